"""Integer kernels against ONNX Runtime's integer operators (QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger,
com.microsoft QLinearAdd / QLinearMul / QLinearAveragePool / QLinearGlobalAveragePool): mode ``f32_rne`` (MLAS
requantizes ``rint(acc * float32 multiplier) + zp``).

ORT's u8s8 kernels on AVX2 CPUs without VNNI add pairs of u8*s8 products in int16 with saturation (``vpmaddubsw``);
weights are kept in [-64, 63] where that matters so the peer computes the exact accumulator (ORT's own remedy is
``reduce_range``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto
from onnx_peers import run_ort, single_node_model

from qlinear import kernels as K
from qlinear.kernels.linear import conv_accumulate


def _ms(rng, n):
    return rng.uniform(0.002, 0.05, n).astype(np.float32)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_matmul_and_matmulinteger(seed, per_channel):
    rng = np.random.default_rng(seed)
    m, k, n = 64, 48, 24
    x = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w = rng.integers(-64, 64, (k, n)).astype(np.int8)
    zx, sx = np.uint8(rng.integers(0, 256)), np.float32(rng.uniform(0.01, 0.05))
    sw = _ms(rng, n) if per_channel else np.float32(0.01)
    zw = np.zeros(n, np.int8) if per_channel else np.int8(0)
    so, zo = np.float32(rng.uniform(0.05, 0.5)), np.uint8(rng.integers(0, 256))
    ins = {"a": x, "as": sx, "az": zx, "b": w, "bs": sw, "bz": zw, "ys": so, "yz": zo}
    want = run_ort(single_node_model("QLinearMatMul", ins, TensorProto.UINT8, [m, n], opset=21), ins)[0]
    got = K.fully_connected(x, w.T, None, zp_x=int(zx), zp_w=0, s_x=sx, s_w=sw, s_out=so, zp_out=int(zo),
                            mode="f32_rne", qmin=0, qmax=255)
    assert np.array_equal(got, want.astype(np.int64)), int((got != want).sum())
    ins2 = {"a": x, "b": w, "az": zx}
    acc = run_ort(single_node_model("MatMulInteger", ins2, TensorProto.INT32, [m, n], opset=21), ins2)[0]
    ours = K.PreparedWeights.prepare(w.T, 0, int(zx)).accumulate(x)
    assert np.array_equal(ours, acc.astype(np.int64))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("group", [1, 2, 8])
def test_qlinear_conv_and_convinteger(seed, group):
    rng = np.random.default_rng(100 + seed)
    c, o = 8, 16
    x = rng.integers(0, 256, (2, c, 11, 10)).astype(np.uint8)
    w = rng.integers(-64, 64, (o, c // group, 3, 3)).astype(np.int8)
    zx, sx = np.uint8(rng.integers(0, 256)), np.float32(0.02)
    sw = _ms(rng, o)
    so, zo = np.float32(rng.uniform(0.1, 1.0)), np.uint8(rng.integers(0, 256))
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    attrs = dict(pads=[1, 0, 1, 1], strides=[2, 1], dilations=[1, 2], group=group)
    ins = {"x": x, "xs": sx, "xz": zx, "w": w, "ws": sw, "wz": np.zeros(o, np.int8), "ys": so, "yz": zo, "b": bias}
    want = run_ort(single_node_model("QLinearConv", ins, TensorProto.UINT8, None, opset=21, **attrs), ins)[0]
    got = K.conv2d(x, w, bias, zp_x=int(zx), s_x=sx, s_w=sw, s_out=so, zp_out=int(zo), mode="f32_rne",
                   stride=(2, 1), pads=(1, 0, 1, 1), dilation=(1, 2), groups=group, qmin=0, qmax=255)
    assert np.array_equal(got, want.astype(np.int64)), int((got != want).sum())
    ins2 = {"x": x, "w": w, "xz": zx}
    acc = run_ort(single_node_model("ConvInteger", ins2, TensorProto.INT32, None, opset=21, **attrs), ins2)[0]
    ours = conv_accumulate(x, w, None, zp_x=int(zx), stride=(2, 1), pads=(1, 0, 1, 1), dilation=(1, 2), groups=group)
    assert np.array_equal(ours, acc.astype(np.int64))


@given(st.integers(1, 300), st.integers(1, 4096), st.integers(0, 2**31 - 1))
def test_float64_accumulation_is_exact(m, k, seed):
    """float64 BLAS accumulation equals exact integer accumulation (int64 in Python/NumPy) for any length."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (min(m, 8), k)).astype(np.int8)
    b = rng.integers(-128, 128, (min(m, 7), k)).astype(np.int8)
    assert np.array_equal(K.int_matmul(a, b), a.astype(np.int64) @ b.astype(np.int64).T)
    za = int(rng.integers(-128, 128))
    zb = rng.integers(-128, 128, b.shape[0])
    want = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb[:, None]).T
    assert np.array_equal(K.PreparedWeights.prepare(b, zb, za).accumulate(a), want)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_add_mul_within_one(op):
    """com.microsoft QLinearAdd/Mul: ORT computes through float lookup or float arithmetic; the f32_rne formula
    matches within one unit (documented difference, README)."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, 4096).astype(np.uint8)
    b = rng.integers(0, 256, 4096).astype(np.uint8)
    p = dict(s_a=np.float32(0.05), zp_a=7, s_b=np.float32(0.03), zp_b=130, s_out=np.float32(0.09), zp_out=100)
    ins = {"a": a, "as": p["s_a"], "az": np.uint8(7), "b": b, "bs": p["s_b"], "bz": np.uint8(130),
           "cs": p["s_out"], "cz": np.uint8(100)}
    want = run_ort(single_node_model(op, ins, TensorProto.UINT8, [4096], opset=21, domain="com.microsoft"), ins)[0]
    fn = K.add if op == "QLinearAdd" else K.mul
    got = fn(a, b, mode="f32_rne", qmin=0, qmax=255, **p)
    d = np.abs(got - want.astype(np.int64))
    assert d.max() <= 1


@pytest.mark.parametrize("dtype,zp_out,depth,s_in", [(np.uint8, 0, 4, 0.05), (np.uint8, 0, 16, 0.21),
                                                      (np.uint8, 0, 1000, 0.08), (np.int8, -128, 8, 0.11),
                                                      (np.int8, -128, 2, 0.9)])
def test_qlinear_softmax_as_onnx_runtime_fuses_it(dtype, zp_out, depth, s_in):
    """DequantizeLinear -> Softmax -> QuantizeLinear in ONNX Runtime's default session (its QLinearSoftmax) against
    ``softmax_ort``, every value, rows of one large value included (int8: 128 clamped to 127)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    from qlinear.kernels.activation import softmax_ort

    rng = np.random.default_rng(depth)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = rng.integers(lo, hi + 1, (300, depth)).astype(dtype)
    x[:20] = lo
    x[:20, 0] = hi    # one value holds (almost) all the mass
    zp_in = np.array(3 if dtype == np.uint8 else -5, dtype)
    t = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("Softmax", ["xf"], ["p"], axis=-1),
             helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", t, [300, depth])],
                          [helper.make_tensor_value_info("y", t, [300, depth])],
                          [numpy_helper.from_array(np.array(s_in, np.float32), "sx"),
                           numpy_helper.from_array(zp_in, "zx"),
                           numpy_helper.from_array(np.array(1 / 256, np.float32), "sy"),
                           numpy_helper.from_array(np.array(zp_out, dtype), "zy")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(__import__("tempfile").mktemp(suffix=".onnx"))
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert "QLinearSoftmax" in {n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node}
    want = s.run(None, {"x": x})[0]
    got = softmax_ort(x.astype(np.int64), s_in=float(s_in), zp_out=zp_out, signed=dtype == np.int8)
    assert np.array_equal(got.astype(dtype), want), int((got.astype(dtype) != want).sum())
