"""The plan as ``qlinear.graph.plan`` computed it on ``onnx.ModelProto`` through ``GraphIndex`` (before the plan moved
onto ``onnx_ir``): the oracle the ir plan is compared with (tests/graph/test_plan_ir.py)."""

from __future__ import annotations

import onnx

from qlinear.graph import ops
from qlinear.graph.axes import param_axes
from qlinear.graph.model import GraphIndex
from qlinear.graph.plan import (
    ACTIVATION_FNS,
    DATA_MOVEMENT,
    FUSABLE_ACT,
    FUSING_PRODUCERS,
    NON_FLOAT_OPS,
    TIED_CONCAT_TARGETS,
    WEIGHTED,
    BiasSpec,
    ConcatSpec,
    Plan,
    WeightSpec,
    resolve_inherit,
)


def make_plan(m: onnx.ModelProto, *, exclude_nodes: tuple[str, ...] = (), exclude_op_types: tuple[str, ...] = (),
              quantize_outputs: bool = True, placement: str = "all", target: str = "tflite") -> Plan:
    """The plan of ``m``. ``placement`` ``all``: every float activation a runtime computes in integers (CNNs,
    integer-only targets); ``matmul``: only the inputs of MatMul/Gemm (both operands of activation x activation
    products, so attention scores and probabilities too) — transformer encoders on CPUs/GPUs, where LayerNorm,
    Softmax, Gelu and the residual adds run in float and their outlier ranges never meet an 8-bit grid.
    ``target``: Concat inputs and output are tied into one encoding only for the targets that require it
    (``TIED_CONCAT_TARGETS``)."""
    plan = _make_plan(m, exclude_nodes, exclude_op_types, quantize_outputs, target in TIED_CONCAT_TARGETS)
    if placement == "matmul":
        g = GraphIndex.build(m, infer_shapes=False)
        feeds: set[str] = set()
        for n in m.graph.node:
            if n.op_type in ("MatMul", "Gemm"):
                for x in n.input[:2]:
                    if x and x not in g.initializers:
                        feeds.add(resolve_inherit(plan, x))
        for t in plan.activations:
            if t not in feeds:
                plan.skipped[t] = "placement matmul: not a MatMul/Gemm input"
        plan.activations = [t for t in plan.activations if t in feeds]
        plan.tied = [grp for grp in plan.tied if all(t in feeds for t in grp)]
        plan.concats = [c for c in plan.concats if c.output in feeds]
        keep = set(plan.activations)
        plan.inherit = {k: v for k, v in plan.inherit.items() if resolve_inherit(plan, v) in keep}
    return plan


def _make_plan(m: onnx.ModelProto, exclude_nodes: tuple[str, ...], exclude_op_types: tuple[str, ...],
               quantize_outputs: bool, tie_concat: bool = True) -> Plan:
    g = GraphIndex.build(m)
    plan = Plan()
    excluded = set(exclude_nodes)
    ex_ops = set(exclude_op_types)
    floats = _float_tensors(m, g)
    data = _float_data(m, g, floats)
    seen: set[str] = set()

    def want(t: str, why_not: str | None = None) -> None:
        if t in seen or not t:
            return
        seen.add(t)
        if t not in floats:
            plan.skipped[t] = "not a float tensor"
            return
        if t not in data:
            plan.skipped[t] = "computed from integer inputs, shapes or constants only (a mask), not from float data"
            return
        if why_not:
            plan.skipped[t] = why_not
            return
        plan.activations.append(t)

    for inp in m.graph.input:
        if inp.name not in g.initializers and inp.name in floats:
            if any(n.op_type in WEIGHTED + FUSING_PRODUCERS or n.op_type not in NON_FLOAT_OPS
                   for n, _ in g.consumers.get(inp.name, [])):
                want(inp.name)

    for n in m.graph.node:
        skip_node = n.name in excluded or n.op_type in ex_ops
        if n.op_type in WEIGHTED and not skip_node:
            w = n.input[1] if len(n.input) > 1 else ""
            if w in g.initializers and len(g.shape(w) or ()) >= 2:
                axes = param_axes(g, w)
                bi = ops.bias_input(n.op_type)
                b = n.input[bi] if bi is not None and len(n.input) > bi else ""
                b = b if b and b in g.initializers else ""
                plan.weights.append(WeightSpec(w, n.op_type, n.name, axes[0], axes[1], n.input[0], b))
                if b:
                    plan.biases.append(BiasSpec(b, w, n.input[0]))
        if n.op_type in NON_FLOAT_OPS:
            continue
        for out in n.output:
            if not out:
                continue
            if skip_node:
                want(out, f"node {n.name or n.op_type} excluded")
                continue
            cons = g.consumers.get(out, [])
            if (n.op_type in FUSING_PRODUCERS or _is_act(n, g)) and len(cons) == 1 and _is_act(cons[0][0], g) \
                    and out not in g.outputs:
                want(out, f"fused with the following {cons[0][0].op_type}")
                continue
            if n.op_type in DATA_MOVEMENT and n.input and n.input[0] in floats:
                plan.inherit[out] = n.input[0]
                seen.add(out)
                continue
            if n.op_type == "Add" and any(_is_mask(x, g, data, floats) for x in n.input):
                want(out, "an attention mask is added here (extreme values): left in float")
                continue
            if n.op_type == "Where" and len(n.input) == 3 and out in data:
                branches = [x for x in n.input[1:] if x in data]
                if len(branches) == 1:
                    plan.inherit[out] = branches[0]
                    seen.add(out)
                    continue
            if out in g.outputs and not quantize_outputs:
                want(out, "graph output (quantize_outputs is off)")
                continue
            want(out)
        if n.op_type == "Concat" and not skip_node:
            if tie_concat:
                plan.tied.append([t for t in n.input if t] + [n.output[0]])
            axis = next((int(a.i) for a in n.attribute if a.name == "axis"), 0)
            parts = [t for t in n.input if t and t not in g.initializers]
            plan.concats.append(ConcatSpec(n.name or n.output[0], parts, n.output[0], axis))
    return plan


def activation_fn_output(g: GraphIndex, t: str, depth: int = 3) -> bool:
    """``t`` is the output of a smooth activation function (Gelu, or its Erf/Tanh form, SiLU/SwiGLU's Sigmoid), found
    within ``depth`` producer steps without crossing a MatMul/Gemm/normalization: the heavy-tailed MatMul inputs of
    transformer MLPs."""
    stack, seen = [(t, 0)], set()
    while stack:
        x, d = stack.pop()
        p = g.producer.get(x)
        if p is None or x in seen or d > depth:
            continue
        seen.add(x)
        if p.op_type in ACTIVATION_FNS:
            return True
        if p.op_type in ops.MLP_BOUNDARY:
            continue
        stack.extend((i, d + 1) for i in p.input if i and i not in g.initializers)
    return False


def _float_data(m: onnx.ModelProto, g: GraphIndex, floats: set[str]) -> set[str]:
    """Tensors computed from float data: float graph inputs, lookups into float initializers (``Gather``) and what
    depends on them (nodes in topological order, as ONNX requires)."""
    data = {i.name for i in m.graph.input if i.name not in g.initializers and i.name in floats}
    for n in m.graph.node:
        lookup = n.op_type in ops.LOOKUPS and n.input and n.input[0] in g.initializers \
            and g.initializers[n.input[0]].data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
        if n.op_type in ("Shape", "Size"):  # a shape is not data: masks built from it stay masks
            continue
        if lookup or any(x in data for x in n.input if x):
            data.update(o for o in n.output if o)
    return data


def _is_mask(x: str, g: GraphIndex, data: set[str], floats: set[str]) -> bool:
    """A computed float tensor that does not depend on float data (an attention mask), not a constant."""
    if not x or x in data or x not in floats or x in g.initializers:
        return False
    p = g.producer.get(x)
    return p is not None and p.op_type not in ("Constant", "ConstantOfShape")


def _is_act(n: onnx.NodeProto, g: GraphIndex) -> bool:
    """An elementwise activation a runtime fuses into its producer: Relu, Clip, LeakyRelu, or Max/Min against a
    constant (the per-channel clip that cross-layer equalization writes)."""
    if n.op_type in FUSABLE_ACT:
        return True
    return ops.is_constant_clamp(n, g.initializers)


def _float_tensors(m: onnx.ModelProto, g: GraphIndex) -> set[str]:
    """Tensors known (or inferred) to be float32/float16."""
    out: set[str] = set()
    try:
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False)
    except Exception:  # noqa: BLE001
        inferred = m
    vis = list(inferred.graph.input) + list(inferred.graph.output) + list(inferred.graph.value_info)
    for v in vis:
        if v.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
            out.add(v.name)
    return out
