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
    if mode == "xnnpack":
        return _add_xnnpack(a, b, s_a, zp_a, s_b, zp_b, s_out, zp_out, sub, qmin, qmax)
    if mode == "mlas" and not sub:
        return _add_mlas(a, b, s_a, zp_a, s_b, zp_b, s_out, zp_out, qmin, qmax)
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


def _add_xnnpack(a: np.ndarray, b: np.ndarray, s_a: float, zp_a: int, s_b: float, zp_b: int, s_out: float,
                 zp_out: int, sub: bool, qmin: int, qmax: int) -> np.ndarray:
    """XNNPACK's qs8/qu8 add (LiteRT's default resolver; measured bit for bit): the input-to-output scales
    ``float32(s_i / s_out)`` become integer multipliers with 20 bits for the larger, ``m_i = rint(r_i 2^shift)``
    with ``shift = 20 - floor(log2(max r_i))``; ``acc = 2^(shift-1) + m_a (a - za) + m_b (b - zb)`` in int32, then
    ``acc >> shift`` (floor: ties toward +inf) ``+ zp_out``, clamped."""
    ra = np.float32(np.float32(s_a) / np.float32(s_out))
    rb = np.float32(np.float32(s_b) / np.float32(s_out))
    exp = int(np.frexp(max(ra, rb))[1]) - 1  # floor(log2) of a normal float
    shift = 20 - exp
    ma = int(np.rint(np.float64(ra) * 2.0 ** shift))
    mb = int(np.rint(np.float64(rb) * 2.0 ** shift)) * (-1 if sub else 1)
    acc = (1 << (shift - 1)) + ma * (np.asarray(a, np.int64) - zp_a) + mb * (np.asarray(b, np.int64) - zp_b)
    return np.clip((acc >> shift) + zp_out, qmin, qmax)


def _fma32(a: np.ndarray, b: np.float32, c: np.ndarray) -> np.ndarray:
    """float32 fused multiply-add ``round32(a*b + c)``: the product of a small integer and a float32 and the sum
    are exact in float64 at these magnitudes, so one rounding to float32 remains."""
    return (np.asarray(a, np.float64) * np.float64(b) + np.asarray(c, np.float64)).astype(np.float32)


def _add_mlas(a: np.ndarray, b: np.ndarray, s_a: float, zp_a: int, s_b: float, zp_b: int, s_out: float, zp_out: int,
              qmin: int, qmax: int) -> np.ndarray:
    """ONNX Runtime's QLinearAdd on x86 (MLAS AVX2 kernel, what its fused int8 path runs): ratios
    ``r_i = float32(s_i / s_out)``, a fixed part ``float32(zp_out) - (r_a zp_a + r_b zp_b)``, then per element
    ``fma(a, r_a, fma(b, r_b, fixed))`` in float32, converted with ties to even and saturated."""
    ra = np.float32(np.float32(s_a) / np.float32(s_out))
    rb = np.float32(np.float32(s_b) / np.float32(s_out))
    fixed = np.float32(np.float32(zp_out) - _fma32(np.float32(zp_a), ra, np.float32(rb) * np.float32(zp_b)))
    t = _fma32(np.asarray(b, np.float32), rb, np.full(np.shape(b), fixed, np.float32))
    t = _fma32(np.asarray(a, np.float32), ra, t)
    return np.clip(np.rint(t), qmin, qmax).astype(np.int64)


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
