"""Per-tensor overrides and automatic precision repair (qlinear.ptq.overrides, qlinear.ptq.algorithms.repair)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import qlinear
from qlinear import encodings as E
from qlinear import graph as G
from qlinear.cli.main import main
from qlinear.errors import ConfigError
from qlinear.examples import DATA, MODEL
from qlinear.ptq.algorithms.repair import Candidate, Target, ladder, repair

BASE = dict(calibration_samples=24, evaluation_samples=16)


def test_overrides_by_name_op_type_role_and_float():
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, weight_type="int4", overrides=[
        {"name": "fc.weight", "type": "int8"},                          # by tensor name
        {"op_type": "Relu", "type": "uint16"},                          # by producer op type (activation)
        {"name": "dw", "role": "weight", "granularity": "per-tensor"},  # by node name, weights only
        {"name": "pw.weight", "type": "float"},                         # left in float
    ]))
    es = qm.encodings
    assert es["fc.weight"].dtype == "int8" and es["stem.weight"].dtype == "int4"
    assert es["relu_out"].dtype == "uint16" and es["relu6_out"].dtype == "uint8"
    assert es["dw.weight"].granularity == "per_tensor" and es["dw.weight"].dtype == "int4"
    assert "pw.weight" not in es.names() and "pw.bias" not in es.names()
    assert qm.plan.skipped["pw.weight"] == "left in float by an override"
    assert G.validate(es, qm.model).ok
    assert qm.report().outputs["logits"]["top1_agreement"] >= 0.9


def test_override_naming_a_tensor_that_reuses_an_encoding_applies_to_its_group():
    """``flat_out`` (Flatten of ``gap_out``) holds ``gap_out``'s values and reuses its encoding: a rule naming it
    was silently ignored (PP-OCRv4 rec's CTC head input, behind Squeeze and Transpose). It now applies to the group,
    with a note; a rule matching nothing is named in a note."""
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, overrides=[{"name": "flat_out", "type": "uint16"},
                                                             {"name": "no_such_tensor", "type": "float"}]))
    es = qm.encodings
    assert es["gap_out"].dtype == "uint16" and es["relu_out"].dtype == "uint8"
    assert any("naming 'flat_out' apply to 'gap_out'" in n for n in qm.notes)
    assert any("overrides[1] {name: 'no_such_tensor', type: 'float'} matches no tensor" in n for n in qm.notes)
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, overrides=[{"name": "flat_out", "role": "activation",
                                                              "type": "float"}]))
    dq_in = {n.input[0] for n in qm.model.graph.node if n.op_type == "QuantizeLinear"}
    assert not dq_in & {"gap_out", "flat_out"} and "relu_out" in dq_in
    assert qm.plan.skipped["gap_out"] == "left in float by an override"


def test_exclude_nodes_must_name_nodes_of_the_model():
    """A misspelt ``exclude_nodes`` name excluded nothing without a word; it is now refused before calibration with
    the closest names (also weight-only), and an operator type the model lacks is a note."""
    for extra in ({}, {"activation_type": "float", "weight_type": "int4"}):
        with pytest.raises(ConfigError, match="has no node named 'relu6x' \\(close: 'relu6'"):
            qlinear.quantize(MODEL, DATA, dict(BASE, exclude_nodes=["relu6x"], **extra))
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, exclude_nodes=["relu6"], exclude_op_types=["LSTM", "Gemm"]))
    assert any(n.endswith("has no LSTM node") for n in qm.notes)
    assert "relu6_out" not in qm.plan.activations and "fc.weight" not in qm.encodings.names()


def test_exclude_op_types_that_no_onnx_operator_spells_is_refused():
    """A misspelt operator type ('gemm') excluded nothing and only got the note a real absent type gets; it is now
    refused before calibration with the closest types (also weight-only)."""
    for extra in ({}, {"activation_type": "float", "weight_type": "int4"}):
        with pytest.raises(ConfigError, match="exclude_op_types: 'gemm' is no ONNX operator type .* \\(close: 'Gemm'"):
            qlinear.quantize(MODEL, DATA, dict(BASE, exclude_op_types=["gemm"], **extra))


@pytest.mark.parametrize("rules,msg", [
    ("Conv", "expected a list of rules"),
    ([{"type": "int8"}], "give \"name\""),
    ([{"name": "x", "type": "int3"}], "is not one of float"),
    ([{"name": "x", "role": "bias", "type": "int8"}], "role: 'bias'"),
    ([{"name": "x"}], "sets nothing"),
    ([{"name": "x", "type": "int8", "colour": 1}], "unknown key"),
    ([{"name": "x", "role": "activation", "method": "seqmse"}], "not a calibration method for activations"),
    ([{"name": "x", "granularity": "per-row"}], "granularity"),
])
def test_bad_overrides_are_config_errors(rules, msg):
    with pytest.raises(ConfigError, match=msg):
        qlinear.QuantizeConfig(overrides=rules)


def test_overrides_and_repair_refused_for_tflite():
    with pytest.raises(ConfigError, match="target tflite"):
        qlinear.QuantizeConfig(target="tflite", overrides=[{"name": "x", "type": "int8"}])
    with pytest.raises(ConfigError, match="target tflite"):
        qlinear.QuantizeConfig(target="tflite", accuracy_target="sqnr_db>=20")


@pytest.mark.parametrize("text,ok", [("top1_agreement>=0.99", True), ("sqnr_db >= 25", True), ("cosine_min=0.9", True),
                                     ("accuracy>=0.9", False), ("top1_agreement>=99", False), ("sqnr_db>x", False),
                                     (3, False)])
def test_target_parsing(text, ok):
    if ok:
        t = Target.parse(text)
        assert str(t).startswith(t.metric)
    else:
        with pytest.raises(ConfigError, match="accuracy_target"):
            Target.parse(text)


def test_ladder():
    assert ladder("weight", "int4", allow_float=False) == "int8"
    assert ladder("weight", "int8", allow_float=False) == "int16"
    assert ladder("weight", "int16", allow_float=True) == "float"
    assert ladder("weight", "int16", allow_float=False) is None
    assert ladder("activation", "uint8", allow_float=False) == "uint16"
    assert ladder("activation", "uint8", allow_float=True) == "float"   # target ort: no 16-bit kernels there
    assert ladder("activation", "float8e4m3fn", allow_float=True) == "float"


def test_search_finds_the_smallest_prefix():
    """A fake model whose metric is the number of raised candidates: the search returns exactly the prefix that
    meets the target, with few evaluations (doubling then bisection)."""
    cands = [Candidate(f"t{i}", "weight", "int4", "int8", float(i)) for i in range(40)]
    calls = []

    def measure(raised):
        calls.append(len(raised))
        return {"y": {"sqnr_db": float(len(raised))}}

    res = repair(Target("sqnr_db", 13), cands, measure)
    assert res.met and res.value == 13 and list(res.raised) == [f"t{i}" for i in range(13)]
    assert len(calls) <= 2 * 6 + 1 and len(res.decisions) == 13
    assert res.decisions[-1]["metric"] == 13 and "rank 13" in res.decisions[-1]["reason"]
    res = repair(Target("sqnr_db", 100), cands, measure)  # unreachable: everything raised, flagged
    assert not res.met and len(res.raised) == 40
    res = repair(Target("sqnr_db", -1), cands, measure)  # already met: nothing changes
    assert res.met and not res.raised and not res.decisions


def test_repair_in_the_pipeline_meets_the_target_and_records_decisions(tmp_path):
    base = qlinear.quantize(MODEL, DATA, dict(BASE, weight_type="int4"))
    before = base.report().outputs["logits"]["sqnr_db"]
    qm = qlinear.quantize(MODEL, DATA, dict(BASE, weight_type="int4", accuracy_target="sqnr_db>=40"))
    assert qm.decisions and all(d["change"].startswith(("weight", "activation")) for d in qm.decisions)
    raised = [d["tensor"] for d in qm.decisions]
    assert all(qm.encodings[t].qtype.bits > base.encodings[t].qtype.bits for t in raised)
    assert qm.report().outputs["logits"]["sqnr_db"] > before + 5
    # the repaired weights are quantized from the float weights again, and everything is consistent
    assert G.validate(qm.encodings, qm.model).ok
    again = G.apply(qm.encodings, qm.encoded_model)
    assert {t.name for t in again.graph.initializer} == {t.name for t in qm.model.graph.initializer}
    qm.save(tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [d["tensor"] for d in doc["decisions"]] == raised
    assert "Precision decisions" in (tmp_path / "out" / "report.html").read_text()
    assert any("precision repair" in n for n in qm.notes)


def test_cli_accuracy_target_and_exit_status(tmp_path, capsys):
    rc = main(["quantize", "--weight-type", "int4", "--accuracy-target", "sqnr_db>=35", "-o", str(tmp_path / "a")])
    out = capsys.readouterr().out
    assert rc == 0 and "->" in out  # the decisions are listed
    rc = main(["quantize", "--weight-type", "int4", "--accuracy-target", "sqnr_db>=200", "-o", str(tmp_path / "b")])
    assert rc == 1 and (tmp_path / "b" / "model.qdq.onnx").exists()  # written, but the target is not reached
    assert "not met" in capsys.readouterr().out
    rc = main(["quantize", "--accuracy-target", "speed>=2", "-o", str(tmp_path / "c")])
    assert rc == 3 and "METRIC>=VALUE" in capsys.readouterr().err


def test_weight_methods_from_the_cli(tmp_path, capsys):
    rc = main(["quantize", "--weight-type", "int4", "--weight-method", "seqmse", "-o", str(tmp_path / "o")])
    assert rc == 0
    assert "SeqMSE" in capsys.readouterr().out
    es = E.load(tmp_path / "o" / "model.encodings")
    assert np.all(np.asarray(es["pw.weight"].scale) > 0)


def test_accuracy_target_on_sequences_of_several_lengths(tmp_path):
    """A tagger fed words padded per batch (slovorez): the repair's metrics on samples of several lengths had only
    cosine and SQNR, so the target its own note names (sequence_agreement) was refused; now they are the output's
    kind's."""
    from onnx import TensorProto, helper
    from tiny_models import make_model

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["z"]), helper.make_node("Softmax", ["z"], ["p"], axis=-1)]
    m = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 8])],
                   [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", "T", 5])],
                   {"W": rng.normal(0, 1, (8, 5)).astype(np.float32)})
    for i, t in enumerate((4, 6, 5, 7) * 6):   # one file per sample, its own length
        np.savez(tmp_path / f"{i:04d}.npz", x=rng.normal(0, 1, (1, t, 8)).astype(np.float32))
    qm = qlinear.quantize(m, tmp_path, dict(calibration_samples=16, evaluation_samples=8,
                                            accuracy_target="sequence_agreement>=0.9"))
    assert any(n.startswith("precision repair (sequence_agreement>=0.9") for n in qm.notes), qm.notes
    assert any(n.startswith("the repair's ") and "judged samples agreeing bound" in n and "above 0.9:" in n
               for n in qm.notes), qm.notes   # 8 judged samples cannot promise 0.9


def test_agreement_bounds_of_few_judged_samples():
    """All of n judged samples agreeing bound the agreement on new samples only above 0.05 ** (1 / n) (95 %
    one-sided, Clopper-Pearson): 8 of 8 above 0.69, so a repair that meets ctc_agreement 1.0 on them promises little
    (ppocr-v4-rec, 16 calibration lines: 1.0 on its 8, 0.906 on 192 held-out lines)."""
    from qlinear.ptq.report.metrics import agreement_bound, samples_for
    assert agreement_bound(8, 8) == pytest.approx(0.6877, abs=1e-4)
    assert agreement_bound(7, 8) == pytest.approx(0.5293, abs=1e-4)   # the Clopper-Pearson table's value
    assert agreement_bound(0, 8) == 0.0 and agreement_bound(5, 0) == 0.0
    assert samples_for(0.95) == 59 and agreement_bound(59, 59) >= 0.95 > agreement_bound(58, 58)
    assert samples_for(0.9) == 29


def test_repair_says_when_its_judged_samples_are_too_few():
    from qlinear.ptq.algorithms.repair import _few_samples_note
    note = _few_samples_note(Target("ctc_agreement", 1.0), 1.0, 8, True, 64)
    assert len(note) == 1 and "8 of 8" in note[0] and "above 0.69" in note[0] and "--calibration-samples 118" in note[0]
    assert "repair_samples 59" in _few_samples_note(Target("ctc_agreement", 1.0), 1.0, 8, True, 32)[0]
    assert "above 0.9:" in _few_samples_note(Target("top1_agreement", 0.9), 1.0, 16, True, 64)[0]
    assert _few_samples_note(Target("ctc_agreement", 1.0), 1.0, 64, True, 64) == []   # 64 agreeing: above 0.95
    assert _few_samples_note(Target("sqnr_db", 30), 31.0, 8, True, 64) == []
    assert _few_samples_note(Target("top1_agreement", 1.0), 1.0, 8, False, 64) == []  # positions, not samples


def test_the_sequence_note_names_the_calibration_samples_the_repair_needs():
    from qlinear.ptq.config import QuantizeConfig
    from qlinear.ptq.report.evaluate import _kind_note
    r = {"sequence_agreement": 0.5, "ctc_agreement": 0.8}
    note = _kind_note("p", "sequence", r, None, QuantizeConfig(calibration_samples=16))
    assert "16 calibration samples hold 8 back" in note and "--calibration-samples 118 bound it above 0.95" in note
    assert "hold" not in _kind_note("p", "sequence", r, None, QuantizeConfig(calibration_samples=128))
    few = _kind_note("p", "sequence", r, None, QuantizeConfig(calibration_samples=200, repair_samples=32))
    assert "--calibration-samples 200 with repair_samples 59 in --config" in few
    assert "hold" not in _kind_note("p", "sequence", r, None, QuantizeConfig(calibration_samples=16, target="tflite"))


def test_repair_on_target_ort_leaves_a_layer_it_floats_with_its_float_weight():
    """When the repair leaves float every activation a layer reads (target ort: no 16-bit kernels there), ONNX
    Runtime computes that layer in float: its weight keeps its float values and its bias the float model's (as the
    plan's own float-input layers do), the repair judges the candidates so, and a note names the weights. Before, the
    int8 values were written as float, with the bias corrected for them."""
    from onnx import numpy_helper

    qm = qlinear.quantize(MODEL, DATA, dict(BASE, accuracy_target="sqnr_db>=45"))
    raised = {d["tensor"] for d in qm.decisions if d["change"].endswith("-> float")}
    assert {"relu_out", "relu6_out"} <= raised, qm.decisions   # dw reads relu_out, pw reads relu6_out
    note, = [n for n in qm.notes if "the repair left float are all their layers read" in n]
    assert "dw.weight" in note and "pw.weight" in note
    written = {t.name: numpy_helper.to_array(t) for t in qm.model.graph.initializer}
    ref = {t.name: numpy_helper.to_array(t) for t in qm.reference_model.graph.initializer}
    for w in ("dw.weight", "pw.weight"):
        assert w not in qm.encodings.names() and np.array_equal(written[w], ref[w])
    assert np.array_equal(written["pw.bias"], ref["pw.bias"])   # not corrected for an int8 rounding it lacks
    assert "stem.weight" in qm.encodings.names()   # its layer reads the quantized input
