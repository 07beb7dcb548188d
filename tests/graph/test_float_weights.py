"""``float_layer_weights``: the weights of the layers ONNX Runtime runs in float written as float values."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from qlinear.graph.float_weights import float_layer_weights


def _qdq_model(out_q: bool, in_q: bool = True) -> onnx.ModelProto:
    """x -> [Q/DQ] -> Conv(DQ(int8 weight, per channel)) -> y -> Relu -> [Q/DQ] -> out."""
    rng = np.random.default_rng(0)
    wq = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(wq, "w_q"), numpy_helper.from_array(np.full(4, 0.01, np.float32), "w_s"),
             numpy_helper.from_array(np.zeros(4, np.int8), "w_z"),
             numpy_helper.from_array(np.array(0.02, np.float32), "x_s"),
             numpy_helper.from_array(np.array(128, np.uint8), "x_z"),
             numpy_helper.from_array(np.array(0.05, np.float32), "o_s"),
             numpy_helper.from_array(np.array(0, np.uint8), "o_z")]
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], axis=0)]
    x = "x"
    if in_q:
        nodes += [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"])]
        x = "xd"
    nodes += [helper.make_node("Conv", [x, "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["y"], ["r" if out_q else "out"])]
    if out_q:
        nodes += [helper.make_node("QuantizeLinear", ["r", "o_s", "o_z"], ["rq"]),
                  helper.make_node("DequantizeLinear", ["rq", "o_s", "o_z"], ["out"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def test_conv_with_float_output_gets_float_weight():
    """A Conv reading a dequantized input whose output no QuantizeLinear reads runs in float in ONNX Runtime (no
    QLinearConv without output parameters): its weight becomes the float values of its DequantizeLinear, the same
    outputs; so does one reading a float input; with both quantized (the output through the Relu ONNX Runtime fuses)
    the weight keeps its DequantizeLinear."""
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for in_q, out_q, folded in ((True, False, True), (False, True, True), (True, True, False)):
        m = _qdq_model(out_q, in_q)
        want = _run(m, x)
        fw = float_layer_weights(m)
        dq_w = any(n.op_type == "DequantizeLinear" and n.output[0] == "w" for n in m.graph.node)
        assert (fw.layers == ["conv"]) == folded and dq_w != folded, (in_q, out_q)
        if folded:
            w = numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "w"))
            assert w.dtype == np.float32 and np.allclose(w / 0.01, np.round(w / 0.01), atol=1e-4)
            assert not {"w_q", "w_s", "w_z"} & {t.name for t in m.graph.initializer}
            assert fw.share == 1.0
        np.testing.assert_allclose(_run(m, x), want, rtol=1e-5, atol=1e-5)
