"""``check_integer(model)``: proof that no accumulator of a Q/DQ model can overflow on an integer runtime.

For every Conv, ConvTranspose, Gemm and MatMul whose activation input and weight are dequantized integers, the
worst case of the accumulator of output channel ``c`` over any input the activation type allows is::

    A[c] = max(b + sum_k max(w_k hi, w_k lo), -b + sum_k max(-w_k hi, -w_k lo))
    w_k = w_q[c, k] - z_w[c],  lo = qmin - z_x,  hi = qmax - z_x,  b = b_q[c]

reached by the input that takes ``qmax`` where the weight is positive and ``qmin`` where it is negative (or the
reverse): the bound is exact for Gemm/MatMul and for a Conv output whose window lies inside the image (the sum runs
over every weight of the channel; for ConvTranspose it is an upper bound on the taps that can meet). ``A[c] <= 2^31 - 1`` for all ``c`` means the int32 accumulator of TFLite, QNN or ONNX
Runtime's int8 kernels cannot wrap, whatever the data. With 16-bit activations (16x8) TFLite accumulates in int64;
the layer is checked against that width and says so. Layers with float activations (weight-only quantization) or
float8 weights accumulate in float and are listed as such. The headroom is ``log2((2^(bits-1) - 1) / max_c A[c])``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.calibration.bias import accumulator_bound
from qlinear.core import granularity as gr
from qlinear.core.types import int_stored_as, qtype
from qlinear.graph.model import Initializers, attr, load_model
from qlinear.graph.ops import WEIGHTED, weight_channel_axis


@dataclass
class LayerCheck:
    node: str
    op: str
    weight: str
    accumulator: str            # "int32", "int64 (16x8)", "float"
    bound: int = 0              # max over channels of the worst-case |accumulator|
    headroom_bits: float = math.inf
    channel: int = -1           # the channel reaching the bound
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.headroom_bits >= 0

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "op": self.op, "weight": self.weight, "accumulator": self.accumulator,
                "bound": self.bound, "headroom_bits": None if math.isinf(self.headroom_bits) else self.headroom_bits,
                "channel": self.channel, "ok": self.ok, "note": self.note}


@dataclass
class IntegerCheck:
    """Result of :func:`check_integer`: one :class:`LayerCheck` per weighted layer."""

    layers: list[LayerCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(lc.ok for lc in self.layers)

    @property
    def min_headroom_bits(self) -> float:
        return min((lc.headroom_bits for lc in self.layers), default=math.inf)

    @property
    def overflows(self) -> list[LayerCheck]:
        return [lc for lc in self.layers if not lc.ok]

    def __str__(self) -> str:
        if not self.layers:
            return "no integer layers"
        checked = [lc for lc in self.layers if lc.accumulator != "float"]
        if self.ok:
            return (f"{len(checked)} integer layers, no accumulator can overflow (least headroom "
                    f"{self.min_headroom_bits:.2f} bits)")
        return f"{len(self.overflows)} of {len(checked)} integer layers can overflow: " + ", ".join(
            f"{lc.node} ({lc.accumulator}, worst case {lc.bound} at channel {lc.channel})" for lc in self.overflows)


class _Lookup(Initializers):
    """What the check reads of a graph: its initializers and the producer of each tensor (no full index)."""

    def __init__(self, m: onnx.ModelProto) -> None:
        super().__init__(m)
        self.initializers = self.tensors
        self.producer = {o: n for n in m.graph.node for o in n.output if o}


def _value(g: _Lookup, const: dict[str, onnx.NodeProto], name: str) -> np.ndarray | None:
    if not name:
        return None
    if name in g.initializers:
        return g.array(name)
    if name in const:
        return numpy_helper.to_array(attr(const[name], "value"))
    return None


def _dq_of(g: _Lookup, name: str) -> onnx.NodeProto | None:
    p = g.producer.get(name)
    return p if p is not None and p.op_type == "DequantizeLinear" else None


def _centered_weight(g: _Lookup, const: dict, dq: onnx.NodeProto) -> tuple[np.ndarray, str] | None:
    """``w_q - z_w`` (int64, the weight's shape) of a weight DequantizeLinear, and its quantized type name. An LPBQ
    weight (its scale itself a DequantizeLinear of integer scales) is multiplied by each block's integer scale: the
    8-bit integers its blocks expand to, whose scale, the per-channel float scale, its int32 bias is at."""
    q = _value(g, const, dq.input[0])
    t = None if q is None else int_stored_as(q.dtype)
    if t is None:
        return None
    axis, block = attr(dq, "axis", 1), attr(dq, "block_size", 0)
    z = _value(g, const, dq.input[2]) if len(dq.input) > 2 else None
    qi = q.astype(np.int64)
    if z is not None and np.any(z.astype(np.int64)):
        qi = qi - gr.expand(z.astype(np.int64), q.shape, gr.resolve(q.shape, z.shape, axis, block))
    sdq = _dq_of(g, dq.input[1])
    i = None if sdq is None else _value(g, const, sdq.input[0])
    if i is not None and i.dtype.kind in "iu":
        qi = qi * gr.expand(i.astype(np.int64), q.shape, gr.resolve(q.shape, i.shape, axis, block))
    return qi, t.name


def check_integer(model: Any) -> IntegerCheck:
    """Check every weighted layer of a Q/DQ model (module docstring)."""
    m = model if isinstance(model, onnx.ModelProto) else load_model(model)  # read only: no copy
    g = _Lookup(m)
    const = {n.output[0]: n for n in m.graph.node if n.op_type == "Constant"}
    res = IntegerCheck()
    for node in m.graph.node:
        if node.op_type not in WEIGHTED or len(node.input) < 2:
            continue
        name = node.name or node.output[0]
        wdq, xdq = _dq_of(g, node.input[1]), _dq_of(g, node.input[0])
        wname = node.input[1]
        if wdq is None:
            continue  # weight not quantized: nothing integer here
        cw = _centered_weight(g, const, wdq)
        if cw is None:
            res.layers.append(LayerCheck(name, node.op_type, wname, "float", note="float8/float weights"))
            continue
        if xdq is None:
            res.layers.append(LayerCheck(name, node.op_type, wname, "float",
                                         note="activation not quantized (weight-only): float accumulation"))
            continue
        x_q = _value(g, const, xdq.input[0])
        xz = _value(g, const, xdq.input[2]) if len(xdq.input) > 2 else None
        if x_q is None:
            qn = g.producer.get(xdq.input[0])
            x_dtype = xz.dtype if xz is not None else (
                onnx.helper.tensor_dtype_to_np_dtype(attr(qn, "output_dtype")) if qn is not None and
                attr(qn, "output_dtype") else np.dtype(np.uint8))
        else:
            x_dtype = x_q.dtype
        xt = qtype(x_dtype)
        if not xt.is_int:
            res.layers.append(LayerCheck(name, node.op_type, wname, "float", note=f"{xt.name} activations"))
            continue
        if xz is not None and np.asarray(xz).size > 1:
            res.layers.append(LayerCheck(name, node.op_type, wname, "float",
                                         note="per-axis activation quantization: not an integer kernel"))
            continue
        z = int(np.asarray(xz).reshape(-1)[0]) if xz is not None else 0
        w, _ = cw
        ax = weight_channel_axis(node, w.ndim)
        bq = None
        if len(node.input) > 2 and node.input[2]:
            bdq = _dq_of(g, node.input[2])
            if bdq is not None:
                bv = _value(g, const, bdq.input[0])
                if bv is not None and bv.dtype.kind in "iu":
                    bq = np.broadcast_to(bv.astype(np.int64).reshape(-1), (w.shape[ax],))
        bound = accumulator_bound(w, bq, int(xt.qmin) - z, int(xt.qmax) - z, ax)
        wide = xt.bits > 8
        bits = 64 if wide else 32
        limit = 2 ** (bits - 1) - 1
        worst = int(bound.max()) if bound.size else 0
        c = int(bound.argmax()) if bound.size else -1
        head = math.log2(limit / worst) if worst > 0 else math.inf
        res.layers.append(LayerCheck(name, node.op_type, wname, "int64 (16x8)" if wide else "int32", worst, head, c,
                                     "16-bit activations: TFLite accumulates 16x8 layers in int64" if wide else ""))
    return res


__all__ = ["IntegerCheck", "LayerCheck", "check_integer"]
