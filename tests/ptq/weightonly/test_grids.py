"""Blocked weight grids against independent peers: ONNX's reference QuantizeLinear (blocked) and ONNX Runtime's
MatMulNBitsQuantizer (the full-range symmetric grid)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from qlinear.ptq.algorithms.grids import padded, params, quantize_rtn, search_clip

floats = st.floats(-4, 4, allow_nan=False, width=32)


@given(arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 70)), elements=floats),
       st.sampled_from([16, 32, 7]), st.sampled_from(["full", "symmetric", "asymmetric"]))
def test_rtn_is_onnx_blocked_quantize_linear(w, block, grid):
    """The integers are ONNX QuantizeLinear's (opset 21, blocked along K) with the same scale and zero point,
    partial last blocks included."""
    bq = quantize_rtn(w, 4, block, grid)
    n, k = w.shape
    z = bq.zero_point if bq.zero_point is not None else np.zeros(bq.scale.shape, np.int8)
    import ml_dtypes

    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=block)
    g = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, k])],
                          [helper.make_tensor_value_info("y", TensorProto.INT4, [n, k])],
                          [numpy_helper.from_array(bq.scale, "s"),
                           numpy_helper.from_array(z.astype(ml_dtypes.int4), "z")])
    ref = ReferenceEvaluator(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    want = ref.run(None, {"x": w})[0].astype(np.int8)
    np.testing.assert_array_equal(bq.q, want)


@given(arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 64)), elements=floats))
def test_full_grid_puts_the_largest_weight_on_the_grid_end(w):
    bq = quantize_rtn(w, 4, 16, "full")
    dq = bq.dequantize()
    wb = padded(w, 16)
    i = np.abs(wb).argmax(-1)
    e = np.take_along_axis(wb, i[..., None], -1)[..., 0]
    dqb = padded(dq, 16)
    got = np.take_along_axis(dqb, i[..., None], -1)[..., 0]
    exact = np.abs(e) >= 2.0 ** -120  # |e| / 8 is a normal float32 (a subnormal scale rounds)
    np.testing.assert_array_equal(got[exact], e[exact])
    assert bq.q.min() >= -8 and bq.q.max() <= 7


def test_mse_clip_never_worse_than_minmax():
    rng = np.random.default_rng(0)
    w = rng.standard_t(3, (64, 256)).astype(np.float32)
    for grid in ("full", "symmetric", "asymmetric"):
        a = quantize_rtn(w, 4, 32, grid).dequantize()
        b = quantize_rtn(w, 4, 32, grid, method="mse").dequantize()
        assert np.square(b - w).sum() <= np.square(a - w).sum()
    clip = search_clip(padded(w, 32), 4, "full")
    assert clip.min() < 1.0  # heavy tails: some blocks clip


def test_full_grid_equals_onnxruntime_matmulnbits_quantizer():
    """Dequantized weights of qlinear's symmetric int4 grid equal those of ONNX Runtime's MatMulNBitsQuantizer
    (symmetric, block 32: scale w_e / -8) on random weights, read back from its MatMulNBits by an identity input."""
    import onnxruntime as ort
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(3)
    k, n = 96, 40
    B = rng.standard_normal((k, n)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "B"], ["y"])], "mm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [k, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [k, n])],
                          [numpy_helper.from_array(B, "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    q = MatMulNBitsQuantizer(m, block_size=32, is_symmetric=True)
    q.process()
    qm = q.model.model if hasattr(q.model, "model") else q.model
    assert any(nd.op_type == "MatMulNBits" for nd in qm.graph.node)
    s = ort.InferenceSession(qm.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = s.run(None, {"a": np.eye(k, dtype=np.float32)})[0]          # [K, N]
    ours = quantize_rtn(np.ascontiguousarray(B.T), 4, 32, "full").dequantize().T
    np.testing.assert_array_equal(ours, theirs)


def test_params_of_zero_block_are_finite():
    s, z = params(np.zeros((2, 3, 8), np.float32), 4, "full")
    assert np.all(s > 0) and np.all(np.isfinite(s))
