"""Target tflite: a GlobalAveragePool is written as MEAN, which requantizes (``s_in / s_out``) and keeps its own
output parameters (the converter's ``tfl.mean``); only MAX_POOL_2D / AVERAGE_POOL_2D take their input's. Tied to
its input, a squeeze-excite mean (a fraction of its input's range) kept a few levels: PP-OCR's text-direction
classifier's means lost 15-21 dB against a min-max grid of their own."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx_peers import run_reference

import qlinear
from qlinear.ptq import check_tflite


def _model():
    rng = np.random.default_rng(0)
    w, b = rng.normal(0, 0.5, (5, 8)).astype(np.float32), rng.normal(0, 0.1, 5).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("Gemm", ["f", "w", "b"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _data():   # sparse peaks: the mean spans a small part of the input's range
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (40, 8, 16, 16)).astype(np.float32)
    x[rng.random(x.shape) < 0.01] *= 20
    return x


def _scale(qm, t):
    return float(np.asarray(qm.encodings[t].scale).reshape(-1)[0])


def test_global_average_pool_keeps_its_own_grid_on_tflite():
    m, x = _model(), _data()
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=32, evaluation_samples=8, target="tflite"))
    assert _scale(qm, "g") < _scale(qm, "r") / 4   # its own range, not the Relu's
    assert not check_tflite(qm.model)
    ev = x[32:]
    ref = np.concatenate([run_reference(m, {"x": v[None]})[0] for v in ev])
    sess = ort.InferenceSession(qm.model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = np.concatenate([sess.run(None, {"x": v[None]})[0] for v in ev])
    assert 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2)) > 30
