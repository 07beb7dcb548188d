"""On target ort a Max/Min against a constant (the per-channel clip cross-layer equalization writes for a ReLU6) is
not fused into the layer before it: ONNX Runtime fuses only Relu and Clip. With no quantizer between them, every such
layer ran in float in ONNX Runtime's default session, its weight dequantized at every inference (EfficientNet-Lite0
per-tensor: 32 of 49 Convs, 72 ms per image against 27 for the float model). Now the layer's output takes the grid of
the clip chain's output (its int8 kernel saturates at the grid's ends) and the clip runs in float after it. Checked in
ONNX Runtime's optimized graph (every Conv an integer kernel) and against the float model (the per-channel bounds
kept)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.graph.plan import make_plan

RNG = np.random.default_rng(0)


def _clipped_convs() -> onnx.ModelProto:
    """Conv -> Max(per-channel lo) -> Min(per-channel hi) -> Conv, as CLE writes a ReLU6 between two Convs."""
    c = 8
    inits = [numpy_helper.from_array(RNG.normal(0, 0.5, (c, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(RNG.normal(0, 0.1, c).astype(np.float32), "b1"),
             numpy_helper.from_array(np.zeros((c, 1, 1), np.float32), "lo"),
             numpy_helper.from_array(RNG.uniform(0.5, 3.0, (c, 1, 1)).astype(np.float32), "hi"),
             numpy_helper.from_array(RNG.normal(0, 0.3, (4, c, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Max", ["c1", "lo"], ["m"], name="max"),
             helper.make_node("Min", ["m", "hi"], ["r"], name="min"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_on_ort_the_layer_before_a_constant_clip_takes_the_clip_outputs_grid():
    plan = make_plan(_clipped_convs(), target="ort")
    assert plan.inherit.get("c1") == "r" and "r" in plan.activations and "m" not in plan.activations
    fused = make_plan(_clipped_convs(), target="tflite")   # where clips fuse: no quantizer between them, as before
    assert "c1" not in plan.activations and "c1" not in fused.inherit and "m" not in fused.activations


@pytest.mark.parametrize("weights", ["per-tensor", "per-channel"])
def test_ort_runs_every_conv_in_integers_and_keeps_the_per_channel_bounds(weights, tmp_path):
    m = _clipped_convs()
    x = RNG.normal(0, 1, (48, 3, 8, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=32, evaluation_samples=16, weights=weights))
    qm.save(tmp_path, report=False)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = ort.InferenceSession(str(tmp_path / "model.qdq.onnx"), so, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert ops.count("QLinearConv") == 2 and "Conv" not in ops, ops
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x[32:]})[0]
    got = sess.run(None, {"x": x[32:]})[0]
    sqnr = 10 * np.log10(np.sum(want ** 2) / np.sum((got - want) ** 2))
    assert sqnr > 25, sqnr
