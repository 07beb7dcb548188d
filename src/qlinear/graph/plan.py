"""Where the quantizers go, the way runtimes need them.

* **Weights** of Conv, ConvTranspose, Gemm and MatMul (initializers) are quantized per channel along the output
  channel (:mod:`qlinear.graph.axes`); their **bias** becomes int32 at ``input_scale * weight_scale``.
* **Activations**: graph inputs and the outputs of nodes, except where a runtime fuses: no quantizer between a
  Conv/Gemm/MatMul/Add and the Relu/Clip that is its only consumer (the quantizer goes after the activation). A
  LeakyRelu is not fused (no runtime's integer Conv takes it): its input is quantized. Target ``qnn`` also fuses
  a MatMul of a constant [K, N] weight with the Add of its constant [N] bias (AIMET's MatmulAdd, QNN's
  FullyConnected): no quantizer between, and the bias is int32 like a Gemm's (:func:`matmul_bias`).
* **Data-movement ops** (Reshape, Flatten, Transpose, Squeeze, Unsqueeze, MaxPool, Identity, Slice, Gather, Pad,
  SpaceToDepth, DepthToSpace) share their input's parameters.
* **Concat**: where the target requires it (``tflite``: one scale in and out), its inputs and output share one set of
  parameters (their ranges are merged, the plan's ``tied``); elsewhere (``ort``, ``qnn``: ONNX Runtime's
  QLinearConcat and the integer kernels requantize each input) every input keeps its own and the output gets its
  own. Every Concat is listed in ``Plan.concats`` (its parts' observed ranges are filled in after calibration, the
  mixed-range checks of :mod:`qlinear.ptq.mixed`).
* **Transformer graphs**: only tensors computed from float data are quantized — float graph inputs and embedding
  lookups (``Gather`` of a float initializer) and what is computed from them. Float tensors derived from integer
  inputs, shapes and constants alone (attention masks: ``Cast(attention_mask)``, ``Where(mask, 0, -inf)``; position
  ids; int64 shape subgraphs) are left alone, and so is the output of an ``Add`` of such a mask to data (the masked
  attention scores hold ``-3.4e38``: no 8- or 16-bit grid represents both). A ``Where`` choosing between data and a
  constant (``Where(IsNaN(p), 0, p)`` after Softmax) shares its data input's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import onnx
import onnx_ir as ir

from qlinear.graph import ops
from qlinear.graph.axes import value_axes
from qlinear.graph.ir import light_proto, to_ir
from qlinear.graph.model import without_weights
from qlinear.graph.norm_stats import norm_statistics

# the operator tables live in the registry (qlinear.graph.ops); these names are its views
WEIGHTED = ops.WEIGHTED
FUSABLE_ACT = ops.FUSABLE_ACT
FUSING_PRODUCERS = ops.FUSING_PRODUCERS
DATA_MOVEMENT = ops.DATA_MOVEMENT
NON_FLOAT_OPS = ops.NON_FLOAT_OPS  # outputs that are not float activations to quantize
ACTIVATION_FNS = ops.ACTIVATION_FNS


@dataclass
class WeightSpec:
    name: str
    op: str
    node: str               # the node's name, or its first output's when it has none
    channel_axis: int
    block_axis: int | None
    input: str = ""          # the activation the weight multiplies
    bias: str = ""           # the bias initializer added to the product, if any


@dataclass
class BiasSpec:
    name: str
    weight: str
    input: str


@dataclass
class ConcatSpec:
    """A Concat of the plan: its data inputs (the parts), output and axis; ``ranges`` (the largest ``|x|`` of each
    part on the calibration data) are filled in after calibration."""

    node: str               # the node's name, or its first output's when it has none
    inputs: list[str]
    output: str
    axis: int
    ranges: list[float] = field(default_factory=list)
    #: target ort (where float chains apply, :func:`_float_chains`): every node reading the output, directly or
    #: through data movement reusing its encoding, runs in float on ONNX Runtime's CPU session (an Add/Mul of a
    #: constant, such as a BatchNorm written out): no integer kernel needs the output on one grid
    float_readers: bool = False

    def ratio(self) -> float:
        """How many times the widest part's range is the narrowest's (1.0 before calibration; inf if a part is all
        zeros)."""
        if len(self.ranges) < 2:
            return 1.0
        lo, hi = min(self.ranges), max(self.ranges)
        return float("inf") if lo <= 0 < hi else (hi / lo if lo > 0 else 1.0)


#: targets whose Concat requires one set of parameters for its inputs and output
TIED_CONCAT_TARGETS = ("tflite",)
#: targets where a normalization's statistics stay float (:mod:`qlinear.graph.norm_stats`): ONNX Runtime computes
#: them in float anyway (no integer Sqrt, ReduceSum, ...), a .tflite as float islands (not a full-integer one: the
#: pipeline says so); QNN gets them in integers, as AIMET's configs do
FLOAT_STATS_TARGETS = ("ort", "tflite")


#: targets where a tensor between two operators the runtime computes in float (``ops.FLOAT_ON_ORT``, an Add/Mul of a
#: constant) gets no quantizer (:func:`_float_chains`): ONNX Runtime's CPU session runs both in float whatever Q/DQ
#: sit between them; QNN and TFLite compute them in integers (or need integer island boundaries)
FLOAT_CHAIN_TARGETS = ("ort",)
#: targets whose runtime computes a Max/Min against a constant (the per-channel clip cross-layer equalization writes
#: for a ReLU6) in float between Q/DQ: ONNX Runtime fuses only Relu and Clip into the layer before (dropped where
#: the quantizer after them clips alike), so there the layer's output gets its own quantizer (DQ -> Conv -> Q is its
#: int8 kernel) and the clip runs in float; elsewhere the clip is fused like a Relu (no quantizer between). On
#: EfficientNet-Lite0 per-tensor (CLE): 32 Convs ran in float with their weights dequantized at every inference
UNFUSED_CLAMP_TARGETS = ("ort",)
#: targets that fuse a MatMul with a constant rank-2 weight and the Add of a constant rank-1 bias into one layer
#: (:func:`matmul_bias`): QNN's FullyConnected, AIMET's ``MatmulAdd`` fusion (its QuantizationSimModel rewrites the
#: pair into a Gemm, so the MatMul's output is no tensor of AIMET's sim and an encoding for it fails to load); the
#: bias then gets its int32 encoding like a Gemm's
MATMUL_BIAS_TARGETS = ("qnn",)
#: why a tensor where an attention mask is added to data is left float (``Plan.skipped``, :func:`masked_note`)
MASKED = "an attention mask is added here (extreme values): left in float"
#: targets where a weight whose every layer reads a float activation keeps its float values
#: (:meth:`Plan.leave_float_input_weights`): ONNX Runtime's CPU session has no integer kernel for a float input and
#: runs such a layer in float, where an int8 weight adds its rounding error and saves nothing (the file would hold its
#: dequantized values as float, :mod:`qlinear.graph.float_weights`); QNN and TFLite keep integer weights
FLOAT_INPUT_WEIGHT_TARGETS = ("ort",)
#: why such a weight is left float (``Plan.skipped``)
FLOAT_INPUT = "its layer reads a float activation (ONNX Runtime computes it in float): float weight"


@dataclass
class Plan:
    """The quantization plan of a float model."""

    activations: list[str] = field(default_factory=list)        # tensors observed and quantized
    inherit: dict[str, str] = field(default_factory=dict)        # tensor -> tensor whose encoding it reuses
    tied: list[list[str]] = field(default_factory=list)          # groups sharing one encoding (Concat)
    concats: list[ConcatSpec] = field(default_factory=list)     # every quantized Concat (tied or not)
    weights: list[WeightSpec] = field(default_factory=list)
    biases: list[BiasSpec] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)        # tensor -> reason
    norm_stats: list[str] = field(default_factory=list)          # quantized normalization statistics (norm_stats)

    @property
    def empty(self) -> bool:
        """Whether the plan quantizes nothing: no weight, no activation (:func:`nothing_quantized_note` says why)."""
        return not self.weights and not self.activations

    def followers(self) -> dict[str, list[str]]:
        """Each tensor whose encoding others reuse (through data-movement chains) -> those tensors."""
        out: dict[str, list[str]] = {}
        for k in self.inherit:
            out.setdefault(resolve_inherit(self, k), []).append(k)
        return out

    def leave_float(self, tensors: set[str], reason: str) -> None:
        """Take ``tensors`` out of the quantized activations (and out of those reusing an encoding), with ``reason``
        (a decision made after calibration: :mod:`qlinear.ptq.mixed`, :mod:`qlinear.ptq.logs`)."""
        self.activations = [t for t in self.activations if t not in tensors]
        self.inherit = {k: v for k, v in self.inherit.items() if k not in tensors}
        for t in tensors:
            self.skipped[t] = reason

    def float_input_weights(self, quantized: set[str]) -> list[str]:
        """The weights whose every layer reads an input not in ``quantized`` (the activations with an integer
        encoding), in plan order; a weight one layer reads on a quantized input is not one."""
        float_in: dict[str, bool] = {}
        for w in self.weights:
            float_in[w.name] = float_in.get(w.name, True) and w.input not in quantized
        return [n for n, f in float_in.items() if f]

    def leave_float_input_weights(self, quantized: set[str]) -> list[str]:
        """Take :meth:`float_input_weights` out of the plan, with their biases, reason :data:`FLOAT_INPUT`; their
        names."""
        names = self.float_input_weights(quantized)
        gone = set(names)
        self.weights = [w for w in self.weights if w.name not in gone]
        self.biases = [b for b in self.biases if b.weight not in gone]
        self.skipped.update({n: FLOAT_INPUT for n in names})
        return names


PLACEMENTS = ("all", "matmul")


def is_transformer(m: onnx.ModelProto) -> bool:
    """Attention (Softmax) with a normalization (LayerNormalization, or its decomposed ReduceMean form) and MatMuls
    with constant weights: the graphs :func:`make_plan`'s ``matmul`` placement is for."""
    present = {n.op_type for n in m.graph.node}
    inits = {t.name for t in m.graph.initializer}
    return "Softmax" in present and bool(present & set(ops.TRANSFORMER_NORMS)) \
        and any(n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in inits for n in m.graph.node)


def make_plan(m: onnx.ModelProto | ir.Model, *, exclude_nodes: tuple[str, ...] = (),
              exclude_op_types: tuple[str, ...] = (), quantize_outputs: bool = True, placement: str = "all",
              target: str = "tflite", proto: onnx.ModelProto | None = None, float_stats: bool | None = None,
              float_chains: bool | None = None) -> Plan:
    """The plan of ``m`` (a ``ModelProto``, or the :class:`onnx_ir.Model` a pipeline already holds: read through its
    def-use chains, never changed; ``proto``: its ``ModelProto`` when the caller holds one too, for the one shape
    inference the plan runs, else that is made from ``m`` without the weights).

    ``placement`` ``all``: every float activation a runtime computes in integers (CNNs, integer-only targets);
    ``matmul``: only the inputs of MatMul/Gemm (both operands of activation x activation products, so attention
    scores and probabilities too) — transformer encoders on CPUs/GPUs, where LayerNorm, Softmax, Gelu and the
    residual adds run in float and their outlier ranges never meet an 8-bit grid.
    ``target``: Concat inputs and output are tied into one encoding only for the targets that require it
    (``TIED_CONCAT_TARGETS``); a decomposed normalization's statistics stay float for ``FLOAT_STATS_TARGETS``
    (``float_stats``: True/False overrides the target's rule); a tensor between two operators ONNX Runtime runs in
    float gets no quantizer for ``FLOAT_CHAIN_TARGETS`` (``float_chains``: True/False overrides the target's rule)."""
    if isinstance(m, onnx.ModelProto):
        model, floats = to_ir(m), float_values(without_weights(m))
    else:
        model, floats = m, float_values(without_weights(proto) if proto is not None else light_proto(m))
    g = _Graph(model.graph, clamps_fuse=target not in UNFUSED_CLAMP_TARGETS,
               matmul_bias=target in MATMUL_BIAS_TARGETS)
    plan = _make_plan(g, floats, exclude_nodes, exclude_op_types, quantize_outputs, target in TIED_CONCAT_TARGETS,
                      target in FLOAT_STATS_TARGETS if float_stats is None else float_stats)
    if placement == "all" and ((target in FLOAT_CHAIN_TARGETS) if float_chains is None else float_chains):
        _float_chains(g, plan)   # (matmul placement leaves those tensors float already)
        _concat_float_readers(g, plan)
    if placement == "matmul":
        feeds: set[str] = set()
        for n in g.nodes:
            if n.op_type in ("MatMul", "Gemm"):
                for x in n.inputs[:2]:
                    if x is not None and x.name and x.name not in g.inits:
                        feeds.add(resolve_inherit(plan, x.name))
        for t in plan.activations:
            if t not in feeds:
                plan.skipped[t] = "placement matmul: not a MatMul/Gemm input"
        plan.activations = [t for t in plan.activations if t in feeds]
        plan.tied = [grp for grp in plan.tied if all(t in feeds for t in grp)]
        plan.concats = [c for c in plan.concats if c.output in feeds]
        plan.norm_stats = [t for t in plan.norm_stats if t in feeds]
        keep = set(plan.activations)
        plan.inherit = {k: v for k, v in plan.inherit.items() if resolve_inherit(plan, v) in keep}
    return plan


class _Graph:
    """The lookups the plan makes on an ``onnx_ir`` main graph: its nodes in order, initializers and output names,
    and the main-graph uses of a value in node order (``Value.uses()`` also lists subgraph nodes, and in the order the
    uses were added)."""

    def __init__(self, graph: ir.Graph, clamps_fuse: bool = True, matmul_bias: bool = False) -> None:
        self.graph = graph
        self.clamps_fuse = clamps_fuse  # a Max/Min against a constant fuses into its producer (a Relu-like clip)
        self.matmul_bias = matmul_bias  # a MatMul and the Add of its bias are one layer (MATMUL_BIAS_TARGETS)
        self.nodes = list(graph)
        self.order = {n: i for i, n in enumerate(self.nodes)}
        self.inits = graph.initializers
        self.outputs = {v.name for v in graph.outputs}

    def uses(self, v: ir.Value | None) -> list[tuple[ir.Node, int]]:
        if v is None:
            return []
        us = [(u.node, u.idx) for u in v.uses() if u.node in self.order]
        return sorted(us, key=lambda u: (self.order[u[0]], u[1]))


def _names(values: Any) -> list[str]:
    """The names of ``values`` with ``""`` for a missing optional input (as ``NodeProto.input`` lists them)."""
    return [v.name or "" if v is not None else "" for v in values]


def _make_plan(g: _Graph, floats: set[str], exclude_nodes: tuple[str, ...], exclude_op_types: tuple[str, ...],
               quantize_outputs: bool, tie_concat: bool = True, float_stats: bool = False) -> Plan:
    plan = Plan()
    excluded = set(exclude_nodes)
    ex_ops = set(exclude_op_types)
    data = _float_data(g, floats)
    all_stats = norm_statistics(g.nodes)
    stats = all_stats if float_stats else set()
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
        if t in stats:
            plan.skipped[t] = "a normalization's statistic (mean, variance, square root): left in float"
            return
        plan.activations.append(t)

    for inp in g.graph.inputs:
        if inp.name not in g.inits and inp.name in floats:
            if any(n.op_type in WEIGHTED + FUSING_PRODUCERS or n.op_type not in NON_FLOAT_OPS for n, _ in g.uses(inp)):
                want(inp.name)

    for n in g.nodes:
        skip_node = (n.name or "") in excluded or n.op_type in ex_ops
        ins = _names(n.inputs)
        if n.op_type in WEIGHTED and not skip_node:
            _add_weight(g, n, ins, plan)
        if n.op_type in NON_FLOAT_OPS:
            continue
        for v in n.outputs:
            out = v.name or ""
            if not out:
                continue
            if not g.uses(v) and out not in g.outputs:   # a GRU's unread final state: a quantizer nobody reads
                plan.skipped[out] = "read by no node and not a graph output"
                continue
            why = _why_not(g, n, ins, v, data, floats, quantize_outputs) if not skip_node else \
                f"node {n.name or n.op_type} excluded"
            if isinstance(why, tuple):  # (the tensor whose parameters ``out`` shares,)
                plan.inherit[out] = why[0]
                seen.add(out)
                continue
            want(out, why)
        if n.op_type == "Concat" and not skip_node:
            outs = _names(n.outputs)
            if tie_concat:
                plan.tied.append([t for t in ins if t] + [outs[0]])
            a = n.attributes.get("axis")
            axis = int(a.value) if a is not None else 0
            parts = [t for t in ins if t and t not in g.inits]
            plan.concats.append(ConcatSpec(n.name or outs[0], parts, outs[0], axis))
    plan.norm_stats = [t for t in plan.activations if t in all_stats]   # the target quantizes them
    return plan


def _add_weight(g: _Graph, n: ir.Node, ins: list[str], plan: Plan) -> None:
    """The weight (and bias) of a Conv/Gemm/MatMul ``n`` into ``plan`` when it is an initializer of rank >= 2."""
    w = ins[1] if len(ins) > 1 else ""
    if w not in g.inits:
        return
    wv = g.inits[w]
    shape = tuple(wv.const_value.shape) if wv.const_value is not None else tuple(wv.shape or ())
    if len(shape) < 2:
        return
    axes = value_axes(g.uses(wv), len(shape))
    bi = ops.bias_input(n.op_type)
    b = ins[bi] if bi is not None and len(ins) > bi else ""
    b = b if b and b in g.inits else ""
    if not b and g.matmul_bias:
        b = matmul_bias(g, n)
    key = n.name or _names(n.outputs)[0]  # an unnamed node by its first output, as everywhere (torch 1.2 exports)
    plan.weights.append(WeightSpec(w, n.op_type, key, axes[0], axes[1], ins[0], b))
    if b and n.op_type != "MatMul":  # bias correction is Conv/Gemm's; a MatMul's bias Add only gets its int32
        plan.biases.append(BiasSpec(b, w, ins[0]))


def _float_chains(g: _Graph, plan: Plan) -> None:
    """Leave float every quantized activation whose producer (none for a graph input) and every reader run in float
    on ONNX Runtime's CPU session (:func:`_runs_float`), with the tensors that reuse its encoding through
    data-movement operators when what reads those runs in float too: a quantizer there only adds rounding and two
    nodes (the ``Div -> Erf`` inside a GELU written out; a GRU's output -> Transpose -> Reshape -> the next GRU, a
    recurrent state input -> Slice -> GRU, whose all-zero calibration state got a grid of 3e-5). Graph outputs, tied
    Concat parts and a ``Log``'s input keep theirs (the input's calibrated range decides whether the Log is wide:
    :mod:`qlinear.ptq.logs`)."""
    keep = {t for grp in plan.tied for t in grp}
    keep |= {x.name for n in g.nodes if n.op_type in ops.LOGS for x in n.inputs[:1] if x is not None}
    values = {v.name: v for v in g.graph.inputs if v.name}
    values.update((v.name, v) for n in g.nodes for v in n.outputs if v.name)
    followers = plan.followers()
    drop: set[str] = set()
    for t in plan.activations:
        group = {t, *followers.get(t, ())}
        v = values.get(t)
        if v is None or group & keep or group & g.outputs:
            continue
        if v.producer() is not None and not _runs_float(v.producer(), g):
            continue
        readers = [u for x in group for u, _ in g.uses(values.get(x))
                   if not any(o.name in group for o in u.outputs)]   # the data movement inside the group
        if readers and all(_runs_float(u, g) for u in readers):
            drop |= group
    if drop:
        plan.leave_float(drop, "ONNX Runtime runs its producer and every reader in float (target ort): left float")


def _concat_float_readers(g: _Graph, plan: Plan) -> None:
    """Set ``float_readers`` of each Concat whose output (or data movement reusing its encoding) is read, and only
    by nodes that run in float on ONNX Runtime's CPU session (:func:`_runs_float`)."""
    values = {v.name: v for n in g.nodes for v in n.outputs if v.name}
    for c in plan.concats:
        readers, todo, seen = [], [c.output], set()
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            for u, _ in g.uses(values.get(t)):
                outs = [v.name for v in u.outputs if v.name]
                if outs and all(resolve_inherit(plan, o) == c.output for o in outs):
                    todo.extend(outs)   # data movement reusing the output's encoding
                else:
                    readers.append(u)
        c.float_readers = bool(readers) and all(_runs_float(u, g) for u in readers)


def _runs_float(n: ir.Node, g: _Graph) -> bool:
    """``n`` runs in float between Q/DQ on ONNX Runtime's CPU session: an operator it has no integer kernel for (an
    ``ai.onnx.ml`` operator: Scaler, TreeEnsemble...; a recurrent layer), or an Add/Sub/Mul of a constant (target ort does not quantize constant operands, so ONNX Runtime cannot fuse
    them)."""
    if n.op_type in ops.FLOAT_ON_ORT or n.domain == "ai.onnx.ml":   # no ONNX Runtime QDQ fusion for ONNX-ML
        return True
    const = any(x is not None and x.name in g.inits for x in n.inputs)
    # a Max/Min of two activations (deepcut's running maximum): no QDQ fusion either; against a constant it is a
    # clamp, fused with its producer where the target fuses clamps (``UNFUSED_CLAMP_TARGETS``), else float too
    return (n.op_type in ops.CONSTANT_OPERAND_OPS and const) or \
        (n.op_type in ops.CONSTANT_CLAMPS and not (const and g.clamps_fuse))


def _why_not(g: _Graph, n: ir.Node, ins: list[str], v: ir.Value, data: set[str], floats: set[str],
             quantize_outputs: bool) -> str | tuple[str] | None:
    """Why the output ``v`` of ``n`` gets no quantizer of its own: a reason (skipped), a 1-tuple naming the tensor
    whose parameters it shares, or None (quantized)."""
    out = v.name
    cons = g.uses(v)
    if (n.op_type in FUSING_PRODUCERS or _is_act(n, g)) and len(cons) == 1 and _is_act(cons[0][0], g) \
            and out not in g.outputs:
        return f"fused with the following {cons[0][0].op_type}"
    if g.matmul_bias and matmul_bias(g, n):
        return "fused with the following Add of its bias (one layer: QNN's FullyConnected, AIMET's MatmulAdd)"
    end = _clamp_chain_end(g, n, v) if n.op_type in FUSING_PRODUCERS and not g.clamps_fuse else None
    if end is not None:
        return (end,)
    if n.op_type in DATA_MOVEMENT and ins and ins[0] in floats:
        return (ins[0],)
    if n.op_type == "Add" and any(_is_mask(x, g, data, floats) for x in n.inputs):
        return MASKED
    if n.op_type == "Where" and len(ins) == 3 and out in data:
        branches = [x for x in ins[1:] if x in data]
        if len(branches) == 1:
            return (branches[0],)
    if out in g.outputs and not quantize_outputs:
        return "graph output (quantize_outputs is off)"
    return None


def activation_fn_output(model: ir.Model | ir.Graph, t: str, depth: int = 3) -> bool:
    """``t`` is the output of a smooth activation function (Gelu, or its Erf/Tanh form, SiLU/SwiGLU's Sigmoid), found
    within ``depth`` producer steps without crossing a MatMul/Gemm/normalization: the heavy-tailed MatMul inputs of
    transformer MLPs."""
    return bool(activation_fn_outputs(model, [t], depth))


def activation_fn_outputs(model: ir.Model | ir.Graph, names: list[str], depth: int = 3) -> list[str]:
    """The tensors of ``names`` (in their order) that are :func:`activation_fn_output`, by one walk of the graph."""
    graph = model.graph if isinstance(model, ir.Model) else model
    producer = {o.name: n for n in graph for o in n.outputs if o.name}
    return [t for t in names if _activation_fn(producer, graph.initializers, t, depth)]


def _activation_fn(producer: dict[str, ir.Node], inits: Any, t: str, depth: int) -> bool:
    stack, seen = [(t, 0)], set()
    while stack:
        x, d = stack.pop()
        p = producer.get(x)
        if p is None or x in seen or d > depth:
            continue
        seen.add(x)
        if p.op_type in ACTIVATION_FNS:
            return True
        if p.op_type in ops.MLP_BOUNDARY:
            continue
        stack.extend((i.name, d + 1) for i in p.inputs if i is not None and i.name and i.name not in inits)
    return False


_FLOAT_DTYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)


def _float_data(g: _Graph, floats: set[str]) -> set[str]:
    """Tensors computed from float data: float graph inputs, lookups into float initializers (``Gather``), layers
    with a float weight (a one-hot encoding times the weight) and what depends on them (nodes in topological order,
    as ONNX requires)."""
    data = {i.name for i in g.graph.inputs if i.name not in g.inits and i.name in floats}
    for n in g.nodes:
        if n.op_type in ("Shape", "Size"):  # a shape is not data: masks built from it stay masks
            continue
        x0 = n.inputs[0] if n.inputs else None
        lookup = n.op_type in ops.LOOKUPS and _float_init(g, x0)
        # a layer with a float weight makes data of what it reads (a one-hot encoding of bytes or tokens times the
        # weight is a lookup written as a MatMul); masks are added or multiplied, never weighted
        weighted = n.op_type in WEIGHTED and len(n.inputs) > 1 and _float_init(g, n.inputs[1])
        if lookup or weighted or any(x is not None and x.name in data for x in n.inputs) \
                or not data.isdisjoint(_subgraph_reads(n)):
            data.update(o.name for o in n.outputs if o.name)
    return data


def _subgraph_reads(n: ir.Node) -> set[str]:
    """The names the nodes of ``n``'s subgraphs (an ``If``'s branches, a ``Loop``'s body) read: an ``If`` whose
    branches compute from outer float data (silero-vad's decoder state) gives data, whatever decides it."""
    subs = [a.value for a in n.attributes.values() if a.type == ir.AttributeType.GRAPH] + \
        [sg for a in n.attributes.values() if a.type == ir.AttributeType.GRAPHS for sg in a.value]
    return {x.name for sg in subs for sn in ir.traversal.RecursiveGraphIterator(sg) for x in sn.inputs
            if x is not None and x.name}


def matmul_bias(g: _Graph, n: ir.Node) -> str:
    """The bias initializer that ``n`` and its only reader make one layer with (target qnn): ``n`` a MatMul of a
    constant rank-2 weight [K, N] whose output (not a graph output) only an Add reads, the Add's other input a
    rank-1 float initializer of N values (AIMET's MatmulAdd fusion checks rank 2 and rank 1); "" otherwise."""
    if n.op_type != "MatMul" or len(n.inputs) < 2 or not _float_init(g, n.inputs[1]) or not n.outputs:
        return ""
    v = n.outputs[0]
    cons = g.uses(v)
    w_shape = g.inits[n.inputs[1].name].const_value.shape
    if len(w_shape) != 2 or v.name in g.outputs or len(cons) != 1 or cons[0][0].op_type != "Add":
        return ""
    add = cons[0][0]
    other = [x for i, x in enumerate(add.inputs) if i != cons[0][1]]
    if len(other) != 1 or not _float_init(g, other[0]) or other[0] is v:
        return ""
    b_shape = g.inits[other[0].name].const_value.shape
    return other[0].name if len(b_shape) == 1 and b_shape[0] == w_shape[1] else ""


def matmul_bias_weights(m: onnx.ModelProto) -> set[str]:
    """The weights of the MatMuls of ``m`` that :func:`matmul_bias` makes one layer with their bias Add (target
    qnn): their output stays float between the Q/DQ pairs."""
    g = _Graph(to_ir(m).graph, matmul_bias=True)
    return {n.inputs[1].name for n in g.nodes if matmul_bias(g, n)}


def _float_init(g: _Graph, x: ir.Value | None) -> bool:
    """Whether ``x`` is a float initializer with its value."""
    return x is not None and x.name in g.inits and g.inits[x.name].const_value is not None \
        and g.inits[x.name].const_value.dtype in _FLOAT_DTYPES


def _is_mask(x: ir.Value | None, g: _Graph, data: set[str], floats: set[str]) -> bool:
    """A computed float tensor that does not depend on float data (an attention mask), not a constant."""
    if x is None or not x.name or x.name in data or x.name not in floats or x.name in g.inits:
        return False
    p = x.producer()
    return p is not None and p in g.order and p.op_type not in ("Constant", "ConstantOfShape")


def _clamp_chain_end(g: _Graph, n: ir.Node, v: ir.Value) -> str | None:
    """Where a Max/Min against a constant does not fuse (``UNFUSED_CLAMP_TARGETS``): the output of the clamp chain
    that ``n``'s output ``v`` alone feeds (``Conv -> Max(c) -> Min(c)``: the Min's), whose grid ``v`` takes. Its
    integer kernel then saturates at that grid's ends, and the per-channel bounds run in float after it: the output
    as the fused clip gave it, up to where a bound falls between grid points (a grid over the unclipped output cost
    EfficientNet-Lite0 per-tensor 4.5 dB)."""
    end, k = None, 0
    while v.name not in g.outputs and k < 4:
        cons = g.uses(v)
        if len(cons) != 1 or not _is_clamp(cons[0][0], g) or not cons[0][0].outputs[0].name:
            break
        v, k = cons[0][0].outputs[0], k + 1
        end = v.name
    return end


def _is_clamp(n: ir.Node, g: _Graph) -> bool:
    """A Max/Min against a constant."""
    x = n.inputs[1] if len(n.inputs) == 2 else None
    return n.op_type in ops.CONSTANT_CLAMPS and x is not None and x.name in g.inits


def _is_act(n: ir.Node, g: _Graph) -> bool:
    """An elementwise activation a runtime fuses into its producer: Relu, Clip, or Max/Min against a constant (the
    per-channel clip that cross-layer equalization writes) where the target fuses those (``g.clamps_fuse``)."""
    return n.op_type in FUSABLE_ACT or (g.clamps_fuse and _is_clamp(n, g))


def float_values(light: onnx.ModelProto) -> set[str]:
    """The tensors of a model's main graph known or inferred to be float32/float16 (its inputs, outputs and
    value_info, by one ONNX shape inference; initializers are not listed). ``light``: the model without the data of
    its large initializers (:func:`~qlinear.graph.model.without_weights`, :func:`~qlinear.graph.ir.light_proto`)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False)
    except Exception:  # noqa: BLE001 - shape inference is best effort
        inferred = light
    out: set[str] = set()
    for v in list(inferred.graph.input) + list(inferred.graph.output) + list(inferred.graph.value_info):
        if v.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
            out.add(v.name)
    return out


def resolve_inherit(plan: Plan, name: str) -> str:
    """The tensor whose encoding ``name`` uses (following data-movement chains)."""
    seen = set()
    while name in plan.inherit and name not in seen:
        seen.add(name)
        name = plan.inherit[name]
    return name



def no_activation_note(plan: Plan, ends: Iterable[str] = ()) -> list[str]:
    """A note when the plan quantizes weights but no activation (asked for integer activations, the model would run
    with float ones, silently): how many tensors each reason left float; and one when it quantizes nothing but some
    of ``ends`` (the graph's inputs and outputs: a lone tree ensemble on target qnn). A plan that quantizes nothing
    at all has its own note (:func:`nothing_quantized_note`)."""
    if plan.empty:
        return []
    if not plan.weights and set(plan.activations) <= set(ends):
        ops_left = sorted({why.split(" ")[1] for why in plan.skipped.values() if why.startswith("node ")})
        return ["nothing inside the model is quantized (no weight of a layer qlinear quantizes, no activation "
                "between its inputs and outputs" + (f"; excluded: {', '.join(ops_left)}" if ops_left else "")
                + "): it computes in float" + (f", only {', '.join(plan.activations)} on an integer grid"
                                               if plan.activations else "")]
    if plan.activations or not plan.weights:
        return []
    reasons: dict[str, int] = {}
    for why in plan.skipped.values():
        if why != "not a float tensor":
            reasons[why] = reasons.get(why, 0) + 1
    top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
    return ["no activation is quantized, so the model runs its layers with float activations (weights only in "
            "integers): " + "; ".join(f"{n} tensor(s) {why}" for why, n in top)]


def nothing_quantized_note(m: onnx.ModelProto, plan: Plan, limit: int = 4) -> str:
    """What a model whose plan quantizes nothing (:attr:`Plan.empty`, luscinia's LightGBM ensemble) is told: its
    operators, which of them lie outside the set qlinear quantizes (layers with a constant weight, ``WEIGHTED``, and
    the float tensors between the operators an integer runtime computes) and, tensor by tensor, why each was left
    float."""
    kinds = dict.fromkeys((n.op_type if n.domain in ("", "ai.onnx") else f"{n.op_type} ({n.domain})")
                          + (" (its subgraphs left float)" if _holds_graph(n) else "") for n in m.graph.node)
    layers = [k for k in kinds if k in WEIGHTED]
    outside = [k for k in kinds if k not in WEIGHTED]
    why: dict[str, list[str]] = {}
    for t, reason in plan.skipped.items():  # (shape inference types no output of some ai.onnx.ml operators)
        why.setdefault("not known to be a float tensor" if reason == "not a float tensor" else reason, []).append(t)
    left = "; ".join(f"{', '.join(ts[:limit])}{' ...' if len(ts) > limit else ''} ({r})" for r, ts in why.items())
    return ("nothing is quantized: "
            + (f"the model's operators, {', '.join(outside)}, are outside the set qlinear quantizes (layers with a "
               f"constant weight: {', '.join(WEIGHTED)}; float tensors an integer runtime computes)" if outside
               else "the model has no operator qlinear quantizes")
            + (f"; its {', '.join(layers)} layer(s) are excluded or have no constant weight" if layers else "")
            + (f"; tensors left float: {left}" if left else ""))


def _holds_graph(n: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)


def float_weight_note(m: onnx.ModelProto, plan: Plan, quantized: Iterable[str] = ()) -> list[str]:
    """Notes naming the constant weights of the main graph the plan leaves float (none of its runtimes' integer
    kernels takes them): recurrent and attention weights (``WEIGHT_BEARING`` operators outside ``WEIGHTED``) and the
    float tables of embedding lookups (``LOOKUPS``) other than ``quantized`` (tables the target stores quantized);
    and a constant first operand of a MatMul/Gemm (``W @ x``: the layer's weight is its second operand)."""
    inits = {t.name: t for t in m.graph.initializer}
    planned = {w.name for w in plan.weights} | set(quantized)
    kernel = "weight(s) stay float (no integer kernel for their operator in this pipeline)"
    table = ("embedding table(s) stay float (stored quantized on targets ort and qnn only, where ONNX Runtime gathers "
             "the integers and AIMET/QNN quantize a table as an input)")
    first = ("constant first operand(s) of a layer stay float (qlinear quantizes a layer's second operand as its "
             "weight; its first is computed in float)")
    left: dict[str, list[str]] = {kernel: [], table: [], first: []}
    for n in m.graph.node:
        if n.op_type in ops.WEIGHT_BEARING and n.op_type not in WEIGHTED:
            idx, why = (1, 2), kernel
        elif n.op_type in ops.LOOKUPS:
            idx, why = (0,), table
        elif n.op_type in WEIGHTED and n.op_type != "Conv" and n.op_type != "ConvTranspose":
            idx, why = (0,), first
        else:
            continue
        for i in idx:
            t = inits.get(n.input[i]) if i < len(n.input) else None
            if t is not None and t.name not in planned and len(t.dims) >= 2 \
                    and t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
                left[why].append(f"{t.name} ({n.op_type} {n.name or n.output[0]})")
    return [f"{len(ws)} {why}: " + ", ".join(ws[:6]) + (" ..." if len(ws) > 6 else "")
            for why, ws in left.items() if ws]


def float_input_note(plan: Plan) -> list[str]:
    """A note naming the layers whose weight the plan quantizes while their input stays float (computed from integer
    inputs alone: a one-hot of bytes, a mask), with the reason the plan gives: such a layer multiplies a float input
    by the dequantized weight."""
    held = set(plan.activations) | set(plan.inherit)
    left = [f"{w.node} ({w.op}, input {w.input}: {plan.skipped.get(w.input, 'not computed from float data')})"
            for w in plan.weights if w.input and w.input not in held]
    if not left or not plan.activations:   # no activation quantized: no_activation_note says so
        return []
    return [f"{len(left)} layer(s) take a float input beside their quantized weight (the input is not on any grid): "
            + "; ".join(left[:3]) + (" ..." if len(left) > 3 else "")]


def masked_note(plan: Plan) -> list[str]:
    """A note naming the tensors where an attention mask is added to data (left float: the masked scores hold
    -3.4e38, which no 8- or 16-bit grid holds beside the scores), when the plan quantizes activations."""
    masked = [t for t, why in plan.skipped.items() if why == MASKED]
    if not masked or not plan.activations:
        return []
    return [f"{len(masked)} tensor(s) where an attention mask is added to the scores stay float (they hold the mask's "
            "-3.4e38, which no 8- or 16-bit grid holds beside the scores), so the Softmax reading each runs on float "
            "input: " + ", ".join(masked[:3]) + (" ..." if len(masked) > 3 else "")]


def asked_float_weight_note(m: onnx.ModelProto, plan: Plan, exclude_nodes: Iterable[str] = (),
                            exclude_op_types: Iterable[str] = ()) -> list[str]:
    """A note naming the constant weights of the main graph's Conv/Gemm/MatMul nodes that ``plan`` leaves float
    because the configuration asks it: the node is excluded (``exclude_nodes``, ``exclude_op_types``) or a rule took
    the weight out of the plan (its reason in ``plan.skipped``, e.g. an override of type float)."""
    inits = {t.name: t for t in m.graph.initializer}
    planned = {w.name for w in plan.weights}
    nodes, types = set(exclude_nodes), set(exclude_op_types)
    left: dict[str, str] = {}
    for n in m.graph.node:
        t = inits.get(n.input[1]) if n.op_type in WEIGHTED and len(n.input) > 1 else None
        if t is None or t.name in planned or t.name in left or len(t.dims) < 2 \
                or t.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
            continue
        if (n.name or "") in nodes or n.op_type in types:
            left[t.name] = f"{n.op_type} {n.name or n.output[0]} excluded"
        elif t.name in plan.skipped:
            left[t.name] = plan.skipped[t.name]
    if not left:
        return []
    named = [f"{w} ({why})" for w, why in left.items()]
    return [f"{len(left)} weight(s) left float as the configuration asks (exclude_nodes, exclude_op_types, "
            "overrides): " + ", ".join(named[:6]) + (" ..." if len(named) > 6 else "")]

