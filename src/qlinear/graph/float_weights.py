"""The weights of the layers ONNX Runtime runs in float, written as float values (target ort).

A weighted layer (Conv, ConvTranspose, Gemm, MatMul) whose data input is not dequantized (the plan left that
activation in float: a detector's score cone, :mod:`qlinear.ptq.mixed`; the inputs of a transformer's convolutions)
has no integer kernel in ONNX Runtime: it runs in float; so does a Conv whose output no QuantizeLinear reads (ONNX
Runtime's QLinearConv needs the output's parameters: a precision repair or an overrides rule leaving the output
float). A ``DequantizeLinear`` of its weight is then not folded (ONNX Runtime's constant folding skips
``DequantizeLinear`` so that its Q/DQ fusions see it): it runs at every inference, and the layer loses the kernels
that need a constant float weight (NCHWc Conv with its reordered filter and fused activation, prepacked MatMul).
:func:`float_layer_weights` writes such a weight as the float values that ``DequantizeLinear`` computes
(``(q - zero_point) * scale`` in float32): the same numbers, the float model's kernels; the encodings keep the
int8 encoding. Measured on nudenet-320n (YOLOv8n, 63 of its 64 Conv layers read the float activations of its score
cone, :mod:`qlinear.ptq.mixed`; ONNX Runtime 1.32's default session, 1 thread, medians of 7 interleaved passes over
13 held-out images, two runs on a shared 2-core AVX-512 machine): 28.9 and 43.5 ms per image with the weights'
DequantizeLinear, 21.5 and 34.7 ms with float weights, the float model 22.2 and 35.0 ms (the same outputs: det_f1
1.000, scores 25.9 dB).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.core.dequantize import dequantize_linear
from qlinear.graph.model import attr
from qlinear.graph.ops import DATA_MOVEMENT, FUSABLE_ACT, ORT_QUANTIZED_OUTPUT, WEIGHTED


@dataclass
class FloatWeights:
    """What :func:`float_layer_weights` wrote: the layers (by name) whose weights are now float, their weight
    elements, and the weight elements of every weighted layer of the graph."""

    layers: list[str] = field(default_factory=list)
    elements: int = 0
    total: int = 0

    @property
    def share(self) -> float:
        return self.elements / self.total if self.total else 0.0


def float_layer_weights(m: onnx.ModelProto, write: bool = True) -> FloatWeights:
    """Replace (in place, main graph) each ``DequantizeLinear`` of a constant that only weighted layers running in
    float read (:func:`_runs_float`) by its float value (module docstring). A ``DequantizeLinear`` of a blocked or
    non-float32 scale, a non-integer type, an ``output_dtype`` or one an integer layer also reads is kept. With
    ``write`` false the model is left as it is and the result says what would be written float."""
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for x in n.input:
            readers.setdefault(x, []).append(n)
    outs = {o.name for o in g.output}
    res, drop, new = FloatWeights(), set(), []
    for n in g.node:
        consts = [x for x in n.input if _const_dq(prod.get(x), inits)] if n.op_type in WEIGHTED else []
        size = max((int(np.prod(inits[prod[x].input[0]].dims)) for x in consts), default=0)
        res.total += size
        if not consts or not _runs_float(n, prod, inits, readers):
            continue
        done = False
        for x in consts:
            dq = prod[x]
            if id(dq) in drop or x in outs or not all(r.op_type in WEIGHTED and _runs_float(r, prod, inits, readers)
                                                      for r in readers.get(x, [])):
                continue
            w = _dequantized(dq, inits)
            if w is not None:
                new.append(numpy_helper.from_array(w, x))
                drop.add(id(dq))
                done = True
        if done:
            res.layers.append(n.name or n.output[0])
            res.elements += size
    if drop and write:
        _rewrite(g, drop, new)
    return res


def _const_dq(n: onnx.NodeProto | None, inits: dict[str, onnx.TensorProto]) -> bool:
    return n is not None and n.op_type == "DequantizeLinear" and n.input[0] in inits


def _runs_float(n: onnx.NodeProto, prod: dict[str, onnx.NodeProto], inits: dict[str, onnx.TensorProto],
                readers: dict[str, list[onnx.NodeProto]]) -> bool:
    """ONNX Runtime has no integer kernel for the weighted layer ``n``: no data input of it is dequantized (looked
    through data movement), or it makes one only with a quantized output (``ORT_QUANTIZED_OUTPUT``: Conv) and no
    QuantizeLinear reads its output (directly or after a Relu/Clip it fuses)."""
    for x in n.input:
        if not x or x in inits or _const_dq(prod.get(x), inits):
            continue
        p, k = prod.get(x), 0
        while p is not None and p.op_type in DATA_MOVEMENT and p.input and k < 16:
            p, k = prod.get(p.input[0]), k + 1
        if p is not None and p.op_type == "DequantizeLinear":
            return n.op_type in ORT_QUANTIZED_OUTPUT and not _quantized_output(n, readers)
    return True


def _quantized_output(n: onnx.NodeProto, readers: dict[str, list[onnx.NodeProto]]) -> bool:
    """A QuantizeLinear reads ``n``'s output, directly or after a fused activation (Relu, Clip)."""
    for r in readers.get(n.output[0], []):
        if r.op_type == "QuantizeLinear" or (r.op_type in FUSABLE_ACT and any(
                q.op_type == "QuantizeLinear" for q in readers.get(r.output[0], []))):
            return True
    return False


def _dequantized(dq: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    """``DequantizeLinear(q, scale, zero_point)`` of initializers (:func:`qlinear.core.dequantize_linear`, bit-exact
    with ONNX Runtime's), or None when not a plain per-tensor or per-axis one of an integer type with a float32
    scale."""
    if attr(dq, "block_size", 0) or attr(dq, "output_dtype", 0) or len(dq.input) < 2 or dq.input[1] not in inits \
            or (len(dq.input) > 2 and dq.input[2] and dq.input[2] not in inits) \
            or any(inits[x].data_location == onnx.TensorProto.EXTERNAL for x in dq.input if x):
        return None
    q = numpy_helper.to_array(inits[dq.input[0]])
    s = numpy_helper.to_array(inits[dq.input[1]])
    if q.dtype.kind not in "iu" or s.dtype != np.float32 or s.ndim > 1:
        return None
    z = numpy_helper.to_array(inits[dq.input[2]]) if len(dq.input) > 2 and dq.input[2] else None
    try:
        return dequantize_linear(q, s, z, axis=attr(dq, "axis", 1))
    except Exception:  # noqa: BLE001 - an axis or shape the operator refuses: keep the DequantizeLinear
        return None


def _rewrite(g: onnx.GraphProto, drop: set[int], new: list[onnx.TensorProto]) -> None:
    """Remove the ``drop`` nodes, add the ``new`` initializers, drop the initializers nothing reads any more."""
    keep = [n for n in g.node if id(n) not in drop]
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(new)
    used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    used |= {x for n in g.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH for x in _outer(a.g)}
    live = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(live)


def _outer(body: onnx.GraphProto) -> set[str]:
    """The names a subgraph reads (its nodes' inputs, nested bodies included): outer values it may capture."""
    out = {x for n in body.node for x in n.input}
    for n in body.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out |= _outer(a.g)
    return out
