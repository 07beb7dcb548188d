"""Accuracy of a quantized model against its float model on held-out samples, in one pass.

* **output agreement** on every held-out sample: top-1 agreement (and top-1 accuracy when labels are known) for
  classifier outputs ``[N, classes]``; cosine similarity (mean, min over samples) and SQNR for every output;
* **per-tensor SQNR** ``10 log10(sum x^2 / sum (x - x_q)^2)`` between each quantized activation of the Q/DQ model
  (its DequantizeLinear output) and the same tensor of the float model, accumulated over the first
  ``stat_samples`` held-out samples (float32 BLAS dot products: three passes over each tensor);
* **sensitivity ranking**: layers ordered by the SQNR they lose (SQNR of their input minus SQNR of their output;
  the first layers get the graph input's SQNR as reference);
* **histograms** of the worst tensors, from a strided sample of the float values of every statistics batch, over a
  span that covers both the data and the chosen range.

The float model runs at ONNX Runtime's full optimization level. The Q/DQ model runs at the full level too, with
ONNX Runtime's Q/DQ fusions disabled (``session.disable_quant_qdq``): every QuantizeLinear/DequantizeLinear is
executed as the operator ONNX defines, in float, and only float fusions (Conv+activation, NCHWc layouts) apply;
what ORT's int8 kernels give on a given CPU is a different question (``run_integer`` and the README answer it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from qlinear.errors import DataError
from qlinear.graph.model import GraphIndex

HIST_CAP = 100_000  # float values kept per tensor for its histogram


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
    stat_samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "stat_samples": self.stat_samples, "outputs": self.outputs,
                "ranking": self.ranking, "tensors": [t.__dict__ for t in self.tensors], "timings": self.timings,
                "histograms": self.histograms}


def _sqnr(sig: float, noise: float) -> float:
    if noise <= 0:
        return float("inf")
    if sig <= 0:
        return float("-inf")
    return float(10 * np.log10(sig / noise))


def _sumsq(v: np.ndarray) -> float:
    """Sum of squares by a float32 BLAS dot product; in float64 when that overflows (values beyond ~1e19)."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = float(np.dot(v, v))
    if not np.isfinite(r):
        v64 = v.astype(np.float64)
        r = float(np.dot(v64, v64))
    return r


class _Sample:
    """A strided sample of a tensor's values over batches (for its histogram), bounded by ``HIST_CAP``."""

    def __init__(self, per_batch: int) -> None:
        self.per_batch = max(1, per_batch)
        self.parts: list[np.ndarray] = []

    def add(self, x: np.ndarray) -> None:
        flat = x.reshape(-1)
        step = max(1, flat.size // self.per_batch)
        self.parts.append(flat[::step][: self.per_batch].astype(np.float32, copy=True))

    def values(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, np.float32)


def _range(e: Any) -> tuple[float, float]:
    s = float(np.asarray(e.scale).reshape(-1)[0])
    if e.qtype.is_int:
        z = float(np.asarray(e.zero_point_or_zeros).reshape(-1)[0])
        return (e.qtype.qmin - z) * s, (e.qtype.qmax - z) * s
    return -float(e.qtype.qmax) * s, float(e.qtype.qmax) * s


def evaluate(qm: Any, *, samples: int | None = None, progress: Callable[[int], None] | None = None,
             worst_histograms: int = 4, stat_samples: int = 32) -> Report:
    from qlinear.ptq.session import Session

    ds = qm.dataset
    cfg = qm.config
    start, stop = qm.held_out()
    if samples is not None:
        stop = min(len(ds), start + samples)
    n = stop - start
    if n <= 0:
        raise DataError(f"{ds.source}: no samples to evaluate")
    ref = qm.reference_model  # float model after exact rewrites (BN folding, CLE): same outputs, same tensors
    outputs = [o.name for o in ref.graph.output]
    g = GraphIndex.build(qm.model, infer_shapes=False)
    ref_inputs = {v.name for v in ref.graph.input}
    ref_tensors = ref_inputs | {o for nd in ref.graph.node for o in nd.output}
    pairs = []
    for e in qm.encodings.activations:
        if e.scale is None:
            continue
        dq = e.name if e.name in outputs else f"{e.name}_dequantized"
        if dq in g.producer and e.name in ref_tensors:
            pairs.append((e, dq))
    f_stats = [e.name for e, _ in pairs if e.name not in ref_inputs]
    q_stats = [dq for _, dq in pairs if dq not in outputs]
    fs = Session(ref, f_stats, level="all", label="the float model")
    qs = Session(qm.model, q_stats, level="all", label="the Q/DQ model", disable_qdq_fusion=True)
    n_stat = min(n, stat_samples)
    sig = {e.name: 0.0 for e, _ in pairs}
    noise = dict(sig)
    lo_seen = {e.name: np.inf for e, _ in pairs}
    hi_seen = {e.name: -np.inf for e, _ in pairs}
    per_batch = max(1, HIST_CAP * cfg.batch_size // max(n_stat, 1))
    hist = {e.name: _Sample(per_batch) for e, _ in pairs}
    out_f: dict[str, list[np.ndarray]] = {o: [] for o in outputs}
    out_q: dict[str, list[np.ndarray]] = {o: [] for o in outputs}
    done = start
    for feed in ds.batches(start, stop, cfg.batch_size):
        b = len(next(iter(feed.values())))
        where = f"{ds.source}, samples {done}..{done + b - 1}"
        stats = done < start + n_stat
        f_fetch = outputs + (f_stats if stats else [])
        q_fetch = outputs + (q_stats if stats else [])
        fv = dict(zip(f_fetch, fs.run(f_fetch, feed, where=where)))
        fv.update(feed)
        qv = dict(zip(q_fetch, qs.run(q_fetch, feed, where=where)))
        if stats:
            for e, dq in pairs:
                x = np.ascontiguousarray(fv[e.name], np.float32).reshape(-1)
                y = np.ascontiguousarray(qv[dq], np.float32).reshape(-1)
                sig[e.name] += _sumsq(x)
                noise[e.name] += _sumsq(x - y)
                if x.size:
                    lo_seen[e.name] = min(lo_seen[e.name], float(x.min()))
                    hi_seen[e.name] = max(hi_seen[e.name], float(x.max()))
                hist[e.name].add(x)
        for o in outputs:
            out_f[o].append(fv[o])
            out_q[o].append(qv[o])
        done += b
        if progress:
            progress(b)
    stats_list = []
    sq = {}
    for e, _ in pairs:
        s = _sqnr(sig[e.name], noise[e.name])
        sq[e.name] = s
        lo, hi = _range(e)
        stats_list.append(TensorStat(e.name, e.dtype, float(np.asarray(e.scale).reshape(-1)[0]),
                                     int(np.asarray(e.zero_point_or_zeros).reshape(-1)[0]) if e.qtype.is_int else 0,
                                     lo, hi, s))
    fg = GraphIndex.build(ref, infer_shapes=False)
    quantized = set(sq)
    for st in stats_list:
        prev = _upstream(fg, st.name, quantized)
        up = max((sq[p] for p in prev), default=float("inf"))
        st.loss_db = (up - st.sqnr_db) if np.isfinite(up) else -st.sqnr_db
    ranking = [s.name for s in sorted(stats_list, key=lambda s: s.sqnr_db)]
    labels = None if ds.labels is None else ds.labels[start:stop]
    res = {o: _output_metrics(np.concatenate(out_f[o]), np.concatenate(out_q[o]), labels, o, ds.source)
           for o in outputs}
    hists = {}
    by_name = {s.name: s for s in stats_list}
    for name in ranking[:worst_histograms]:
        x = hist[name].values()
        if not x.size:
            continue
        st = by_name[name]
        span_lo, span_hi = min(st.lo, lo_seen[name]), max(st.hi, hi_seen[name])
        if not span_hi > span_lo:
            span_hi = span_lo + 1.0
        h, edges = np.histogram(x.astype(np.float64), bins=64, range=(span_lo, span_hi))
        hists[name] = {"counts": h.tolist(), "edges": edges.tolist(), "lo": st.lo, "hi": st.hi,
                       "data_lo": lo_seen[name], "data_hi": hi_seen[name], "values": int(x.size)}
    return Report(n, stats_list, res, ranking, hists, stat_samples=n_stat)


def _output_metrics(a: np.ndarray, b: np.ndarray, labels: list[int] | None, name: str,
                    source: str) -> dict[str, float]:
    r: dict[str, float] = {}
    if a.ndim == 2 and a.shape[1] > 1:
        fa, qa = a.argmax(1), b.argmax(1)
        r["top1_agreement"] = float(np.mean(fa == qa))
        if labels is not None:
            lab = np.asarray(labels)
            if len(lab) != len(fa):
                raise DataError(f"{source}: {len(lab)} labels for {len(fa)} evaluated samples of output {name!r}")
            if lab.size and lab.max() >= a.shape[1]:
                raise DataError(f"{source}: label {int(lab.max())} is outside the {a.shape[1]} classes of output "
                                f"{name!r}; labels must be 0-based class indices of that output")
            r["float_top1"] = float(np.mean(fa == lab))
            r["quantized_top1"] = float(np.mean(qa == lab))
    af = a.reshape(len(a), -1).astype(np.float64)
    bf = b.reshape(len(b), -1).astype(np.float64)
    cos = np.sum(af * bf, 1) / np.maximum(np.linalg.norm(af, axis=1) * np.linalg.norm(bf, axis=1), 1e-30)
    r["cosine_mean"] = float(np.mean(cos))
    r["cosine_min"] = float(np.min(cos))
    r["sqnr_db"] = _sqnr(float(np.sum(af ** 2)), float(np.sum((af - bf) ** 2)))
    return r


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
