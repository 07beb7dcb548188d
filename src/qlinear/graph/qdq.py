"""A Q/DQ ONNX model read as an integer graph: which tensors are integers, with which parameters, and which float
nodes a runtime executes as integer kernels.

The pattern every integer runtime fuses (ONNX Runtime's QDQ selectors, TFLite's converter, QNN)::

    DQ(x_q) --+
    DQ(w_q) --+--> Op --> [Relu | Clip] --> Q --> y_q
    DQ(b_q) --+

becomes one :class:`QOp` whose inputs are integer tensors (:class:`QValue`), whose output is the integer tensor the
``Q`` writes, and whose fused activation is the Relu/Clip between them. Everything else (graph inputs quantized by a
``Q``, outputs dequantized by a ``DQ``, nodes on float values) is kept as it is. :func:`parse` is shared by
:func:`qlinear.kernels.run_integer` and the TFLite exporter (:mod:`qlinear.tflite`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.core.types import QType, int_stored_as, qtype
from qlinear.graph.model import GraphIndex, attr, load_model
from qlinear.graph.ops import QDQ_FUSED_ACTIVATIONS, QDQ_STRUCTURE

#: the clamps :func:`parse` fuses into the operator before them (the registry's ``qdq_fused_activation`` role)
ACTIVATIONS = QDQ_FUSED_ACTIVATIONS


@dataclass(frozen=True)
class QParams:
    """Quantization parameters of an integer tensor (ONNX shapes: scalar per-tensor, 1-D per-axis, blocked)."""

    dtype: QType
    scale: np.ndarray          # float32
    zero_point: np.ndarray     # int64, same shape as scale
    axis: int | None = None    # per-axis / blocked axis (normalised when the rank is known)
    block_size: int = 0

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and not self.block_size

    @property
    def s(self) -> float:
        return float(self.scale.reshape(-1)[0])

    @property
    def z(self) -> int:
        return int(self.zero_point.reshape(-1)[0])


@dataclass
class QValue:
    """An integer tensor: the output of a QuantizeLinear, or a quantized initializer (weights, int32 bias)."""

    name: str
    params: QParams
    const: np.ndarray | None = None   # the integers of an initializer
    float_name: str = ""              # the float tensor it stands for (the Q input, or the DQ output of a constant)


@dataclass
class QOp:
    """A node a runtime executes on integers: inputs are :class:`QValue` (or None for a float input), the output is
    the integer tensor its QuantizeLinear writes; ``act`` the fused activation (``RELU``, ``RELU6``,
    ``RELU_N1_TO_1``, ``CLIP`` with ``act_bounds``)."""

    node: onnx.NodeProto
    inputs: list[QValue | None]
    output: QValue | None
    act: str | None = None
    act_bounds: tuple[float, float] = (-math.inf, math.inf)
    act_node: onnx.NodeProto | None = None
    q_node: onnx.NodeProto | None = None

    @property
    def op(self) -> str:
        return self.node.op_type

    @property
    def name(self) -> str:
        return self.node.name or self.node.output[0]


@dataclass
class QdqGraph:
    model: onnx.ModelProto
    index: GraphIndex
    values: dict[str, QValue] = field(default_factory=dict)        # integer tensors by name
    dq: dict[str, str] = field(default_factory=dict)               # DQ output -> integer tensor it dequantizes
    q: dict[str, str] = field(default_factory=dict)                # Q output -> float input
    ops: dict[str, QOp] = field(default_factory=dict)               # node name -> fused integer op
    consts: dict[str, np.ndarray] = field(default_factory=dict)    # float initializers and Constant outputs

    def value_of_dq(self, name: str) -> QValue | None:
        src = self.dq.get(name)
        return None if src is None else self.values.get(src)


def _params(node: onnx.NodeProto, consts: dict[str, np.ndarray], rank: int | None,
            dtype_hint: np.dtype | None = None) -> QParams | None:
    s = consts.get(node.input[1])
    if s is None:
        return None
    z = consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if z is not None:
        t = qtype(z.dtype)
    else:
        od = attr(node, "output_dtype", 0) if node.op_type == "QuantizeLinear" else 0
        t = qtype(od) if od else (qtype(dtype_hint) if dtype_hint is not None else qtype("uint8"))
    zp = np.zeros(s.shape, np.int64) if z is None or not t.is_int else np.asarray(z).astype(np.int64)
    axis = None
    if s.size > 1 or attr(node, "block_size", 0):
        axis = attr(node, "axis", 1)
        if rank:
            axis %= rank
    return QParams(t, np.asarray(s, np.float32), zp, axis, int(attr(node, "block_size", 0)))


def clip_bounds(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> tuple[float, float] | None:
    """The clamp ``(lo, hi)`` of a Relu or Clip node (Clip bounds from its inputs 1, 2 looked up in ``consts``, or
    its opset < 11 attributes; a missing bound is infinite), or None when a bound is not a scalar constant."""
    if node.op_type == "Relu":
        return 0.0, math.inf
    lo, hi = -math.inf, math.inf
    if len(node.input) > 1 and node.input[1]:
        v = consts.get(node.input[1])
        if v is None or np.asarray(v).size != 1:
            return None
        lo = float(np.asarray(v).reshape(-1)[0])
    elif attr(node, "min") is not None:
        lo = float(attr(node, "min"))
    if len(node.input) > 2 and node.input[2]:
        v = consts.get(node.input[2])
        if v is None or np.asarray(v).size != 1:
            return None
        hi = float(np.asarray(v).reshape(-1)[0])
    elif attr(node, "max") is not None:
        hi = float(attr(node, "max"))
    return lo, hi


def activation_name(lo: float, hi: float) -> str:
    """The TFLite fused activation a clamp ``[lo, hi]`` is (``CLIP`` when it is none of them)."""
    if lo == 0 and hi == math.inf:
        return "RELU"
    if lo == 0 and hi == 6:
        return "RELU6"
    if lo == -1 and hi == 1:
        return "RELU_N1_TO_1"
    return "CLIP"


def fold_constants(m: onnx.ModelProto, consts: dict[str, np.ndarray], max_elements: int = 1 << 16) -> None:
    """Add to ``consts`` the value of every Constant node and of every small node whose inputs are all constants
    (``Cast`` of a Clip bound, ``Shape``-free arithmetic on scalars...), evaluated by the ONNX reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    for n in m.graph.node:
        if n.op_type == "Constant":
            v = attr(n, "value")
            if v is not None:
                consts[n.output[0]] = numpy_helper.to_array(v)
            continue
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") or not n.input or n.domain not in ("", "ai.onnx"):
            continue
        if any(i and i not in consts for i in n.input) or any(a.type == onnx.AttributeProto.GRAPH
                                                              for a in n.attribute):
            continue
        if sum(consts[i].size for i in n.input if i) > max_elements:
            continue
        names = [f"i{k}" if x else "" for k, x in enumerate(n.input)]
        n2 = onnx.helper.make_node(n.op_type, names, [f"o{k}" for k in range(len(n.output))])
        n2.attribute.extend(n.attribute)
        vals = {nm: consts[x] for nm, x in zip(names, n.input) if x}
        try:
            graph = onnx.helper.make_graph([n2], "fold", [
                onnx.helper.make_tensor_value_info(nm, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                for nm, v in vals.items()], [onnx.helper.make_tensor_value_info(f"o{k}", 0, None)
                                             for k in range(len(n.output))])
            res = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=list(m.opset_import))).run(None, vals)
        except Exception:  # noqa: BLE001 - not foldable here: it stays a runtime node
            continue
        for o, v in zip(n.output, res):
            consts[o] = np.asarray(v)


def parse(model: Any) -> QdqGraph:
    """The integer structure of a Q/DQ model (module docstring)."""
    m = load_model(model)
    g = GraphIndex.build(m, infer_shapes=False)
    consts: dict[str, np.ndarray] = {k: numpy_helper.to_array(t) for k, t in g.initializers.items()}
    fold_constants(m, consts)
    qg = QdqGraph(m, g, consts=consts)
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear":
            p = _params(n, consts, None)
            if p is None:
                continue
            qg.values[n.output[0]] = QValue(n.output[0], p, float_name=n.input[0])
            qg.q[n.output[0]] = n.input[0]
    for n in m.graph.node:
        if n.op_type != "DequantizeLinear":
            continue
        src = n.input[0]
        if src in qg.values:
            qg.dq[n.output[0]] = src
            continue
        if src in consts:
            c = consts[src]
            if int_stored_as(c.dtype) is None:
                continue
            p = _params(n, consts, c.ndim, c.dtype)
            if p is None:
                continue
            qg.values[src] = QValue(src, p, const=c, float_name=n.output[0])
            qg.dq[n.output[0]] = src
        elif src in g.producer:  # integers a node computes (Min/Max moved onto them): the DQ gives the parameters
            p = _params(n, consts, None)
            if p is not None:
                qg.values[src] = QValue(src, p, float_name=n.output[0])
                qg.dq[n.output[0]] = src
    for n in m.graph.node:
        if n.op_type in QDQ_STRUCTURE:
            continue
        ins = [qg.value_of_dq(i) if i else None for i in n.input]
        if not any(v is not None for v in ins) or not n.output:
            continue
        out, act, bounds, act_node, q_node = None, None, (-math.inf, math.inf), None, None
        cur = n.output[0]
        cons = g.consumers.get(cur, [])
        if len(cons) == 1 and cur not in g.outputs and cons[0][0].op_type in ACTIVATIONS and \
                n.op_type not in ACTIVATIONS:
            b = clip_bounds(cons[0][0], consts)
            nxt = cons[0][0].output[0]
            nc = g.consumers.get(nxt, [])
            if b is not None and len(nc) == 1 and nxt not in g.outputs and nc[0][0].op_type == "QuantizeLinear":
                act_node, bounds = cons[0][0], b
                act = activation_name(*b)
                q_node = nc[0][0]
        elif len(cons) == 1 and cur not in g.outputs and cons[0][0].op_type == "QuantizeLinear":
            q_node = cons[0][0]
        if q_node is not None and q_node.output[0] in qg.values:
            out = qg.values[q_node.output[0]]
        qg.ops[n.name or n.output[0]] = QOp(n, ins, out, act, bounds, act_node, q_node)
    return qg



__all__ = ["ACTIVATIONS", "QOp", "QParams", "QValue", "QdqGraph", "activation_name", "clip_bounds", "parse"]
