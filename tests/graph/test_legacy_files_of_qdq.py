"""A 0.6.1/1.0.0 encodings file (no axes stored) qlinear wrote for target qnn validates against the Q/DQ model it
wrote beside it, as against ``model.float.onnx``: a weight there is the DequantizeLinear of its quantized
initializer, and its axes come from the layer reading it (found auditing ``--target qnn --encodings-version 1.0.0``
on nudenet-320n: ``encodings validate ... --model model.qdq.onnx`` gave 126 "axis unknown" problems)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import qlinear
from qlinear import encodings as E
from qlinear import graph as G
from qlinear.ptq import QuantizeConfig

RNG = np.random.default_rng(0)
X = RNG.standard_normal((24, 3, 8, 8)).astype(np.float32)


def conv_gemm():
    """x -> Conv(3->8, 3x3) -> Relu -> Flatten -> Gemm(512->10)."""
    inits = [numpy_helper.from_array(RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "W"),
             numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32) * 0.1, "B"),
             numpy_helper.from_array(RNG.standard_normal((10, 512)).astype(np.float32) * 0.05, "F"),
             numpy_helper.from_array(RNG.standard_normal(10).astype(np.float32) * 0.1, "FB")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "F", "FB"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [None, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [None, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("version", ["0.6.1", "1.0.0"])
def test_a_legacy_file_validates_against_the_qdq_model(tmp_path, version):
    q = qlinear.quantize(conv_gemm(), {"x": X}, QuantizeConfig(target="qnn", calibration_samples=16,
                                                                 evaluation_samples=8))
    path = tmp_path / "model.encodings"
    q.save_encodings(path, version=version)
    legacy = E.load(path)
    assert any(not e.resolved for e in legacy)
    for model in (q.encoded_model, q.model):
        rep = G.validate(legacy, model)
        assert rep.ok, str(rep)
    assert G.load_encodings(path, q.model) == G.resolve(q.encodings, q.model)
