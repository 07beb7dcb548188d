"""Calibration statistics on Ray actors (``workers``, ``ray_address``; qlinear.ptq.stats.distributed): the files
written with 2 workers are byte-identical to the single-process run's (W8A8 with histogram and min-max observers
plus bias correction's channel means, weight-only GPTQ's one-pass Hessians, sequential GPTQ's pass); a bad or unreachable address is one
ConfigError line before any work. One local Ray instance (2 CPUs) for the whole test session; skipped without
Ray (``pip install 'qlinear[ray]'``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import lm_data, tiny_lm

import qlinear
from qlinear.examples import DATA, MODEL

ray = pytest.importorskip("ray")

WO = {"activation_type": "float", "weight_type": "int4", "weights": "per-block", "block_size": 32}


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray instance for the session (``connect`` reuses an initialized Ray)."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def _files(qm, folder: Path) -> dict[str, bytes]:
    qm.save(folder, report=False)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _same_files(model, data, cfg: dict, tmp_path: Path) -> dict[str, bytes]:
    one = _files(qlinear.quantize(model, data, cfg), tmp_path / "w1")
    two = _files(qlinear.quantize(model, data, {**cfg, "workers": 2}), tmp_path / "w2")
    assert sorted(one) == sorted(two)
    for name in one:
        assert one[name] == two[name], f"{name} differs between workers 1 and 2"
    return one


@pytest.mark.parametrize("method", ["minmax", "sqnr", "moving_average"])
def test_w8a8_two_workers_byte_identical(local_ray, tmp_path, method):
    # batch 3 over 20 samples: 7 batches (the last one short), alternating between the two actors
    cfg = {"activation_method": method, "calibration_samples": 20, "evaluation_samples": 4, "batch_size": 3}
    files = _same_files(MODEL, DATA, cfg, tmp_path)
    assert {"model.qdq.onnx", "model.encodings"} <= set(files)


def test_gptq_two_workers_byte_identical(local_ray, tmp_path):
    m, d = tiny_lm(d=64, ff=128, vocab=256), lm_data(n=40, seq=16, vocab=256)
    # the one-pass Hessians (sequential GPTQ, the default, runs in one process: workers are not used)
    cfg = {**WO, "weight_method": "gptq", "gptq_sequential": False, "calibration_samples": 30, "evaluation_samples": 4,
           "batch_size": 4}
    files = _same_files(m, d, cfg, tmp_path)
    assert any(name.endswith(".onnx") for name in files)


@pytest.mark.parametrize("method, opts", [("gptq", {}), ("awq+gptq", {}), ("aag+gptq", {}),
                                          ("gptq", {"weights": "lpbq", "block_size": 16}), ("awq", {})])
def test_sequential_gptq_two_workers_byte_identical(local_ray, tmp_path, monkeypatch, method, opts):
    # the sequential pass (the default for GPTQ; awq on the float model): each group's Hessians merged from the two
    # actors' shares of the 8 batches (the last one short) in batch order, the pieces run by the actors on the
    # dequantized weights the driver sends, and each linear's GPTQ / grid job run as a Ray task on an actor: the
    # driver never runs one itself (its calls are counted in the driver only), and the files are those of 1 worker
    import qlinear.ptq.weightonly.api as api

    driver_calls: list[str] = []
    real = api.run_job

    def counted(job, *args):
        driver_calls.append(job.name)
        return real(job, *args)

    monkeypatch.setattr(api, "run_job", counted)
    m, d = tiny_lm(d=64, ff=128, vocab=256), lm_data(n=40, seq=16, vocab=256)
    cfg = {**WO, "weight_method": method, "calibration_samples": 30, "evaluation_samples": 4, "batch_size": 4,
           **opts}
    one = qlinear.quantize(m, d, cfg)
    jobs, driver_calls[:] = list(driver_calls), []
    two = qlinear.quantize(m, d, {**cfg, "workers": 2})
    assert any("sequential pass on Ray (2 workers)" in n and "Ray task" in n for n in two.notes)
    assert not any("on Ray" in n for n in one.notes)
    assert any(f"{method} {'sequential ' if 'gptq' in method else ''}on 30 calibration samples" in n
               for n in two.notes)
    assert driver_calls == [] and (len(jobs) >= 3) == (method != "awq")  # GPTQ linears (aag: the lm_head too)
    a, b = _files(one, tmp_path / "w1"), _files(two, tmp_path / "w2")
    assert sorted(a) == sorted(b) and any(name.endswith(".onnx") for name in a)
    for name in a:
        assert a[name] == b[name], f"{name} differs between workers 1 and 2"


def test_unreachable_address_refused_before_work(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    r = subprocess.run([sys.executable, "-m", "qlinear", "quantize", "-o", str(tmp_path / "out"), "--no-report",
                        "--ray-address", "127.0.0.1:1"], capture_output=True, text=True, env=env, timeout=120)
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and not (tmp_path / "out").exists()
    assert err[-1].startswith("error: ray_address: no Ray head node answers at 127.0.0.1:1")
    assert "Traceback" not in r.stderr
