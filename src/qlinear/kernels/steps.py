"""The integer kernels of :func:`qlinear.kernels.run_integer`, one per kernel family of the operator registry
(:mod:`qlinear.graph.ops`, ``OpSpec.kernel``): :data:`KERNELS` maps the family to the function that prepares the
step of one fused Q/DQ operator (or raises :class:`~qlinear.kernels.layer.NotInteger`: the node then runs in
float). :class:`Env` holds the values during a run; :class:`FloatNode` evaluates one node in float."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from qlinear.core import dequantize_linear
from qlinear.errors import KernelError
from qlinear.graph.model import attr, node_inputs
from qlinear.graph.qdq import QdqGraph, QOp, QValue, clip_bounds
from qlinear.kernels import activation as A
from qlinear.kernels import elementwise as EW
from qlinear.kernels import leaky_relu as LR
from qlinear.kernels import pool as P
from qlinear.kernels.batch_matmul import BatchMatMul
from qlinear.kernels.deconv import TransposeConvLayer
from qlinear.kernels.hardswish import hard_swish_table
from qlinear.kernels.layer import IntegerLayer, NotInteger, fused_clamp, qrange
from qlinear.kernels.profiles import Profile
from qlinear.kernels.resize import resize_bilinear


class Env:
    """Values during a run: integer tensors by name, float tensors by name (DQ outputs made on demand)."""

    def __init__(self, qg: QdqGraph, inputs: dict[str, np.ndarray]) -> None:
        self.qg = qg
        self.ints: dict[str, np.ndarray] = {}
        self.floats: dict[str, Any] = dict(qg.consts)
        self.floats.update(inputs)

    def int_of(self, v: Any) -> np.ndarray:
        if v.const is not None:
            return v.const
        if v.name not in self.ints:
            raise KernelError(f"integer tensor {v.name!r} has no value yet (unsupported graph order)")
        return self.ints[v.name]

    def float_of(self, name: str) -> Any:
        if name in self.floats:
            return self.floats[name]
        v = self.qg.value_of_dq(name)
        if v is not None:
            p = v.params
            z = p.zero_point.astype(p.dtype.storage) if p.dtype.is_int else None
            y = dequantize_linear(self.int_of(v), p.scale, z, axis=1 if p.axis is None else p.axis,
                                  block_size=p.block_size)
            self.floats[name] = y
            return y
        raise KernelError(f"tensor {name!r} has no value (unsupported graph structure)")


class FloatNode:
    """One ONNX node evaluated on NumPy values by the reference evaluator (built once, run many times)."""

    def __init__(self, node: onnx.NodeProto, model: onnx.ModelProto) -> None:
        self.node = node
        self.opsets = list(model.opset_import)
        self._ev: dict[tuple, Any] = {}
        #: the outer-scope names its subgraphs read (an If's branches): graph inputs of the one-node model, by name
        self.outer = list(dict.fromkeys(x for x in node_inputs(node)[sum(1 for i in node.input if i):]
                                        if x not in node.input))

    def __call__(self, values: list, outer: list | None = None) -> list:
        """The node's outputs on ``values`` (its inputs) and ``outer`` (the values of :attr:`outer`)."""

        node = self.node
        if self.outer:
            return self._run(values, dict(zip(self.outer, outer or [])))
        if node.op_type == "BatchNormalization" and len(node.output) == 1:
            return [_batch_norm(node, values)]
        if node.op_type == "GatherElements":  # onnx.reference fails on [1, N] data with [1, K] indices
            return [_gather_elements(node, values)]
        if node.op_type == "Pad" and len(values) > 1 and np.any(np.asarray(values[1]) < 0):
            return [_pad_negative(node, values)]   # onnx.reference refuses negative pads (crops)
        if node.op_type == "GlobalMaxPool":  # onnx.reference reduces axes (ndim-2, ndim-1) of 3-D inputs: wrong
            x = np.asarray(values[0])
            return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
        return self._run(values, {})

    def _run(self, values: list, outer: dict[str, Any]) -> list:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        node = self.node
        feed = {f"i{k}": v for k, v in enumerate(values) if v is not None} | outer
        key = tuple((k, np.asarray(v).dtype.str, np.asarray(v).ndim) for k, v in feed.items())
        ev = self._ev.get(key)
        names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
        if ev is None:
            n2 = helper.make_node(node.op_type, names, [f"o{k}" for k in range(len(node.output))],
                                  domain=node.domain)
            n2.attribute.extend(node.attribute)
            g = helper.make_graph(
                [n2], "g", [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                                          None) for nm, v in feed.items()],
                [helper.make_tensor_value_info(f"o{k}", 0, None) for k in range(len(node.output))])
            ev = ReferenceEvaluator(helper.make_model(g, opset_imports=self.opsets))
            self._ev[key] = ev
        return list(ev.run(None, {nm: np.asarray(v) for nm, v in feed.items()}))


def _gather_elements(node: onnx.NodeProto, values: list) -> np.ndarray:
    """GatherElements as the ONNX definition: ``out[..., i_axis, ...] = data[..., index[..., i_axis, ...], ...]``,
    the indices' shape (no larger than the data's off the axis) the output's, negative indices counted from the end.
    onnx.reference 1.23 fails on ``[1, N]`` data with ``[1, K]`` indices (onnx-asr's Kaldi framing, SwiftF0)."""
    data, idx = np.asarray(values[0]), np.asarray(values[1]).astype(np.int64)
    axis = attr(node, "axis", 0) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    part = data[tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(idx.shape))]
    return np.take_along_axis(part, idx, axis=axis)


def _pad_negative(node: onnx.NodeProto, values: list) -> np.ndarray:
    """Pad (opset 11+: pads, constant value and axes as inputs) with negative pads, which crop, as the ONNX
    definition: the crops first, then the padding in ``mode`` (constant, reflect, edge, wrap)."""
    x = np.asarray(values[0])
    pads = np.asarray(values[1], np.int64).reshape(-1)
    value = values[2] if len(values) > 2 and values[2] is not None else None
    axes = list(range(x.ndim)) if len(values) < 4 or values[3] is None else \
        [int(a) % x.ndim for a in np.asarray(values[3]).reshape(-1)]
    lo, hi = [0] * x.ndim, [0] * x.ndim
    for k, a in enumerate(axes):
        lo[a], hi[a] = int(pads[k]), int(pads[k + len(axes)])
    x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for b, e, n in zip(lo, hi, x.shape))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(lo, hi)]
    mode = attr(node, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode == "constant":
        return np.pad(x, widths, constant_values=0 if value is None else np.asarray(value).reshape(()).item())
    return np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])


def _batch_norm(node: onnx.NodeProto, values: list) -> np.ndarray:
    """Inference BatchNormalization as the ONNX definition (``scale * (x - mean) / sqrt(var + epsilon) + bias``,
    float32). onnx.reference's BatchNormalization-9 uses the batch's statistics whenever ``momentum`` is set, and its
    schema default sets it: not what ONNX Runtime computes."""
    x, scale, bias, mean, var = (np.asarray(v) for v in values[:5])
    shape = (-1,) + (1,) * (x.ndim - 2)
    eps = attr(node, "epsilon", 1e-5)
    y = scale.reshape(shape) * (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) + bias.reshape(shape)
    return y.astype(x.dtype)


Step = Callable[[Env], None]


@dataclass(frozen=True)
class _Out:
    """The per-tensor integer output of a non-linear kernel: its parameters, range, fused clamp and mode."""

    name: str
    s: float
    z: int
    dtype: Any            # storage dtype
    qmin: int
    qmax: int
    lo: int               # the fused clamp (the range without one)
    hi: int
    mode: str             # the profile's elementwise mode

    def emit(self, env: Env, y: np.ndarray) -> None:
        env.ints[self.name] = np.asarray(y).astype(self.dtype)


def _out_of(op: QOp, prof: Profile) -> _Out:
    """The output of ``op`` when it and all its integer inputs are per-tensor integers, else :class:`NotInteger`."""
    out = op.output
    if out is None or not out.params.per_tensor or not out.params.dtype.is_int:
        raise NotInteger
    if any(v is not None and not v.params.per_tensor for v in op.inputs):
        raise NotInteger
    qmin, qmax = qrange(out.params)
    lo, hi = fused_clamp(op, out.params, prof)
    return _Out(out.name, out.params.s, out.params.z, out.params.dtype.storage, qmin, qmax, lo, hi, prof.elementwise)


def _first_input(op: QOp) -> QValue:
    x = op.inputs[0] if op.inputs else None
    if x is None:
        raise NotInteger
    return x


def _linear_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """Conv / Gemm / MatMul: :class:`_Conv` (exact accumulation, per-channel requantization, fused clamp); a MatMul
    of two activations as LiteRT's BATCH_MATMUL (LiteRT profiles; other runtimes compute it in float)."""
    if op.op == "MatMul" and len(op.inputs) > 1 and op.inputs[1] is not None and op.inputs[1].const is None:
        if not prof.name.startswith("litert"):
            raise NotInteger
        bm, (a, b), out_name = BatchMatMul(op, prof), op.inputs[:2], op.output.name if op.output else ""
        return lambda env: env.ints.__setitem__(out_name, bm(env.int_of(a), env.int_of(b)))
    layer = IntegerLayer(op, prof)
    x = op.inputs[0]
    out = op.output.name if op.output is not None else ""

    def run(env: Env) -> None:
        xq = env.int_of(x)
        if layer.kind == "Conv" and xq.ndim != (3 if layer.one_d else 4):
            raise KernelError(f"node {op.name}: only 1-D and 2-D convolutions run on integers")
        y = layer(xq)
        if layer.float_out:
            if layer.float_bias:
                y = y + np.asarray(env.float_of(layer.float_bias), np.float32).reshape(
                    (-1,) + (1,) * (y.ndim - 2) if layer.kind == "Conv" else -1)
            env.floats[op.node.output[0]] = y
        else:
            env.ints[out] = y

    return run


def _transpose_conv_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """ConvTranspose as LiteRT's TRANSPOSE_CONV (LiteRT profiles; other runtimes compute it in float)."""
    if not prof.name.startswith("litert"):
        raise NotInteger
    layer, x, out = TransposeConvLayer(op, prof), op.inputs[0], op.output.name

    def run(env: Env) -> None:
        xq = env.int_of(x)
        if xq.ndim != 4:
            raise KernelError(f"node {op.name}: only 2-D transposed convolutions run on integers")
        env.ints[out] = layer(xq)

    return run


def _resize_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """A bilinear Resize of H, W with its input's parameters: LiteRT's integer RESIZE_BILINEAR (LiteRT profiles;
    nearest moves values: the float path is exact)."""
    o, x, node = _out_of(op, prof), _first_input(op), op.node
    mode = attr(node, "mode", b"nearest")
    ct = attr(node, "coordinate_transformation_mode", b"half_pixel")
    ct = ct.decode() if isinstance(ct, bytes) else ct
    if not prof.name.startswith("litert") or mode not in (b"linear", "linear") or \
            ct not in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric") or \
            np.float32(x.params.s) != np.float32(o.s) or x.params.z != o.z or x.params.dtype != op.output.params.dtype:
        raise NotInteger
    def run(env: Env) -> None:
        xq = env.int_of(x)
        sizes = _resize_hw(node, qg, xq.shape)
        if xq.ndim != 4 or sizes is None:
            raise KernelError(f"node {op.name}: only a constant H, W resize of a 4-D tensor runs on integers")
        o.emit(env, resize_bilinear(xq, sizes, align_corners=ct == "align_corners",
                                    half_pixel_centers=ct in ("half_pixel", "pytorch_half_pixel")))

    return run


def _resize_hw(node: onnx.NodeProto, qg: QdqGraph, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The output H, W of a Resize (``sizes`` or ``scales`` constant, N and C unchanged), or None."""
    sizes = qg.consts.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    if sizes is not None:
        s = [int(v) for v in np.asarray(sizes).reshape(-1)]
        return (s[2], s[3]) if len(s) == 4 and s[:2] == list(shape[:2]) else None
    scales = qg.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if scales is None:
        return None
    sc = np.asarray(scales, np.float32).reshape(-1)
    if len(sc) != 4 or sc[0] != 1 or sc[1] != 1:
        return None
    return int(np.floor(shape[2] * sc[2])), int(np.floor(shape[3] * sc[3]))


def _binary_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """Add / Sub / Mul of two integer tensors (TFLite ADD/SUB left shift 20 for int8, 15 for int16)."""
    o, name = _out_of(op, prof), op.op
    if len(op.inputs) != 2 or op.inputs[0] is None or op.inputs[1] is None:
        raise NotInteger
    a, b = op.inputs
    wide = a.params.dtype.bits > 8 or b.params.dtype.bits > 8
    if wide and (a.params.dtype.bits != 16 or b.params.dtype.bits != 16):
        raise NotInteger
    shift = 15 if wide else 20

    def run(env: Env) -> None:
        aq, bq = env.int_of(a), env.int_of(b)
        if aq.shape != bq.shape:
            aq, bq = np.broadcast_arrays(aq, bq)
        if name == "Mul":
            y = EW.mul(aq, bq, s_a=a.params.s, zp_a=a.params.z, s_b=b.params.s, zp_b=b.params.z, s_out=o.s,
                       zp_out=o.z, mode=o.mode, qmin=o.lo, qmax=o.hi)
        else:
            y = EW.add(aq, bq, s_a=a.params.s, zp_a=a.params.z, s_b=b.params.s, zp_b=b.params.z, s_out=o.s,
                       zp_out=o.z, mode=prof.add_mode if not wide else o.mode, sub=name == "Sub", qmin=o.lo,
                       qmax=o.hi, left_shift=shift)
        o.emit(env, y)

    return run


def _move_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """Data movement on the integers themselves (same parameters in and out), by the reference evaluator."""
    o, x = _out_of(op, prof), _first_input(op)
    if x.params.s != o.s or x.params.z != o.z or x.params.dtype != op.output.params.dtype:
        raise NotInteger
    ev = FloatNode(op.node, qg.model)
    rest = list(op.node.input[1:])

    def run(env: Env) -> None:
        res = ev([env.int_of(x)] + [env.float_of(i) if i else None for i in rest])
        o.emit(env, res[0])

    return run


def _pool_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """MaxPool / AveragePool (then requantized or clamped) and GlobalAveragePool (a mean over H, W)."""
    o, x, node, name = _out_of(op, prof), _first_input(op), op.node, op.op
    if name != "GlobalAveragePool" and (attr(node, "count_include_pad", 0) or attr(node, "ceil_mode", 0)
                                        or attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")):
        raise NotInteger

    def run(env: Env) -> None:
        xq = env.int_of(x)
        if xq.ndim != 4:
            raise KernelError(f"node {op.name}: pools run on 4-D tensors")
        if name == "GlobalAveragePool":
            y = P.mean(xq, (2, 3), s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z, mode=prof.mean_mode,
                       qmin=o.lo, qmax=o.hi)
        else:
            k = tuple(attr(node, "kernel_shape"))
            pads = tuple(attr(node, "pads", [0, 0, 0, 0]))
            st = tuple(attr(node, "strides", [1, 1]))
            if name == "MaxPool":
                y = P.max_pool2d(xq, k, stride=st, pads=pads)
            else:
                y = P.avg_pool2d(xq, k, stride=st, pads=pads, qmin=o.qmin, qmax=o.qmax)
            if np.float32(x.params.s) != np.float32(o.s) or x.params.z != o.z:
                y = EW.requantize_tensor(y, s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z, mode=o.mode,
                                         qmin=o.lo, qmax=o.hi)
            else:
                y = np.clip(y, o.lo, o.hi)
        o.emit(env, y)

    return run


def _mean_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """ReduceMean over constant axes (attribute, or input 1 from opset 18)."""
    o, x, node = _out_of(op, prof), _first_input(op), op.node
    if prof.mean_mode == "float":  # the runtime does not fuse it: DQ -> ReduceMean -> Q in float
        raise NotInteger
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        if node.input[1] not in qg.consts:
            raise NotInteger
        axes = [int(a) for a in np.asarray(qg.consts[node.input[1]]).reshape(-1)]
    if axes is None:
        raise NotInteger
    keep = bool(attr(node, "keepdims", 1))

    def run(env: Env) -> None:
        xq = env.int_of(x)
        ax = tuple(a % xq.ndim for a in axes)
        o.emit(env, P.mean(xq, ax, s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z, mode=prof.mean_mode,
                           keepdims=keep, qmin=o.lo, qmax=o.hi))

    return run


def _concat_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """Concat, each input requantized to the output's parameters (LiteRT profiles: only when none needs it)."""
    o, ins = _out_of(op, prof), op.inputs
    _first_input(op)
    if any(v is None for v in ins):
        raise NotInteger
    if prof.name.startswith("litert") and any(np.float32(v.params.s) != np.float32(o.s) or v.params.z != o.z
                                              for v in ins):
        raise NotInteger  # LiteRT's CONCATENATION does not requantize: the .tflite runs it as a float island
    axis = attr(op.node, "axis")

    def run(env: Env) -> None:
        xs = [env.int_of(v) for v in ins]
        o.emit(env, P.concat(xs, [(v.params.s, v.params.z) for v in ins], s_out=o.s, zp_out=o.z,
                             axis=axis % xs[0].ndim, mode=o.mode, qmin=o.lo, qmax=o.hi))

    return run


def _clamp_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """A Relu / Clip not fused into its producer: requantize, then clamp."""
    o, x = _out_of(op, prof), _first_input(op)
    if op.act is not None:
        raise NotInteger
    b = clip_bounds(op.node, qg.consts)
    if b is None:
        raise NotInteger
    lo, hi = fused_clamp(QOp(op.node, op.inputs, op.output, "CLIP", b), op.output.params, prof)

    def run(env: Env) -> None:
        o.emit(env, EW.requantize_tensor(env.int_of(x), s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z,
                                         mode=o.mode, qmin=lo, qmax=hi))

    return run


def _activation_kernel(op: QOp, prof: Profile, qg: QdqGraph) -> Step:
    """Sigmoid / Tanh / Softmax / HardSwish / LeakyRelu (LiteRT profiles): TFLite's int8 kernels, and its 16-bit ones
    at the fixed output ``1/32768, 0`` (LeakyRelu: any 16-bit output, :func:`_leaky_relu_step`)."""
    o, x, name = _out_of(op, prof), _first_input(op), op.op
    axis = attr(op.node, "axis", -1)
    if name == "LeakyRelu":
        return _leaky_relu_step(op, prof, o, x)
    if o.dtype == np.int16 and x.params.dtype.storage == np.int16 and x.params.z == 0 and o.z == 0 \
            and np.float32(o.s) == np.float32(1 / 32768):
        fn16 = {"Sigmoid": A.logistic16, "Tanh": A.tanh16}.get(name)

        def run16(env: Env) -> None:
            xq = env.int_of(x)
            y = fn16(xq, s_in=x.params.s) if fn16 is not None else A.softmax16(xq, s_in=x.params.s, axis=axis)
            o.emit(env, np.clip(y, o.lo, o.hi))

        return run16
    if name == "Softmax" and prof.softmax == "ort" and o.dtype == x.params.dtype.storage \
            and o.dtype in (np.int8, np.uint8):
        signed = o.dtype == np.int8
        return lambda env: o.emit(env, A.softmax_ort(env.int_of(x), s_in=x.params.s, s_out=o.s, zp_out=o.z,
                                                     signed=signed, axis=axis))
    if o.dtype != np.int8 or x.params.dtype.storage != np.int8:
        raise NotInteger
    if name == "HardSwish":  # LiteRT's fixed-point HARD_SWISH; other runtimes compute it in float (DQ -> op -> Q)
        if not prof.name.startswith("litert"):
            raise NotInteger
        table = hard_swish_table(x.params.s, x.params.z, o.s, o.z, o.lo, o.hi).astype(np.int8)
        return lambda env: o.emit(env, table[env.int_of(x).astype(np.int64) + 128])
    if name == "Softmax":
        def run_softmax(env: Env) -> None:
            if prof.softmax == "reference" and np.float32(o.s) == np.float32(1 / 256) and o.z == -128:
                o.emit(env, A.softmax_reference(env.int_of(x), s_in=x.params.s, axis=axis))
            else:
                o.emit(env, A.softmax(env.int_of(x), s_in=x.params.s, s_out=o.s, zp_out=o.z, axis=axis))

        return run_softmax
    fn = A.logistic if name == "Sigmoid" else A.tanh

    def run(env: Env) -> None:
        o.emit(env, np.clip(fn(env.int_of(x), s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z), o.lo, o.hi))

    return run


def _leaky_relu_step(op: QOp, prof: Profile, o: Any, x: Any) -> Step:
    """LiteRT's LEAKY_RELU (int8, int16; :mod:`qlinear.kernels.leaky_relu`): the builtin kernel, or XNNPACK's for an
    int8 one under the ``litert_xnnpack`` profile; other runtimes compute it in float (DQ -> op -> Q)."""
    if not prof.name.startswith("litert") or o.dtype not in (np.int8, np.int16) \
            or x.params.dtype.storage != o.dtype:
        raise NotInteger
    alpha = float(attr(op.node, "alpha", 0.01))
    kw = dict(s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z, alpha=alpha)
    if o.dtype == np.int8 and prof.name == "litert_xnnpack":
        return lambda env: o.emit(env, LR.xnnpack_leaky_relu(env.int_of(x), **kw))
    return lambda env: o.emit(env, LR.leaky_relu(env.int_of(x), **kw, qmin=o.lo, qmax=o.hi))


#: integer kernel family (the operator registry's ``OpSpec.kernel``) -> the function preparing its step
KERNELS: dict[str, Callable[[QOp, Profile, QdqGraph], Step]] = {
    "linear": _linear_kernel, "transpose_conv": _transpose_conv_kernel, "resize": _resize_kernel,
    "binary": _binary_kernel, "move": _move_kernel, "pool": _pool_kernel,
    "mean": _mean_kernel, "concat": _concat_kernel, "clamp": _clamp_kernel, "activation": _activation_kernel,
}


__all__ = ["KERNELS", "Env", "FloatNode", "Step"]
