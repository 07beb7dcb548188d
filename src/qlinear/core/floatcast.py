"""Conversion to float8 / float4 exactly as ONNX Cast-25 and the float4e2m1 note define it.

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

``[x]`` is x rounded to the target's mantissa width, ties to even. float4e2m1 has neither Inf nor
NaN: values outside [-6, 6] and +-Inf saturate to +-6, **NaN becomes 6** (ml_dtypes gives -0; qlinear
follows the spec, see deviation R5 in the notes).

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
    """Round ``v`` (float16/bfloat16/float32/float64) to float8 or float4 type ``t`` per the Cast-25 table."""
    if v.dtype == np.float64:
        v = round_to_odd_f32(v)
    else:
        v = v.astype(np.float32)
    if t.bits == 4:  # float4e2m1: always saturating, NaN -> 6
        nan = np.isnan(v)
        out = np.clip(v, -t.qmax, t.qmax).astype(t.storage)
        if nan.any():
            out[nan] = np.asarray(t.qmax, np.float32).astype(t.storage)
        return out
    if saturate:
        # clipping before rounding equals rounding then saturating: everything above FLT_MAX rounds to
        # FLT_MAX or to a value that saturates to it. NaN passes through np.clip unchanged.
        v = np.clip(v, np.float32(t.qmin), np.float32(t.qmax))
    return v.astype(t.storage)


__all__ = ["round_to_odd_f32", "to_lowp_float"]
