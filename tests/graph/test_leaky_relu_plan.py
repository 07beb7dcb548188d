"""A LeakyRelu after a Conv is not fused: the Conv output is quantized, so ONNX Runtime runs the Conv as an integer
QLinearConv (with no quantizer in between it ran the Conv in float, slower than the float model), and the TFLite
export writes LEAKY_RELU (bit-exact against LiteRT in tests/tflite/test_export.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from tiny_models import make_model

import qlinear
from qlinear.graph.plan import make_plan


def conv_leaky_max() -> object:
    """``x [N, 4, 8, 8]`` -> Conv -> LeakyRelu(0.2) -> Max(-0.4) -> Conv -> ``y`` (tf2onnx's Keras LeakyReLU with a
    clamp, openwakeword's speech embedding)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["l"], alpha=0.2), helper.make_node("Max", ["l", "k"], ["m"]),
             helper.make_node("Conv", ["m", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
                      {"w1": rng.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32), "b1": np.zeros(8, np.float32),
                       "k": np.array(-0.4, np.float32),
                       "w2": rng.normal(0, 0.3, (4, 8, 3, 3)).astype(np.float32), "b2": np.zeros(4, np.float32)})


def test_the_conv_output_before_a_leaky_relu_is_quantized():
    plan = make_plan(conv_leaky_max(), target="ort")
    assert {"c", "l", "m"} <= set(plan.activations) and "c" not in plan.skipped


def test_onnx_runtime_runs_both_convs_in_integers(tmp_path):
    m = conv_leaky_max()
    x = np.random.default_rng(1).normal(0, 1, (32, 4, 8, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=16, evaluation_samples=16))
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(qm.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    import onnx

    kinds = [n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node]
    assert kinds.count("QLinearConv") == 2 and "Conv" not in kinds and "FusedConv" not in kinds
