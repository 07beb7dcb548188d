"""Target qnn: a MatMul of a constant rank-2 weight and the Add of its constant rank-1 bias are one layer, as QNN's
FullyConnected and AIMET's MatmulAdd fusion make them. AIMET 2.42's QuantizationSimModel rewrites the pair into a
Gemm, so an encoding for the MatMul's output named a tensor its sim does not have: ``load_encodings_to_sim`` raised
"The following encoding names were present in the encodings to load but not found in the model:
['.../query/MatMul_output_0', ...]" on MiniLM quantized with --target qnn. The bias gets its int32 encoding
(``input_scale * weight_scale``), like a Gemm's; other targets keep the MatMul output's quantizer."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from tiny_models import make_model

import qlinear
from qlinear.graph.plan import make_plan


def _linear(bias_first: bool = False, reader: bool = False) -> onnx.ModelProto:
    """``x [N, 3, 8]`` -> MatMul(W [8, 4]) -> Add(b [4]) -> Relu -> ``y``; ``reader``: the MatMul output is also a
    graph output (a second reader: no fusion)."""
    rng = np.random.default_rng(0)
    inits = {"W": rng.standard_normal((8, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}
    add_in = ["b", "mm"] if bias_first else ["mm", "b"]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="fc"),
             helper.make_node("Add", add_in, ["fc_out"], name="fc_add"),
             helper.make_node("Relu", ["fc_out"], ["y"], name="relu")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4])]
    if reader:
        outs.append(helper.make_tensor_value_info("mm", TensorProto.FLOAT, ["N", 3, 4]))
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8])], outs, inits)


def test_qnn_plan_fuses_the_bias_add_into_the_matmul():
    for bias_first in (False, True):
        plan = make_plan(_linear(bias_first), target="qnn")
        assert "mm" not in plan.activations and "fused with the following Add" in plan.skipped["mm"]
        assert [w.bias for w in plan.weights] == ["b"]
        assert plan.biases == []      # bias correction stays Conv/Gemm's
    ort_plan = make_plan(_linear(), target="ort")
    assert "mm" in ort_plan.activations and [w.bias for w in ort_plan.weights] == [""]
    shared = make_plan(_linear(reader=True), target="qnn")  # the MatMul output has another reader: two layers
    assert "mm" in shared.activations and [w.bias for w in shared.weights] == [""]


def test_qnn_writes_an_int32_bias_and_no_matmul_output_encoding():
    m = _linear()
    x = np.random.default_rng(1).standard_normal((48, 3, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=32, evaluation_samples=16, target="qnn"))
    encs = {e.name: e for e in qm.encodings}
    assert "mm" not in encs
    b, w, xin = encs["b"], encs["W"], encs["x"]
    assert b.dtype == "int32" and b.scale.shape == (4,)
    np.testing.assert_allclose(b.scale, float(xin.scale) * w.scale.reshape(-1), rtol=1e-12)
    run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
        None, {"x": x[32:]})[0].astype(np.float64)
    f, q = run(m), run(qm.model)
    assert 10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2)) > 20   # 22.4 dB (20.9 with the MatMul output quantized)


def test_qnn_blocked_8_bit_weight_of_a_fused_matmul_is_per_channel():
    """Its output stays float, so ONNX Runtime (default optimization level) fuses DQ -> MatMul -> Add into
    MatMulIntegerToFloat, which takes no blocked scales ("Per-column quantization parameter of batched matrix should
    have same dimension as the matrix"): 8-bit blocks with 8-bit activations become per-channel, with a note, as
    on the ``matmul`` placement; 4-bit blocks stay blocks."""
    m = _linear()
    x = np.random.default_rng(1).standard_normal((48, 3, 8)).astype(np.float32)
    cfg = dict(calibration_samples=32, evaluation_samples=16, target="qnn", weights="per-block", block_size=4)
    qm = qlinear.quantize(m, {"x": x}, dict(cfg, weight_type="int8"))
    assert qm.encodings["W"].granularity == "per_channel"
    assert any("1 MatMul weight(s) quantized per-channel instead" in n for n in qm.notes)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    ort.InferenceSession(qm.model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x[:1]})
    assert qlinear.quantize(m, {"x": x}, dict(cfg, weight_type="int4")).encodings["W"].granularity == "per_block"
