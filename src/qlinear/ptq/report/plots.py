"""The data of the report's output plots, accumulated batch by batch (an LLM's logits are too large to keep): for one
graph output, a strided sample of its values as pairs (float, quantized) for a scatter plot and their differences
for an error histogram, and the held-out samples that agree worst with the float model (lowest per-sample SQNR).
Pure NumPy; :mod:`qlinear.ptq.report.html` draws it."""

from __future__ import annotations

from typing import Any

import numpy as np

PER_BATCH = 4096   #: values sampled from each batch
SCATTER = 600      #: points in the scatter plot
ERRORS = 20_000    #: differences the error histogram counts
WORST = 5          #: worst samples listed
BINS = 40
SLICE = 2 ** 20    #: values converted to float64 at a time by :meth:`OutputPlot.add_part`


class OutputPlot:
    """One graph output's plot data over the held-out batches (:meth:`add` each batch, then :meth:`result`)."""

    def __init__(self) -> None:
        self.f: list[np.ndarray] = []
        self.q: list[np.ndarray] = []
        self.per_sample: list[tuple[float, int, float]] = []   # (SQNR dB, sample index, max |error|)
        self.values = 0

    def add(self, a: np.ndarray, b: np.ndarray, first: int, count: int) -> None:
        """Float ``a`` and quantized ``b`` of one batch of ``count`` samples, the first being held-out sample
        ``first`` (samples along the first axis when its size is ``count``; else the batch is one row)."""
        if a.shape != b.shape or not a.size or a.dtype.kind not in "f":
            return
        fa, qa = a.reshape(-1), b.reshape(-1)
        step = max(1, fa.size // PER_BATCH)
        self.f.append(fa[::step][:PER_BATCH].astype(np.float64))
        self.q.append(qa[::step][:PER_BATCH].astype(np.float64))
        self.values += fa.size
        rows = count if a.ndim and a.shape[0] == count else 1   # a 0-d output: one value, one row (PLCMOS's MOS)
        af, bf = a.reshape(rows, -1), b.reshape(rows, -1)
        for i in range(rows):   # one sample at a time in float64 (an LLM's logits are large)
            x, d = af[i].astype(np.float64), bf[i].astype(np.float64)
            d -= x
            sig, noise = float(np.dot(x, x)), float(np.dot(d, d))
            db = float("inf") if noise <= 0 else (float("-inf") if sig <= 0 else float(10 * np.log10(sig / noise)))
            self.per_sample.append((db, first + i, float(np.max(np.abs(d)))))

    def add_part(self, a: np.ndarray, b: np.ndarray, first: int, part: int, parts: int) -> None:
        """:meth:`add` of a batch of ``parts`` samples of one shape given one sample at a time: ``a``, ``b`` are
        sample ``part`` of the batch (held-out sample ``first``, batch axis first of size 1). The strided values are
        :meth:`add`'s; the sample's SQNR comes from float64 sums over slices of :data:`SLICE` values (equal up to the
        rounding of the sums), never a float64 copy of the whole sample."""
        if a.shape != b.shape or not a.size or a.dtype.kind not in "f":
            return
        fa, qa, n = a.reshape(-1), b.reshape(-1), a.size
        step = max(1, n * parts // PER_BATCH)
        at = np.arange(0, n * parts, step)[:PER_BATCH]
        at = at[(at >= part * n) & (at < (part + 1) * n)] - part * n
        self.f.append(fa[at].astype(np.float64))
        self.q.append(qa[at].astype(np.float64))
        self.values += n
        sig = noise = worst = 0.0
        for lo in range(0, n, SLICE):
            x = fa[lo:lo + SLICE].astype(np.float64)
            d = qa[lo:lo + SLICE].astype(np.float64)
            d -= x
            sig += float(np.dot(x, x))
            noise += float(np.dot(d, d))
            worst = float(np.maximum(worst, np.max(np.abs(d))))  # NaN kept, as in add()
        db = float("inf") if noise <= 0 else (float("-inf") if sig <= 0 else float(10 * np.log10(sig / noise)))
        self.per_sample.append((db, first, worst))

    def result(self) -> dict[str, Any] | None:
        """``scatter`` ([float values], [quantized values]), ``errors`` (histogram of quantized - float: ``counts``,
        ``edges``, ``values`` counted of ``of``), ``worst`` ([{sample, sqnr_db, max_abs_error}], lowest first)."""
        if not self.f:
            return None
        f, q = np.concatenate(self.f), np.concatenate(self.q)
        d = q - f
        keep = d[:: max(1, d.size // ERRORS)][:ERRORS]
        lim = float(np.max(np.abs(keep[np.isfinite(keep)]), initial=0.0)) or 1.0
        counts, edges = np.histogram(keep[np.isfinite(keep)], bins=BINS, range=(-lim, lim))
        sel = slice(None, None, max(1, f.size // SCATTER))
        worst = sorted(self.per_sample, key=lambda t: (t[0], t[1]))[:WORST]
        return {"scatter": {"float": f[sel][:SCATTER].tolist(), "quantized": q[sel][:SCATTER].tolist()},
                "errors": {"counts": counts.tolist(), "edges": edges.tolist(), "values": int(keep.size),
                           "of": int(self.values)},
                "worst": [{"sample": i, "sqnr_db": db, "max_abs_error": e} for db, i, e in worst]}


def output_plots(outputs: dict[str, list[np.ndarray]], quantized: dict[str, list[np.ndarray]], counts: list[int],
                 start: int, kinds: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The plot data of every float output (not ``passthrough`` / ``integer``) from its per-batch arrays."""
    res = {}
    for o, fa in outputs.items():
        if kinds.get(o) in ("passthrough", "integer"):
            continue
        p, at = OutputPlot(), start
        for a, b, n in zip(fa, quantized[o], counts):
            p.add(a, b, at, n)
            at += n
        r = p.result()
        if r is not None:
            res[o] = r
    return res
