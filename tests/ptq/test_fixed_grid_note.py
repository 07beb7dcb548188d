"""Target tflite: a Softmax/Sigmoid/Tanh output takes TFLite's fixed grid (1/256 for int8); when its calibration
outputs span only a few steps of it (a detector's Sigmoid that stays below 1e-3 on negatives rounds to 0), the
run says so and names the remedy, rather than writing an output that is silently constant."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import qlinear


def _model():
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["z"], transB=1),
                           helper.make_node("Sigmoid", ["z"], ["y"], name="score")], "det",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
                          [numpy_helper.from_array(np.full((1, 8), 0.1, np.float32), "w"),
                           numpy_helper.from_array(np.array([-9.0], np.float32), "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(target, act="int8"):
    x = np.random.default_rng(0).normal(0, 1, (24, 8)).astype(np.float32)
    return qlinear.quantize(_model(), {"x": x}, dict(calibration_samples=16, evaluation_samples=8, target=target,
                                                     activation_type=act))


def test_sigmoid_below_one_step_of_the_fixed_grid_is_named():
    notes = [n for n in _run("tflite").notes if "fixed output grid" in n]
    assert len(notes) == 1 and "Sigmoid 'score'" in notes[0] and "--activation-type int16" in notes[0]
    assert not [n for n in _run("ort", "uint8").notes if "fixed output grid" in n]
