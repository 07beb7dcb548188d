"""The report's per-tensor statistics: the chunked, buffer-reusing path gives the very numbers of the plain one
(``fake_quantize`` on the whole tensor, ``x.min()``/``x.max()``), for every chunk split and special value."""

from __future__ import annotations

import numpy as np
import pytest

from qlinear.encodings.model import Encoding
from qlinear.ptq.report import evaluate as evaluate_mod
from qlinear.ptq.report import passes as ev


def _both(e: Encoding, batches: list[np.ndarray], chunk: int, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ev._Scratch, "CHUNK", chunk)
    plain, chunked, scratch = ev._Seen(ev._Sample(1000)), ev._Seen(ev._Sample(1000)), ev._Scratch()
    for x in batches:
        plain.add(e, x)
        chunked.add(e, x, scratch)
    return plain, chunked


@pytest.mark.parametrize("dtype,zp", [("uint8", 128), ("int8", 0), ("uint16", 30000), ("int16", 0)])
@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_chunked_stats_equal_plain(dtype: str, zp: int, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(chunk)
    e = Encoding("t", dtype, scale=np.float32(0.013), zero_point=zp)
    assert ev._Scratch().handles(e)
    batches = [rng.standard_normal((2, 3, 11, 13)).astype(np.float32) * 2, np.zeros((0, 3), np.float32),
               (rng.standard_normal((1, 500)) * 40).astype(np.float32)]
    plain, chunked = _both(e, batches, chunk, monkeypatch)
    assert (plain.sig, plain.noise, plain.lo, plain.hi) == (chunked.sig, chunked.noise, chunked.lo, chunked.hi)
    assert plain.noise > 0 and np.isfinite(plain.lo)
    assert np.array_equal(plain.hist.values(), chunked.hist.values())


def test_chunked_stats_nan_like_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    e = Encoding("t", "uint8", scale=np.float32(0.1), zero_point=10)
    x = np.linspace(-3, 5, 300, dtype=np.float32)
    x[157] = np.nan
    plain, chunked = _both(e, [x, x[:100]], 16, monkeypatch)
    assert (plain.lo, plain.hi) == (chunked.lo, chunked.hi) == (-3.0, float(x[99]))
    assert np.isnan(plain.noise) and np.isnan(chunked.noise)


def test_per_channel_keeps_the_plain_path() -> None:
    e = Encoding("t", "int8", scale=np.array([0.1, 0.2], np.float32), zero_point=np.zeros(2, np.int8), axis=1)
    assert not ev._Scratch().handles(e)


class _Inline:
    """A stand-in executor that runs each job at once in the caller's thread: the evaluation's streams one after
    the other, as before they ran side by side."""

    def __init__(self, *a, **k) -> None:
        pass

    def __enter__(self) -> "_Inline":
        return self

    def __exit__(self, *a) -> None:
        return None

    def shutdown(self, wait: bool = True) -> None:
        return None

    def submit(self, fn, *a, **k):
        from concurrent.futures import Future

        f: Future = Future()
        try:
            f.set_result(fn(*a, **k))
        except Exception as ex:  # noqa: BLE001 - delivered by result(), as a real executor does
            f.set_exception(ex)
        return f


def test_side_by_side_report_equals_one_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """The statistics pass and the float / quantized output sessions run in threads of their own, reading the
    example's ``.npz`` (not thread-safe) one batch at a time: the report is the one of running them in turn."""
    import json

    import qlinear
    from qlinear.examples import DATA, MODEL

    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=8, evaluation_samples=24, batch_size=2))
    runs = []
    for inline in (False, True, False):
        with monkeypatch.context() as m:
            if inline:
                m.setattr(ev, "ThreadPoolExecutor", _Inline)
            d = evaluate_mod.evaluate(qm).to_dict()
        d.pop("timings")
        runs.append(json.dumps(d, sort_keys=True, default=str))
    assert runs[0] == runs[1] == runs[2]
    assert json.loads(runs[0])["samples"] == 24 and json.loads(runs[0])["tensors"]


def test_report_started_ahead_equals_report_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """``quantize(report_ahead=True)`` starts the float outputs and the statistics while quantizing: the report is the
    one computed after, and the passes it started are taken (not run again)."""
    import json

    import qlinear
    from qlinear.examples import DATA, MODEL

    cfg = dict(calibration_samples=8, evaluation_samples=24, batch_size=2)
    docs = []
    for ahead in (False, True):
        qm = qlinear.quantize(MODEL, DATA, cfg, report_ahead=ahead)
        assert (qm._ahead is not None) == ahead
        if ahead:
            jobs = (qm._ahead.float_job, qm._ahead.stats_job, qm._ahead.quant_job)
            assert None not in jobs
            for name in ("start_float", "start_stats", "start_quant"):   # taken, not run again
                monkeypatch.setattr(ev.Passes, name, lambda *a, **k: pytest.fail("a pass ran twice"))
        d = qm.report().to_dict()
        if ahead:
            assert all(j.done() for j in jobs) and qm._ahead is None
        d.pop("timings")
        docs.append(json.dumps(d, sort_keys=True, default=str))
    assert docs[0] == docs[1]


def test_failed_run_cancels_the_passes_started_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that fails after the report's passes started abandons them (they stop before their next batch)."""
    import qlinear
    from qlinear.errors import CalibrationError
    from qlinear.examples import DATA, MODEL
    from qlinear.ptq import pipeline

    started = []
    real = pipeline._start_ahead

    def start(run, reference):
        a = real(run, reference)
        started.append(a)
        return a

    def fail(*a, **k):
        raise CalibrationError("boom")

    monkeypatch.setattr(pipeline, "_start_ahead", start)
    monkeypatch.setattr(pipeline, "_collect", fail)
    with pytest.raises(CalibrationError, match="boom"):
        qlinear.quantize(MODEL, DATA, dict(calibration_samples=8, evaluation_samples=24, batch_size=2),
                         report_ahead=True)
    assert started and started[0].cancelled
