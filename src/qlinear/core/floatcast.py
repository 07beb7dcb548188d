"""Conversion to float8 / float6 / float4 exactly as ONNX Cast and the float4e2m1 / float6 notes define it.

Spec (``notes/onnx-ort.md`` §1.2, Cast-25 table; onnx technical note "Float stored in 4 bits"):

==========================  ==========  ==========  ==========  ==========
x                            E4M3FN      E4M3FNUZ    E5M2        E5M2FNUZ
==========================  ==========  ==========  ==========  ==========
saturate=1: +-Inf            +-FLT_MAX   +-FLT_MAX   +-FLT_MAX   +-FLT_MAX
saturate=1: abs([x])>FLT_MAX +-FLT_MAX   +-FLT_MAX   +-FLT_MAX   +-FLT_MAX
saturate=0: +-Inf            NaN         NaN         +-Inf       NaN
saturate=0: abs([x])>FLT_MAX NaN         NaN         +-Inf       NaN
NaN                          NaN         NaN         NaN         NaN
-0                           -0          0           -0          0
==========================  ==========  ==========  ==========  ==========

``[x]`` is x rounded to the target's mantissa width, ties to even. float4e2m1, float6e2m3 and float6e3m2
have neither Inf nor NaN (``QType.finite``): values outside [-max, max] and +-Inf saturate to +-max (6, 7.5,
28) whatever ``saturate`` says (QuantizeLinear-28 schema). NaN:

* float4e2m1: **NaN becomes 6**, as its note says (ml_dtypes gives -0; deviation R5 in the notes).
* float6: the onnx note "Float stored in 6 bits" lists ``nan -> -0.0`` and calls it unspecified ("matches
  FLOAT4E2M1's cast behavior, not saturated"). qlinear takes that zero, with ml_dtypes' sign, which is the
  reference's: NaN with the sign bit clear -> -0 (0x20), with the sign bit set -> +0 (0x00). A NaN carries
  no value, so it contributes nothing (zero) rather than the largest magnitude, and every NaN bit pattern
  gives what ``onnx.reference`` gives.

ml_dtypes implements the saturate=0 column bit-exactly for float32 inputs (checked against the
reference and against ORT outside ORT's two overflow bugs). It rounds float64 inputs through float32
(double rounding), so float64 values are first narrowed with round-to-odd, which makes the second
rounding exact (24 >= mantissa + 2 bits).
"""

from __future__ import annotations

import numpy as np

from qlinear.core.types import QType


def round_to_odd_f32(v: np.ndarray) -> np.ndarray:
    """Narrow float64 to float32 with round-to-odd (sticky): exact values stay, inexact ones get an odd last bit.

    A later round-to-nearest-even into any format with at most 22 mantissa bits then equals a single
    correct rounding of the original float64 value.
    """
    f = v.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        inexact = np.isfinite(f) & (f.astype(np.float64) != v)
    even = (f.view(np.uint32) & np.uint32(1)) == 0
    fix = inexact & even
    if fix.any():
        toward = np.where(v > f.astype(np.float64), np.float32(np.inf), np.float32(-np.inf))
        f = np.where(fix, np.nextafter(f, toward), f)
    return f


def to_lowp_float(v: np.ndarray, t: QType, saturate: bool) -> np.ndarray:
    """Round ``v`` (float16/bfloat16/float32/float64) to float8/float6/float4 type ``t`` per the Cast table."""
    if v.dtype == np.float64:
        v = round_to_odd_f32(v)
    else:
        v = v.astype(np.float32)
    if t.finite:  # float4e2m1, float6: always saturating; NaN per the type's note (module doc)
        nan = np.isnan(v)
        with np.errstate(invalid="ignore"):  # NaN is replaced below
            out = np.clip(v, np.float32(-t.qmax), np.float32(t.qmax)).astype(t.storage)
        if nan.any():
            if t.nan_as is not None:
                fill = np.full(int(nan.sum()), t.nan_as, np.float32)
            else:  # zero with the opposite sign bit
                fill = np.where(np.signbit(v[nan]), np.float32(0.0), np.float32(-0.0))
            out[nan] = fill.astype(t.storage)
        return out
    if saturate:
        # clipping before rounding equals rounding then saturating: everything above FLT_MAX rounds to
        # FLT_MAX or to a value that saturates to it. NaN passes through np.clip unchanged.
        v = np.clip(v, np.float32(t.qmin), np.float32(t.qmax))
    return v.astype(t.storage)


__all__ = ["round_to_odd_f32", "to_lowp_float"]
