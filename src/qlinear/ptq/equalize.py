"""Cross-layer equalization (Nagel et al. 2019, "Data-free quantization"; AIMET ``equalize_model``).

For two convolutions joined through a positively homogeneous activation, ``Conv2(act(Conv1(x)))``, scaling output
channel ``c`` of Conv1 by ``1/s_c`` and input channel ``c`` of Conv2 by ``s_c`` leaves the function unchanged; with
``s_c = sqrt(r1_c / r2_c)`` (``r`` = max |w| of the channel) both weight ranges become ``sqrt(r1_c r2_c)``, which is
what per-tensor weight quantization needs.

ReLU commutes with the scaling. A ``Clip(a, b)`` (ReLU6) does not, so it is rewritten exactly as
``Min(Max(x, a/s), b/s)`` with per-channel bounds (AIMET instead replaces ReLU6 by ReLU, which changes the float
model). Pairs are Conv -> [act] -> Conv where the second is a regular (group 1) or depthwise convolution; the pass
is repeated so that chains (expand -> depthwise -> project) converge.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.graph.model import GraphIndex, attr
from qlinear.graph.ops import CONSTANT_CLAMPS, is_constant_clamp
from qlinear.graph.qdq import clip_bounds


def _clip_bounds(g: GraphIndex, node: onnx.NodeProto) -> tuple[float, float] | None:
    """Clip's (min, max): inputs 1 and 2 (opset >= 11) or the attributes; None if a bound is not a constant
    initializer (:func:`qlinear.graph.qdq.clip_bounds` over the initializers)."""
    return clip_bounds(node, {i: g.array(i) for i in node.input[1:] if i in g.initializers})


def _pairs(m: onnx.ModelProto, clips: bool = True) -> list[tuple[onnx.NodeProto, list[onnx.NodeProto],
                                                                  onnx.NodeProto]]:
    g = GraphIndex.build(m, infer_shapes=False)
    out = []
    for n1 in m.graph.node:
        if n1.op_type != "Conv" or n1.input[1] not in g.initializers:
            continue
        chain: list[onnx.NodeProto] = []
        t = n1.output[0]
        ok = True
        while True:
            cons = g.consumers.get(t, [])
            if len(cons) != 1 or t in g.outputs:
                ok = False
                break
            nxt, idx = cons[0]
            if nxt.op_type == "Conv" and idx == 0:
                break
            if nxt.op_type == "Relu" or clips and (nxt.op_type == "Clip" and _clip_bounds(g, nxt) is not None
                                                     or is_constant_clamp(nxt, g.initializers)):
                chain.append(nxt)
                t = nxt.output[0]
                continue
            ok = False
            break
        if not ok:
            continue
        n2 = g.consumers[t][0][0]
        if n2.input[1] not in g.initializers:
            continue
        w1, w2 = g.array(n1.input[1]), g.array(n2.input[1])
        c = w1.shape[0]
        grp = attr(n2, "group", 1)
        if not ((grp == 1 and w2.shape[1] == c) or (grp == c and w2.shape[0] == c and w2.shape[1] == 1)):
            continue
        out.append((n1, chain, n2))
    return out


def equalize(m: onnx.ModelProto, *, passes: int = 4, clips: bool = True) -> int:
    """Equalize ``m`` in place; returns the number of Conv pairs equalized. ``clips=False``: only pairs joined by
    ReLU (no per-channel Max/Min bounds, which a runtime with fused activations such as TFLite cannot express)."""
    if clips:
        _clips_to_minmax(m)
    n = 0
    for _ in range(passes):
        pairs = _pairs(m, clips)
        n = len(pairs)
        inits = {t.name: t for t in m.graph.initializer}
        for n1, chain, n2 in pairs:
            w1 = numpy_helper.to_array(inits[n1.input[1]]).astype(np.float64)
            w2 = numpy_helper.to_array(inits[n2.input[1]]).astype(np.float64)
            c = w1.shape[0]
            r1 = np.abs(w1.reshape(c, -1)).max(1)
            dw = attr(n2, "group", 1) != 1
            r2 = np.abs(w2.reshape(c, -1)).max(1) if dw else np.abs(np.moveaxis(w2, 1, 0).reshape(c, -1)).max(1)
            with np.errstate(divide="ignore", invalid="ignore"):
                s = np.sqrt(r1 / r2)
            s = np.where(np.isfinite(s) & (s > 0), s, 1.0)
            shape1 = (c,) + (1,) * (w1.ndim - 1)
            _set(inits, n1.input[1], w1 / s.reshape(shape1))
            if len(n1.input) > 2 and n1.input[2]:
                b1 = numpy_helper.to_array(inits[n1.input[2]]).astype(np.float64)
                _set(inits, n1.input[2], b1 / s)
            if dw:
                _set(inits, n2.input[1], w2 * s.reshape(shape1))
            else:
                _set(inits, n2.input[1], w2 * s.reshape((1, c) + (1,) * (w2.ndim - 2)))
            for a in chain:
                if a.op_type in CONSTANT_CLAMPS:
                    bound = numpy_helper.to_array(inits[a.input[1]]).astype(np.float64)
                    _set(inits, a.input[1], bound / s.reshape(bound.shape))
    return n


def _set(inits: dict, name: str, value: np.ndarray) -> None:
    old = inits[name]
    inits[name].CopyFrom(numpy_helper.from_array(value.astype(numpy_helper.to_array(old).dtype), name))


def _clips_to_minmax(m: onnx.ModelProto) -> None:
    """Rewrite every Clip between two equalizable Convs as Max/Min with per-channel (unshared) bounds."""
    pairs = _pairs(m)
    g = GraphIndex.build(m, infer_shapes=False)
    new_nodes = {}
    for n1, chain, _ in pairs:
        c = g.array(n1.input[1]).shape[0]
        for a in chain:
            if a.op_type != "Clip":
                continue
            lo, hi = _clip_bounds(g, a)
            nodes = []
            x = a.input[0]
            if np.isfinite(lo):
                t = f"{a.output[0]}_cle_lo"
                m.graph.initializer.append(numpy_helper.from_array(np.full((1, c, 1, 1), lo, np.float32), t))
                mid = f"{a.output[0]}_cle_max"
                nodes.append(helper.make_node("Max", [x, t], [mid if np.isfinite(hi) else a.output[0]],
                                              name=f"{a.name}_cle_Max"))
                x = mid
            if np.isfinite(hi):
                t = f"{a.output[0]}_cle_hi"
                m.graph.initializer.append(numpy_helper.from_array(np.full((1, c, 1, 1), hi, np.float32), t))
                nodes.append(helper.make_node("Min", [x, t], [a.output[0]], name=f"{a.name}_cle_Min"))
            new_nodes[id(a)] = (a, nodes)
    if not new_nodes:
        return
    out = []
    for n in m.graph.node:
        if id(n) in new_nodes:
            out.extend(new_nodes[id(n)][1])
        else:
            out.append(n)
    del m.graph.node[:]
    m.graph.node.extend(out)
