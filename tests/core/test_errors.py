"""Every mismatch of shape, type, axis or block size raises a QlinearError naming the argument,
the expected and the actual value; no raw NumPy error reaches the user."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qlinear
from qlinear.errors import AxisError, BlockSizeError, DTypeError, QlinearError, ShapeError

X = np.zeros((2, 3, 4), np.float32)


@pytest.mark.parametrize("kwargs,exc,pattern", [
    (dict(x=X.astype(np.float64), y_scale=np.float32(1)), DTypeError, r"x: the input type must be one of float32.*got"),
    (dict(x=X, y_scale=np.float64(1)), DTypeError, r"y_scale: the scale type must be one of float32, .* got float64"),
    (dict(x=X, y_scale=np.int8(1)), DTypeError, r"y_scale: the scale type must be one of .* got int8"),
    (dict(x=X, y_scale=np.float32(1), y_zero_point=np.float32(0)), DTypeError, r"QuantizeLinear cannot output float32"),
    (dict(x=X, y_scale=np.float32(1), y_zero_point=np.int8(0), output_dtype="uint8"), DTypeError,
     r"output_dtype=uint8 disagrees with the type of y_zero_point \(int8\)"),
    (dict(x=X, y_scale=np.ones(4, np.float32), axis=1), ShapeError, r"per-axis scale must have length D\[axis=1\] = 3, got length 4"),
    (dict(x=X, y_scale=np.ones(3, np.float32), axis=3), AxisError, r"axis=3 is out of range for an input of rank 3; expected \[-3, 2\]"),
    (dict(x=X, y_scale=np.ones((2, 3), np.float32)), ShapeError, r"rank 2 but block_size is 0"),
    (dict(x=X, y_scale=np.ones((2, 3, 2), np.float32), axis=2, block_size=1), BlockSizeError,
     r"block_size=1 gives ceil\(4/1\) = 4 blocks on axis 2, but y_scale has 2 there; accepted block sizes are \[2, 3\]"),
    (dict(x=X, y_scale=np.ones((2, 3, 3), np.float32), axis=2, block_size=2), BlockSizeError, r"has 3 there"),
    (dict(x=X, y_scale=np.ones((2, 2, 2), np.float32), axis=2, block_size=2), ShapeError, r"dimension 1 is 2, expected 3"),
    (dict(x=X, y_scale=np.ones((2, 3), np.float32), axis=2, block_size=2), ShapeError, r"needs a scale of the input's rank 3"),
    (dict(x=X, y_scale=np.ones((2, 3, 2), np.float32), axis=2, block_size=-1), BlockSizeError, r"block_size must be >= 0"),
    (dict(x=X, y_scale=np.ones(3, np.float32), y_zero_point=np.zeros(2, np.uint8)), ShapeError,
     r"y_zero_point: shape \(2,\) must equal the shape of y_scale \(3,\)"),
    (dict(x=X, y_scale=np.float32(1), output_dtype="int7"), DTypeError, r"output_dtype: unknown type 'int7'"),
    (dict(x=X, y_scale=np.float32(1), precision="int8"), DTypeError, r"precision must be float32, float16 or bfloat16"),
    (dict(x=X, y_scale=np.float32(1), packed=True), DTypeError, r"packed=True needs a 2-, 4- or 6-bit output type, got uint8"),
    (dict(x=X, y_scale=np.float32(1), out=np.empty(3, np.uint8)), ShapeError, r"out: expected .* shape \(2, 3, 4\)"),
])
def test_quantize_errors(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        qlinear.quantize_linear(**kwargs)
    assert isinstance(info.value, QlinearError)


@pytest.mark.parametrize("kwargs,exc,pattern", [
    (dict(x=X, x_scale=np.float32(1)), DTypeError, r"x: the input type must be one of .* got float32"),
    (dict(x=np.zeros(3, np.int8), x_scale=np.float32(1), x_zero_point=np.uint8(0)), DTypeError,
     r"x_zero_point: type uint8 must equal the type of x \(int8\)"),
    (dict(x=np.zeros(3, np.int8), x_scale=np.int32(1)), DTypeError, r"x_scale: the scale type must be one of"),
    (dict(x=np.zeros(3, np.int8), x_scale=np.float32(1), output_dtype="int8"), DTypeError,
     r"output_dtype: the output type must be one of float32, float16, bfloat16, got int8"),
    (dict(x=np.zeros((3, 4), np.int8), x_scale=np.ones(5, np.float32), axis=-1), ShapeError, r"got length 5"),
])
def test_dequantize_errors(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        qlinear.dequantize_linear(**kwargs)


def test_dynamic_requires_float32():
    with pytest.raises(DTypeError, match="x: the DynamicQuantizeLinear input type must be one of float32, got float16"):
        qlinear.dynamic_quantize_linear(np.zeros(3, np.float16))


OUT_TYPES = ["uint8", "int8", "int4", "uint2", "int16", "float8e4m3fn", "float4e2m1", None, "float32", "int32"]


@given(st.lists(st.integers(0, 4), max_size=3), st.lists(st.integers(0, 4), max_size=3),
       st.one_of(st.none(), st.lists(st.integers(0, 4), max_size=3)), st.integers(-5, 5), st.integers(-2, 5),
       st.sampled_from(OUT_TYPES), st.sampled_from([np.float32, np.float16, np.int32, np.float64, np.int8]),
       st.booleans())
def test_fuzz_only_qlinear_errors_escape(xs, ss, zs, axis, block, out, sdt, dq):
    x = np.ones(xs, np.float32)
    s = np.ones(ss, sdt)
    z = None if zs is None else np.zeros(zs, np.uint8)
    try:
        if dq:
            qlinear.dequantize_linear(x.astype(np.int8), s, None if z is None else z.astype(np.int8), axis=axis,
                                      block_size=block, output_dtype=out)
        else:
            qlinear.quantize_linear(x, s, z, axis=axis, block_size=block, output_dtype=out)
    except QlinearError:
        pass
