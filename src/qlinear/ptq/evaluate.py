"""Accuracy of a quantized model against its float model on held-out samples.

* **per-tensor SQNR**: ``10 log10(sum x^2 / sum (x - x_q)^2)`` between each quantized activation of the Q/DQ model
  (its DequantizeLinear output) and the same tensor of the float model, accumulated over the held-out samples;
* **sensitivity ranking**: layers ordered by the SQNR they lose (SQNR of their input minus SQNR of their output;
  the first layers get the graph input's SQNR as reference);
* **output agreement**: top-1 agreement (and top-1 accuracy when labels are known) for classifier outputs
  ``[N, classes]``, cosine similarity for the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from qlinear.graph.model import GraphIndex
from qlinear.ptq.collect import session


@dataclass
class TensorStat:
    name: str
    dtype: str
    scale: float
    zero_point: int
    lo: float
    hi: float
    sqnr_db: float
    loss_db: float = 0.0


@dataclass
class Report:
    samples: int
    tensors: list[TensorStat]
    outputs: dict[str, dict[str, float]]
    ranking: list[str]
    histograms: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "outputs": self.outputs, "ranking": self.ranking,
                "tensors": [t.__dict__ for t in self.tensors], "timings": self.timings,
                "histograms": self.histograms}


def _sqnr(sig: float, noise: float) -> float:
    if noise <= 0:
        return float("inf")
    if sig <= 0:
        return float("-inf")
    return float(10 * np.log10(sig / noise))


def evaluate(qm: Any, *, samples: int | None = None, progress: Callable[[int], None] | None = None,
             worst_histograms: int = 4) -> Report:
    ds = qm.dataset
    cfg = qm.config
    start = min(cfg.calibration_samples, len(ds))
    if start >= len(ds):
        start = 0  # no held-out samples: evaluate on the calibration ones (the report says so)
    stop = min(len(ds), start + (samples if samples is not None else cfg.evaluation_samples))
    acts = [e for e in qm.encodings.activations if e.scale is not None]
    g = GraphIndex.build(qm.model, infer_shapes=False)
    ref = qm.reference_model  # float model after exact rewrites (BN folding, CLE): same outputs, same tensors
    outputs = [o.name for o in ref.graph.output]
    pairs = []
    for e in acts:
        dq = e.name if e.name in outputs else f"{e.name}_dequantized"
        if dq in g.producer and (e.name in {v.name for v in ref.graph.input} or e.name in
                                 {o for n in ref.graph.node for o in n.output}):
            pairs.append((e, dq))
    f_fetch = list(dict.fromkeys(outputs + [e.name for e, _ in pairs if e.name not in
                                            {v.name for v in ref.graph.input}]))
    q_fetch = list(dict.fromkeys(outputs + [dq for _, dq in pairs if dq not in outputs]))
    fs, qs = session(ref, f_fetch), session(qm.model, q_fetch)
    sig = {e.name: 0.0 for e, _ in pairs}
    noise = dict(sig)
    out_f: dict[str, list[np.ndarray]] = {o: [] for o in outputs}
    out_q: dict[str, list[np.ndarray]] = {o: [] for o in outputs}
    first: dict[str, np.ndarray] = {}
    for feed in ds.batches(start, stop, cfg.batch_size):
        fv = dict(zip(f_fetch, fs.run(f_fetch, feed)))
        fv.update(feed)
        qv = dict(zip(q_fetch, qs.run(q_fetch, feed)))
        for e, dq in pairs:
            x = fv[e.name].astype(np.float64)
            y = qv[dq if dq in qv else e.name].astype(np.float64)
            sig[e.name] += float(np.sum(x * x))
            noise[e.name] += float(np.sum((x - y) ** 2))
            if e.name not in first:
                first[e.name] = fv[e.name].reshape(-1)[:200_000].copy()
        for o in outputs:
            out_f[o].append(fv[o])
            out_q[o].append(qv[o])
        if progress:
            progress(len(next(iter(feed.values()))))
    n = stop - start
    stats = []
    sq = {}
    for e, _ in pairs:
        s = _sqnr(sig[e.name], noise[e.name])
        sq[e.name] = s
        lo = float(-e.zero_point_or_zeros.reshape(-1)[0] + e.qtype.qmin) * float(e.scale.reshape(-1)[0]) \
            if e.qtype.is_int else -float(e.qtype.qmax * e.scale.reshape(-1)[0])
        hi = float(-e.zero_point_or_zeros.reshape(-1)[0] + e.qtype.qmax) * float(e.scale.reshape(-1)[0]) \
            if e.qtype.is_int else float(e.qtype.qmax * e.scale.reshape(-1)[0])
        stats.append(TensorStat(e.name, e.dtype, float(e.scale.reshape(-1)[0]),
                                int(e.zero_point_or_zeros.reshape(-1)[0]) if e.qtype.is_int else 0, lo, hi, s))
    # sensitivity: SQNR lost between a tensor and the quantized tensor feeding its producer chain
    fg = GraphIndex.build(ref, infer_shapes=False)
    quantized = set(sq)
    for st in stats:
        prev = _upstream(fg, st.name, quantized)
        ref = max((sq[p] for p in prev), default=float("inf"))
        st.loss_db = (ref - st.sqnr_db) if np.isfinite(ref) else -st.sqnr_db
    ranking = [s.name for s in sorted(stats, key=lambda s: s.sqnr_db)]
    res: dict[str, dict[str, float]] = {}
    labels = ds.labels[start:stop] if ds.labels is not None else None
    for o in outputs:
        a = np.concatenate(out_f[o]) if out_f[o] else np.zeros((0,))
        b = np.concatenate(out_q[o]) if out_q[o] else np.zeros((0,))
        r: dict[str, float] = {}
        if a.ndim == 2 and a.shape[1] > 1:
            fa, qa = a.argmax(1), b.argmax(1)
            r["top1_agreement"] = float(np.mean(fa == qa))
            if labels is not None and len(labels) == len(fa):
                lab = np.asarray(labels)
                r["float_top1"] = float(np.mean(fa == lab))
                r["quantized_top1"] = float(np.mean(qa == lab))
        af, bf = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
        cos = np.sum(af * bf, 1) / np.maximum(np.linalg.norm(af, axis=1) * np.linalg.norm(bf, axis=1), 1e-30)
        r["cosine_mean"] = float(np.mean(cos))
        r["cosine_min"] = float(np.min(cos))
        r["sqnr_db"] = _sqnr(float(np.sum(af ** 2)), float(np.sum((af - bf) ** 2)))
        res[o] = r
    hists = {}
    for name in ranking[:worst_histograms]:
        x = first.get(name)
        if x is None:
            continue
        h, edges = np.histogram(x, bins=64)
        st = next(s for s in stats if s.name == name)
        hists[name] = {"counts": h.tolist(), "edges": edges.tolist(), "lo": st.lo, "hi": st.hi}
    return Report(n, stats, res, ranking, hists)


def _upstream(g: GraphIndex, name: str, quantized: set[str], limit: int = 64) -> set[str]:
    """The nearest quantized tensors upstream of ``name`` (through unquantized intermediates)."""
    found: set[str] = set()
    stack = [name]
    seen = {name}
    while stack and limit:
        limit -= 1
        t = stack.pop()
        p = g.producer.get(t)
        if p is None:
            continue
        for i in p.input:
            if not i or i in seen or i in g.initializers:
                continue
            seen.add(i)
            if i in quantized:
                found.add(i)
            else:
                stack.append(i)
    return found
