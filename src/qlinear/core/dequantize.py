"""DequantizeLinear, opset 25 (and 28 for float6 inputs), bit-exact.

Spec (DequantizeLinear-25 schema)::

    y = (x - x_zero_point) * x_scale

* ``x_zero_point`` has the type of ``x``; per-tensor, per-axis and blocked granularity as for
  QuantizeLinear (:mod:`qlinear.core.granularity`).
* The output type is ``output_dtype`` if given, else the scale's type; "the output type also
  determines the precision of the multiplication". qlinear computes as ONNX Runtime does
  (``DequantizeLinearApply``) and as the reference does: the exact integer difference converted once to
  float32, one float32 multiply, one rounding to the output type. For 8-bit inputs this is exactly the
  correctly rounded product in the output precision; for 16/32-bit inputs it is what both peers compute.
* int32 inputs: the difference is exact (int64) before the float32 conversion; the reference converts
  x to float32 first and subtracts in float64 (deviation R8); ONNX Runtime wraps on int32 overflow.
* float8 / float6 / float4 inputs: ``(float32(x) - float32(zero_point)) * scale`` (the difference of two
  float6/float4 values is exact in float32). The reference raises for a non-zero float8 zero point and
  ignores the float4 one (deviation R4); it applies the float6 one as qlinear does. qlinear applies the
  formula for all. Packed input (:class:`PackedTensor`) is unpacked first for the NumPy path.
* A float8e8m0 scale needs ``output_dtype`` (it is not a valid output type; the reference returns e8m0,
  deviation R9).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core import granularity as gr
from qlinear.core import native
from qlinear.core.packing import PackedTensor
from qlinear.core.quantize import _check_out, kernel_layout
from qlinear.core.types import (
    DEQUANTIZE_INPUTS,
    DEQUANTIZE_OUTPUT,
    DEQUANTIZE_SCALE,
    QType,
    TypeLike,
    dtype_of,
    qtype,
    require,
)
from qlinear.errors import DTypeError

#: C kernel input codes (``_native.c``, ql_dequantize_f32)
_ITYPE_CODE = {"uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint4": 4, "int4": 5, "uint2": 6, "int2": 7}
_INPUT_NAMES = tuple(t.name for t in DEQUANTIZE_INPUTS)
_PACKED_CODE = {"uint4": 8, "int4": 9, "uint2": 10, "int2": 11}


def dequantize_linear(
    x: Any,
    x_scale: Any,
    x_zero_point: Any = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: TypeLike | None = None,
    out: np.ndarray | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """ONNX DequantizeLinear-25/28: ``y = (x - x_zero_point) * x_scale``.

    Args:
        x: quantized input (any T1 type, as its ml_dtypes storage dtype), or a :class:`PackedTensor`.
        x_scale: float32 / float16 / bfloat16 / float8e8m0; shape as for :func:`quantize_linear`.
        x_zero_point: optional, same type as ``x`` and same shape as ``x_scale``.
        axis, block_size: as for QuantizeLinear.
        output_dtype: float32 / float16 / bfloat16; default the scale's type.
        out: optional preallocated output array.
        threads: threads for the compiled kernel (default: all cores for large inputs).

    >>> import numpy as np
    >>> dequantize_linear(np.array([0, 3, 128, 255], np.uint8), np.float32(2.0), np.uint8(128)).tolist()
    [-256.0, -250.0, 0.0, 254.0]
    """
    native.check_threads(threads)
    packed_in = isinstance(x, PackedTensor)
    if packed_in:
        xt, x_shape = x.qtype, tuple(x.shape)
    else:
        x = np.asarray(x)
        xt, x_shape = dtype_of(x, arg="x", allowed=_INPUT_NAMES, what="the input type"), x.shape
    require(xt, _INPUT_NAMES, arg="x", what="the input type")
    s = np.asarray(x_scale)
    st = dtype_of(s, arg="x_scale", allowed=DEQUANTIZE_SCALE, what="the scale type")
    z = None if x_zero_point is None else np.asarray(x_zero_point)
    if z is not None and z.dtype != xt.storage:
        raise DTypeError(f"x_zero_point: type {dtype_of(z, arg='x_zero_point').name} must equal the type of x ({xt.name})")
    if output_dtype in (None, 0):
        if st.name == "float8e8m0":
            raise DTypeError("output_dtype is required with a float8e8m0 x_scale (e8m0 is not an output type); "
                             "pass output_dtype='float32', 'float16' or 'bfloat16'")
        ot = st
    else:
        ot = require(qtype(output_dtype, arg="output_dtype"), DEQUANTIZE_OUTPUT, arg="output_dtype",
                     what="the output type")
    g = gr.resolve(x_shape, s.shape, axis, block_size, scale_arg="x_scale")
    if z is not None:
        gr.check_zero_point(z.shape, s.shape, g, zp_arg="x_zero_point", scale_arg="x_scale")

    if xt.name in _ITYPE_CODE and ot.name == "float32" and st.name == "float32" and native.available():
        return _dequantize_native(x, xt, s, z, g, x_shape, packed_in, out, threads)

    xv = x.unpack() if packed_in else x
    y = _dequantize_numpy(xv, xt, s, z, g, ot)
    if out is not None:
        _check_out(out, x_shape, ot.storage)
        out[...] = y
        return out
    return y


def _dequantize_numpy(x: np.ndarray, xt: QType, s: np.ndarray, z: np.ndarray | None, g: gr.Granularity,
                      ot: QType) -> np.ndarray:
    se = gr.expand(s, x.shape, g).astype(np.float32)
    if xt.is_int:
        d = x.astype(np.int64)
        if z is not None:
            d = d - gr.expand(z, x.shape, g).astype(np.int64)
        df = d.astype(np.float32)
    else:
        df = x.astype(np.float32)
        if z is not None:
            df = df - gr.expand(z, x.shape, g).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return (df * se).astype(ot.storage)


def _dequantize_native(x: np.ndarray | PackedTensor, xt: QType, s: np.ndarray, z: np.ndarray | None,
                       g: gr.Granularity, x_shape: tuple[int, ...], packed_in: bool, out: np.ndarray | None,
                       threads: int | None) -> np.ndarray:
    if packed_in:
        if xt.name not in _PACKED_CODE:
            raise DTypeError(f"x: packed input of type {xt.name} is not supported")
        buf = np.ascontiguousarray(x.data)
        code = _PACKED_CODE[xt.name]
        align = xt.per_byte
    else:
        buf = np.ascontiguousarray(x)
        code = _ITYPE_CODE[xt.name]
        align = 1
    s = np.ascontiguousarray(s, dtype=np.float32)
    z32 = None if z is None else np.ascontiguousarray(z.astype(np.int32))
    if out is None:
        y = np.empty(x_shape, np.float32)
    else:
        _check_out(out, x_shape, np.dtype(np.float32))
        y = out
    n = y.size
    row_len, D, B, so, sd, kind, kb = kernel_layout(x_shape, g)
    fn = native.lib().ql_dequantize_f32
    xa, ya, sa, za = buf.ctypes.data, y.ctypes.data, s.ctypes.data, native.addr(z32)

    stream = int(y.nbytes >= native.STREAM_MIN_BYTES)

    def run(e0: int, e1: int) -> None:
        fn(xa, code, ya, sa, za, e0, e1, row_len, D, B, so, sd, kind, kb, stream)

    if n:
        native.parallel_ranges(run, n, native.resolve_threads(threads, n), align)
    return y


__all__ = ["dequantize_linear"]
