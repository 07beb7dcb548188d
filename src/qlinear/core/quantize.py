"""QuantizeLinear, opset 25 (and 28 for the float6 outputs), bit-exact.

Spec: ``onnx-quantizelinear-25.txt``::

    y = saturate((x / y_scale) + y_zero_point)

* ``x / y_scale`` is a true division (never a multiplication by the reciprocal) carried out in the
  *precision* type: the ``precision`` argument if given, else the type of ``y_scale`` ("The type of
  y_scale determines the precision of the division operation between x and y_scale, unless the
  precision attribute is specified"). Both operands are converted to that type first (this is what ONNX
  Runtime 1.32 does; the reference evaluator divides in float32 when x is float32 and the scale float16,
  deviation R2).
* Integer outputs: the quotient is rounded half to even, the zero point is added, the result saturates
  to the spec's range. NaN becomes the type minimum (the spec is silent; this is ONNX Runtime's answer;
  the reference wraps through INT32_MIN, deviation R1).
* Float outputs (float8, float6, float4): ``quotient + zero_point`` is rounded to the target per the Cast
  table (:mod:`qlinear.core.floatcast`), honouring ``saturate`` for float8 (float6 and float4 always
  saturate). The zero point, only when given, is added to the quotient (already rounded to the precision
  type) in float32, or float64 for the exact int32-scale division: the spec names a precision for the
  division only, and a float16/bfloat16 sum would round twice (e.g. float6e2m3: ``0.25 + 2^-12 + 4`` is
  ``4.25`` in float16, a tie that goes to 4, where the single rounding gives 4.5). A float16/bfloat16
  quotient plus a float6/float4 zero point rounds to the same float6/float4 value in float32 as exactly
  (a float32 rounding cannot land on a midpoint the exact sum misses), and it is what ``onnx.reference``
  computes (NumPy promotes the sum to float32). The reference ignores a float8 zero point (deviation R4).
* Scale types the spec allows but whose "precision" is not a float: ``int32`` scales divide exactly
  (the float64 quotient of two int32/float32 values rounds to the same integer as the exact rational);
  ``float8e8m0`` scales (powers of two) divide in float32, which is exact except for subnormals.

The common case (float32 x and scale, integer output) runs in the compiled fused kernel
(:mod:`qlinear.core.native`); everything else in vectorised NumPy. Both give the same bits; the test
suite checks it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core import granularity as gr
from qlinear.core import native
from qlinear.core.floatcast import to_lowp_float
from qlinear.core.packing import PackedTensor, pack, packed_nbytes
from qlinear.core.types import (
    QUANTIZE_OUTPUTS,
    QUANTIZE_SCALE,
    QUANTIZE_X,
    QType,
    TypeLike,
    dtype_of,
    qtype,
)
from qlinear.errors import DTypeError, ShapeError

_F32 = np.dtype(np.float32)

#: C kernel output codes (``_native.c``, ql_quantize_f32)
_OTYPE_CODE = {"uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint4": 4, "int4": 4, "uint2": 5, "int2": 5}


def _output_type(output_dtype: TypeLike | None, zp: np.ndarray | None) -> QType:
    """Spec: output_dtype, else the zero point's type, else uint8; both given must agree."""
    out = None if output_dtype in (None, 0) else qtype(output_dtype, arg="output_dtype")
    if zp is not None:
        zt = dtype_of(zp, arg="y_zero_point")
        if out is not None and out != zt:
            raise DTypeError(f"output_dtype={out.name} disagrees with the type of y_zero_point ({zt.name}); "
                             f"they must be equal (or pass only one)")
        out = zt
    out = out or qtype("uint8")
    if out not in QUANTIZE_OUTPUTS:
        raise DTypeError(f"output_dtype: QuantizeLinear cannot output {out.name}; expected one of "
                         f"{', '.join(t.name for t in QUANTIZE_OUTPUTS)}")
    return out


def precision_dtype(scale_type: QType, precision: TypeLike | None) -> np.dtype:
    """NumPy dtype in which ``x / y_scale`` is computed (float64 stands for "exact", see module doc)."""
    if precision not in (None, 0):
        p = qtype(precision, arg="precision")
        if p.name not in ("float32", "float16", "bfloat16"):
            raise DTypeError(f"precision must be float32, float16 or bfloat16, got {p.name}")
        return p.storage
    if scale_type.name == "int32":
        return np.dtype(np.float64)
    if scale_type.name == "float8e8m0":
        return _F32
    return scale_type.storage


def _divide(x: np.ndarray, s: np.ndarray, p: np.dtype) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.true_divide(x.astype(p, copy=False), s.astype(p, copy=False), dtype=p)


def quantize_linear(
    x: Any,
    y_scale: Any,
    y_zero_point: Any = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: TypeLike | None = None,
    saturate: bool = True,
    precision: TypeLike | None = None,
    packed: bool = False,
    out: np.ndarray | None = None,
    threads: int | None = None,
) -> np.ndarray | PackedTensor:
    """ONNX QuantizeLinear-25/28: ``y = saturate(round(x / y_scale) + y_zero_point)``.

    Args:
        x: input, float32 / float16 / bfloat16 / int32 (spec T1).
        y_scale: scalar (per-tensor), 1-D of length ``x.shape[axis]`` (per-axis), or the input's shape
            with ``ceil(D/block_size)`` on ``axis`` (blocked); float32 / float16 / bfloat16 / int32 /
            float8e8m0 (spec T2).
        y_zero_point: same shape as ``y_scale``; its type is the output type (spec T3).
        axis: quantization axis for per-axis and blocked scales; negative counts from the end.
        block_size: > 0 for blocked quantization.
        output_dtype: output type (ONNX name, ``TensorProto`` number, dtype or :class:`QType`) when
            there is no zero point; default uint8.
        saturate: float8 outputs only: saturate out-of-range values (Cast-25 table); float6/float4 always
            saturate (they have no Inf/NaN).
        precision: type of the division (default: the scale's type).
        packed: for 2-, 4- and 6-bit outputs, return a :class:`PackedTensor` in ONNX byte layout.
        out: optional preallocated output (the unpacked output array, or for ``packed=True`` a uint8
            array of ``ceil(n * bits / 8)`` bytes).
        threads: threads for the compiled kernel (default: all cores for large inputs).

    Returns:
        An array of the output type's storage dtype (``ml_dtypes.int4`` ...), or a PackedTensor.

    >>> import numpy as np
    >>> quantize_linear(np.array([0.0, 1.5, 2.5, -1.0], np.float32), np.float32(1.0), np.uint8(128)).tolist()
    [128, 130, 130, 127]
    """
    native.check_threads(threads)
    x = np.asarray(x)
    xt = dtype_of(x, arg="x", allowed=QUANTIZE_X, what="the input type")
    s = np.asarray(y_scale)
    st = dtype_of(s, arg="y_scale", allowed=QUANTIZE_SCALE, what="the scale type")
    z = None if y_zero_point is None else np.asarray(y_zero_point)
    ot = _output_type(output_dtype, z)
    g = gr.resolve(x.shape, s.shape, axis, block_size, scale_arg="y_scale")
    if z is not None:
        gr.check_zero_point(z.shape, s.shape, g, zp_arg="y_zero_point", scale_arg="y_scale")
    if packed and not ot.is_subbyte:
        raise DTypeError(f"packed=True needs a 2-, 4- or 6-bit output type, got {ot.name}")
    p = precision_dtype(st, precision)

    if ot.is_int and xt.name == "float32" and st.name == "float32" and p == _F32 and native.available():
        return _quantize_native(x, s, z, ot, g, packed, out, threads)

    y = _quantize_numpy(x, s, z, ot, g, p, saturate)
    if packed:
        pt = pack(y, ot)
        if out is not None:
            _check_out(out, (pt.data.size,), np.dtype(np.uint8))
            out[...] = pt.data
            return PackedTensor(out, pt.shape, ot)
        return pt
    if out is not None:
        _check_out(out, x.shape, ot.storage)
        out[...] = y
        return out
    return y


def _check_out(out: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
    if not isinstance(out, np.ndarray) or out.shape != tuple(shape) or out.dtype != dtype:
        got = (getattr(out, "shape", None), getattr(out, "dtype", type(out).__name__))
        raise ShapeError(f"out: expected a C-contiguous array of shape {tuple(shape)} and dtype {dtype}, got {got}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ShapeError("out: the output array must be C-contiguous and writeable")


def _quantize_numpy(x: np.ndarray, s: np.ndarray, z: np.ndarray | None, ot: QType, g: gr.Granularity,
                    p: np.dtype, saturate: bool) -> np.ndarray:
    se = gr.expand(s, x.shape, g)
    q = _divide(x, se, p)
    if ot.is_float:
        if z is not None:  # in float32 (float64 for the exact int32-scale quotient): module doc
            a = np.promote_types(p, _F32)
            with np.errstate(invalid="ignore", over="ignore"):
                q = q.astype(a) + gr.expand(z, x.shape, g).astype(a)
        return to_lowp_float(q, ot, saturate)
    r = np.rint(q.astype(np.float64))
    if z is not None:
        r += gr.expand(z, x.shape, g).astype(np.float64)
    r = np.where(np.isnan(r), ot.qmin, np.clip(r, ot.qmin, ot.qmax))
    return r.astype(np.int32).astype(ot.storage)


def kernel_layout(x_shape: tuple[int, ...], g: gr.Granularity) -> tuple[int, ...]:
    """(row_len, D, B, so, sd, kind, kb) for the C kernel (see ``_native.c``)."""
    L = gr.layout(x_shape, g)
    if isinstance(g, gr.PerTensor):
        return (max(L.inner, 1), 1, 1, 0, 0, 0, 1)
    if isinstance(g, gr.PerAxis):
        if L.inner == 1:  # scales run along the row
            return (L.D, 1, 1, 0, 0, 1, 1)
        return (L.inner, L.D, 1, 0, 1, 0, 1)
    if L.inner == 1:  # blocks of B along the row
        return (L.D, 1, 1, L.nb, 0, 2, L.block)
    return (L.inner, L.D, L.block, L.nb * L.inner, L.inner, 1, 1)


def _quantize_native(x: np.ndarray, s: np.ndarray, z: np.ndarray | None, ot: QType, g: gr.Granularity,
                     packed: bool, out: np.ndarray | None, threads: int | None) -> np.ndarray | PackedTensor:
    x = np.require(x, requirements="C")  # ascontiguousarray would make a 0-d input 1-D
    s = np.ascontiguousarray(s, dtype=np.float32)
    z32 = None if z is None else np.ascontiguousarray(z.astype(np.int32))
    n = x.size
    code = _OTYPE_CODE[ot.name]
    if packed:
        code = 6 if ot.bits == 4 else 7
        nbytes = packed_nbytes(n, ot)
        if out is None:
            y = np.empty(nbytes, np.uint8)
        else:
            _check_out(out, (nbytes,), np.dtype(np.uint8))
            y = out
        align = ot.per_byte
    else:
        if out is None:
            y = np.empty(x.shape, ot.storage)
        else:
            _check_out(out, x.shape, ot.storage)
            y = out
        align = 1
    lay = kernel_layout(x.shape, g)
    fn = native.lib().ql_quantize_f32
    xa, ya, sa, za = x.ctypes.data, y.ctypes.data, s.ctypes.data, native.addr(z32)
    lo, hi = float(ot.qmin), float(ot.qmax)
    row_len, D, B, so, sd, kind, kb = lay

    def run(e0: int, e1: int) -> None:
        fn(xa, ya, code, sa, za, e0, e1, row_len, D, B, so, sd, kind, kb, lo, hi)

    if n:
        native.parallel_ranges(run, n, native.resolve_threads(threads, n), align)
    if packed:
        if n % ot.per_byte:  # padding bits of the last byte are 0 (onnx.proto)
            used = (n % ot.per_byte) * ot.bits
            y[-1] &= np.uint8((1 << used) - 1)
        return PackedTensor(y, tuple(x.shape), ot)
    return y


__all__ = ["quantize_linear", "precision_dtype", "kernel_layout"]
