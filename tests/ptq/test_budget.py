"""Mixed precision under a size budget (qlinear.ptq.algorithms.budget): the size fits, the choice follows sensitivity, refusals
come before any work."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import qlinear
from qlinear.cli.main import main
from qlinear.errors import ConfigError
from qlinear.examples import DATA, MODEL
from qlinear.ptq.algorithms.budget import fill

BASE = dict(calibration_samples=24, evaluation_samples=16)
BITS = {"int4": 4, "int8": 8}


def _size_fraction(qm) -> float:
    """The model's bytes from its encodings (weights at their width + float32 scales, zero points at the weight's
    width when not all zero), everything else at its float bytes, over the float model's initializer bytes."""
    es = {e.name: e for e in qm.encodings}
    total = base = 0.0
    for t in qm.encoded_model.graph.initializer:
        a = numpy_helper.to_array(t)
        base += a.nbytes
        e = es.get(t.name)
        if e is None or e.dtype not in BITS:
            total += a.nbytes
            continue
        k = np.size(e.scale)
        zp = k * BITS[e.dtype] / 8 if e.zero_point is not None and np.any(e.zero_point) else 0
        total += a.size * BITS[e.dtype] / 8 + 4 * k + zp
    return total / base


def _int4_noise(name: str, qm) -> float:
    """Relative output noise of the float model with only ``name`` rounded to symmetric per-channel int4 (numpy +
    ONNX Runtime, independent of qlinear)."""
    m = onnx.ModelProto()
    m.CopyFrom(qm.reference_model)
    init = next(t for t in m.graph.initializer if t.name == name)
    w = numpy_helper.to_array(init).astype(np.float64)
    amax = np.abs(w.reshape(w.shape[0], -1)).max(1).reshape((-1,) + (1,) * (w.ndim - 1))
    s = np.where(amax > 0, amax / 7, 1.0)
    init.CopyFrom(numpy_helper.from_array((np.clip(np.round(w / s), -8, 7) * s).astype(np.float32), name))
    x = np.load(DATA)["input"][18:24]
    f = ort.InferenceSession(qm.reference_model.SerializeToString()).run(None, {"input": x})[0].astype(np.float64)
    q = ort.InferenceSession(m.SerializeToString()).run(None, {"input": x})[0].astype(np.float64)
    return float(np.sum((f - q) ** 2) / np.sum(f ** 2))


@pytest.mark.parametrize("budget", [0.24, 0.3, 0.33])
def test_size_fits_and_some_weights_are_int4(budget):
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=budget))
    frac = _size_fraction(qm)
    assert frac <= budget
    dtypes = {e.name: e.dtype for e in qm.encodings if e.name in {s.name for s in qm.plan.weights}}
    assert "int4" in dtypes.values()
    assert {d["tensor"] for d in qm.decisions} == {t for t, d in dtypes.items() if d == "int4"}
    assert any(n.startswith(f"size_budget {budget:g}:") for n in qm.notes)
    # the model as written holds int4 weights and still runs with high agreement on the held-out samples
    kinds = {t.data_type for t in qm.model.graph.initializer}
    assert onnx.TensorProto.INT4 in kinds
    assert qm.report().outputs["logits"]["top1_agreement"] >= 0.8


def test_average_bits_fits():
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, average_bits=6))
    ws = {s.name for s in qm.plan.weights}
    sizes = {t.name: numpy_helper.to_array(t).size for t in qm.encoded_model.graph.initializer if t.name in ws}
    es = {e.name: e.dtype for e in qm.encodings}
    bits = sum(BITS[es[t]] * n for t, n in sizes.items()) / sum(sizes.values())
    assert 4 <= bits <= 6
    assert "int4" in es.values()


def test_choice_follows_sensitivity():
    """With room for one int4 weight, the report's sensitivity ranking agrees with an independent measurement, and
    the weight picked is the least harmful per byte saved among the weights whose int4 alone fits."""
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=0.3))
    ws = [s.name for s in qm.plan.weights]
    noise = {t: _int4_noise(t, qm) for t in ws}
    picked = [d["tensor"] for d in qm.decisions]
    assert len(picked) == 1
    ranked = sorted(ws, key=lambda t: noise[t])
    rank = int(qm.decisions[0]["reason"].split("(rank ")[1].split(" ")[0])
    assert ranked[rank - 1] == picked[0]
    # the others that would fit alone: the picked one adds least noise among them
    alone = []
    for t in ws:
        q2 = qlinear.quantize(MODEL, DATA, dict(BASE, overrides=[{"name": t, "type": "int4"}]))
        if _size_fraction(q2) <= 0.3:
            alone.append(t)
    assert picked[0] in alone
    assert noise[picked[0]] == min(noise[t] for t in alone) or len(alone) == 1


def test_fill_lowers_least_sensitive_then_raises_most_harmful_back():
    sizes = {"a": 10, "b": 10, "c": 50, "d": 10}  # bytes saved by int4
    fits = lambda a: sum(sizes[t] for t in a) >= 55  # noqa: E731
    noise = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.9}
    # a, b, c go to int4 (70 >= 55); back to int8, most harmful first: c is needed, b is not (60), then a is needed
    assert fill(["a", "b", "c", "d"], noise, fits) == {"a": "int4", "c": "int4"}
    assert fill(["d", "a"], noise, lambda a: True) == {}


@pytest.mark.parametrize("opts,msg", [
    (dict(size_budget=0.3, average_bits=6), "not both"),
    (dict(size_budget=0), "in (0, 1]"),
    (dict(size_budget=1.5), "in (0, 1]"),
    (dict(size_budget="small"), "in (0, 1]"),
    (dict(average_bits=3), "in [4, 8]"),
    (dict(size_budget=True), "in (0, 1]"),
    (dict(size_budget=0.3, activation_type="float"), "weight-only"),
    (dict(size_budget=0.3, target="tflite"), "tflite"),
    (dict(size_budget=0.3, weight_type="int4"), "leave weight_type int8"),
])
def test_refused_in_config(opts, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        qlinear.quantize(MODEL, DATA, dict(BASE, **opts))


def test_unreachable_budget_names_smallest_fraction_before_calibration(monkeypatch):
    import qlinear.ptq.pipeline as P

    def no_calibration(*a, **k):
        raise AssertionError("calibrated before refusing")

    monkeypatch.setattr(P, "_collect", no_calibration)
    with pytest.raises(ConfigError, match=r"size_budget: 0.1 is below .* \(0\.2\d+ of the float size\); raise "
                                          r"size_budget to at least 0\.2"):
        qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=0.1))


def test_cli_size_budget_report_curve(tmp_path):
    out = tmp_path / "o"
    assert main(["quantize", "-o", str(out), "--size-budget", "0.3"]) == 0
    rep = json.loads((out / "report.json").read_text())
    curve = rep["budget"]
    assert sum(c["chosen"] for c in curve) == 1
    chosen = next(c for c in curve if c["chosen"])
    assert chosen["within_budget"] and chosen["size_fraction"] <= 0.3
    assert any(c["candidate"] == "all int8" and not c["within_budget"] for c in curve)
    assert rep["config"]["size_budget"] == 0.3
    html = (out / "report.html").read_text()
    assert "Mixed precision: size against metric" in html and "<circle" in html


def test_weight_type_overrides_are_kept_and_counted():
    """A weight whose type an override sets is not moved; its bytes count at its width."""
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=0.35, overrides=[{"name": "pw.weight", "type": "int16"}]))
    es = {e.name: e.dtype for e in qm.encodings}
    assert es["pw.weight"] == "int16" and "pw.weight" not in {d["tensor"] for d in qm.decisions}
    BITS["int16"] = 16
    try:
        assert _size_fraction(qm) <= 0.35
    finally:
        del BITS["int16"]
    assert "int4" in es.values()


def test_accuracy_target_gives_the_smallest_model_meeting_it():
    easy = qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=0.35, accuracy_target="top1_agreement>=0.5"))
    assert _size_fraction(easy) < 0.24  # every weight int4 still meets it: the smallest model
    assert not any(n.startswith("WARNING") for n in easy.notes)
    hard = qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=0.35, accuracy_target="sqnr_db>=200"))
    assert _size_fraction(hard) <= 0.35
    assert any(n.startswith("WARNING: accuracy target sqnr_db>=200 not met") for n in hard.notes)
