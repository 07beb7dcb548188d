"""Mixed precision under a size budget (qlinear.ptq.algorithms.budget): the written file fits, the choice follows
sensitivity, refusals come before any work. The bundled example (5 kB of weights) is smaller than the Q/DQ graph
around them; these tests use the same network 12 times wider (183 kB of weights, :func:`_wide`)."""

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
from qlinear.examples import DATA
from qlinear.examples.make_example import build
from qlinear.ptq.algorithms.budget import fill, swap

BASE = dict(calibration_samples=24, evaluation_samples=16)
BITS = {"int4": 4, "int8": 8}


def _wide(c: int = 192) -> onnx.ModelProto:
    """The bundled example network (qlinear/examples/make_example.py) with ``c`` channels instead of 16."""
    return build(channels=c)[0]


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    p = tmp_path_factory.mktemp("wide") / "wide_cnn.onnx"
    onnx.save(_wide(), p)
    return p


MODEL = None  # set by the autouse fixture below: the wide model's path


@pytest.fixture(autouse=True)
def _model(wide, monkeypatch):
    monkeypatch.setitem(globals(), "MODEL", wide)


def _size_fraction(qm) -> float:
    """The written Q/DQ file's bytes over the float model file's bytes (the files themselves, not a count)."""
    return len(qm.model.SerializeToString()) / MODEL.stat().st_size


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
    # its note's fraction is of the float model's file as given, as size_budget's is (not of the folded model)
    note = next(n for n in qm.notes if n.startswith("average_bits 6:"))
    assert f"of the float model's {MODEL.stat().st_size}," in note, note


def test_choice_follows_sensitivity():
    """With room for one int4 weight, the report's sensitivity ranking agrees with an independent measurement, and
    the weight picked is the least harmful per byte saved among the weights whose int4 alone fits."""
    all8 = _size_fraction(qlinear.quantize(MODEL, DATA, BASE))
    budget = round(all8 - 0.01, 4)  # int4 saves 0.014 on stem, 0.098 on pw, 0.005 on dw and fc
    # min-max weights, as the independent measurement rounds them (a budget's default is SQNR search)
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=budget, weight_method="minmax"))
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
        if _size_fraction(q2) <= budget:
            alone.append(t)
    assert picked[0] in alone and len(alone) > 1
    assert noise[picked[0]] == min(noise[t] for t in alone) or len(alone) == 1


def test_fill_lowers_least_sensitive_then_raises_most_harmful_back():
    sizes = {"a": 10, "b": 10, "c": 50, "d": 10}  # bytes saved by int4
    fits = lambda a: sum(sizes[t] for t in a) >= 55  # noqa: E731
    noise = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.9}
    # a, b, c go to int4 (70 >= 55); back to int8, most harmful first: c is needed, b is not (60), then a is needed
    assert fill(["a", "b", "c", "d"], noise, fits) == {"a": "int4", "c": "int4"}
    assert fill(["d", "a"], noise, lambda a: True) == {}


def test_swap_trades_one_int4_weight_for_others_that_add_less_noise():
    saved = {"a": 100, "b": 70, "c": 40, "d": 10}
    noise = {"a": 0.5, "b": 0.28, "c": 0.21, "d": 0.01}
    fits = lambda a: sum(saved[t] for t in a) >= 100  # noqa: E731
    order = sorted(saved, key=lambda t: noise[t] / saved[t])  # d, b, a, c
    greedy = fill(order, noise, fits)
    assert greedy == {"a": "int4"}  # d, b, a; then b and d back (a alone fits): noise 0.5
    assert swap(greedy, order, noise, fits) == {"b": "int4", "c": "int4"}  # noise 0.49, still fits
    assert swap({"b": "int4", "c": "int4"}, order, noise, fits) == {"b": "int4", "c": "int4"}  # nothing better


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

    # the all-int4 file with the budget's default weight method (SQNR search)
    every_int4 = _size_fraction(qlinear.quantize(MODEL, DATA, dict(BASE, weight_type="int4", weight_method="sqnr")))
    real = P._collect

    def no_calibration(*a, **k):
        raise AssertionError("calibrated before refusing")

    monkeypatch.setattr(P, "_collect", no_calibration)
    with pytest.raises(ConfigError, match=r"size_budget: 0.1 is below .* \(at least (0\.\d+) of the float model's "
                                          r"file, counted before calibration\); raise size_budget to at least") as ex:
        qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=0.1))
    bound = float(str(ex.value).split("(at least ")[1].split(" ")[0])
    assert 0.1 < bound <= every_int4  # a lower bound of the written all-int4 file
    # between the bound and the file: refused after calibration, naming the written all-int4 file's fraction
    monkeypatch.setattr(P, "_collect", real)
    with pytest.raises(ConfigError, match=r"\((0\.\d+) of the float model's file\); raise size_budget") as ex:
        qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=round((bound + every_int4) / 2, 3)))
    named = float(str(ex.value).split("(")[-1].split(" ")[0])
    assert abs(named - every_int4) < 0.002, (named, every_int4)


def test_cli_size_budget_report_curve(tmp_path):
    out = tmp_path / "o"
    assert main(["quantize", str(MODEL), "--data", str(DATA), "-o", str(out), "--size-budget", "0.3"]) == 0
    rep = json.loads((out / "report.json").read_text())
    curve = rep["budget"]
    assert sum(c["chosen"] for c in curve) == 1
    chosen = next(c for c in curve if c["chosen"])
    assert chosen["within_budget"] and chosen["size_fraction"] <= 0.3
    assert chosen["size_fraction"] == (out / "model.qdq.onnx").stat().st_size / MODEL.stat().st_size  # the file
    assert (chosen["file_bytes"], chosen["float_bytes"]) == ((out / "model.qdq.onnx").stat().st_size,
                                                             MODEL.stat().st_size)
    assert any(c["candidate"] == "all int8" and not c["within_budget"] for c in curve)
    assert rep["config"]["size_budget"] == 0.3
    html = (out / "report.html").read_text()
    assert "Mixed precision: size against metric" in html and "<circle" in html


def test_weight_type_overrides_are_kept_and_counted():
    """A weight whose type an override sets is not moved; its bytes count at its width."""
    over = dict(BASE, overrides=[{"name": "pw.weight", "type": "int16"}])
    budget = round(_size_fraction(qlinear.quantize(MODEL, DATA, over)) - 0.01, 4)  # below all int8 but pw
    qm = qlinear.quantize(MODEL, DATA, dict(over, size_budget=budget))
    es = {e.name: e.dtype for e in qm.encodings}
    assert es["pw.weight"] == "int16" and "pw.weight" not in {d["tensor"] for d in qm.decisions}
    assert _size_fraction(qm) <= budget
    assert "int4" in es.values()


def test_accuracy_target_gives_the_smallest_model_meeting_it():
    easy = qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=0.35, accuracy_target="top1_agreement>=0.5"))
    assert _size_fraction(easy) < 0.24  # every weight int4 still meets it: the smallest model
    assert not any(n.startswith("WARNING") for n in easy.notes)
    hard = qlinear.quantize(MODEL, DATA, dict(BASE, size_budget=0.35, accuracy_target="sqnr_db>=200"))
    assert _size_fraction(hard) <= 0.35
    assert any(n.startswith("WARNING: accuracy target sqnr_db>=200 not met") for n in hard.notes)
