"""``run_integer(model, inputs, mode)``: execute a Q/DQ ONNX model in integer arithmetic, as a given runtime does.

The model is read once (:func:`qlinear.graph.qdq.parse`) into steps (:class:`IntegerModel`); the Q/DQ patterns a
runtime fuses run as integer kernels:

* ``DQ(x), DQ(W)[, DQ(bias int32)] -> Conv | Gemm | MatMul [-> Relu | Clip] -> Q`` : Conv2D (regular, grouped,
  depthwise) / fully connected with the fused clamp, exact accumulation, requantized per channel;
* ``DQ(a), DQ(b) -> Add | Sub | Mul -> Q``; ``DQ -> MaxPool | AveragePool | GlobalAveragePool | ReduceMean -> Q``;
  ``DQ -> Concat -> Q``; ``DQ -> Softmax | Sigmoid | Tanh -> Q``; ``DQ -> Relu | Clip -> Q`` (requantize + clamp);
* data movement (Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Identity) moves the integers.

Graph inputs are quantized by their QuantizeLinear and outputs dequantized, so the result is ``{output name: array}``
as ONNX Runtime returns it. Any other node runs in float on the dequantized values (the ONNX reference evaluator), as
a Q/DQ runtime without that kernel would.

**Modes.** A requantization mode of :mod:`qlinear.kernels.requant` (``fixed_double``, ``fixed_single``, ``ruy_x86``,
``f64_round_away``, ``f32_rne``, ``onednn``) applies that formula to every operator (ONNX QuantizeLinear at the
inputs; fused clamps rounded half away from zero in the fixed-point modes, to even in the float ones). A runtime
profile picks, operator by operator, what that runtime's kernels do (:data:`PROFILES`):

==================  =====================================================================================
``litert_ref``      LiteRT 2.3.0 reference kernels (``BUILTIN_REF``): CONV_2D/DEPTHWISE ``fixed_double``,
                    FULLY_CONNECTED ``f64_round_away``, ADD/SUB/MUL/MEAN/pools/requantize the reference
                    fixed-point formulas, QUANTIZE ``round_half_away(x / scale)`` in float32, clamps half away
``litert_xnnpack``  LiteRT's default resolver (XNNPACK delegate): ``f32_rne`` kernels, XNNPACK's ADD/SUB
                    and MEAN (``xnnpack`` in :mod:`qlinear.kernels.elementwise` / :mod:`~qlinear.kernels.pool`),
                    clamps half away
``ort``             ONNX Runtime on the Q/DQ model: ``f32_rne`` (same as that mode)
``ort_fused``       ONNX Runtime's fused int8 path on x86 (QLinearConv/QGemm ``f32_rne``, QLinearAdd's MLAS AVX2
                    formula, ReduceMean left in float as ORT leaves it)
==================  =====================================================================================

Every mode checks the accumulators: one outside int32 raises :class:`~qlinear.errors.OverflowRiskError` (16x8 layers
accumulate in int64, as TFLite does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx

from qlinear.core import dequantize_linear, quantize_linear
from qlinear.errors import KernelError, OverflowRiskError
from qlinear.graph.model import attr
from qlinear.graph import ops
from qlinear.graph.qdq import QOp, QParams, QdqGraph, QValue, clip_bounds, parse
from qlinear.kernels import activation as A
from qlinear.kernels import elementwise as EW
from qlinear.kernels import native as NK
from qlinear.kernels import pool as P
from qlinear.kernels.requant import FIXED_MODES, MODES, round_half_away

EXACT32 = float(2**24)


@dataclass(frozen=True)
class Profile:
    """Which formula each operator family uses (see the module docstring)."""

    name: str
    conv: str                 # requantization mode of Conv / depthwise
    fc: str                   # requantization mode of Gemm / MatMul (FULLY_CONNECTED)
    elementwise: str          # mode of Add/Sub/Mul/Mean/pool/requantize kernels (fixed modes: TFLite reference)
    quantize: str = "onnx"    # graph-input QuantizeLinear: "onnx" (true division, ties even) or "tflite"
    clamp: str = "away"       # rounding of fused-activation bounds: "away" (TFLite) or "even"
    mean: str = ""            # Mean / GlobalAveragePool formula (default: ``elementwise``; "xnnpack")
    add: str = ""             # Add / Sub formula (default: ``elementwise``; "xnnpack")

    @property
    def mean_mode(self) -> str:
        return self.mean or self.elementwise

    @property
    def add_mode(self) -> str:
        return self.add or self.elementwise


def _uniform(mode: str) -> Profile:
    return Profile(mode, mode, mode, mode, "onnx", "away" if mode in FIXED_MODES else "even")


PROFILES: dict[str, Profile] = {m: _uniform(m) for m in MODES}
PROFILES["litert_ref"] = Profile("litert_ref", "fixed_double", "f64_round_away", "fixed_double", "tflite", "away")
PROFILES["litert_xnnpack"] = Profile("litert_xnnpack", "f32_rne", "f32_rne", "f32_rne", "onnx", "away", "xnnpack",
                                     "xnnpack")
PROFILES["ort"] = Profile("ort", "f32_rne", "f32_rne", "f32_rne", "onnx", "even")
PROFILES["ort_fused"] = Profile("ort_fused", "f32_rne", "f32_rne", "f32_rne", "onnx", "even", "float", "mlas")


def profile(mode: str) -> Profile:
    if mode not in PROFILES:
        raise KernelError(f"unknown mode {mode!r}; expected one of {', '.join(PROFILES)}")
    return PROFILES[mode]


def _range(p: QParams) -> tuple[int, int]:
    return int(p.dtype.qmin), int(p.dtype.qmax)


class _Env:
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


class _Conv:
    """A prepared Conv / Gemm / MatMul layer: centered float32 weights, int64 bias, multipliers, clamp."""

    def __init__(self, op: QOp, prof: Profile) -> None:
        node = op.node
        self.op = op
        x, w = op.inputs[0], op.inputs[1]
        out = op.output
        if x is None or w is None or w.const is None or not x.params.per_tensor or w.params.block_size \
                or not x.params.dtype.is_int or not w.params.dtype.is_int:
            raise _NotInteger
        if out is not None and (not out.params.per_tensor or not out.params.dtype.is_int):
            raise _NotInteger
        # no QuantizeLinear after it: integer accumulation, float output (ORT's MatMulIntegerToFloat)
        self.float_out = out is None
        self.wide = x.params.dtype.bits > 8  # 16x8: int64 accumulators (TFLite)
        self.kind = node.op_type
        wq = np.asarray(w.const).astype(np.int64)
        wz = w.params.zero_point.astype(np.int64)
        ws = w.params.scale.astype(np.float32)
        if self.kind == "Conv":
            if wq.ndim != 4 or attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
                raise _NotInteger
            ch_axis = 0
        elif self.kind == "Gemm":
            if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
                raise _NotInteger
            ch_axis = 0 if attr(node, "transB", 0) else 1
        else:
            if wq.ndim != 2:
                raise _NotInteger
            ch_axis = 1
        if not w.params.per_tensor and w.params.axis != ch_axis:
            raise _NotInteger
        n_out = wq.shape[ch_axis]
        if wz.size > 1:
            shape = [1] * wq.ndim
            shape[ch_axis] = n_out
            wc = wq - wz.reshape(shape)
        else:
            wc = wq - int(wz.reshape(-1)[0])
        if self.kind == "Conv":
            self.w = wc  # OIHW, centered
        else:
            self.w = wc if ch_axis == 0 else wc.T  # [N_out, K]
        self.groups = attr(node, "group", 1) if self.kind == "Conv" else 1
        self.stride = tuple(attr(node, "strides", [1, 1])) if self.kind == "Conv" else (1, 1)
        pads = list(attr(node, "pads", [0, 0, 0, 0])) if self.kind == "Conv" else [0, 0, 0, 0]
        self.pads = (pads[0], pads[1], pads[2], pads[3])
        self.dil = tuple(attr(node, "dilations", [1, 1])) if self.kind == "Conv" else (1, 1)
        b = op.inputs[2] if len(op.inputs) > 2 else None
        self.float_bias = None
        if len(node.input) > 2 and node.input[2] and (b is None or b.const is None):
            if not self.float_out:
                raise _NotInteger  # float bias: not an integer kernel
            self.float_bias = node.input[2]
        self.bias = None if b is None else np.broadcast_to(np.asarray(b.const).astype(np.int64).reshape(-1),
                                                           (n_out,)).copy()
        self.zx = x.params.z
        self.x_dtype = x.params.dtype
        mode = prof.conv if self.kind == "Conv" else prof.fc
        self.mode = "int64_reduced" if self.wide and mode in FIXED_MODES else mode
        s_x = np.float32(x.params.s)
        self.scale_out = np.broadcast_to(s_x * ws, (n_out,)).astype(np.float32)  # float output: acc * s_x * s_w
        if not self.float_out:
            s_o = np.float32(out.params.s)
            if mode in ("f32_rne", "onednn"):
                m = (s_x * ws / s_o).astype(np.float64)
            else:
                m = np.float64(s_x) * ws.astype(np.float64) / np.float64(s_o)
            self.mult = NK.Multiplier(np.broadcast_to(m, (n_out,)) if m.size > 1 else m.reshape(-1))
            self.zo = out.params.z
            self.out_dtype = out.params.dtype.storage
            self.lo, self.hi = _clamp(op, out.params, prof)
        xr = max(self.zx - int(self.x_dtype.qmin), int(self.x_dtype.qmax) - self.zx)
        wmax = float(np.abs(self.w).max(initial=1))
        self.chunk = max(1, int((EXACT32 - 1) // max(1.0, xr * wmax)))
        self.w32 = self.w.astype(np.float32)
        self.depthwise = self.kind == "Conv" and self.w.shape[1] == 1 and self.groups > 1
        if self.kind == "Conv" and not self.depthwise:
            o, cg, kh, kw = self.w.shape
            self.w2 = self.w32.reshape(o, cg * kh * kw)

    def accumulate(self, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Accumulators (integers, possibly held in float32/float64) and the bias still to add (or None)."""
        if self.kind != "Conv":
            xc = np.subtract(xq.reshape(-1, xq.shape[-1]), np.float32(self.zx), dtype=np.float32)
            acc = _exact_matmul(xc, self.w32.T, self.chunk)  # [M, N_out]
            return acc.reshape(xq.shape[:-1] + (self.w.shape[0],)), self.bias
        if self.depthwise:
            o, _, kh, kw = self.w.shape
            return NK.dwconv(xq, self.zx, self.w.reshape(o, kh, kw), o // xq.shape[1], self.bias, self.stride,
                             self.pads, self.dil), None
        return self._conv(xq), self.bias

    def _conv(self, xq: np.ndarray) -> np.ndarray:
        n, c, h, wd = xq.shape
        o, cg, kh, kw = self.w.shape
        xc = np.subtract(xq, np.float32(self.zx), dtype=np.float32)  # zero-point padding = real 0 = centered 0
        t, l, b, r = self.pads
        if kh == kw == 1 and self.stride == (1, 1) and not any(self.pads) and self.groups == 1:
            cols = xc.reshape(n, c, h * wd)
            oh, ow = h, wd
        else:
            xp = np.pad(xc, ((0, 0), (0, 0), (t, b), (l, r))) if any(self.pads) else xc
            eh, ew = (kh - 1) * self.dil[0] + 1, (kw - 1) * self.dil[1] + 1
            win = np.lib.stride_tricks.sliding_window_view(xp, (eh, ew), axis=(2, 3))
            win = win[:, :, ::self.stride[0], ::self.stride[1], ::self.dil[0], ::self.dil[1]]
            oh, ow = win.shape[2], win.shape[3]
            cols = None
        og = o // self.groups
        if self.groups == 1:
            cg_cols = cols if cols is not None else np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(
                n, cg * kh * kw, oh * ow)
            return _exact_matmul(self.w2, cg_cols, self.chunk).reshape(n, o, oh, ow)
        acc = np.empty((n, o, oh * ow), np.float64)
        for g in range(self.groups):
            if cols is None:
                cg_cols = np.ascontiguousarray(win[:, g * cg:(g + 1) * cg].transpose(0, 1, 4, 5, 2, 3)).reshape(
                    n, cg * kh * kw, oh * ow)
            else:
                cg_cols = cols
            wg = self.w2[g * og:(g + 1) * og]
            acc[:, g * og:(g + 1) * og] = _exact_matmul(wg, cg_cols, self.chunk)
        return acc.reshape(n, o, oh, ow)

    def __call__(self, xq: np.ndarray) -> np.ndarray:
        acc, bias = self.accumulate(xq)
        axis = 1 if self.kind == "Conv" else -1
        try:
            if self.float_out:
                from qlinear.kernels.requant import check_accumulator

                acc = acc.astype(np.int64)
                shape = [1] * acc.ndim
                shape[axis] = self.scale_out.size
                if bias is not None:
                    acc = acc + bias.reshape(shape)
                check_accumulator(acc, 64 if self.wide else 32)
                return acc.astype(np.float32) * self.scale_out.reshape(shape)
            return NK.requant(acc, self.mult, self.mode, self.zo, self.lo, self.hi, self.out_dtype,
                              channel_axis=axis, acc_bits=64 if self.wide else 32, bias=bias)
        except OverflowRiskError as e:
            raise OverflowRiskError(f"node {self.op.name} ({self.kind}): {e}") from None


class _NotInteger(Exception):
    """The pattern is not one the integer kernels run: the node falls back to float."""


def _exact_matmul(a: np.ndarray, b: np.ndarray, chunk: int) -> np.ndarray:
    """``a @ b`` of integer-valued float32 arrays, exactly: one float32 GEMM when every partial sum stays below 2^24
    (float32 result), else float32 GEMMs over chunks of the reduction that do, added in float64 (float64 result).
    ``a``: [..., M, K], ``b``: [..., K, N]."""
    k = a.shape[-1]
    if k <= chunk:
        return np.matmul(a, b)  # float32, every value an exact integer
    acc = None
    for s in range(0, k, chunk):
        part = np.matmul(a[..., s:s + chunk], b[..., s:s + chunk, :]).astype(np.float64)
        acc = part if acc is None else acc + part
    return acc  # float64, exact


def _clamp(op: QOp, p: QParams, prof: Profile) -> tuple[int, int]:
    qmin, qmax = _range(p)
    lo, hi = op.act_bounds
    if op.act is None:
        return qmin, qmax
    rnd = round_half_away if prof.clamp == "away" else np.rint

    def q(f: float) -> int:
        return p.z + int(rnd(np.float32(f) / np.float32(p.s)))

    return (max(qmin, q(lo)) if np.isfinite(lo) else qmin, min(qmax, q(hi)) if np.isfinite(hi) else qmax)


class IntegerModel:
    """A Q/DQ model prepared for integer execution in ``mode`` (see the module docstring); ``run`` many times."""

    def __init__(self, model: Any, mode: str = "f32_rne") -> None:
        self.profile = profile(mode)
        self.mode = mode
        self.qg = parse(model)
        self.steps: list[Callable[[_Env], None]] = []
        self._compile()

    # ------------------------------------------------------------------------------------------ compile
    def _compile(self) -> None:
        qg, prof = self.qg, self.profile
        m = qg.model
        fused: set[int] = set()
        for op in qg.ops.values():
            step = self._integer_step(op)
            if step is not None:
                op._step = step  # type: ignore[attr-defined]
                if op.act_node is not None:
                    fused.add(id(op.act_node))
                if op.q_node is not None:
                    fused.add(id(op.q_node))
        for n in m.graph.node:
            if n.op_type in ("Constant", "DequantizeLinear") or id(n) in fused:
                continue
            if n.op_type == "QuantizeLinear":
                self.steps.append(self._quantize_step(n))
                continue
            key = n.name or (n.output[0] if n.output else "")
            op = qg.ops.get(key)
            if op is not None and getattr(op, "_step", None) is not None:
                self.steps.append(op._step)  # type: ignore[attr-defined]
                continue
            if all(not i or i in qg.consts for i in n.input) and n.output and all(o in qg.consts for o in n.output):
                continue  # folded constant
            self.steps.append(self._float_step(n))
        del prof

    def _quantize_step(self, n: onnx.NodeProto) -> Callable[[_Env], None]:
        qv = self.qg.values.get(n.output[0])
        src, out = n.input[0], n.output[0]
        tfl = self.profile.quantize == "tflite"

        def run(env: _Env) -> None:
            x = env.float_of(src)
            if qv is None:
                raise KernelError(f"QuantizeLinear {n.name or out}: non-constant parameters")
            p = qv.params
            if tfl and p.per_tensor and p.dtype.is_int and np.asarray(x).dtype == np.float32:
                # TFLite reference QUANTIZE: (int32) TfLiteRound(val / (float)scale) + zp, ties away
                with np.errstate(over="ignore", invalid="ignore"):
                    r = round_half_away(np.asarray(x, np.float32) / np.float32(p.s))
                q = np.clip(r + p.z, p.dtype.qmin, p.dtype.qmax).astype(p.dtype.storage)
            else:
                z = p.zero_point.astype(p.dtype.storage) if p.dtype.is_int else None
                kw: dict[str, Any] = {"axis": 1 if p.axis is None else p.axis, "block_size": p.block_size}
                if z is None:
                    kw["output_dtype"] = p.dtype.name
                q = quantize_linear(x, p.scale if p.scale.size > 1 or p.block_size else p.scale.reshape(()),
                                    None if z is None else (z if z.size > 1 or p.block_size else z.reshape(())), **kw)
            env.ints[out] = np.asarray(q)

        return run

    def _float_step(self, n: onnx.NodeProto) -> Callable[[_Env], None]:
        ev = _FloatNode(n, self.qg.model)

        def run(env: _Env) -> None:
            vals = [env.float_of(i) if i else None for i in n.input]
            res = ev(vals)
            for o, v in zip(n.output, res):
                env.floats[o] = v

        return run

    def _integer_step(self, op: QOp) -> Step | None:
        """The integer kernel of ``op`` (the registry's kernel family, :data:`KERNELS`), or None: it runs in
        float."""
        kernel = KERNELS.get(ops.kernel_of(op.op) or "")
        if kernel is None:
            return None
        try:
            return kernel(self, op)
        except _NotInteger:
            return None

    # ------------------------------------------------------------------------------------------ run
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        qg = self.qg
        m = qg.model
        feed = {}
        for v in m.graph.input:
            if v.name in qg.index.initializers:
                continue
            if v.name not in inputs:
                raise KernelError(f"missing model input {v.name!r}")
            feed[v.name] = np.asarray(inputs[v.name])
        env = _Env(qg, feed)
        for step in self.steps:
            step(env)
        out = {}
        for o in m.graph.output:
            out[o.name] = env.ints[o.name] if o.name in env.ints else env.float_of(o.name)
        return out


class _FloatNode:
    """One ONNX node evaluated on NumPy values by the reference evaluator (built once, run many times)."""

    def __init__(self, node: onnx.NodeProto, model: onnx.ModelProto) -> None:
        self.node = node
        self.opsets = list(model.opset_import)
        self._ev: dict[tuple, Any] = {}

    def __call__(self, values: list) -> list:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        node = self.node
        key = tuple((np.asarray(v).dtype.str, np.asarray(v).ndim) if v is not None else None for v in values)
        ev = self._ev.get(key)
        names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
        if ev is None:
            n2 = helper.make_node(node.op_type, names, [f"o{k}" for k in range(len(node.output))],
                                  domain=node.domain)
            n2.attribute.extend(node.attribute)
            g = helper.make_graph(
                [n2], "g", [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                                          None) for nm, v in zip(names, values) if nm],
                [helper.make_tensor_value_info(f"o{k}", 0, None) for k in range(len(node.output))])
            ev = ReferenceEvaluator(helper.make_model(g, opset_imports=self.opsets))
            self._ev[key] = ev
        res = ev.run(None, {nm: np.asarray(v) for nm, v in zip(names, values) if nm})
        return list(res)


# ---------------------------------------------------------------------------------------------- kernels
Step = Callable[[_Env], None]


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

    def emit(self, env: _Env, y: np.ndarray) -> None:
        env.ints[self.name] = np.asarray(y).astype(self.dtype)


def _out_of(op: QOp, prof: Profile) -> _Out:
    """The output of ``op`` when it and all its integer inputs are per-tensor integers, else :class:`_NotInteger`."""
    out = op.output
    if out is None or not out.params.per_tensor or not out.params.dtype.is_int:
        raise _NotInteger
    if any(v is not None and not v.params.per_tensor for v in op.inputs):
        raise _NotInteger
    qmin, qmax = _range(out.params)
    lo, hi = _clamp(op, out.params, prof)
    return _Out(out.name, out.params.s, out.params.z, out.params.dtype.storage, qmin, qmax, lo, hi, prof.elementwise)


def _first_input(op: QOp) -> QValue:
    x = op.inputs[0] if op.inputs else None
    if x is None:
        raise _NotInteger
    return x


def _linear_kernel(im: IntegerModel, op: QOp) -> Step:
    """Conv / Gemm / MatMul: :class:`_Conv` (exact accumulation, per-channel requantization, fused clamp)."""
    layer = _Conv(op, im.profile)
    x = op.inputs[0]
    out = op.output.name if op.output is not None else ""

    def run(env: _Env) -> None:
        xq = env.int_of(x)
        if layer.kind == "Conv" and xq.ndim != 4:
            raise KernelError(f"node {op.name}: only 2-D convolutions run on integers")
        y = layer(xq)
        if layer.float_out:
            if layer.float_bias:
                y = y + np.asarray(env.float_of(layer.float_bias), np.float32).reshape(
                    (-1,) + (1,) * (y.ndim - 2) if layer.kind == "Conv" else -1)
            env.floats[op.node.output[0]] = y
        else:
            env.ints[out] = y

    return run


def _binary_kernel(im: IntegerModel, op: QOp) -> Step:
    """Add / Sub / Mul of two integer tensors (TFLite ADD/SUB left shift 20 for int8, 15 for int16)."""
    o, prof, name = _out_of(op, im.profile), im.profile, op.op
    if len(op.inputs) != 2 or op.inputs[0] is None or op.inputs[1] is None:
        raise _NotInteger
    a, b = op.inputs
    wide = a.params.dtype.bits > 8 or b.params.dtype.bits > 8
    if wide and (a.params.dtype.bits != 16 or b.params.dtype.bits != 16):
        raise _NotInteger
    shift = 15 if wide else 20

    def run(env: _Env) -> None:
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


def _move_kernel(im: IntegerModel, op: QOp) -> Step:
    """Data movement on the integers themselves (same parameters in and out), by the reference evaluator."""
    o, x = _out_of(op, im.profile), _first_input(op)
    if x.params.s != o.s or x.params.z != o.z or x.params.dtype != op.output.params.dtype:
        raise _NotInteger
    ev = _FloatNode(op.node, im.qg.model)
    rest = list(op.node.input[1:])

    def run(env: _Env) -> None:
        res = ev([env.int_of(x)] + [env.float_of(i) if i else None for i in rest])
        o.emit(env, res[0])

    return run


def _pool_kernel(im: IntegerModel, op: QOp) -> Step:
    """MaxPool / AveragePool (then requantized or clamped) and GlobalAveragePool (a mean over H, W)."""
    o, x, node, name, prof = _out_of(op, im.profile), _first_input(op), op.node, op.op, im.profile
    if name != "GlobalAveragePool" and (attr(node, "count_include_pad", 0) or attr(node, "ceil_mode", 0)
                                        or attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")):
        raise _NotInteger

    def run(env: _Env) -> None:
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


def _mean_kernel(im: IntegerModel, op: QOp) -> Step:
    """ReduceMean over constant axes (attribute, or input 1 from opset 18)."""
    o, x, node, prof = _out_of(op, im.profile), _first_input(op), op.node, im.profile
    if prof.mean_mode == "float":  # the runtime does not fuse it: DQ -> ReduceMean -> Q in float
        raise _NotInteger
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        if node.input[1] not in im.qg.consts:
            raise _NotInteger
        axes = [int(a) for a in np.asarray(im.qg.consts[node.input[1]]).reshape(-1)]
    if axes is None:
        raise _NotInteger
    keep = bool(attr(node, "keepdims", 1))

    def run(env: _Env) -> None:
        xq = env.int_of(x)
        ax = tuple(a % xq.ndim for a in axes)
        o.emit(env, P.mean(xq, ax, s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z, mode=prof.mean_mode,
                           keepdims=keep, qmin=o.lo, qmax=o.hi))

    return run


def _concat_kernel(im: IntegerModel, op: QOp) -> Step:
    """Concat, each input requantized to the output's parameters."""
    o, ins = _out_of(op, im.profile), op.inputs
    _first_input(op)
    if any(v is None for v in ins):
        raise _NotInteger
    axis = attr(op.node, "axis")

    def run(env: _Env) -> None:
        xs = [env.int_of(v) for v in ins]
        o.emit(env, P.concat(xs, [(v.params.s, v.params.z) for v in ins], s_out=o.s, zp_out=o.z,
                             axis=axis % xs[0].ndim, mode=o.mode, qmin=o.lo, qmax=o.hi))

    return run


def _clamp_kernel(im: IntegerModel, op: QOp) -> Step:
    """A Relu / Clip not fused into its producer: requantize, then clamp."""
    o, x = _out_of(op, im.profile), _first_input(op)
    if op.act is not None:
        raise _NotInteger
    b = clip_bounds(op.node, im.qg.consts)
    if b is None:
        raise _NotInteger
    lo, hi = _clamp(QOp(op.node, op.inputs, op.output, "CLIP", b), op.output.params, im.profile)

    def run(env: _Env) -> None:
        o.emit(env, EW.requantize_tensor(env.int_of(x), s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z,
                                         mode=o.mode, qmin=lo, qmax=hi))

    return run


def _activation_kernel(im: IntegerModel, op: QOp) -> Step:
    """Sigmoid / Tanh / Softmax: TFLite's int8 kernels, and its 16-bit ones at the fixed output ``1/32768, 0``."""
    o, x, name = _out_of(op, im.profile), _first_input(op), op.op
    axis = attr(op.node, "axis", -1)
    if o.dtype == np.int16 and x.params.dtype.storage == np.int16 and x.params.z == 0 and o.z == 0 \
            and np.float32(o.s) == np.float32(1 / 32768):
        fn16 = {"Sigmoid": A.logistic16, "Tanh": A.tanh16}.get(name)

        def run16(env: _Env) -> None:
            xq = env.int_of(x)
            y = fn16(xq, s_in=x.params.s) if fn16 is not None else A.softmax16(xq, s_in=x.params.s, axis=axis)
            o.emit(env, np.clip(y, o.lo, o.hi))

        return run16
    if o.dtype != np.int8 or x.params.dtype.storage != np.int8:
        raise _NotInteger
    if name == "Softmax":
        def run_softmax(env: _Env) -> None:
            o.emit(env, A.softmax(env.int_of(x), s_in=x.params.s, s_out=o.s, zp_out=o.z, axis=axis))

        return run_softmax
    fn = A.logistic if name == "Sigmoid" else A.tanh

    def run(env: _Env) -> None:
        o.emit(env, np.clip(fn(env.int_of(x), s_in=x.params.s, zp_in=x.params.z, s_out=o.s, zp_out=o.z), o.lo, o.hi))

    return run


#: integer kernel family (the operator registry's ``OpSpec.kernel``) -> the function preparing its step
KERNELS: dict[str, Callable[[IntegerModel, QOp], Step]] = {
    "linear": _linear_kernel, "binary": _binary_kernel, "move": _move_kernel, "pool": _pool_kernel,
    "mean": _mean_kernel, "concat": _concat_kernel, "clamp": _clamp_kernel, "activation": _activation_kernel,
}


def run_integer(model: Any, inputs: dict[str, np.ndarray], *, mode: str = "f32_rne") -> dict[str, np.ndarray]:
    """Run a Q/DQ model with the integer kernels in ``mode`` (a requantization mode or a runtime profile, module
    docstring). For many runs, build an :class:`IntegerModel` once."""
    return IntegerModel(model, mode).run(inputs)


__all__ = ["IntegerModel", "PROFILES", "Profile", "profile", "run_integer"]
