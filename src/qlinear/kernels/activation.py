"""Softmax, logistic and tanh on int8, as TFLite's optimized (x86) and generic kernels compute them.

* logistic / tanh (``LUTPopulate<int8_t>``): for every input code ``q``: ``x = s_in*(q - zp_in)`` (float32),
  ``y = 1/(1 + expf(-x))`` or ``tanhf(x)``, ``out = round_half_away(y * (1/s_out)) + zp_out`` (float32), clamp;
  ``expf``/``tanhf`` are modelled as correctly rounded (``float(exp(double))``);
* softmax (``PopulateSoftmaxLookupTable``, optimized x86 path): ``table[255 - v] = expf(-s_in*beta * v)`` with a
  float32 product; per row ``sum`` accumulated in float32 in order, ``inv = 1/(sum * s_out)``,
  ``out = round_half_away(table[max - q] * inv) + zp_out``.

The fixed output parameters TFLite requires (softmax/logistic ``1/256, -128``; tanh ``1/128, 0``) are the defaults.
"""

from __future__ import annotations

import numpy as np

from qlinear.kernels.requant import (
    I32_MAX,
    I32_MIN,
    quantize_multiplier,
    rdbpot,
    round_half_away,
    srdhm,
    wrap32,
)


def _lut(fn, s_in: float, zp_in: int, s_out: float, zp_out: int, qmin: int, qmax: int) -> np.ndarray:  # noqa: ANN001
    q = np.arange(qmin, qmax + 1, dtype=np.int64)
    x = np.float32(s_in) * (q - zp_in).astype(np.float32)
    y = fn(x.astype(np.float64)).astype(np.float32)
    inv = np.float32(1.0) / np.float32(s_out)
    return np.clip(round_half_away(y * inv) + zp_out, qmin, qmax).astype(np.int64)


def logistic(x: np.ndarray, *, s_in: float, zp_in: int, s_out: float = 1 / 256, zp_out: int = -128,
             qmin: int = -128, qmax: int = 127) -> np.ndarray:
    def sig(v: np.ndarray) -> np.ndarray:
        e = np.exp(-v).astype(np.float32)  # expf
        return (np.float32(1.0) / (np.float32(1.0) + e)).astype(np.float64)

    lut = _lut(sig, s_in, zp_in, s_out, zp_out, qmin, qmax)
    return lut[np.asarray(x, np.int64) - qmin]


def tanh(x: np.ndarray, *, s_in: float, zp_in: int, s_out: float = 1 / 128, zp_out: int = 0, qmin: int = -128,
         qmax: int = 127) -> np.ndarray:
    lut = _lut(np.tanh, s_in, zp_in, s_out, zp_out, qmin, qmax)
    return lut[np.asarray(x, np.int64) - qmin]


def softmax(x: np.ndarray, *, s_in: float, beta: float = 1.0, s_out: float = 1 / 256, zp_out: int = -128,
            axis: int = -1) -> np.ndarray:
    x = np.moveaxis(np.asarray(x, np.int64), axis, -1)
    scale = np.float32(-np.float32(s_in) * np.float32(beta))
    v = np.arange(256, dtype=np.int64)
    table = np.exp((scale * v.astype(np.float32)).astype(np.float64)).astype(np.float32)  # table[v] = exp(-s*v)
    mx = x.max(-1, keepdims=True)
    t = table[mx - x]
    s = np.zeros(t.shape[:-1], np.float32)
    for j in range(t.shape[-1]):  # sequential float32 sum, as the kernel adds (loop over the row length only)
        s = (s + t[..., j]).astype(np.float32)
    inv = (np.float32(1.0) / (s * np.float32(s_out))).astype(np.float32)
    out = round_half_away((t * inv[..., None]).astype(np.float32)) + zp_out
    return np.moveaxis(np.clip(out, -128, 127).astype(np.int64), -1, axis)


def softmax_ort(x: np.ndarray, *, s_in: float, s_out: float = 1 / 256, zp_out: int = 0, signed: bool = False,
                axis: int = -1) -> np.ndarray:
    """ONNX Runtime's ``QLinearSoftmax`` (the CPU kernel its QDQ fusion runs): a float32 table of
    ``exp((i - 255 + shift) s_in)`` over the 256 differences to the row maximum (computed in double, ``shift``
    keeping the row sum inside float32: ``max(0, log(FLT_MAX / depth) - 5) / s_in``), a sequential float32 row
    sum, ``nearbyintf(t * floor(1 / s_out) / sum) + zp`` (ties to even), clamped to the type (ONNX Runtime 1.32:
    an int8 row holding all its mass in one value gives 127, not a wrapped 128)."""
    x = np.moveaxis(np.asarray(x, np.int64), axis, -1)
    depth = x.shape[-1]
    s = float(np.float32(s_in))
    shift = max(0.0, float(np.log(float(np.float32(np.finfo(np.float32).max) / np.float32(depth)))) - 5.0) / s
    table = np.exp((np.arange(256, dtype=np.float64) - 255 + shift) * s).astype(np.float32)
    t = table[255 - x.max(-1, keepdims=True) + x]
    total = np.zeros(t.shape[:-1], np.float32)
    for j in range(depth):  # sequential float32 sum, as the kernel adds
        total = (total + t[..., j]).astype(np.float32)
    y_scale = np.float32(np.floor(np.float32(1.0) / np.float32(s_out)))
    q = np.rint((t * y_scale).astype(np.float32) / total[..., None]).astype(np.int64) + int(zp_out)
    q = np.clip(q, -128, 127) if signed else np.minimum(q, 255)
    return np.moveaxis(q, -1, axis)


def _sat_shift_left(x: np.ndarray, e: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<e>`` for ``e > 0`` on int32 values."""
    x = np.asarray(x, np.int64)
    return np.where(x > (I32_MAX >> e), I32_MAX, np.where(x < (I32_MIN >> e), I32_MIN, x << e))


def _exp_quarter(a: np.ndarray) -> np.ndarray:
    """gemmlowp ``exp_on_interval_between_negative_one_quarter_and_0_excl`` (Q0.31 in and out): a Taylor series
    around -1/8."""
    c, third = 1895147668, 715827883   # exp(-1/8), 1/3 in Q0.31
    x = wrap32(np.asarray(a, np.int64) + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    poly = rdbpot(wrap32(srdhm(wrap32(rdbpot(x4, 2) + x3), third) + x2), 1)
    return wrap32(c + srdhm(c, wrap32(x + poly)))


def _exp_negative(a: np.ndarray) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values`` of Q5.26 values ``a <= 0`` (Q0.31 out): ``exp`` of ``a mod 1/4`` times
    the constants ``exp(-2^k)`` for the set bits of the rest (the barrel shifter), 1.0 at ``a = 0``."""
    a = np.asarray(a, np.int64)
    quarter = 1 << 24
    low = wrap32((a & (quarter - 1)) - quarter)
    result = _exp_quarter(_sat_shift_left(low, 5))
    rest = wrap32(low - a)
    for k, mult in zip(range(-2, 5), (1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242)):
        result = np.where(rest & (1 << (26 + k)), srdhm(result, mult), result)
    return np.where(a == 0, I32_MAX, result)


def _reciprocal(x: np.ndarray, integer_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite ``GetReciprocal``: ``1 / x`` of positive Qn fixed-point ``x`` as a Q0.31 value in ``[0.5, 1)`` and the
    number of bits over unit, by gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` (three Newton-Raphson steps)."""
    x = np.asarray(x, np.int64)
    clz = 32 - np.ceil(np.log2(x.astype(np.float64) + 1)).astype(np.int64)   # leading zeros of a uint32 > 0
    clz = np.where((np.int64(1) << (32 - clz)) <= x, clz - 1, clz)
    clz = np.where((np.int64(1) << np.maximum(31 - clz, 0)) > x, clz + 1, clz)
    bits = integer_bits - clz
    a = wrap32(((x << clz) & 0xFFFFFFFF) - (1 << 31))
    s = a + I32_MAX
    half = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))   # RoundingHalfSum: (a + b + sign) / 2, truncated
    f2_one = 1 << 29
    xr = wrap32(1515870810 + srdhm(half, -1010580540))
    for _ in range(3):
        t = wrap32(f2_one - srdhm(half, xr))
        xr = wrap32(xr + _sat_shift_left(srdhm(xr, t), 2))
    return _sat_shift_left(xr, 1), bits


def softmax_reference(x: np.ndarray, *, s_in: float, beta: float = 1.0, zp_out: int = -128,
                      axis: int = -1) -> np.ndarray:
    """TFLite's reference int8 SOFTMAX (``reference_ops::Softmax``, the kernel of LiteRT's reference resolver): the
    differences to the row maximum scaled into Q5.26 (``PreprocessSoftmaxScaling``), ``exp`` in gemmlowp fixed point,
    a Q12.19 sum, its reciprocal, ``out = RDBPOT(recip * exp, bits over unit + 23) - 128``; a difference below
    ``diff_min`` gives -128. It and the optimized kernel's float table (:func:`softmax`) differ by a step in about
    one row in 5,000."""
    x = np.moveaxis(np.asarray(x, np.int64), axis, -1)
    real = min(float(beta) * float(np.float32(s_in)) * 2.0 ** 26, 2.0 ** 31 - 1)
    q, shift = quantize_multiplier(real)
    q, shift = int(q), int(shift)
    diff_min = -int(np.floor(31 * 2.0 ** 26 / 2.0 ** shift))
    d = x - x.max(-1, keepdims=True)
    ok = d >= diff_min
    scaled = srdhm(wrap32(np.where(ok, d, 0) << shift), q)
    e = _exp_negative(scaled)
    total = wrap32(np.where(ok, rdbpot(e, 12), 0).sum(-1, keepdims=True))
    recip, bits = _reciprocal(total, 12)
    out = rdbpot(srdhm(recip, e), bits + 23) + int(zp_out)
    out = np.where(ok, np.clip(out, -128, 127), -128)
    return np.moveaxis(out.astype(np.int64), -1, axis)


# ------------------------------------------------------------------------------------------------- 16-bit (16x8)
#: ``sigmoid(i / 24)`` in unsigned 0.16 fixed point, the table TFLite's int16 LOGISTIC and TANH interpolate in. Its
#: entries are not a plain rounding of the function, so they were read out of LiteRT 2.3.0 itself: the reference
#: int16 TANH of ``x = 128 i`` at input scale ``8/3 * 2^-14`` (which maps ``x`` to the table's ``256 i``) returns
#: ``table[i] - 32768`` exactly (``tests/kernels/test_int16.py`` repeats the probe).
SIGMOID_TABLE_U16 = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535
], np.int64)


def sigmoid_table_u16() -> np.ndarray:
    return SIGMOID_TABLE_U16


def checked_log2(x: float) -> tuple[int, bool]:
    """TFLite ``CheckedLog2``: ``(round(log2 x), |fraction| < 1e-3)`` in float32."""
    lg = np.float32(np.log(np.float32(x))) * np.float32(np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    r = np.float32(round_half_away(lg))
    return int(r), bool(abs(np.float32(lg - r)) < np.float32(1e-3))


def _int16_act_params(s_in: float, pot_shifts: tuple[int, ...]) -> tuple[int, int]:
    """(input_multiplier, input_left_shift) of TFLite's int16 LOGISTIC/TANH Prepare: a power-of-two input scale
    ``2^(shift - 12)`` with ``shift`` in ``pot_shifts`` keeps multiplier 0; otherwise the scale is mapped to
    ``1/(3*4096)`` by ``int(s_in * 4096 * 3 * 2^k)`` with the smallest ``k`` that passes 16383.5."""
    lg, pot = checked_log2(s_in)
    shift = 12 + lg
    if pot and shift in pot_shifts:
        return 0, shift
    m = float(np.float32(s_in)) * 4096.0 * 3.0
    shift = 0
    while m <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        m *= 2.0
    return int(m), shift


def _scaled_int16(x: np.ndarray, mult: int, shift: int) -> np.ndarray:
    if mult == 0:  # power-of-two case
        mult, shift = 3 << shift, 0
    rnd = (1 << (shift - 1)) if shift > 0 else 0
    return (np.asarray(x, np.int64) * mult + rnd) >> shift


def logistic16(x: np.ndarray, *, s_in: float) -> np.ndarray:
    """TFLite reference int16 LOGISTIC (``reference_integer_ops::Logistic``): input rescaled to 1/(3*4096), linear
    interpolation in :func:`sigmoid_table_u16` with 9 fractional bits, output scale 1/32768, zero point 0."""
    mult, shift = _int16_act_params(s_in, (0,))
    v = _scaled_int16(x, mult, shift)
    a = np.abs(v)
    uh = a >> 9
    t = sigmoid_table_u16()
    ua, ub = t[np.minimum(uh, 254)], t[np.minimum(uh + 1, 255)]
    res = np.where(uh >= 255, 0x7FFF << 10, (ua << 9) + (a & 0x1FF) * (ub - ua))
    res = np.where(v >= 0, res + (1 << 9), (1 << 25) - res + (1 << 9) - 1)
    return (res >> 10).astype(np.int64)


def tanh16(x: np.ndarray, *, s_in: float) -> np.ndarray:
    """TFLite reference int16 TANH (``reference_integer_ops::Tanh``): ``tanh(x) = 2 sigmoid(2x) - 1`` on the same
    table with 8 fractional bits; output scale 1/32768, zero point 0."""
    mult, shift = _int16_act_params(s_in, (0, 1))
    v = _scaled_int16(x, mult, shift)
    a = np.abs(v)
    uh = a >> 8
    t = sigmoid_table_u16()
    ua, ub = t[np.minimum(uh, 254)], t[np.minimum(uh + 1, 255)]
    res = np.where(uh >= 255, 0xFFFF << 8, (ua << 8) + (a & 0xFF) * (ub - ua))
    res = np.where(v >= 0, res - (1 << 23) + (1 << 7), -res + (1 << 23) + (1 << 7) - 1)
    return (res >> 8).astype(np.int64)


def lut_int16(fn, input_scale: float, input_zp: int, output_scale: float, output_zp: int) -> np.ndarray:  # noqa: ANN001
    """TFLite ``LUTPopulate<int16_t>`` in double: 512 samples of ``fn`` over the int16 input range with a bias that
    halves the interpolation error at each step's midpoint, plus a 513th entry for the last slope."""
    in_min = input_scale * (-32768 - input_zp)
    in_max = input_scale * (32767 - input_zp)
    out_min = output_scale * (-32768 - output_zp)
    out_max = output_scale * (32767 - output_zp)
    step = (in_max - in_min) / 512
    inv = 65536.0 / (out_max - out_min)
    i = np.arange(512, dtype=np.float64)
    val = fn(in_min + i * step)
    mid = fn(in_min + i * step + step / 2)
    nxt = fn(in_min + (i + 1) * step)
    sample = round_half_away(val * inv)
    interp = round_half_away((nxt * inv + round_half_away(val * inv)) / 2)
    bias = round_half_away((interp - round_half_away(mid * inv)) / 2)
    lut = np.clip(sample - bias, -32768, 32767)
    last = np.clip(round_half_away(fn(np.float64(in_max)) * inv), -32768, 32767)
    return np.append(lut, last).astype(np.int64)


def lut_lookup_int16(v: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """TFLite ``generic_int16_table_lookup``: base + interpolated slope over 7 fractional bits (int16 arithmetic)."""
    v = np.asarray(v, np.int64)
    idx = 256 + (v >> 7)
    off = v & 0x7F
    base = lut[idx]
    slope = ((lut[idx + 1] - base + 32768) & 0xFFFF) - 32768  # int16 difference
    return ((base + ((slope * off + 64) >> 7) + 32768) & 0xFFFF) - 32768


def softmax16(x: np.ndarray, *, s_in: float, beta: float = 1.0, axis: int = -1) -> np.ndarray:
    """TFLite reference int16 SOFTMAX (``reference_ops::SoftmaxInt16``): ``exp`` of the scaled difference to the row
    maximum from a 513-entry LUT over [-10, 0], the reciprocal of the Q16.15 sum from a ``1/(1+x)`` LUT, output scale
    1/32768, zero point 0."""
    from qlinear.kernels.requant import mbqm, quantize_multiplier

    exp_lut = lut_int16(np.exp, 10.0 / 65535, 32767, 2.0 / 65535, 0)
    rec_lut = lut_int16(lambda v: 1.0 / (1.0 + v), 1.0 / 65535, -32768, 2.0 / 65535, 0)
    q, sh = quantize_multiplier(np.float64(np.float32(s_in)) * beta / (10.0 / 65535.0))
    xm = np.moveaxis(np.asarray(x, np.int64), axis, -1)
    diff = xm - xm.max(-1, keepdims=True)
    scaled = mbqm(diff, int(q), int(sh))
    e = lut_lookup_int16(np.clip(scaled + 32767, -32768, 32767), exp_lut)
    total = e.sum(-1, keepdims=True)
    clz = 32 - np.floor(np.log2(np.maximum(total, 1))).astype(np.int64) - 1
    clz = np.where(total > 0, clz, 32)
    shifted = ((total << (clz - 1)) + (1 << 13)) >> 14
    rec = lut_lookup_int16(np.clip(shifted - ((1 << 15) + (1 << 16)), -32768, 32767), rec_lut)
    rs = 31 - clz
    out = (e * rec + (np.int64(1) << (rs - 1))) >> rs
    return np.moveaxis(np.clip(out, 0, 32767), -1, axis)
