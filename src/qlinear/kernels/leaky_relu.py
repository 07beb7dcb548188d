"""LiteRT's integer LEAKY_RELU (``reference_ops::QuantizeLeakyRelu``, ``activations.cc`` ``LeakyReluPrepare``), int8
and int16, bit for bit.

Prepare forms two multipliers in float32 arithmetic (``float`` scales and ``alpha``), widened to double for
``QuantizeMultiplier``: ``identity = s_in / s_out`` and ``alpha = s_in * alpha / s_out``. Per value, with
``v = q - zp_in``: ``out = zp_out + MBQM(v, identity)`` when ``v >= 0``, else ``zp_out + MBQM(v, alpha)``, clamped
to the output type. Checked against LiteRT 2.3.0 over every int8 input value (``tests/kernels/test_leaky_relu.py``).

LiteRT's default resolver hands an int8 LEAKY_RELU to XNNPACK (``qs8-vlrelu``) when its scales allow: with
``p = s_in / s_out`` and ``n = p * alpha`` (float32), ``2^-8 <= p <= 2^7``, ``2^-8 <= |n|``, ``-0x1.FFFCp+6 <= n <=
2^7``. XNNPACK multiplies by 8-bit fixed-point multipliers, ``lrintf(256 p)`` or ``lrintf(256 n)``, and rounds half
up: ``out = (v * M + 256 zp_out + 128) >> 8`` (:func:`xnnpack_leaky_relu`); otherwise the builtin kernel runs.
"""

from __future__ import annotations

import numpy as np

from qlinear.kernels.requant import requantize


def multipliers(s_in: float, s_out: float, alpha: float) -> tuple[float, float]:
    """``(identity, alpha)`` multipliers as LiteRT's Prepare forms them (float32 products and quotients)."""
    si, so, a = np.float32(s_in), np.float32(s_out), np.float32(alpha)
    return float(np.float32(si / so)), float(np.float32(np.float32(si * a) / so))


def leaky_relu(x: np.ndarray, *, s_in: float, zp_in: int, s_out: float, zp_out: int, alpha: float,
               mode: str = "fixed_double", qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """LEAKY_RELU of the integers ``x`` (int64 result, clamped to ``[qmin, qmax]``); ``mode``: the requantization
    formula of :func:`~qlinear.kernels.requant.requantize` (LiteRT's build: ``fixed_double``)."""
    v = np.asarray(x, np.int64) - zp_in
    ident, slope = multipliers(s_in, s_out, alpha)
    pos = requantize(v, ident, zp_out, mode, qmin=qmin, qmax=qmax)
    neg = requantize(v, slope, zp_out, mode, qmin=qmin, qmax=qmax)
    return np.where(v >= 0, pos, neg)


def xnnpack_scales(s_in: float, s_out: float, alpha: float) -> tuple[np.float32, np.float32] | None:
    """XNNPACK's ``(positive, negative)`` input-to-output scales (float32), or None when it refuses them (LiteRT then
    runs its builtin kernel)."""
    p = np.float32(np.float32(s_in) / np.float32(s_out))
    n = np.float32(p * np.float32(alpha))
    if not (2.0 ** -8 <= p <= 2.0 ** 7) or not (-float.fromhex("0x1.FFFCp+6") <= n <= 2.0 ** 7) \
            or abs(n) < 2.0 ** -8:
        return None
    return p, n


def xnnpack_leaky_relu(x: np.ndarray, *, s_in: float, zp_in: int, s_out: float, zp_out: int,
                       alpha: float) -> np.ndarray:
    """int8 LEAKY_RELU as LiteRT's XNNPACK delegate computes it (module docstring), or the builtin kernel's result
    where XNNPACK refuses the scales."""
    sc = xnnpack_scales(s_in, s_out, alpha)
    if sc is None:
        return leaky_relu(x, s_in=s_in, zp_in=zp_in, s_out=s_out, zp_out=zp_out, alpha=alpha)
    mp, mn = (int(np.rint(np.float32(256.0) * v)) for v in sc)
    v = np.asarray(x, np.int64) - zp_in
    y = (v * np.where(v >= 0, mp, mn) + (zp_out << 8) + 128) >> 8
    return np.clip(y, -128, 127)


__all__ = ["leaky_relu", "multipliers", "xnnpack_leaky_relu", "xnnpack_scales"]
