"""CorrectBias on its own: for 1x1 convolutions (groups included) and Gemm (transB either way) the corrected model
with quantized weights has, over the data, the mean output of the float model (exact for these linear layers:
``mean(W_q x + b') = W_q mu + b - (W_q - W) mu``), measured in ONNX Runtime; only biases with statistics and not
skipped are changed."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx_peers import run_ort
from tiny_models import make_model

from qlinear.encodings import Encoding
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.correct_bias import CorrectBias
from qlinear.graph.plan import BiasSpec
from qlinear.ptq.stats.collect import ChannelMean

RNG = np.random.default_rng(4)


def conv(groups: int) -> tuple[onnx.ModelProto, dict]:
    w = RNG.standard_normal((6, 6 // groups, 1, 1)).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "W", "B"], ["y"], name="conv", group=groups)],
                   [helper.make_tensor_value_info("x", T.FLOAT, [16, 6, 5, 5])],
                   [helper.make_tensor_value_info("y", T.FLOAT, [16, 6, 5, 5])],
                   {"W": w, "B": RNG.standard_normal(6).astype(np.float32)}, opset=17)
    x = (RNG.standard_normal((16, 6, 5, 5)) + np.arange(6).reshape(1, 6, 1, 1)).astype(np.float32)
    return m, {"x": x}


def gemm(trans_b: int) -> tuple[onnx.ModelProto, dict]:
    w = RNG.standard_normal((5, 7) if trans_b else (7, 5)).astype(np.float32)
    m = make_model([helper.make_node("Gemm", ["x", "W", "B"], ["y"], name="gemm", transB=trans_b)],
                   [helper.make_tensor_value_info("x", T.FLOAT, [32, 7])],
                   [helper.make_tensor_value_info("y", T.FLOAT, [32, 5])],
                   {"W": w, "B": RNG.standard_normal(5).astype(np.float32)}, opset=17)
    return m, {"x": (RNG.standard_normal((32, 7)) + 2).astype(np.float32)}


def quantized_weights(m: onnx.ModelProto, enc: Encoding) -> onnx.ModelProto:
    q = onnx.ModelProto()
    q.CopyFrom(m)
    for t in q.graph.initializer:
        if t.name == "W":
            t.CopyFrom(numpy_helper.from_array(enc.fake_quantize(numpy_helper.to_array(t)), "W"))
    return q


@pytest.mark.parametrize("case", ["conv1", "conv2", "conv6", "gemm0", "gemm1"])
def test_corrected_mean_output_matches_float(case):
    m, feeds = conv(int(case[4:])) if case.startswith("conv") else gemm(int(case[4:]))
    mean = ChannelMean()
    mean.update(feeds["x"])
    enc = Encoding("W", "int4", scale=np.array(0.4), zero_point=np.array(0), role="param")
    model = to_ir(m)
    p = CorrectBias([BiasSpec("B", "W", "x")], {"W": enc}, {"x": mean})
    assert p(model).modified and p.corrected == 1
    corrected = quantized_weights(to_proto(model), enc)
    want = run_ort(m, feeds)[0].mean(axis=(0, 2, 3) if case.startswith("conv") else 0)
    before = run_ort(quantized_weights(m, enc), feeds)[0].mean(axis=(0, 2, 3) if case.startswith("conv") else 0)
    after = run_ort(corrected, feeds)[0].mean(axis=(0, 2, 3) if case.startswith("conv") else 0)
    assert np.abs(before - want).max() > 1e-2
    np.testing.assert_allclose(after, want, rtol=1e-4, atol=1e-4)


def test_skipped_or_without_means_unchanged():
    m, feeds = gemm(1)
    mean = ChannelMean()
    mean.update(feeds["x"])
    enc = Encoding("W", "int4", scale=np.array(0.4), zero_point=np.array(0), role="param")
    for kw in ({"means": {"x": mean}, "skip": {"B"}}, {"means": {}, "skip": set()}, {"means": {"x": ChannelMean()},
                                                                                      "skip": set()}):
        model = to_ir(m)
        p = CorrectBias([BiasSpec("B", "W", "x")], {"W": enc}, kw["means"], skip=kw["skip"])
        assert not p(model).modified
        assert to_proto(model).SerializeToString() == m.SerializeToString()
