"""int2 weights are written on the exact int4 grid (ONNX Runtime has no 2-bit DequantizeLinear): the run says so.
ppocr-cls --weight-type int2 printed "int2 weights" and report.json's weights said int2, while every weight
DequantizeLinear in model.qdq.onnx read int4 (267937 bytes, the int4 run's 264815), with no note."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.ptq.config import QuantizeConfig
from qlinear.ptq.settle import settle


def test_the_note_names_the_storage():
    _, notes = settle(QuantizeConfig(weight_type="int2"))
    assert any("weight_type int2" in n and "exact int4 grid" in n for n in notes), notes
    _, notes = settle(QuantizeConfig(weight_type="int4"))
    assert not any("exact int4 grid" in n for n in notes)


def test_the_written_weight_is_int4_and_the_note_is_kept():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 6, 6])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.normal(0, 1, (16, 4, 6, 6)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(weight_type="int2", calibration_samples=16, evaluation_samples=0))
    stored = {t.name: t.data_type for t in qm.model.graph.initializer}
    dq = [n for n in qm.model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "w"]
    assert dq and stored[dq[0].input[0]] == TensorProto.INT4
    assert any("exact int4 grid" in n for n in qm.notes), qm.notes


def test_an_override_to_int2_gets_the_note_naming_its_weights():
    # weight_type int2 said so, but an override giving one layer int2 wrote int4 with no word
    rng = np.random.default_rng(1)
    ws = [numpy_helper.from_array(rng.normal(0, 0.2, (4, 4, 3, 3)).astype(np.float32), f"w{i}") for i in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h"], name="c0", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["h", "w1"], ["y"], name="c1", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 6, 6])], ws)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.normal(0, 1, (16, 4, 6, 6)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(overrides=[{"name": "w1", "type": "int2"}], calibration_samples=16,
                                            evaluation_samples=0))
    said = [n for n in qm.notes if "exact int4 grid" in n]
    assert len(said) == 1 and said[0].startswith("overrides give 1 weight(s) int2 ('w1')"), qm.notes
    stored = {t.name: t.data_type for t in qm.model.graph.initializer}
    dq = {n.output[0]: n.input[0] for n in qm.model.graph.node if n.op_type == "DequantizeLinear"}
    assert stored[dq["w1"]] == TensorProto.INT4 and stored[dq["w0"]] == TensorProto.INT8
    qm = qlinear.quantize(m, {"x": x}, dict(overrides=[{"name": "w1", "type": "int4"}], calibration_samples=16,
                                            evaluation_samples=0))
    assert not [n for n in qm.notes if "exact int4 grid" in n]
