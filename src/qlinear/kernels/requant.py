"""Requantization: int32 accumulator -> output integer, as each runtime rounds it.

Notes ``int8-kernels.md`` §0-§1 (formulas matched bit for bit against the peers there). With ``m = s_in*s_w/s_out``
(double, per channel) and ``(q, shift) = QuantizeMultiplier(m)`` (``m ~ q * 2^(shift-31)``):

==================  ==========================================================================================
mode                formula (then ``+ zp_out`` where not inside, clamp to the output range / fused activation)
==================  ==========================================================================================
``fixed_double``    ``RDBPOT(SRDHM(acc * 2^left, q), right)``: TFLite/TFLM reference CONV, DEPTHWISE, MUL,
                    MEAN, requantize; tflite-runtime <= 2.14 FC (default build, double rounding)
``fixed_single``    ``(acc*q + 2^(30-shift)) >> (31-shift)``: ``TFLITE_SINGLE_ROUNDING`` builds, ruy reference
``ruy_x86``         ``h = SRDHM(acc << left, q)`` then ``(h + 2^(r-1)) >> r``: LiteRT's optimized x86 kernels
``f64_round_away``  ``round_half_away(double(acc) * m)``: LiteRT >= 2025-04 reference FULLY_CONNECTED
``f32_rne``         ``rint(float32(acc) * float32(m)) + zp``: ONNX Runtime (MLAS), XNNPACK, fbgemm
``onednn``          ``rint(float32(acc) * float32(m) + zp)``: oneDNN (zero point inside the rounding)
==================  ==========================================================================================

All vectorised over int64 arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.errors import KernelError

MODES = ("fixed_double", "fixed_single", "ruy_x86", "f64_round_away", "f32_rne", "onednn")
FIXED_MODES = ("fixed_double", "fixed_single", "ruy_x86")
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def round_half_away(x: Any) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def quantize_multiplier(m: Any, *, single_rounding: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``QuantizeMultiplier`` (``quantization_util.cc``): Q31 multiplier and shift, vectorised."""
    m = np.asarray(m, np.float64)
    f, shift = np.frexp(m)
    q = round_half_away(f * 2.0**31).astype(np.int64)
    top = q == 2**31
    q = np.where(top, 2**30, q)
    shift = np.where(top, shift + 1, shift).astype(np.int64)
    tiny = shift < -31
    q = np.where(tiny, 0, q)
    shift = np.where(tiny, 0, shift)
    if single_rounding:
        big = shift > 30
        q = np.where(big, 2**31 - 1, q)
        shift = np.where(big, 30, shift)
    zero = m == 0
    return np.where(zero, 0, q), np.where(zero, 0, shift)


def srdhm(a: Any, b: Any) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` (ties toward +inf)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    overflow = (a == I32_MIN) & (b == I32_MIN)
    p = a * b
    nudge = np.where(p >= 0, 2**30, 1 - 2**30)
    s = p + nudge
    r = np.where(s >= 0, s >> 31, -((-s) >> 31))  # C division truncates toward zero
    return np.where(overflow, I32_MAX, r)


def rdbpot(x: Any, e: Any) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT`` (ties away from zero)."""
    x = np.asarray(x, np.int64)
    e = np.asarray(e, np.int64)
    mask = (np.int64(1) << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > thr)


def wrap32(x: np.ndarray) -> np.ndarray:
    """int64 values wrapped to int32, as C's two's complement arithmetic leaves them."""
    return ((x + 2**31) & 0xFFFFFFFF) - 2**31


def mbqm(x: Any, q: Any, shift: Any) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier``, default (double-rounding) build."""
    x = np.asarray(x, np.int64)
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rdbpot(srdhm(wrap32(x << left), q), right)


def mbqm_single(x: Any, q: Any, shift: Any) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier`` with ``TFLITE_SINGLE_ROUNDING``."""
    x = np.asarray(x, np.int64)
    total = 31 - np.asarray(shift, np.int64)
    return (x * np.asarray(q, np.int64) + (np.int64(1) << (total - 1))) >> total


def mbqm_ruy_x86(x: Any, q: Any, shift: Any) -> np.ndarray:
    """What LiteRT's optimized x86 int8 kernels compute: SRDHM, then a rounding right shift with ties toward +inf."""
    x = np.asarray(x, np.int64)
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    h = srdhm(wrap32(x << left), q)
    return np.where(right > 0, (h + (np.int64(1) << np.maximum(right - 1, 0))) >> right, h)


def check_accumulator(acc: np.ndarray, bits: int = 32) -> None:
    """Raise :class:`OverflowRiskError` when an accumulator does not fit ``bits`` (the runtimes would wrap)."""
    lim = 2 ** (bits - 1) - 1
    if acc.size and (int(acc.max()) > lim or int(acc.min()) < -lim - 1):
        from qlinear.errors import OverflowRiskError

        worst = int(acc.max()) if int(acc.max()) > lim else int(acc.min())
        raise OverflowRiskError(f"int{bits} accumulator overflow: {worst} does not fit in int{bits}; the runtimes "
                                "would wrap around here (qlinear check MODEL finds such layers; qlinear quantize "
                                "raises the weight scale to prevent it)")


def mbqm_int64(x: Any, q: Any, shift: Any) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier(int64_t x, ...)``, the 16x8 conv / fully-connected requantization: the
    Q31 multiplier reduced to Q15 (``(q + 2^15) >> 16``), one rounding (ties toward +inf) by ``15 - shift``."""
    x = np.asarray(x, np.int64)
    q = np.asarray(q, np.int64)
    total = 15 - np.asarray(shift, np.int64)
    reduced = np.where(q < 0x7FFF0000, (q + (1 << 15)) >> 16, 0x7FFF)
    return (x * reduced + (np.int64(1) << (total - 1))) >> total


def requantize(acc: Any, multiplier: Any, zp_out: int, mode: str, *, qmin: int = -128, qmax: int = 127,
               channel_axis: int = -1, acc_bits: int = 32) -> np.ndarray:
    """Requantize int accumulators with a (per-channel) real ``multiplier = s_in*s_w/s_out`` in ``mode``.

    ``multiplier`` broadcasts along ``channel_axis`` of ``acc``. Returns int64 values clamped to ``[qmin, qmax]``
    (pass the fused activation range as ``qmin``/``qmax``). Accumulators outside ``int{acc_bits}`` raise
    :class:`~qlinear.errors.OverflowRiskError` in every mode (a runtime would wrap there).
    """
    if mode not in MODES:
        raise KernelError(f"unknown requantization mode {mode!r}; expected one of {', '.join(MODES)}")
    acc = np.asarray(acc, np.int64)
    check_accumulator(acc, acc_bits)
    m = np.asarray(multiplier, np.float64)
    if m.ndim == 1 and acc.ndim > 1:
        shape = [1] * acc.ndim
        shape[channel_axis] = m.size
        m = m.reshape(shape)
    if mode in FIXED_MODES:
        q, sh = quantize_multiplier(m, single_rounding=mode == "fixed_single")
        fn = {"fixed_double": mbqm, "fixed_single": mbqm_single, "ruy_x86": mbqm_ruy_x86}[mode]
        out = fn(acc, q, sh) + zp_out
    elif mode == "f64_round_away":
        out = round_half_away(acc.astype(np.float64) * m) + zp_out
    elif mode == "f32_rne":
        out = np.rint(acc.astype(np.float32) * m.astype(np.float32)).astype(np.float64) + zp_out
    else:  # onednn: the zero point is added in float before rounding
        out = np.rint(acc.astype(np.float32) * m.astype(np.float32) + np.float32(zp_out)).astype(np.float64)
    return np.clip(out, qmin, qmax).astype(np.int64)


def activation_range(act: str | None, s_out: float, zp_out: int, qmin: int, qmax: int) -> tuple[int, int]:
    """TFLite ``CalculateActivationRangeQuantized``: ``Q(f) = zp + round_half_away(f / s)`` (float32 division)."""
    def q(f: float) -> int:
        return int(zp_out + round_half_away(np.float32(f) / np.float32(s_out)))

    if act in (None, "NONE"):
        return qmin, qmax
    if act == "RELU":
        return max(qmin, q(0.0)), qmax
    if act == "RELU6":
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if act == "RELU_N1_TO_1":
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    raise KernelError(f"unknown fused activation {act!r}; expected NONE, RELU, RELU6 or RELU_N1_TO_1")
