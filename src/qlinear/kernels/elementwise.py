"""Add, Sub, Mul and Requantize in integer arithmetic.

Fixed-point modes follow the TFLite reference kernels (notes ``int8-kernels.md`` §2): ADD/SUB rescale both inputs to
a common ``2*max(s1, s2)`` with ``left_shift = 20`` (int8) and ``QuantizeMultiplierSmallerThanOneExp``; MUL uses
``MBQM((x1+off1)(x2+off2))`` with the multiplier ``s1*s2/s_out`` formed in float32. Float modes compute
``rint(sum of float32 rescaled terms)`` (``f32_rne``: zero point added after rounding; ``onednn``: before).
"""

from __future__ import annotations

import numpy as np

from qlinear.kernels.requant import (
    FIXED_MODES,
    mbqm,
    mbqm_ruy_x86,
    mbqm_single,
    quantize_multiplier,
    rdbpot,
    requantize,
    srdhm,
)


def _smaller_than_one(x: np.ndarray, m: float) -> np.ndarray:
    q, sh = quantize_multiplier(np.float64(m))
    return rdbpot(srdhm(x, q), -sh)


def add(a: np.ndarray, b: np.ndarray, *, s_a: float, zp_a: int, s_b: float, zp_b: int, s_out: float, zp_out: int,
        mode: str, sub: bool = False, qmin: int = -128, qmax: int = 127, left_shift: int = 20) -> np.ndarray:
    a = np.asarray(a, np.int64) - zp_a
    b = np.asarray(b, np.int64) - zp_b
    if mode in FIXED_MODES:
        s_a, s_b, s_out = (np.float64(np.float32(v)) for v in (s_a, s_b, s_out))
        twice = 2 * max(s_a, s_b)
        ra = _smaller_than_one(a << left_shift, s_a / twice)
        rb = _smaller_than_one(b << left_shift, s_b / twice)
        total = ra - rb if sub else ra + rb
        mo = twice / ((1 << left_shift) * s_out)
        q, sh = quantize_multiplier(np.float64(mo))
        if mo < 1:
            out = rdbpot(srdhm(total, q), -sh)
        else:
            out = srdhm(total << sh, q)
        return np.clip(out + zp_out, qmin, qmax)
    fa = a.astype(np.float32) * np.float32(np.float32(s_a) / np.float32(s_out))
    fb = b.astype(np.float32) * np.float32(np.float32(s_b) / np.float32(s_out))
    v = fa - fb if sub else fa + fb
    out = np.rint(v + np.float32(zp_out)) if mode == "onednn" else np.rint(v) + zp_out
    return np.clip(out, qmin, qmax).astype(np.int64)


def mul(a: np.ndarray, b: np.ndarray, *, s_a: float, zp_a: int, s_b: float, zp_b: int, s_out: float, zp_out: int,
        mode: str, qmin: int = -128, qmax: int = 127) -> np.ndarray:
    prod = (np.asarray(a, np.int64) - zp_a) * (np.asarray(b, np.int64) - zp_b)
    m = np.float32(s_a) * np.float32(s_b) / np.float32(s_out)  # float32, as TFLite's Prepare
    if mode in FIXED_MODES:
        q, sh = quantize_multiplier(np.float64(m), single_rounding=mode == "fixed_single")
        fn = {"fixed_double": mbqm, "fixed_single": mbqm_single, "ruy_x86": mbqm_ruy_x86}[mode]
        return np.clip(fn(prod, q, sh) + zp_out, qmin, qmax)
    return requantize(prod, np.float64(m), zp_out, mode, qmin=qmin, qmax=qmax)


def requantize_tensor(x: np.ndarray, *, s_in: float, zp_in: int, s_out: float, zp_out: int, mode: str,
                      qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """TFLite QUANTIZE int->int (``MBQM(q - zp_in)`` with ``s_in/s_out`` in double) or the float modes."""
    m = np.float64(np.float32(s_in)) / np.float64(np.float32(s_out))
    return requantize(np.asarray(x, np.int64) - zp_in, m, zp_out, mode, qmin=qmin, qmax=qmax)
