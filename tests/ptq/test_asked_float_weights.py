"""A weight the configuration leaves float is named: an excluded Conv/Gemm/MatMul node (``exclude_nodes``,
``exclude_op_types``) or an override of type float took its weight out of the plan without a word (ppocr-cls with
``exclude_op_types: ["MatMul"]``: ``fc_0.w_0`` written float, no note; with an override ``{"name":
"conv2_expand_weights", "type": "float"}``: the same), while a weight left float for want of a kernel was named."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import qlinear

RNG = np.random.default_rng(0)


def _three_layers() -> onnx.ModelProto:
    inits = [numpy_helper.from_array(RNG.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(RNG.normal(0, 0.2, (8, 8, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(RNG.normal(0, 0.2, (8, 5)).astype(np.float32), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w3"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _float_weights(qm) -> set[str]:
    dq = {n.output[0] for n in qm.model.graph.node if n.op_type == "DequantizeLinear"}
    return {t.name for t in qm.model.graph.initializer if t.name in ("w1", "w2", "w3") and t.name not in dq}


def _run(**kw):
    x = RNG.normal(0, 1, (16, 4, 6, 6)).astype(np.float32)
    return qlinear.quantize(_three_layers(), {"x": x}, dict(calibration_samples=16, evaluation_samples=0, **kw))


def test_excluded_layers_weights_are_named():
    qm = _run(exclude_op_types=["MatMul"], exclude_nodes=["conv1"])
    assert _float_weights(qm) == {"w1", "w3"}
    note = [n for n in qm.notes if "left float as the configuration asks" in n]
    assert len(note) == 1 and note[0].startswith("2 weight(s)"), qm.notes
    assert "w1 (Conv conv1 excluded)" in note[0] and "w3 (MatMul fc excluded)" in note[0] and "w2" not in note[0]


def test_a_weight_an_override_leaves_float_is_named():
    qm = _run(overrides=[{"name": "w2", "type": "float"}])
    assert _float_weights(qm) == {"w2"}
    assert any("1 weight(s) left float as the configuration asks" in n and "w2 (left in float by an override)" in n
               for n in qm.notes), qm.notes


def test_nothing_said_when_every_weight_is_quantized():
    qm = _run()
    assert not _float_weights(qm)
    assert not any("left float as the configuration asks" in n for n in qm.notes)


def test_a_constant_first_operand_of_a_matmul_is_named():
    # W @ x: the plan quantizes a MatMul's second operand as its weight; a constant first one stayed float unnamed
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(16, 8)).astype(np.float32), "W")
    v = numpy_helper.from_array(rng.normal(size=(8, 4)).astype(np.float32), "V")
    nodes = [helper.make_node("MatMul", ["W", "x"], ["y"], name="mm_left"),
             helper.make_node("MatMul", ["y", "V"], ["z"], name="mm_right")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 16, 4])], [w, v])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    qm = qlinear.quantize(m, {"x": rng.normal(size=(16, 8, 8)).astype(np.float32)},
                          dict(calibration_samples=8, evaluation_samples=8))
    assert [s.name for s in qm.plan.weights] == ["V"]
    said = [n for n in qm.notes if "first operand" in n]
    assert said and said[0].startswith("1 constant first operand(s) of a layer stay float") \
        and said[0].endswith("W (MatMul mm_left)"), qm.notes


def test_a_layer_whose_input_stays_float_is_named_on_target_qnn():
    # magika's first Dense multiplies a one-hot of the input bytes (Cast of integers: not on any grid) by its int8
    # weight; target qnn, which quantizes every tensor, said nothing (the qnn audit)
    rng = np.random.default_rng(2)
    w1 = numpy_helper.from_array(rng.normal(size=(4, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(size=(4, 3)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["y1"], name="dense_x"),
             helper.make_node("Cast", ["ids"], ["idf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("MatMul", ["idf", "w2"], ["y2"], name="dense_ids")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                                       helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])],
                          [helper.make_tensor_value_info("y1", TensorProto.FLOAT, ["N", 3]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["N", 3])], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = {"x": rng.normal(size=(16, 4)).astype(np.float32), "ids": rng.integers(0, 2, (16, 4)).astype(np.int64)}
    qm = qlinear.quantize(m, data, dict(calibration_samples=8, evaluation_samples=0, target="qnn"))
    said = [n for n in qm.notes if "take a float input beside their quantized weight" in n]
    assert len(said) == 1 and said[0].startswith("1 layer(s)") and "dense_ids (MatMul, input idf" in said[0], qm.notes
    assert {s.name for s in qm.plan.weights} == {"w1", "w2"}
    ort_run = qlinear.quantize(m, data, dict(calibration_samples=8, evaluation_samples=0))
    assert not [n for n in ort_run.notes if "take a float input" in n]
