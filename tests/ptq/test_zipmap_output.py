"""A classifier with a ``ZipMap`` output (skl2onnx's and onnxmltools' default: a sequence of maps, luscinia's
LightGBM model): ``onnx_ir`` cannot read map types and ONNX Runtime gives the output as a list of dicts. Quantizing
crashed in ``onnx_ir`` (``Map types are not supported yet``) and, past that, in the report and in ``qlinear debug``."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.graph.ir import to_ir, to_proto
from qlinear.ptq.report.debug import compare_models


def _zipmap_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 1, (4, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["l"]), helper.make_node("Softmax", ["l"], ["p"], axis=1),
             helper.make_node("ArgMax", ["p"], ["label"], axis=1, keepdims=0),
             helper.make_node("ZipMap", ["p"], ["probs"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2])]
    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
                           helper.make_value_info("probs", seq)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])


X = np.random.default_rng(1).normal(0, 1, (48, 4)).astype(np.float32)


def test_ir_round_trip_keeps_the_map_type_and_leaves_the_proto_alone():
    m = _zipmap_model()
    before = m.SerializeToString()
    back = to_proto(to_ir(m))
    assert m.SerializeToString() == before
    assert back.graph.output[1].type == m.graph.output[1].type


@pytest.mark.parametrize("extra", [{}, {"activation_type": "float"}, {"accuracy_target": "cosine_mean>=0.9"}])
def test_quantize_keeps_the_zipmap_output_and_names_it_unscored(tmp_path, extra):
    qm = qlinear.quantize(_zipmap_model(), {"x": X}, dict(calibration_samples=32, evaluation_samples=16, **extra))
    qm.save(tmp_path)
    out = onnx.load(tmp_path / "model.qdq.onnx")
    assert out.graph.output[1].type.WhichOneof("value") == "sequence_type"
    label, probs = ort.InferenceSession(str(tmp_path / "model.qdq.onnx")).run(None, {"x": X[40:41]})
    assert isinstance(probs[0], dict) and sorted(probs[0]) == [0, 1, 2]
    if "activation_type" not in extra:
        assert any("probs (sequence)" in n for n in qm.notes), qm.notes


def test_debug_leaves_the_zipmap_output_out(tmp_path):
    qlinear.quantize(_zipmap_model(), {"x": X}, dict(calibration_samples=32, evaluation_samples=16)).save(
        tmp_path, report=False)
    res = compare_models(_zipmap_model(), tmp_path / "model.qdq.onnx", {"x": X}, samples=8)
    assert "probs (not a tensor)" in res.unmatched
    assert {d.tensor for d in res.tensors} >= {"l", "p"}


def test_bias_correction_without_weights_does_not_read_the_model(monkeypatch):
    """luscinia (a 194 MB tree ensemble, nothing to quantize): bias correction built the model's IR (10 s) to correct
    no bias."""
    from qlinear.graph.plan import Plan
    from qlinear.ptq.algorithms import bias

    def boom(m):
        raise AssertionError("to_ir called")

    monkeypatch.setattr(bias, "to_ir", boom)
    assert bias.correct_biases(_zipmap_model(), Plan(), {}, {}) == 0
