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
