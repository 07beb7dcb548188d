"""LiteRT's int8 HARD_SWISH (``reference_ops::HardSwish``, ``activations.cc`` ``HardSwishPrepare``), bit for bit.

``x * relu6(x + 3) / 6`` in 16-bit fixed point: the input moved to a "hires" scale ``s_in / 128``; the output on
``output_multiplier = (s_in / 128) / s_out`` and the "relu-ish" factor on ``reluish_multiplier = (s_in / 128) /
(3 / 32768)``, both Q15 multipliers (``QuantizeMultiplier`` then ``DownScaleInt32ToInt16Multiplier``) computed from
float32 scales; ``SaturatingRoundingDoublingHighMul`` (int16, ties toward +inf), a truncating doubling high multiply
for the product, ``RoundingDivideByPOT`` for the shifts. An int8 input has 256 values: the kernel is a table.
"""

from __future__ import annotations

import numpy as np

from qlinear.errors import KernelError
from qlinear.kernels.requant import quantize_multiplier

I16_MIN, I16_MAX = -(1 << 15), (1 << 15) - 1


def _q15(m: np.float32) -> tuple[int, int]:
    """``QuantizeMultiplier`` (Q31) then ``DownScaleInt32ToInt16Multiplier``: (Q15 multiplier, exponent)."""
    q, shift = quantize_multiplier(float(m))
    q, shift = int(q), int(shift)
    if q >= (1 << 31) - 1 - (1 << 15):
        return I16_MAX, shift
    return (q + (1 << 15)) >> 16, shift


def _srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int16 (ties toward +inf, C division toward zero)."""
    p = a.astype(np.int64) * b
    s = p + np.where(p >= 0, 1 << 14, 1 - (1 << 14))
    r = np.where(s >= 0, s >> 15, -((-s) >> 15))
    return np.where((a == I16_MIN) & (b == I16_MIN), I16_MAX, r)


def _sdhm16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``SaturatingDoublingHighMul`` on int16: the product / 2^15 truncated toward zero."""
    p = a.astype(np.int64) * b.astype(np.int64)
    r = np.where(p >= 0, p >> 15, -((-p) >> 15))
    return np.where((a == I16_MIN) & (b == I16_MIN), I16_MAX, r)


def _rdbpot(x: np.ndarray, e: int) -> np.ndarray:
    mask = (1 << e) - 1
    return (x >> e) + ((x & mask) > ((mask >> 1) + (x < 0)))


def _sat16(x: np.ndarray) -> np.ndarray:
    return np.clip(x, I16_MIN, I16_MAX)


def hard_swish_table(s_in: float, zp_in: int, s_out: float, zp_out: int, qmin: int = -128,
                     qmax: int = 127) -> np.ndarray:
    """The 256 outputs of LiteRT's int8 HARD_SWISH for the inputs -128..127 (module docstring)."""
    hires = np.float32(1.0 / 128.0) * np.float32(s_in)
    out_m, out_e = _q15(hires / np.float32(s_out))
    if out_e > 0:
        raise KernelError(f"HARD_SWISH: output scale {s_out} is too small for input scale {s_in} (LiteRT refuses an "
                          "output multiplier above 1)")
    rel_m, rel_e = _q15(hires / np.float32(3.0 / 32768.0))
    x = np.arange(-128, 128, dtype=np.int64) - zp_in
    hi = x * 128
    pre = _srdhm16(hi, out_m)
    r = hi
    if rel_e > 0:
        r = _sat16(r * (1 << (rel_e - 1)))
    r = _srdhm16(r, rel_m)
    if rel_e > 0:
        r = _sat16(r * 2)
    if rel_e < 0:
        r = _rdbpot(r, -rel_e)
    r = (r + (1 << 15)) >> 1
    y = _rdbpot(_sdhm16(r, pre), -out_e) + zp_out
    return np.clip(y, qmin, qmax)


def hard_swish(x: np.ndarray, *, s_in: float, zp_in: int, s_out: float, zp_out: int, qmin: int = -128,
               qmax: int = 127) -> np.ndarray:
    """LiteRT's int8 HARD_SWISH of the int8 tensor ``x`` (module docstring)."""
    table = hard_swish_table(s_in, zp_in, s_out, zp_out, qmin, qmax)
    return table[np.asarray(x).astype(np.int64) + 128].astype(np.int8)


__all__ = ["hard_swish", "hard_swish_table"]
