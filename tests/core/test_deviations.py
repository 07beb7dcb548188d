"""Where the ONNX reference or ONNX Runtime disagree with the spec, qlinear follows the spec.

Each test pins one case of notes/onnx-ort.md §1.5 (R1-R11) or §3.3 (ORT float8 overflow bugs): qlinear's
value, and the peer's differing value, so a peer that changes its behaviour is noticed.
"""

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx_peers import run_ort, run_reference, single_node_model

import qlinear
from qlinear.errors import BlockSizeError, DTypeError


def _q_model(feeds, out_type, **attrs):
    n = next(iter(feeds.values())).shape
    return single_node_model("QuantizeLinear", feeds, out_type, list(n), **attrs)


def test_r1_nan_inf_overflow_saturate():
    # R1: the reference casts NaN/inf/|v| >= 2^31 through int32 (INT32_MIN) and wraps when adding the zero
    # point. Spec: saturation; NaN (unspecified) -> type minimum, as ONNX Runtime.
    x = np.array([np.nan, np.inf, -np.inf, 1e10, 3e9, -1e10], np.float32)
    feeds = {"x": x, "s": np.float32(1), "z": np.int8(-3)}
    ours = qlinear.quantize_linear(x, np.float32(1), np.int8(-3))
    assert ours.tolist() == [-128, 127, -128, 127, 127, -128]
    assert run_ort(_q_model(feeds, T.INT8), feeds)[0].tolist() == ours.tolist()
    assert run_reference(_q_model(feeds, T.INT8), feeds)[0].tolist() == [127] * 6  # wrapped


def test_r1_scale_zero():
    x = np.array([1, -1, 0, np.nan], np.float32)
    ours = qlinear.quantize_linear(x, np.float32(0), output_dtype="int8")
    assert ours.tolist() == [127, -128, -128, -128]  # 1/0 = +inf saturates; 0/0 = NaN -> minimum
    feeds = {"x": x, "s": np.float32(0)}
    assert run_ort(_q_model(feeds, T.INT8, output_dtype=T.INT8), feeds)[0].tolist() == ours.tolist()
    assert run_reference(_q_model(feeds, T.INT8, output_dtype=T.INT8), feeds)[0].tolist() == [-128] * 4


def test_r2_float32_x_float16_scale_divides_in_float16():
    # R2: spec: the scale's type (float16) sets the division precision; the reference divides in float32.
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(4096) * 100).astype(np.float32)
    s = np.float16(0.1234)
    feeds = {"x": x, "s": np.asarray(s)}
    m = _q_model(feeds, T.INT16, output_dtype=T.INT16)
    ours = qlinear.quantize_linear(x, s, output_dtype="int16")
    ort = run_ort(m, feeds)[0]
    ref = run_reference(m, feeds)[0]
    assert np.array_equal(ours, ort)
    assert (ours != ref).sum() > 0


def test_r3_int32_x_divides_in_float32():
    # R3: spec: float32 scale -> float32 division; the reference promotes int32 / float32 to float64.
    rng = np.random.default_rng(3)
    x = rng.integers(-2**30, 2**30, 65536).astype(np.int32)
    s = np.float32(12345.678)
    feeds = {"x": x, "s": s}
    ours = qlinear.quantize_linear(x, s, output_dtype="int16")
    ref64 = run_reference(_q_model(feeds, T.INT16, output_dtype=T.INT16), feeds)[0]
    ref_spec = run_reference(_q_model(feeds, T.INT16, output_dtype=T.INT16, precision=T.FLOAT), feeds)[0]
    assert np.array_equal(ours, ref_spec)
    assert (ours != ref64).sum() > 0


def test_r4_float_zero_points_are_applied():
    # R4: spec: "the quantization formula remains the same" for float8/float4. The reference and ORT ignore
    # a float8 zero point in Q; the reference ignores a float4 zero point in DQ and refuses a float8 one.
    z8 = np.array(2.0, ml_dtypes.float8_e4m3fn)
    x = np.array([0.0, 1.0], np.float32)
    ours = qlinear.quantize_linear(x, np.float32(1), z8)
    assert ours.astype(np.float32).tolist() == [2.0, 3.0]
    feeds = {"x": x, "s": np.float32(1), "z": z8}
    m = _q_model(feeds, T.FLOAT8E4M3FN)
    assert run_reference(m, feeds)[0].astype(np.float32).tolist() == [0.0, 1.0]
    assert run_ort(m, feeds)[0].astype(np.float32).tolist() == [0.0, 1.0]
    z4 = np.array([1.0], ml_dtypes.float4_e2m1fn)
    q4 = np.array([1.0, 3.0], ml_dtypes.float4_e2m1fn)
    assert qlinear.dequantize_linear(q4, np.float32(2), z4).tolist() == [0.0, 4.0]
    feeds = {"x": q4, "s": np.float32(2), "z": z4}
    m = single_node_model("DequantizeLinear", feeds, T.FLOAT, [2])
    assert run_reference(m, feeds)[0].tolist() == [2.0, 6.0]
    # DQ float8 with a non-zero zero point: reference raises, qlinear applies it
    assert qlinear.dequantize_linear(np.array([3.0], ml_dtypes.float8_e4m3fn), np.float32(1), z8).tolist() == [1.0]


def test_r5_float4_nan_is_six():
    # R5: onnx float4 note: NaN -> 6. ml_dtypes (used by the reference) gives -0.
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 7.0], np.float32)
    ours = qlinear.quantize_linear(x, np.float32(1), output_dtype="float4e2m1")
    assert ours.astype(np.float32).tolist() == [6.0, 6.0, 6.0, -6.0, 6.0]
    feeds = {"x": x, "s": np.float32(1)}
    ref = run_reference(_q_model(feeds, T.FLOAT4E2M1, output_dtype=T.FLOAT4E2M1), feeds)[0]
    assert ref.astype(np.float32)[0] == 0.0


def test_r6_negative_zero_plus_zero_point():
    # R6: with a zero point given, -0 + 0 = +0 (IEEE), for float4 (as the backend test expects) and float8
    # (the reference and ORT skip the addition and keep -0); without a zero point -0 stays -0.
    x = np.array([-0.0], np.float32)
    for t, z in (("float4e2m1", ml_dtypes.float4_e2m1fn), ("float8e4m3fn", ml_dtypes.float8_e4m3fn)):
        with_zp = qlinear.quantize_linear(x, np.float32(1), np.zeros(1, z))
        without = qlinear.quantize_linear(x, np.float32(1), output_dtype=t)
        assert not np.signbit(with_zp.astype(np.float32))[0]
        assert np.signbit(without.astype(np.float32))[0]


def test_r8_int32_dequantize_exact_difference():
    # R8: the reference computes float32(x) - zp in float64; spec/ORT: exact integer difference first.
    x = np.array([16777217], np.int32)
    z = np.array(1, np.int32)
    ours = qlinear.dequantize_linear(x, np.float32(1), z)
    assert ours.tolist() == [16777216.0]
    feeds = {"x": x, "s": np.float32(1), "z": z}
    m = single_node_model("DequantizeLinear", feeds, T.FLOAT, [1])
    assert run_ort(m, feeds)[0].tolist() == [16777216.0]
    assert run_reference(m, feeds)[0].tolist() == [16777215.0]


def test_r9_e8m0_scale_needs_output_dtype():
    x = np.array([1, 2], np.int8)
    s = np.array(4.0, ml_dtypes.float8_e8m0fnu)
    with pytest.raises(DTypeError, match="output_dtype is required with a float8e8m0 x_scale"):
        qlinear.dequantize_linear(x, s)
    assert qlinear.dequantize_linear(x, s, output_dtype="float32").tolist() == [4.0, 8.0]
    feeds = {"x": x, "s": s}
    ref = run_reference(single_node_model("DequantizeLinear", feeds, T.FLOAT8E8M0, [2]), feeds)[0]
    assert ref.dtype == ml_dtypes.float8_e8m0fnu  # the reference returns the scale's type (invalid per T3)


def test_r10_block_size_range_is_checked():
    # R10: D=5 with 3 blocks accepts block sizes ceil(5/3)=2 .. ceil(5/2)-1=2 only; the reference takes 3.
    x = np.arange(5, dtype=np.float32)[None, :]
    s = np.ones((1, 3), np.float32)
    with pytest.raises(BlockSizeError, match=r"accepted block sizes are \[2, 2\]"):
        qlinear.quantize_linear(x, s, axis=1, block_size=3)
    feeds = {"x": x, "s": s}
    run_reference(_q_model(feeds, T.UINT8, axis=1, block_size=3), feeds)  # no error


@pytest.mark.parametrize("t,onnx_t,x,spec,ort_value", [
    ("float8e4m3fn", T.FLOAT8E4M3FN, 480.0, np.nan, 448.0),   # [x] = 480 > 448 -> NaN; ORT gives 448
    ("float8e5m2", T.FLOAT8E5M2, 61440.0, np.inf, np.nan),   # [x] = 65536 > 57344 -> +Inf; ORT gives NaN
])
def test_ort_float8_saturate_false_overflow(t, onnx_t, x, spec, ort_value):
    xs = np.array([x, -x], np.float32)
    ours = qlinear.quantize_linear(xs, np.float32(1), output_dtype=t, saturate=False).astype(np.float32)
    np.testing.assert_array_equal(ours, np.array([spec, -spec if not np.isnan(spec) else spec], np.float32))
    feeds = {"x": xs, "s": np.float32(1)}
    m = _q_model(feeds, onnx_t, output_dtype=onnx_t, saturate=0)
    np.testing.assert_array_equal(run_reference(m, feeds)[0].astype(np.float32), ours)
    assert np.array_equal(np.abs(run_ort(m, feeds)[0].astype(np.float32)), np.abs([ort_value] * 2), equal_nan=True)


def test_dynamic_constant_input_scale_one():
    # DynamicQuantizeLinear on max == min: ORT (and the reference's own comment) use scale 1; the reference
    # code computes 1/255. The spec formula divides by zero. qlinear follows ORT.
    x = np.zeros(4, np.float32)
    y, s, z = qlinear.dynamic_quantize_linear(x)
    assert (y.tolist(), float(s), int(z)) == ([0, 0, 0, 0], 1.0, 0)
    m = single_node_model("DynamicQuantizeLinear", {"x": x}, T.UINT8, [4], opset=11, n_out=3,
                          out_types=[T.UINT8, T.FLOAT, T.UINT8])
    assert float(run_ort(m, {"x": x})[1]) == 1.0
    assert float(run_reference(m, {"x": x})[1]) == pytest.approx(1 / 255)
