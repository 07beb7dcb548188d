"""The report's passes over the held-out samples, and starting them while quantization still runs.

* :func:`model_outputs`: one model's outputs, batch by batch (the float model and the quantized model each run one);
* :func:`activation_stats`: one pass of the float model with every quantized activation fetched (calibration's warm
  session), each against its own quantization: its SQNR (on a strided sample of :data:`STAT_VALUES` values per sample
  of a large tensor: an OCR detector's 480 x 480 maps give millions per sample, whose sums took most of the report's
  time), range and a histogram sample. Its batches are calibration's (:mod:`qlinear.ptq.stats.batching`: sized by
  the fetched bytes);
* :class:`Passes`: the three passes side by side; the statistics pass's runs also give the float outputs of its
  samples (their graph outputs fetched with the tensors), so the float model's own session runs only the rest. With
  ``quantize(report_ahead=True)`` (the command line writing a report) the float outputs start as soon as the
  rewritten float model exists, the statistics as soon as the encodings do and the quantized outputs as soon as the
  load check built its session. ONNX Runtime releases the GIL, so they run on the cores that the pipeline's own
  Python (encoding, Q/DQ insertion, the integer check, writing the files) leaves idle;
  :func:`qlinear.ptq.report.evaluate.evaluate` takes their results. Each pass keeps its own order, so every number
  is the one of running it then.

Passes run in threads of their own and read the data one batch at a time (:class:`SerialReader`).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator

import numpy as np
import onnx

from qlinear.core.granularity import PerTensor
from qlinear.core.native import cpu_count

HIST_CAP = 100_000  #: float values kept per tensor for its histogram
STAT_VALUES = 1 << 16  #: values per sample of a tensor its SQNR is computed on (a strided sample beyond)
Outputs = dict[str, list[np.ndarray]]


def sumsq(v: np.ndarray) -> float:
    """Sum of squares by a float32 BLAS dot product; in float64 when that overflows (values beyond ~1e19)."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = float(np.dot(v, v))
    if not np.isfinite(r):
        v64 = v.astype(np.float64)
        r = float(np.dot(v64, v64))
    return r


class _Sample:
    """A strided sample of a tensor's values over batches (for its histogram): ``per_sample`` values of each sample
    in a batch, bounded over the pass by ``HIST_CAP``."""

    def __init__(self, per_sample: int) -> None:
        self.per_sample = max(1, per_sample)
        self.parts: list[np.ndarray] = []

    def add(self, x: np.ndarray, samples: int = 1) -> None:
        flat = x.reshape(-1)
        keep = self.per_sample * max(1, samples)
        step = max(1, flat.size // keep)
        self.parts.append(flat[::step][:keep].astype(np.float32, copy=True))

    def values(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, np.float32)


class _Scratch:
    """The statistics' quantize/dequantize of a per-tensor integer encoding, in cache-sized chunks into per-thread
    buffers reused from tensor to tensor (tens of MB of fresh arrays cost more in page faults and memory traffic
    than the kernels): the noise ``x - DQ(Q(x))`` and the chunks' minima/maxima in one sweep over ``x``. Every
    value is the one of ``fake_quantize`` on the whole tensor (element-wise), and so are the minimum/maximum."""

    CHUNK = 1 << 20
    REUSABLE = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.uint16), np.dtype(np.int16))

    def __init__(self) -> None:
        self.local = threading.local()

    def handles(self, e: Any) -> bool:
        t = e.qtype
        return t.is_int and t.storage in self.REUSABLE and isinstance(e.grain, PerTensor)

    def _buf(self, key: str, n: int, dtype: np.dtype) -> np.ndarray:
        b = getattr(self.local, key, None)
        if b is None or b.nbytes < n * dtype.itemsize:
            b = np.empty(n * dtype.itemsize, np.uint8)
            setattr(self.local, key, b)
        return b[: n * dtype.itemsize].view(dtype)

    def noise(self, e: Any, x: np.ndarray, threads: int | None = None) -> tuple[np.ndarray, float, float]:
        """``x - DQ(Q(x))`` of a flat float32 ``x`` (a per-thread buffer), ``x.min()`` and ``x.max()``; ``threads``
        for the kernels (None: automatic)."""
        n, c = x.size, self.CHUNK
        d = self._buf("d", n, np.dtype(np.float32))
        q = self._buf("q", min(n, c), e.qtype.storage)
        lo, hi = np.empty(-(-n // c), np.float32), np.empty(-(-n // c), np.float32)
        for i, a in enumerate(range(0, n, c)):
            xc, dc = x[a:a + c], d[a:a + c]
            qc = e.quantize(xc, out=q[: xc.size], threads=threads)
            e.dequantize(qc, out=dc, threads=threads)
            np.subtract(xc, dc, out=dc)
            lo[i], hi[i] = xc.min(), xc.max()
        return d, (float(lo.min()) if n else np.inf), (float(hi.max()) if n else -np.inf)


@dataclass
class _Seen:
    """One activation over the statistics samples: its signal and quantization noise, range, histogram sample."""

    hist: _Sample
    sig: float = 0.0
    noise: float = 0.0
    lo: float = np.inf
    hi: float = -np.inf

    def add(self, e: Any, x: np.ndarray, scratch: "_Scratch | None" = None, threads: int | None = None,
            samples: int = 1) -> None:
        xs = np.ascontiguousarray(x, np.float32)
        x = xs.reshape(-1)
        step = -(-x.size // (STAT_VALUES * max(1, samples)))
        if step > 1:  # a strided sample of a large tensor (its SQNR estimated on ~STAT_VALUES values per sample)
            xs = x = np.ascontiguousarray(x[::step])
        if scratch is not None and scratch.handles(e):
            d, lo, hi = scratch.noise(e, x, threads)
        else:
            d = e.fake_quantize(xs).reshape(-1)   # a fresh array: the noise is computed in its place
            np.subtract(x, d, out=d)
            lo, hi = (float(x.min()), float(x.max())) if x.size else (np.inf, -np.inf)
        self.sig += sumsq(x)
        self.noise += sumsq(d)
        if x.size:
            self.lo = min(self.lo, lo)
            self.hi = max(self.hi, hi)
        self.hist.add(x, samples)

    def histogram(self, st: Any) -> dict | None:
        """64 bins over a span covering both the data and the chosen range ``st.lo..st.hi``."""
        x = self.hist.values()
        if not x.size:
            return None
        span_lo, span_hi = min(st.lo, self.lo), max(st.hi, self.hi)
        if not span_hi > span_lo:
            span_hi = span_lo + 1.0
        h, edges = np.histogram(x.astype(np.float64), bins=64, range=(span_lo, span_hi))
        return {"counts": h.tolist(), "edges": edges.tolist(), "lo": st.lo, "hi": st.hi,
                "data_lo": self.lo, "data_hi": self.hi, "values": int(x.size)}


class SerialReader:
    """A dataset's batches read by several threads one batch at a time (its loaders, an open ``.npz`` say, are not
    thread-safe); each iteration yields what ``ds.batches`` does."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds
        self.lock = threading.Lock()

    def batches(self, start: int, stop: int, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        it = self.ds.batches(start, stop, batch_size)
        while True:
            with self.lock:
                feed = next(it, None)
            if feed is None:
                return
            yield feed


@dataclass
class Basis:
    """What the report's float passes read: the data, the float model qlinear calibrated (after its exact rewrites),
    the encodings and plan, calibration's warm session ``(session, exposed tensors)`` and its batch size."""

    dataset: Any
    reference: onnx.ModelProto
    encodings: Any
    plan: Any
    warm: tuple[Any, list[str]]
    batch: int

    @classmethod
    def of(cls, qm: Any) -> "Basis":
        return cls(qm.dataset, qm.reference_model, qm.encodings, qm.plan, qm._float_session or (None, []),
                   getattr(qm, "_batch", None) or qm.config.batch_size)


def stat_encodings(b: Basis) -> list[Any]:
    """The activation encodings whose float values the statistics pass can fetch (those that only move data, a
    Reshape's output, share their source's encoding and statistics and are left out)."""
    ref = b.reference
    ref_inputs = {v.name for v in ref.graph.input}
    warm, exposed = b.warm
    known = (set(exposed) | {o.name for o in ref.graph.output} | ref_inputs) if warm is not None else \
        ref_inputs | {o for nd in ref.graph.node for o in nd.output}
    return [e for e in b.encodings.activations if e.scale is not None and e.name in known
            and e.name not in b.plan.inherit]


def float_stats_session(b: Basis, names: list[str]) -> Any:
    """An ONNX Runtime session of the float model exposing ``names``: calibration's own (warm) when it does."""
    from qlinear.ptq.stats.session import Session

    warm, exposed = b.warm
    outputs = {o.name for o in b.reference.graph.output}
    if warm is not None and set(names) <= set(exposed) | outputs:
        return warm
    return Session(b.reference, names, level="all", label="the float model")


def activation_stats(b: Basis, encs: list[Any], start: int, n_stat: int, read: "SerialReader | None" = None,
                     stop_if: Callable[[], bool] = lambda: False,
                     outputs: list[str] = ()) -> tuple[dict[str, _Seen], Outputs, list[int]]:
    """One float pass over samples ``start .. start + n_stat - 1``: each activation against its own quantization,
    and the float model's ``outputs`` there (computed by the same runs) with the samples per batch (``stop_if()``:
    checked before each batch, abandons the pass)."""
    ds = b.dataset
    ref_inputs = {v.name for v in b.reference.graph.input}
    per_sample = max(1, HIST_CAP // max(n_stat, 1))
    seen = {e.name: _Seen(_Sample(per_sample)) for e in encs}
    out: Outputs = {o: [] for o in outputs}
    counts: list[int] = []
    if not n_stat or not (encs or outputs):
        return seen, out, counts
    stat = [e.name for e in encs if e.name not in ref_inputs]
    fetch = list(dict.fromkeys(stat + list(outputs)))
    fs_stats = float_stats_session(b, fetch)
    scratch = _Scratch()
    done = start
    for feed in (read or SerialReader(ds)).batches(start, start + n_stat, b.batch):
        if stop_if():
            break
        n = ds.batch_len(feed)
        fv = dict(zip(fetch, fs_stats.run(fetch, feed, where=f"{ds.source}, samples {done}..{done + n - 1}")))
        for o in outputs:
            out[o].append(fv[o])
        counts.append(n)
        fv.update(feed)
        # tensors are independent (each keeps its own batch order): numpy and the kernels release the GIL, so the
        # large ones go to a pool of their own (not the kernels' pool, which the kernels wait on), one core each,
        # while this thread does the small ones (for which the GIL-bound Python around the kernels dominates)
        big = [e for e in encs if fv[e.name].size >= _Scratch.CHUNK]
        jobs = [_stats_pool().submit(seen[e.name].add, e, fv[e.name], scratch, 1, n) for e in big]
        for e in encs:
            if fv[e.name].size < _Scratch.CHUNK:
                seen[e.name].add(e, fv[e.name], scratch, samples=n)
        for j in jobs:
            j.result()
        done += n
    return seen, out, counts


@lru_cache(maxsize=1)
def _stats_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=cpu_count(), thread_name_prefix="qlinear-stats")


def model_outputs(session: Callable[[], Any], outputs: list[str], ds: Any, parts: list[tuple[int, int, int]],
                  read: "SerialReader | None" = None, progress: Callable[[int], None] | None = None,
                  stop_if: Callable[[], bool] = lambda: False) -> tuple[Outputs, list[int]]:
    """One model's ``outputs`` on each part ``(start, stop, batch)``: samples ``start .. stop - 1`` in batches of
    ``batch`` (the session is built here by ``session()``), and the number of samples in each batch."""
    out: Outputs = {o: [] for o in outputs}
    counts: list[int] = []
    if not any(a < z for a, z, _ in parts):
        return out, counts
    sess = session()
    if hasattr(ds, "check_stacking") and hasattr(sess, "run_all"):  # this pass may start before calibration checked
        ds.check_stacking(sess.run_all, max(b for _, _, b in parts))  # a batch axis only nominally dynamic
    for start, stop, batch in parts:
        done = start
        for feed in (read or SerialReader(ds)).batches(start, stop, batch):
            if stop_if():
                return out, counts
            n = ds.batch_len(feed)
            for o, v in zip(outputs, sess.run(outputs, feed, where=f"{ds.source}, samples {done}..{done + n - 1}")):
                out[o].append(v)
            counts.append(n)
            done += n
            if progress:
                progress(n)
    return out, counts


def float_session(ref: onnx.ModelProto) -> Callable[[], Any]:
    """``session`` for :func:`model_outputs`: the float model at ONNX Runtime's full optimization level."""
    from qlinear.ptq.stats.session import Session

    return lambda: Session(ref, (), level="all", label="the float model")


class Passes:
    """The report's three passes over the held-out samples ``span``, each in a thread of its own, started as their
    inputs become ready (before :func:`~qlinear.ptq.report.evaluate.evaluate` asks for them when quantizing starts
    them, module docstring). The span is cut in two: its first ``n_stat`` samples run the statistics pass, whose runs
    also give the float outputs there (calibration's warm session, in its batches); the rest runs the float model's
    own session in batches of ``batch``. The quantized model runs both parts with the same cuts."""

    def __init__(self, ds: Any, span: tuple[int, int], batch: int, outputs: list[str], stat_samples: int = 16) -> None:
        self.ds, self.span, self.batch, self.outputs = ds, span, batch, outputs
        self.n_stat = max(0, min(span[1] - span[0], stat_samples))
        self.read = SerialReader(ds)
        self.pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="qlinear-report")
        self.float_job: Future | None = None
        self.stats_job: Future | None = None
        self.quant_job: Future | None = None
        self.stat_batch = batch
        self.encs: list[Any] = []
        self.cancelled = False
        self.mirrored = False  # the quantized model is the float model: its outputs are the float pass's

    def start_float(self, ref: onnx.ModelProto, session: Callable[[], Any] | None = None) -> None:
        """The float model's outputs on the samples after the statistics' ones (``session()``: a session of ``ref``
        there is already, else a new one)."""
        self.float_job = self.pool.submit(model_outputs, session or float_session(ref), self.outputs, self.ds,
                                          [(self.span[0] + self.n_stat, self.span[1], self.batch)], self.read,
                                          stop_if=lambda: self.cancelled)

    def start_stats(self, b: Basis, encs: list[Any]) -> None:
        """The statistics of ``encs`` and the float outputs on the first ``n_stat`` samples (``b``'s batches)."""
        self.encs, self.stat_batch = encs, b.batch
        self.stats_job = self.pool.submit(activation_stats, b, encs, self.span[0], self.n_stat, self.read,
                                          stop_if=lambda: self.cancelled, outputs=self.outputs)

    def start_quant(self, session: Callable[[], Any], progress: Callable[[int], None] | None = None) -> None:
        """The quantized model's outputs (``session()`` builds or hands over its session), cut as the float ones."""
        start, stop = self.span
        parts = [(start, start + self.n_stat, self.stat_batch), (start + self.n_stat, stop, self.batch)]
        self.quant_job = self.pool.submit(model_outputs, session, self.outputs, self.ds, parts, self.read, progress,
                                          stop_if=lambda: self.cancelled)

    def mirror(self) -> None:
        """Nothing was quantized (the written model is the float model, run by the same session): the quantized
        outputs are the float passes' own, not computed a second time."""
        self.mirrored = True

    def results(self) -> tuple[Outputs, Outputs, list[int], dict[str, _Seen]]:
        """The float and quantized outputs, the samples per batch and the statistics (errors as the passes raised
        them, the float passes' first)."""
        try:
            seen, out_a, counts_a = self.stats_job.result()
            out_b, counts_b = self.float_job.result()
            out_f = {o: out_a[o] + out_b[o] for o in self.outputs}
            out_q, counts = (out_f, counts_a + counts_b) if self.mirrored else self.quant_job.result()
        finally:
            self.pool.shutdown(wait=False)
        if counts_a + counts_b != counts:
            raise RuntimeError(f"the report's passes cut different batches: {counts_a + counts_b} vs {counts}")
        return out_f, out_q, counts, seen

    def cancel(self) -> None:
        """Abandon the passes (the run failed): each stops before its next batch."""
        self.cancelled = True
        self.pool.shutdown(wait=False)


__all__ = ["HIST_CAP", "STAT_VALUES", "Basis", "Passes", "SerialReader", "activation_stats", "float_session",
           "float_stats_session", "model_outputs", "stat_encodings", "sumsq"]
