"""A model whose plan quantizes nothing (luscinia: a 194 MB LightGBM ``TreeEnsembleClassifier`` + ``ZipMap``, no
operator qlinear quantizes) took ~77 s where ONNX Runtime's ``quantize_static`` took ~20 s: calibration ran, the
Q/DQ model was rebuilt through ``onnx_ir`` (its 194 MB of attributes read into Python tuples), shape-inferred, and
loaded in ONNX Runtime three more times for the load check and the report. Now such a run skips calibration and the
passes on quantized layers, builds the written model without the IR round trip, loads it once (the report runs that
session) and says why nothing was quantized. These tests pin the behaviour (no timing): calibration never runs, one
session of the written model, the note, and outputs that load in ONNX Runtime at its default level."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from tiny_models import lgbm_classifier

import qlinear
from qlinear.encodings import load
from qlinear.ptq import pipeline
from qlinear.ptq.stats import session as session_mod

RNG = np.random.default_rng(0)
X = RNG.normal(0, 1, (24, 3)).astype(np.float32)


def _argmax_model() -> onnx.ModelProto:
    """Only an operator qlinear does not quantize: float input, ArgMax, integer output."""
    g = helper.make_graph([helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, ["N"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


MODELS = {"argmax": (_argmax_model, "ArgMax"), "trees": (lgbm_classifier, "TreeEnsembleClassifier (ai.onnx.ml)")}


@pytest.fixture
def sessions(monkeypatch):
    """Counts the ONNX Runtime sessions qlinear builds (the load check, calibration, the report's)."""
    built = []
    init = session_mod.Session.__init__

    def counting(self, m, *a, **k):
        built.append(k.get("label", ""))
        init(self, m, *a, **k)

    monkeypatch.setattr(session_mod.Session, "__init__", counting)
    return built


@pytest.mark.parametrize("name", list(MODELS))
def test_nothing_to_quantize_skips_calibration_and_says_why(name, tmp_path, monkeypatch, sessions):
    make, op = MODELS[name]

    def no_calibration(*a, **k):
        raise AssertionError("calibration ran on a model with nothing to quantize")

    monkeypatch.setattr(pipeline, "_collect", no_calibration)
    qm = qlinear.quantize(make(), {"x": X}, dict(calibration_samples=8, evaluation_samples=16))
    note = next(n for n in qm.notes if n.startswith("nothing is quantized"))
    assert f"the model's operators, {op}" in note and "outside the set qlinear quantizes" in note, note
    assert "Calibration was skipped" in note and "model.qdq.onnx is the float model" in note, note
    assert qm.unquantized and len(qm.encodings) == 0 and "calibration" not in qm.timings
    files = qm.save(tmp_path)
    assert {"model.qdq.onnx", "model.encodings", "report.json", "report.html"} <= set(files)
    assert len(sessions) == 1, sessions  # the load check's session, which every pass of the report ran
    written = onnx.load(tmp_path / "model.qdq.onnx")
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in written.graph.node)
    got = ort.InferenceSession(str(tmp_path / "model.qdq.onnx"), providers=["CPUExecutionProvider"])
    want = ort.InferenceSession(make().SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b in zip(got.run(None, {"x": X}), want.run(None, {"x": X})):
        assert a == b if isinstance(a, list) else np.array_equal(a, b)
    assert len(load(tmp_path / "model.encodings")) == 0
    assert note in json.loads((tmp_path / "report.json").read_text())["notes"]


def test_a_search_still_calibrates_a_model_with_nothing_to_quantize(monkeypatch):
    """An accuracy target runs its passes as before (only the note, without the skipped calibration's words)."""
    calls = []
    collect = pipeline._collect
    monkeypatch.setattr(pipeline, "_collect", lambda *a, **k: calls.append(1) or collect(*a, **k))
    qm = qlinear.quantize(_argmax_model(), {"x": X}, dict(calibration_samples=8, evaluation_samples=8,
                                                          accuracy_target="cosine_mean>=0.9"))
    assert calls and not qm.unquantized
    assert any(n.startswith("nothing is quantized") and "Calibration was skipped" not in n for n in qm.notes)


def test_the_report_of_a_model_with_nothing_quantized_runs_it_once(monkeypatch):
    """The written model is the float model, run by the same session: the report takes its outputs as both the float
    and the "quantized" ones (each held-out sample run once, not twice), and scores them as equal."""
    runs = []
    run = session_mod.Session.run

    def counting(self, fetch, feed, **k):
        if k.get("where") != "two samples in one call":   # not the batch-axis check
            runs.append(next(iter(feed.values())).shape[0])
        return run(self, fetch, feed, **k)

    monkeypatch.setattr(session_mod.Session, "run", counting)
    x = RNG.normal(0, 1, (40, 3)).astype(np.float32)
    qm = qlinear.quantize(_argmax_model(), {"x": x}, dict(calibration_samples=8, evaluation_samples=32))
    runs.clear()
    rep = qm.report()
    assert sum(runs) == 32, runs  # 32 held-out samples, each run once (the "quantized" outputs are the same arrays)
    assert "y" in rep.outputs and rep.samples == 32
