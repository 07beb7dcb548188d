"""Cross-layer equalization (Nagel et al. 2019, "Data-free quantization"; AIMET ``equalize_model``) as one ``onnx_ir``
pass.

For two convolutions joined through a positively homogeneous activation, ``Conv2(act(Conv1(x)))``, scaling output
channel ``c`` of Conv1 by ``1/s_c`` and input channel ``c`` of Conv2 by ``s_c`` leaves the function unchanged; with
``s_c = sqrt(r1_c / r2_c)`` (``r`` = max |w| of the channel) both weight ranges become ``sqrt(r1_c r2_c)``, which is
what per-tensor weight quantization needs.

ReLU commutes with the scaling. A ``Clip(a, b)`` (ReLU6) does not, so it is rewritten exactly as
``Min(Max(x, a/s), b/s)`` with per-channel bounds (AIMET instead replaces ReLU6 by ReLU, which changes the float
model). Pairs are Conv -> [act] -> Conv where the second is a regular (group 1) or depthwise convolution; the
scaling is repeated (``passes`` times) so that chains (expand -> depthwise -> project) converge. The pairs are found
once (the scaling does not change the graph): linear in the graph's size per repetition.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from qlinear.graph.ir import Names, add_initializer, make_node, set_initializer
from qlinear.graph.ops import CONSTANT_CLAMPS

Pair = tuple[ir.Node, list[ir.Node], ir.Node]


class Equalize(ir.passes.InPlacePass):
    """Equalize every Conv pair of the main graph; ``self.pairs`` is how many. ``clips=False``: only pairs joined by
    ReLU (no per-channel Max/Min bounds, which a runtime with fused activations such as TFLite cannot express)."""

    def __init__(self, *, passes: int = 4, clips: bool = True) -> None:
        super().__init__()
        self.passes, self.clips = passes, clips
        self.pairs = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = self.clips and clips_to_minmax(graph)
        found = pairs(graph, self.clips) if self.passes > 0 else []
        for _ in range(self.passes):
            for pair in found:
                _scale(*pair)
        self.pairs = len(found)
        return ir.passes.PassResult(model, modified=bool(modified or found))


def _const(v: ir.Value | None) -> np.ndarray | None:
    """The data of ``v`` when it is an initializer, else None."""
    if v is None or not v.is_initializer() or v.const_value is None:
        return None
    return v.const_value.numpy()


def _int_attr(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return default if a is None else int(a.value)


def clip_bounds(node: ir.Node) -> tuple[float, float] | None:
    """Clip's (min, max) (inputs 1 and 2 at opset >= 11, else the attributes; a missing bound is infinite), or None
    when a bound is not a scalar initializer."""
    lo, hi = -math.inf, math.inf
    for i, key in ((1, "min"), (2, "max")):
        v = node.inputs[i] if len(node.inputs) > i else None
        if v is not None:
            arr = _const(v)
            if arr is None or arr.size != 1:
                return None
            bound = float(arr.reshape(-1)[0])
        elif node.attributes.get(key) is not None:
            bound = float(node.attributes[key].value)
        else:
            continue
        lo, hi = (bound, hi) if i == 1 else (lo, bound)
    return lo, hi


def _is_constant_clamp(node: ir.Node) -> bool:
    return node.op_type in CONSTANT_CLAMPS and len(node.inputs) == 2 and _const(node.inputs[1]) is not None


def _chain(n1: ir.Node, clips: bool) -> tuple[list[ir.Node], ir.Node] | None:
    """The activations between ``n1`` and the next Conv, and that Conv (each value read by one node only)."""
    chain: list[ir.Node] = []
    t = n1.outputs[0]
    while True:
        uses = list(t.uses())
        if len(uses) != 1 or t.is_graph_output():
            return None
        nxt, idx = uses[0].node, uses[0].idx
        if nxt.op_type == "Conv" and idx == 0:
            return chain, nxt
        if nxt.op_type == "Relu" or clips and (nxt.op_type == "Clip" and clip_bounds(nxt) is not None
                                                 or _is_constant_clamp(nxt)):
            chain.append(nxt)
            t = nxt.outputs[0]
            continue
        return None


def pairs(graph: ir.Graph, clips: bool = True) -> list[Pair]:
    """The equalizable ``(Conv1, activations, Conv2)`` triples of ``graph``, in node order."""
    out = []
    for n1 in graph:
        if n1.op_type != "Conv" or len(n1.inputs) < 2 or _const(n1.inputs[1]) is None:
            continue
        found = _chain(n1, clips)
        if found is None:
            continue
        chain, n2 = found
        if len(n2.inputs) < 2 or _const(n2.inputs[1]) is None:
            continue
        s1, s2 = n1.inputs[1].const_value.shape, n2.inputs[1].const_value.shape
        c = s1[0]
        grp = _int_attr(n2, "group", 1)
        if not ((grp == 1 and s2[1] == c) or (grp == c and s2[0] == c and s2[1] == 1)):
            continue
        out.append((n1, chain, n2))
    return out


def _set(v: ir.Value, value: np.ndarray) -> None:
    set_initializer(v, value.astype(v.const_value.numpy().dtype))


def _scale(n1: ir.Node, chain: list[ir.Node], n2: ir.Node) -> None:
    w1 = n1.inputs[1].const_value.numpy().astype(np.float64)
    w2 = n2.inputs[1].const_value.numpy().astype(np.float64)
    c = w1.shape[0]
    r1 = np.abs(w1.reshape(c, -1)).max(1)
    dw = _int_attr(n2, "group", 1) != 1
    r2 = np.abs(w2.reshape(c, -1)).max(1) if dw else np.abs(np.moveaxis(w2, 1, 0).reshape(c, -1)).max(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.sqrt(r1 / r2)
    s = np.where(np.isfinite(s) & (s > 0), s, 1.0)
    shape1 = (c,) + (1,) * (w1.ndim - 1)
    _set(n1.inputs[1], w1 / s.reshape(shape1))
    if len(n1.inputs) > 2 and n1.inputs[2] is not None:
        _set(n1.inputs[2], n1.inputs[2].const_value.numpy().astype(np.float64) / s)
    if dw:
        _set(n2.inputs[1], w2 * s.reshape(shape1))
    else:
        _set(n2.inputs[1], w2 * s.reshape((1, c) + (1,) * (w2.ndim - 2)))
    for a in chain:
        if a.op_type in CONSTANT_CLAMPS:
            bound = a.inputs[1].const_value.numpy().astype(np.float64)
            _set(a.inputs[1], bound / s.reshape(bound.shape))


def clips_to_minmax(graph: ir.Graph) -> int:
    """Rewrite every Clip between two equalizable Convs as Max/Min with per-channel (unshared) bounds ``{Y}_cle_lo``,
    ``{Y}_cle_hi`` (``Y`` the Clip's output, which the last new node writes); returns how many Clips."""
    names: Names | None = None
    done = 0
    for n1, chain, _ in pairs(graph):
        c = n1.inputs[1].const_value.shape[0]
        for a in chain:
            bounds = clip_bounds(a) if a.op_type == "Clip" else None
            if bounds is None or not (np.isfinite(bounds[0]) or np.isfinite(bounds[1])):
                continue  # not a Clip, or one without bounds (the identity: commutes with the scaling)
            names = names or Names(graph)
            _replace_clip(graph, names, a, bounds, c)
            done += 1
    return done


def _replace_clip(graph: ir.Graph, names: Names, a: ir.Node, bounds: tuple[float, float], c: int) -> None:
    lo, hi = bounds
    y = a.outputs[0]
    out = y.name
    x = a.inputs[0]
    nodes = []
    if np.isfinite(lo):
        t = add_initializer(graph, names.new(f"{out}_cle_lo"), np.full((1, c, 1, 1), lo, np.float32))
        mid = names.new(f"{out}_cle_max") if np.isfinite(hi) else None
        nodes.append(make_node("Max", [x, t], mid or "", names.new(f"{a.name}_cle_Max")))
        x = nodes[-1].outputs[0]
    if np.isfinite(hi):
        t = add_initializer(graph, names.new(f"{out}_cle_hi"), np.full((1, c, 1, 1), hi, np.float32))
        nodes.append(make_node("Min", [x, t], "", names.new(f"{a.name}_cle_Min")))
    last = nodes[-1].outputs[0]
    y.name = None
    last.name = out
    last.type, last.shape, last.doc_string = y.type, y.shape, y.doc_string
    last.metadata_props.update(y.metadata_props)
    y.replace_all_uses_with(last, replace_graph_outputs=True)
    graph.insert_before(a, nodes)
    graph.remove(a, safe=True)
