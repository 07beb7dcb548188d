"""``run_integer(model, inputs, mode)``: execute a Q/DQ ONNX model in integer arithmetic.

The Q/DQ patterns a runtime fuses are executed with the integer kernels:

* ``DQ(x), DQ(W)[, DQ(bias int32)] -> Conv | Gemm | MatMul [-> Relu | Clip] -> Q`` : Conv2D / fully connected with
  the fused clamp, requantized in ``mode``;
* ``DQ(a), DQ(b) -> Add | Sub | Mul -> Q``; ``DQ -> MaxPool | AveragePool | GlobalAveragePool | ReduceMean -> Q``;
  ``DQ -> Concat -> Q``; ``DQ -> Softmax | Sigmoid | Tanh -> Q``; ``DQ -> Relu | Clip -> Q`` (requantize + clamp);
* data movement (Reshape, Flatten, Transpose, Squeeze, Unsqueeze) moves the integers and keeps their parameters.

Graph inputs are quantized by their QuantizeLinear (core, bit-exact ONNX), graph outputs dequantized, so the result
is ``{output name: array}`` as ONNX Runtime returns it. Any other node runs in float on the dequantized values (the
ONNX reference evaluator), as a Q/DQ runtime without that kernel would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.core import dequantize_linear, quantize_linear
from qlinear.errors import KernelError
from qlinear.graph.model import GraphIndex, attr, load_model
from qlinear.kernels import activation as A
from qlinear.kernels import elementwise as EW
from qlinear.kernels import linear as L
from qlinear.kernels import pool as P
from qlinear.kernels.requant import FIXED_MODES, MODES, round_half_away

MOVE = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity")


@dataclass
class QTensor:
    """Integers with per-tensor (or per-axis) parameters."""

    q: np.ndarray
    scale: np.ndarray
    zp: np.ndarray
    axis: int = 1

    @property
    def s(self) -> float:
        return float(np.asarray(self.scale).reshape(-1)[0])

    @property
    def z(self) -> int:
        return int(np.asarray(self.zp).reshape(-1)[0])

    def float(self) -> np.ndarray:
        return dequantize_linear(self.q, self.scale, self.zp, axis=self.axis)


def _range(dtype: np.dtype) -> tuple[int, int]:
    from qlinear.core.types import qtype

    t = qtype(dtype)
    return int(t.qmin), int(t.qmax)


def run_integer(model: Any, inputs: dict[str, np.ndarray], *, mode: str = "f32_rne") -> dict[str, np.ndarray]:
    """Run a Q/DQ model with the integer kernels in requantization ``mode`` (see :mod:`qlinear.kernels.requant`)."""
    if mode not in MODES:
        raise KernelError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    m = load_model(model)
    g = GraphIndex.build(m, infer_shapes=False)
    env: dict[str, Any] = {k: numpy_helper.to_array(t) for k, t in g.initializers.items()}
    for n in m.graph.node:
        if n.op_type == "Constant":
            env[n.output[0]] = numpy_helper.to_array(attr(n, "value"))
    for v in m.graph.input:
        if v.name not in g.initializers:
            if v.name not in inputs:
                raise KernelError(f"missing model input {v.name!r}")
            env[v.name] = np.asarray(inputs[v.name])
    qview: dict[str, QTensor] = {}   # DQ output name -> the integers it dequantizes
    qvals: dict[str, QTensor] = {}   # Q output name -> integers
    done: set[int] = set()
    nodes = list(m.graph.node)

    def fval(name: str) -> np.ndarray:
        if name in env:
            return env[name]
        if name in qview:
            env[name] = qview[name].float()
            return env[name]
        raise KernelError(f"tensor {name!r} has no value (unsupported graph structure)")

    def single_q(t: str) -> tuple[list[onnx.NodeProto], onnx.NodeProto] | None:
        """The chain ``t -> [Relu|Clip] -> QuantizeLinear`` if ``t`` feeds only it."""
        chain = []
        cur = t
        while True:
            cons = g.consumers.get(cur, [])
            if len(cons) != 1 or cur in g.outputs:
                return None
            nxt = cons[0][0]
            if nxt.op_type == "QuantizeLinear":
                return chain, nxt
            if nxt.op_type in ("Relu", "Clip") and not chain:
                chain.append(nxt)
                cur = nxt.output[0]
                continue
            return None

    def out_params(qn: onnx.NodeProto) -> tuple[float, int, np.dtype]:
        s = fval(qn.input[1])
        z = fval(qn.input[2]) if len(qn.input) > 2 and qn.input[2] else np.uint8(0)
        if np.asarray(s).size != 1:
            raise KernelError(f"{qn.name}: per-axis output quantization is not supported by the integer kernels")
        return float(np.asarray(s).reshape(-1)[0]), int(np.asarray(z).reshape(-1)[0]), np.asarray(z).dtype

    def clamp(chain: list[onnx.NodeProto], s: float, z: int, qmin: int, qmax: int) -> tuple[int, int]:
        if not chain:
            return qmin, qmax
        a = chain[0]
        lo, hi = (0.0, np.inf) if a.op_type == "Relu" else (
            float(fval(a.input[1])) if len(a.input) > 1 and a.input[1] else -np.inf,
            float(fval(a.input[2])) if len(a.input) > 2 and a.input[2] else np.inf)
        rnd = round_half_away if mode in FIXED_MODES else np.rint

        def q(f: float) -> float:
            return z + float(rnd(np.float32(f) / np.float32(s)))

        return (max(qmin, int(q(lo))) if np.isfinite(lo) else qmin, min(qmax, int(q(hi))) if np.isfinite(hi) else qmax)

    def emit(qn: onnx.NodeProto, chain: list[onnx.NodeProto], node: onnx.NodeProto, values: np.ndarray,
             s: float, z: int, dt: np.dtype) -> None:
        qvals[qn.output[0]] = QTensor(values.astype(dt), np.float32(s), np.asarray(z, dt))
        done.update({id(node), id(qn)} | {id(c) for c in chain})

    for node in nodes:
        if id(node) in done:
            continue
        op = node.op_type
        if op == "Constant":
            continue
        if op == "QuantizeLinear":
            x = node.input[0]
            s = fval(node.input[1])
            z = fval(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            kw = {"axis": attr(node, "axis", 1), "block_size": attr(node, "block_size", 0)}
            od = attr(node, "output_dtype", 0)
            if od:
                kw["output_dtype"] = od
            q = quantize_linear(fval(x), s, z, **kw)
            qvals[node.output[0]] = QTensor(q, s, z if z is not None else np.zeros((), q.dtype), kw["axis"])
            continue
        if op == "DequantizeLinear":
            src = node.input[0]
            s = fval(node.input[1])
            z = fval(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.int32)
            q = qvals[src].q if src in qvals else fval(src)
            qview[node.output[0]] = QTensor(np.asarray(q), np.asarray(s), np.asarray(z), attr(node, "axis", 1))
            if attr(node, "block_size", 0):
                env[node.output[0]] = dequantize_linear(q, s, z, axis=attr(node, "axis", 1),
                                                        block_size=attr(node, "block_size", 0))
            continue
        ins = [qview.get(i) for i in node.input]
        tail = single_q(node.output[0]) if node.output else None
        if tail is not None and _integer_node(node, ins, tail, fval, emit, clamp, out_params, mode, g):
            continue
        if op in MOVE and ins and ins[0] is not None and np.asarray(ins[0].scale).size == 1:
            env_in = [ins[0].q] + [fval(i) for i in node.input[1:] if i]
            y = _float_op(node, env_in)
            qview[node.output[0]] = QTensor(y, ins[0].scale, ins[0].zp)
            continue
        y = _float_op(node, [fval(i) if i else None for i in node.input])
        for o, v in zip(node.output, y if isinstance(y, (list, tuple)) else [y]):
            env[o] = v
    out = {}
    for o in m.graph.output:
        out[o.name] = fval(o.name) if o.name not in qvals else qvals[o.name].q
    return out


def _integer_node(node, ins, tail, fval, emit, clamp, out_params, mode, g) -> bool:  # noqa: ANN001
    """Run ``node`` (+ fused activation + its Q) with the integer kernels; False if the pattern does not apply."""
    chain, qn = tail
    op = node.op_type
    s_o, z_o, dt = out_params(qn)
    qmin, qmax = _range(dt)
    lo, hi = clamp(chain, s_o, z_o, qmin, qmax)
    if op in ("Conv", "Gemm", "MatMul"):
        x, w = ins[0], ins[1] if len(ins) > 1 else None
        if x is None or w is None or np.asarray(x.scale).size != 1 or x.q.dtype.itemsize > 2:
            return False
        b = ins[2] if len(ins) > 2 else None
        bias = None if b is None else b.q.astype(np.int64)
        sw = np.asarray(w.scale, np.float64)
        zw = np.asarray(w.zp, np.int64)
        if op == "Conv":
            if x.q.ndim != 4:
                return False
            pads = list(attr(node, "pads", [0, 0, 0, 0]))
            if attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
                return False
            y = L.conv2d(x.q, w.q, bias, zp_x=x.z, zp_w=zw, s_x=x.s, s_w=sw, s_out=s_o, zp_out=z_o, mode=mode,
                         stride=tuple(attr(node, "strides", [1, 1])), pads=(pads[0], pads[1], pads[2], pads[3]),
                         dilation=tuple(attr(node, "dilations", [1, 1])), groups=attr(node, "group", 1),
                         qmin=lo, qmax=hi)
        else:
            wq = w.q
            if op == "Gemm":
                if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
                    return False
                wq = wq if attr(node, "transB", 0) else wq.T
                if sw.size > 1 and not attr(node, "transB", 0) and w.axis not in (1, -1):
                    return False
            else:
                if wq.ndim != 2:
                    return False
                wq = wq.T
            if x.q.ndim != 2 and op == "Gemm":
                return False
            y = L.fully_connected(x.q, wq, bias, zp_x=x.z, zp_w=zw, s_x=x.s, s_w=sw, s_out=s_o, zp_out=z_o,
                                  mode=mode, qmin=lo, qmax=hi)
        emit(qn, chain, node, y, s_o, z_o, dt)
        return True
    if op in ("Add", "Sub", "Mul") and len(ins) == 2 and all(i is not None and np.asarray(i.scale).size == 1
                                                            for i in ins):
        a, b = ins
        if a.q.shape != b.q.shape:
            a_q, b_q = np.broadcast_arrays(a.q, b.q)
        else:
            a_q, b_q = a.q, b.q
        if op == "Mul":
            y = EW.mul(a_q, b_q, s_a=a.s, zp_a=a.z, s_b=b.s, zp_b=b.z, s_out=s_o, zp_out=z_o, mode=mode, qmin=lo,
                       qmax=hi)
        else:
            y = EW.add(a_q, b_q, s_a=a.s, zp_a=a.z, s_b=b.s, zp_b=b.z, s_out=s_o, zp_out=z_o, mode=mode,
                       sub=op == "Sub", qmin=lo, qmax=hi)
        emit(qn, chain, node, y, s_o, z_o, dt)
        return True
    x = ins[0] if ins else None
    if x is None or np.asarray(x.scale).size != 1:
        return False
    if op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
        if x.q.ndim != 4:
            return False
        if op == "GlobalAveragePool":
            y = P.mean(x.q, (2, 3), s_in=x.s, zp_in=x.z, s_out=s_o, zp_out=z_o, mode=mode, qmin=lo, qmax=hi)
        else:
            k = tuple(attr(node, "kernel_shape"))
            pads = tuple(attr(node, "pads", [0, 0, 0, 0]))
            st = tuple(attr(node, "strides", [1, 1]))
            if op == "MaxPool":
                y = P.max_pool2d(x.q, k, stride=st, pads=pads)
            else:
                if attr(node, "count_include_pad", 0):
                    return False
                y = P.avg_pool2d(x.q, k, stride=st, pads=pads, qmin=qmin, qmax=qmax)
            if np.float32(x.s) != np.float32(s_o) or x.z != z_o:
                y = EW.requantize_tensor(y, s_in=x.s, zp_in=x.z, s_out=s_o, zp_out=z_o, mode=mode, qmin=lo, qmax=hi)
            else:
                y = np.clip(y, lo, hi)
        emit(qn, chain, node, y, s_o, z_o, dt)
        return True
    if op == "ReduceMean":
        axes = attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = [int(a) for a in np.asarray(fval(node.input[1])).reshape(-1)]
        if axes is None:
            return False
        axes = tuple(a % x.q.ndim for a in axes)
        y = P.mean(x.q, axes, s_in=x.s, zp_in=x.z, s_out=s_o, zp_out=z_o, mode=mode,
                   keepdims=bool(attr(node, "keepdims", 1)), qmin=lo, qmax=hi)
        emit(qn, chain, node, y, s_o, z_o, dt)
        return True
    if op in ("Relu", "Clip") and not chain:
        lo2, hi2 = clamp([node], s_o, z_o, qmin, qmax)
        y = EW.requantize_tensor(x.q, s_in=x.s, zp_in=x.z, s_out=s_o, zp_out=z_o, mode=mode, qmin=lo2, qmax=hi2)
        emit(qn, [], node, y, s_o, z_o, dt)
        return True
    if op == "Sigmoid" and dt == np.int8:
        emit(qn, chain, node, np.clip(A.logistic(x.q, s_in=x.s, zp_in=x.z, s_out=s_o, zp_out=z_o), lo, hi), s_o, z_o,
             dt)
        return True
    if op == "Tanh" and dt == np.int8:
        emit(qn, chain, node, np.clip(A.tanh(x.q, s_in=x.s, zp_in=x.z, s_out=s_o, zp_out=z_o), lo, hi), s_o, z_o, dt)
        return True
    if op == "Softmax" and dt == np.int8 and x.q.dtype == np.int8:
        emit(qn, chain, node, A.softmax(x.q, s_in=x.s, s_out=s_o, zp_out=z_o, axis=attr(node, "axis", -1)), s_o,
             z_o, dt)
        return True
    return False


def _float_op(node: onnx.NodeProto, values: list) -> Any:
    """One node on NumPy values through the ONNX reference evaluator."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
    n2 = helper.make_node(node.op_type, names, [f"o{k}" for k in range(len(node.output))], domain=node.domain)
    n2.attribute.extend(node.attribute)
    ev = ReferenceEvaluator(helper.make_model(helper.make_graph(
        [n2], "g", [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), None)
                    for nm, v in zip(names, values) if nm],
        [helper.make_tensor_value_info(f"o{k}", 0, None) for k in range(len(node.output))])))
    res = ev.run(None, {nm: np.asarray(v) for nm, v in zip(names, values) if nm})
    return res if len(res) > 1 else res[0]
