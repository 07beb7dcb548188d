"""Sensitivity of the output to each quantized tensor: the output metric with only that tensor quantized, and with
only that tensor left float (everything else quantized), for every quantized weight and activation, ranked.

All of it comes from **one** ONNX Runtime session of a *gated* copy of the Q/DQ model (:func:`gated_model`): every
quantizer's output is ``Where(mask[k], DQ(Q(x)), x)`` (a weight's: ``Where(mask[k], DQ(w_q), w)`` with the float
weight added as an initializer), ``mask`` a boolean graph input with one entry per quantized tensor. ``Where`` picks
one of the two values exactly, so all-true is the Q/DQ model and all-false the float model, bit for bit (tested),
and each configuration is one run of the same session on the same batch: ``2 K + 2`` runs of ``samples`` samples for
``K`` tensors, each run that changes one gate against the all-float (all-quantized) configuration starting at the
piece of the graph where that gate is first read, from the tensors that configuration's full run left at the cut
(:class:`_Suffixes`: about half the work; the same numbers, tested). Tensors that share their source's parameters (a Flatten of a quantized tensor,
:attr:`qlinear.graph.plan.Plan.inherit`) are gated with their source: they add no error of their own; an int32 bias
is gated with its layer's weight (float when the weight is).

The metric is the output SQNR (dB) of the model's first float output against the float model on the same samples
(continuous, where a top-1 agreement on a few samples would tie); ``report.json["sensitivity"]`` lists
``{tensor, role, metric, only_quantized, only_float}`` ranked from the most harmful (lowest ``only_quantized``).
"""

from __future__ import annotations

import html
import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.graph.model import node_inputs, tensor_outputs
from qlinear.graph.ops import bias_input
from qlinear.graph.plan import resolve_inherit
from qlinear.ptq.stats.session import Session
from qlinear.ptq.stats.staged import _order

MASK = "qlinear_sensitivity_mask"


@dataclass
class TensorSensitivity:
    tensor: str
    role: str              # "weight" or "activation"
    metric: str            # the metric's name, e.g. "sqnr_db(logits)"
    only_quantized: float  # the metric with only this tensor quantized
    only_float: float      # the metric with every other tensor quantized and this one float


def _sqnr(f: list[np.ndarray], q: list[np.ndarray]) -> float:
    sig = sum(float(np.sum(np.asarray(a, np.float64) ** 2)) for a in f)
    noise = sum(float(np.sum((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)) for a, b in zip(f, q))
    if noise <= 0:
        return math.inf
    return -math.inf if sig <= 0 else float(10 * np.log10(sig / noise))


def gated_model(qdq: onnx.ModelProto, float_model: onnx.ModelProto, names: dict[str, str],
                inherit: dict[str, str] | None = None) -> tuple[onnx.ModelProto, list[tuple[str, str]]]:
    """The Q/DQ model with a gate on every quantizer (module docstring) and its gates ``[(tensor, role)]`` in the
    order of the ``mask`` input. ``names``: tensor -> role of the quantized tensors to gate (others stay quantized);
    a quantizer is known by its DequantizeLinear output or its QuantizeLinear input; ``inherit`` maps a tensor to
    the one whose parameters it shares (gated together); ``float_model`` gives the float weights."""
    m = onnx.ModelProto()
    m.CopyFrom(qdq)
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    finits = {t.name: t for t in float_model.graph.initializer}
    qinits = {t.name for t in g.initializer}
    inherit = inherit or {}
    bias_of = {n.input[b]: n.input[1] for n in g.node if (b := bias_input(n.op_type)) is not None
               and len(n.input) > b and n.input[b]}  # a bias is gated with its layer's weight
    gates: list[tuple[str, str]] = []
    index: dict[str, int] = {}
    nodes: list[onnx.NodeProto] = []
    for n in g.node:
        nodes.append(n)
        if n.op_type != "DequantizeLinear":
            continue
        src = n.input[0]
        q = prod.get(src)
        y = n.output[0]
        if q is not None and q.op_type == "QuantizeLinear":
            x, tensor = q.input[0], y if y in names else q.input[0]
        elif src in qinits and y in finits and finits[y].data_type == onnx.TensorProto.FLOAT:
            x, tensor = f"{y}__float", bias_of.get(y, y)
        else:
            continue
        if tensor not in names:
            continue
        if x == f"{y}__float":
            g.initializer.append(numpy_helper.from_array(numpy_helper.to_array(finits[y]), x))
        key = inherit.get(tensor, tensor)
        if key not in index:
            index[key] = len(gates)
            gates.append((key, names.get(key, names[tensor])))
        k = index[key]
        nodes.pop()
        nodes.extend(_gate(n, x, y, k, q if q is not None and q.op_type == "QuantizeLinear" else None, g))
    used = {i for n in nodes for i in n.input} | {o.name for o in g.output}
    del g.node[:]
    g.node.extend(n for n in nodes if n.op_type != "QuantizeLinear" or n.output[0] in used)  # now in the branches
    g.input.append(helper.make_tensor_value_info(MASK, onnx.TensorProto.BOOL, [len(gates)]))
    return m, gates


def _gate(dq: onnx.NodeProto, x: str, y: str, k: int, q: onnx.NodeProto | None,
          g: onnx.GraphProto) -> list[onnx.NodeProto]:
    """``y = If(mask[k]) then DQ(Q(x)) else x``: only the chosen branch runs (a ``Where`` would compute both)."""
    kk = f"{MASK}_{k}"
    if not any(i.name == kk for i in g.initializer):
        g.initializer.append(numpy_helper.from_array(np.array(k, np.int64), kk))
    inner = []
    if q is not None:
        q2 = onnx.NodeProto()
        q2.CopyFrom(q)
        q2.output[0] = f"{y}__q"
        q2.name = f"{y}__gate_q"
        inner.append(q2)
    dq2 = onnx.NodeProto()
    dq2.CopyFrom(dq)
    dq2.name = f"{y}__gate_dq"
    if q is not None:
        dq2.input[0] = f"{y}__q"
    dq2.output[0] = f"{y}__quantized"
    inner.append(dq2)
    then = helper.make_graph(inner, f"{y}__quantized_branch", [], [onnx.ValueInfoProto(name=f"{y}__quantized")])
    other = helper.make_graph([helper.make_node("Identity", [x], [f"{y}__kept"])], f"{y}__float_branch", [],
                              [onnx.ValueInfoProto(name=f"{y}__kept")])
    return [helper.make_node("Gather", [MASK, kk], [f"{y}__gate"], name=f"{y}__gate", axis=0),
            helper.make_node("If", [f"{y}__gate"], [y], name=f"{y}__select", then_branch=then, else_branch=other)]


def sensitivity(qm: Any, *, samples: int = 8, start: int | None = None,
                progress: Callable[[str, int], Callable[[int], None]] | None = None,
                output: str | None = None) -> list[TensorSensitivity]:
    """The ranked sensitivity of ``qm`` (a :class:`~qlinear.ptq.result.QuantizedModel`) on ``samples`` held-out
    samples (from ``start``, default the first held-out one), module docstring, measured on ``output`` (default:
    the first float output; the report passes its worst). ``progress(task, total)`` returns the callback advanced
    after each run (as :func:`qlinear.quantize`'s)."""
    ds = qm.dataset
    s0, s1 = qm.held_out()
    start = s0 if start is None else start
    stop = min(s1 if start == s0 else len(ds), start + samples)
    if stop <= start:
        return []
    weights = {t.name for t in qm.encoded_model.graph.initializer}
    names = {e.name: ("weight" if e.name in weights else "activation") for e in qm.encodings
             if e.scale is not None and e.dtype not in ("int32", "int64")}
    inherit = {t: resolve_inherit(qm.plan, s) for t, s in qm.plan.inherit.items()}
    gm, gates = gated_model(qm.model, qm.encoded_model, names, inherit)
    if not gates:
        return []
    outs = tensor_outputs(qm.model)
    feeds = list(ds.batches(start, stop, max(1, stop - start)))
    out = output if output in outs and _is_float(gm, output) else next((o for o in outs if _is_float(gm, o)), outs[0])
    k = len(gates)
    advance = progress("sensitivity", 2 * k + 1) if progress else None
    runner = _Suffixes(gm, out, gates, feeds, f"{ds.source}, samples {start}..{stop - 1}")
    ref = runner.start(np.zeros(k, bool), advance)
    runner.start(np.ones(k, bool), None)
    res = []
    for i, (t, role) in enumerate(gates):
        only = np.zeros(k, bool)
        only[i] = True
        oq = _sqnr(ref, runner.run(i, only, from_quantized=False))
        of = _sqnr(ref, runner.run(i, ~only, from_quantized=True))
        if advance:
            advance(2)
        res.append(TensorSensitivity(t, role, f"sqnr_db({out})", oq, of))
    res.sort(key=lambda r: (r.only_quantized, -r.only_float))
    return res


class _Suffixes:
    """The gated model cut into ``PIECES`` pieces of equal node count: a run that changes only gate ``k`` against
    the all-float (or all-quantized) configuration starts at the piece where gate ``k`` is first read, from that
    configuration's tensors crossing the cut (fetched once), instead of at the graph inputs: about half the work."""

    PIECES = 6

    def __init__(self, gm: onnx.ModelProto, out: str, gates: list[tuple[str, str]], feeds: list[dict], where: str):
        nodes = _order(gm.graph)
        self.out, self.feeds, self.where = out, feeds, where
        n = len(nodes)
        cuts = sorted({0} | {n * j // self.PIECES for j in range(1, self.PIECES)})
        first: dict[int, int] = {}
        for i, nd in enumerate(nodes):
            if nd.op_type == "Gather" and nd.input[0] == MASK:
                first.setdefault(int(nd.input[1].rsplit("_", 1)[1]), i)
        self.piece = {g: max(c for c in cuts if c <= first.get(g, 0)) for g in range(len(gates))}
        consts = {t.name for t in gm.graph.initializer}
        self.cross = {c: _crossing(nodes, c, consts, out) for c in cuts}
        fetch = sorted({x for c in cuts for x in self.cross[c]})
        self.full = Session(gm, fetch, level="basic", label="the gated quantized model", disable_qdq_fusion=True)
        self.fetch, self.gm, self.nodes = fetch, gm, nodes
        self.sub: dict[int, Session] = {}
        self.saved: dict[bool, list[dict[str, np.ndarray]]] = {}

    def start(self, mask: np.ndarray, advance: Callable[[int], None] | None) -> list[np.ndarray]:
        """One full run under ``mask`` (all false or all true), keeping the tensors at every cut."""
        kept = []
        for f in self.feeds:
            vals = dict(zip([self.out] + self.fetch, self.full.run([self.out] + self.fetch, {**f, MASK: mask},
                                                                  where=self.where)))
            kept.append(vals)
        self.saved[bool(mask.all())] = kept
        if advance:
            advance(1)
        return [v[self.out] for v in kept]

    def run(self, g: int, mask: np.ndarray, *, from_quantized: bool) -> list[np.ndarray]:
        c = self.piece[g]
        res = []
        for f, kept in zip(self.feeds, self.saved[from_quantized]):
            if c == 0:
                res.append(self.full.run([self.out], {**f, MASK: mask}, where=self.where)[0])
            else:
                feed = {x: kept[x] if x in kept else f[x] for x in self.cross[c]}
                if c not in self.sub:
                    self.sub[c] = Session(_suffix(self.gm, self.nodes, c, feed), level="basic",
                                          label="the gated quantized model", disable_qdq_fusion=True)
                res.append(self.sub[c].run([self.out], {**feed, MASK: mask}, where=self.where)[0])
        return res


def _crossing(nodes: list[onnx.NodeProto], c: int, consts: set[str], out: str) -> list[str]:
    """The tensors computed before node ``c`` (or graph inputs) that nodes ``c..`` read, or the output itself."""
    before = {o for nd in nodes[:c] for o in nd.output if o}
    read = {x for nd in nodes[c:] for x in node_inputs(nd)} | {out}
    return sorted(x for x in read if x not in consts and x != MASK and (x in before or x not in
                                                                          {o for nd in nodes for o in nd.output}))


def _suffix(gm: onnx.ModelProto, nodes: list[onnx.NodeProto], c: int, feed: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The gated model from node ``c`` on, fed the tensors of ``feed`` (typed by their values) and the mask."""
    m = onnx.ModelProto()
    m.CopyFrom(gm)
    g = m.graph
    del g.node[:]
    g.node.extend(nodes[c:])
    del g.input[:]
    g.input.extend(helper.make_tensor_value_info(x, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), None)
                   for x, v in feed.items())
    g.input.append(helper.make_tensor_value_info(MASK, onnx.TensorProto.BOOL, None))
    return m


def _is_float(m: onnx.ModelProto, name: str) -> bool:
    for o in m.graph.output:
        if o.name == name:
            return o.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                                    onnx.TensorProto.BFLOAT16, 0)
    return False


def as_dicts(items: list[TensorSensitivity]) -> list[dict[str, Any]]:
    return [asdict(r) for r in items]


def chart(items: list[dict[str, Any]], width: int = 900, limit: int = 60) -> str:
    """An inline SVG of the ranking: per tensor, the output SQNR with only it quantized (bar) and with only it left
    float (tick), most harmful first."""
    if not items:
        return ""
    rows = items[:limit]
    vals = [v for r in rows for v in (r["only_quantized"], r["only_float"]) if v is not None and math.isfinite(v)]
    vmax = max(vals + [1.0])
    left, h, gap = 230, 10, 3
    scale = (width - left - 80) / vmax
    p = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{len(rows) * (h + gap) + 30}" '
         'font-size="9" font-family="sans-serif"><text x="230" y="12">output SQNR (dB) with only this tensor '
         'quantized (bar, lowest = most harmful) and with only it left float (black tick)</text>']
    for i, r in enumerate(rows):
        y = 20 + i * (h + gap)
        oq, of = r["only_quantized"], r["only_float"]
        w = max(0.0, min(oq if oq is not None and math.isfinite(oq) else vmax, vmax)) * scale
        color = "#c0392b" if r["role"] == "weight" else "#2e86c1"
        p.append(f'<text x="{left - 4}" y="{y + 8}" text-anchor="end">{html.escape(r["tensor"][:40])} '
                 f'({r["role"][0]})</text><rect x="{left}" y="{y}" width="{w:.1f}" height="{h}" fill="{color}"/>')
        if of is not None and math.isfinite(of):
            x = left + max(0.0, min(of, vmax)) * scale
            p.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + h}" stroke="#000" stroke-width="2"/>')
        p.append(f'<text x="{left + w + 3:.1f}" y="{y + 8}">{_f(oq)} / {_f(of)} dB</text>')
    p.append("</svg>")
    return "".join(p)


def _f(v: float | None) -> str:
    return "inf" if v is None or (math.isinf(v) and v > 0) else f"{v:.1f}"


__all__ = ["MASK", "TensorSensitivity", "as_dicts", "chart", "gated_model", "sensitivity"]
