"""An output that departs from float on the held-out samples (mean cosine below 0.9) is named in one note with the
options that repair it; nothing is said of outputs that agree, of sequences (their own note) or when a target was
asked for."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from tiny_models import make_model

import qlinear
from qlinear.errors import ConfigError
from qlinear.ptq.config import QuantizeConfig
from qlinear.ptq.report.evaluate import _departure_note


def cancelling() -> object:
    """``x [N, 8]`` -> MatMul -> ``h`` (about 1000 + small) -> ``h - 1000`` -> ``y`` (the small part: an 8-bit grid
    over ``h`` leaves it noise) and ``z = h`` (kept well)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "big"], ["h"]),
             helper.make_node("Sub", ["h", "big2"], ["y"]), helper.make_node("Identity", ["h"], ["z"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
                       helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4])],
                      {"W": rng.normal(0, 0.1, (8, 4)).astype(np.float32), "big": np.full(4, 1000, np.float32),
                       "big2": np.full(4, 1000, np.float32)})


def test_an_output_that_departs_is_named_with_the_remedy():
    x = np.random.default_rng(1).normal(0, 1, (48, 8)).astype(np.float32)
    qm = qlinear.quantize(cancelling(), {"x": x}, dict(calibration_samples=32, evaluation_samples=16))
    rep = qm.report()
    assert rep.outputs["y"]["cosine_mean"] < 0.9 and rep.kinds["z"] == "regression"   # four scores near 1000
    assert rep.outputs["z"]["sqnr_db"] > 30
    notes = [n for n in qm.notes if "depart from float" in n]
    assert len(notes) == 1 and "'y' (" in notes[0] and ", cosine 0." in notes[0] and "'z'" not in notes[0]
    assert "--accuracy-target sqnr_db>=15" in notes[0] and "--activation-type uint16" in notes[0]


def test_int4_weights_are_named_as_the_remedy():
    """With 4-bit weights the likelier cause is the weights (mtcnn's box output: 0.9 dB at int4, 18 dB at int8):
    the note names --weight-type int8, not 16-bit activations, which change nothing there."""
    cfg = QuantizeConfig(weight_type="int4")
    note = _departure_note({"a": "generic"}, {"a": {"cosine_mean": 0.5, "sqnr_db": 0.9}}, None, cfg)
    assert "--weight-type int8" in note and "uint16" not in note


def test_classifier_departs_by_its_agreement():
    """A classifier whose top class changes on more than 5 % of the held-out samples is named, though its cosine is
    high (ppocr-cls, --target qnn --weights lpbq: agreement 0.906, no note)."""
    good = {"top1_agreement": 0.99, "cosine_mean": 0.999}
    bad = {"top1_agreement": 0.906, "cosine_mean": 0.999, "sqnr_db": 20.0}
    assert _departure_note({"c": "classifier"}, {"c": good}, None) is None
    assert "'c' (top-1 agreement 0.906, cosine 1.00, SQNR 20.0 dB)" in _departure_note({"c": "classifier"},
                                                                                       {"c": bad}, None)


def test_regression_output_departs_by_its_sqnr():
    """A regression output has no cosine (a few positive scores always point the same way): it is named when its
    SQNR is below 15 dB."""
    assert _departure_note({"mos": "regression"}, {"mos": {"sqnr_db": 30.0}}, None) is None
    note = _departure_note({"mos": "regression"}, {"mos": {"sqnr_db": 9.5, "max_abs_error": 0.8}}, None)
    assert note is not None and "'mos' (SQNR 9.5 dB)" in note


def test_mixed_output_departs_by_its_worst_part():
    """A mixed output (box coordinates in pixels next to scores in [0, 1]) has the cosine of its wide part: it is
    named when its worst part's SQNR is below 15 dB (nudenet-320n, --target qnn --weights lpbq: scores 4.9 dB,
    cosine 0.999, detections 0.740 of float's, no note)."""
    good = {"cosine_mean": 0.999, "sqnr_db": 41.6, "sqnr_db_worst_part": 25.5}
    bad = {"cosine_mean": 0.999, "sqnr_db": 25.6, "sqnr_db_worst_part": 4.9}
    assert _departure_note({"o": "mixed"}, {"o": good}, None) is None
    note = _departure_note({"o": "mixed"}, {"o": bad}, None)
    assert note is not None and "'o' (cosine 1.00, SQNR 25.6 dB, worst part 4.9 dB)" in note


def test_no_note_for_agreeing_outputs_sequences_or_a_target():
    good = {"cosine_mean": 0.99, "sqnr_db": 20.0}
    bad = {"cosine_mean": 0.5, "sqnr_db": 1.0}
    assert _departure_note({"a": "generic"}, {"a": good}, None) is None
    assert _departure_note({"a": "sequence"}, {"a": bad}, None) is None
    assert _departure_note({"a": "generic"}, {"a": bad}, "sqnr_db>=15") is None
    assert "1 output(s)" in _departure_note({"a": "generic", "b": "generic"}, {"a": bad, "b": good}, None)


def test_the_remedy_follows_the_deployment_target():
    """target tflite refuses precision repair (one activation type per model): its note names 16x8 instead, and
    nothing more once activations are 16-bit; ort and qnn keep naming the repair."""
    bad = {"cosine_mean": 0.5, "sqnr_db": 1.0}
    ort = _departure_note({"a": "generic"}, {"a": bad}, None, QuantizeConfig())
    assert "--accuracy-target sqnr_db>=15 raises" in ort and "--activation-type uint16" in ort
    tfl = _departure_note({"a": "generic"}, {"a": bad}, None, QuantizeConfig(target="tflite"))
    assert "--activation-type int16" in tfl and "16x8" in tfl and "needs target ort or qnn" in tfl
    assert "uint16" not in tfl and "raises the precision" not in tfl
    t16 = _departure_note({"a": "generic"}, {"a": bad}, None,
                          QuantizeConfig(target="tflite", activation_type="int16"))
    assert "already 16-bit" in t16 and "--activation-type" not in t16
    with pytest.raises(ConfigError, match="not available with target tflite"):
        QuantizeConfig(target="tflite", accuracy_target="sqnr_db>=15")


def test_sixteen_bit_activations_are_not_suggested_again():
    """dnsmos with --target qnn --activation-type uint16 (its log spectrum on a 16-bit grid: SQNR 6.7 dB) was told
    "--activation-type uint16 keeps every activation at 16 bits": the repair alone is named then."""
    bad = {"cosine_mean": 0.5, "sqnr_db": 1.0}
    for t in ("uint16", "int16"):
        note = _departure_note({"a": "generic"}, {"a": bad}, None, QuantizeConfig(target="qnn", activation_type=t))
        assert "--accuracy-target sqnr_db>=15 raises" in note and "--activation-type" not in note


def test_lpbq_is_told_options_it_accepts():
    """ppocr-cls --target qnn --weights lpbq (top-1 agreement 0.938) was told "--weight-type int8 keeps every weight
    at 8 bits", which the run then refuses (LPBQ is 4-bit blocks): the note names per-channel int8 weights at the
    activation type LPBQ chose, and those options settle."""
    from qlinear.ptq.settle import settle

    bad = {"top1_agreement": 0.9, "cosine_mean": 0.95}
    cfg, _ = settle(QuantizeConfig(target="qnn", weights="lpbq"))
    note = _departure_note({"c": "classifier"}, {"c": bad}, None, cfg)
    assert "--weights per-channel --weight-type int8 --activation-type uint16 keeps every weight at 8 bits" in note
    with pytest.raises(ConfigError, match="with weights lpbq"):
        settle(QuantizeConfig(target="qnn", weights="lpbq", weight_type="int8"))
    told, _ = settle(QuantizeConfig(target="qnn", weights="per-channel", weight_type="int8",
                                    activation_type="uint16"))
    assert (told.weight_type, told.activation_type) == ("int8", "uint16")
