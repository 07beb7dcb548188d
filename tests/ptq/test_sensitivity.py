"""``qlinear.ptq.report.sensitivity``: the gated model is the Q/DQ model (all gates on) and the float model (all off) bit
for bit; one tensor's "only quantized" metric equals the one of a model quantized independently at that tensor only
(``qlinear.graph.apply`` of its encoding alone); weights and activations are ranked in ``report.json``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import qlinear
from qlinear.encodings import EncodingSet
from qlinear.examples import DATA, MODEL
from qlinear.ptq.report.sensitivity import MASK, gated_model, sensitivity
from qlinear.ptq.stats.session import Session

CFG = dict(calibration_samples=20, evaluation_samples=20)


@pytest.fixture(scope="module")
def qm():
    return qlinear.quantize(MODEL, DATA, CFG)


def _names(qm):
    weights = {t.name for t in qm.encoded_model.graph.initializer}
    return {e.name: "weight" if e.name in weights else "activation" for e in qm.encodings
            if e.scale is not None and e.dtype != "int32"}


def _run(m, feed):
    s = Session(m, level="basic", disable_qdq_fusion=True)
    return s.run(["logits"], feed)[0]


def test_gates_reproduce_the_qdq_and_the_float_model_exactly(qm):
    gm, gates = gated_model(qm.model, qm.encoded_model, _names(qm), {"flat_out": "gap_out"})
    assert {t for t, _ in gates} == set(_names(qm)) - {"flat_out"}   # flat_out shares gap_out's gate
    assert {r for _, r in gates} == {"weight", "activation"}
    x = {"input": np.load(DATA)["input"][20:28]}
    k = len(gates)
    assert np.array_equal(_run(gm, {**x, MASK: np.ones(k, bool)}), _run(qm.model, x))
    assert np.array_equal(_run(gm, {**x, MASK: np.zeros(k, bool)}), _run(qm.encoded_model, x))


def _sqnr(f, q):
    f, q = f.astype(np.float64), q.astype(np.float64)
    return 10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2))


@pytest.mark.parametrize("tensor", ["relu6_out", "res_out", "input"])
def test_only_quantized_equals_an_independent_single_tensor_model(qm, tensor):
    res = {r.tensor: r for r in sensitivity(qm, samples=8)}
    one = EncodingSet(tuple(e for e in qm.encodings if e.name == tensor))
    alone = qlinear.graph.apply(one, qm.encoded_model)
    x = {"input": np.load(DATA)["input"][20:28]}
    want = _sqnr(_run(qm.encoded_model, x), _run(alone, x))
    assert res[tensor].only_quantized == pytest.approx(want, abs=1e-6)
    assert res[tensor].metric == "sqnr_db(logits)"


def test_bad_sample_count_is_refused(qm):
    from qlinear.errors import ConfigError

    for bad in (-1, True, 2.5):
        with pytest.raises(ConfigError, match="sensitivity: expected"):
            qm.report(sensitivity=bad)


def test_ranked_in_report_json(tmp_path, qm):
    rep = qm.report(sensitivity=4)
    qm.save(tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    s = doc["sensitivity"]
    assert s == rep.sensitivity and {r["role"] for r in s} == {"weight", "activation"}
    assert [r["only_quantized"] for r in s] == sorted(r["only_quantized"] for r in s)   # most harmful first
    assert set(s[0]) == {"tensor", "role", "metric", "only_quantized", "only_float"}
    # quantizing one tensor costs less than quantizing all; leaving one float gains over all quantized
    allq = doc["report"]["outputs"]["logits"]["sqnr_db"]
    assert all(r["only_quantized"] > r["only_float"] - 1.0 for r in s)
    assert min(r["only_quantized"] for r in s) > allq - 6.0
    assert "Sensitivity" in (tmp_path / "out" / "report.html").read_text()


def test_suffix_runs_equal_full_runs(qm):
    """Runs started at a cut from the saved all-float / all-quantized tensors give the full runs' outputs exactly."""
    from qlinear.ptq.report import sensitivity as S

    gm, gates = gated_model(qm.model, qm.encoded_model, _names(qm), {"flat_out": "gap_out"})
    feeds = [{"input": np.load(DATA)["input"][20:26]}]
    r = S._Suffixes(gm, "logits", gates, feeds, "test")
    k = len(gates)
    r.start(np.zeros(k, bool), None)
    r.start(np.ones(k, bool), None)
    assert len(set(r.piece.values())) > 2  # the gates are spread over several pieces
    full = Session(gm, level="basic", disable_qdq_fusion=True)
    for i in range(k):
        only = np.eye(k, dtype=bool)[i]
        for mask, from_q in ((only, False), (~only, True)):
            want = full.run(["logits"], {**feeds[0], S.MASK: mask})[0]
            assert np.array_equal(r.run(i, mask, from_quantized=from_q)[0], want)


def test_sensitivity_is_measured_on_the_worst_output():
    """CenterFace's report ranked every tensor by its first output (the heatmap) while its offsets output was the
    one departing from float (4 dB): the ranking now uses the output of lowest SQNR."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_departure_note import cancelling

    x = np.random.default_rng(1).normal(0, 1, (48, 8)).astype(np.float32)
    qm = qlinear.quantize(cancelling(), {"x": x}, dict(calibration_samples=32, evaluation_samples=16))
    rep = qm.report(sensitivity=4)
    worst = min(("y", "z"), key=lambda o: rep.outputs[o]["sqnr_db"])
    assert worst == "y" and {r["metric"] for r in rep.sensitivity} == {"sqnr_db(y)"}
