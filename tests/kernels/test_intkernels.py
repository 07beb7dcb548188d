"""The compiled integer-simulation kernels (``_intkernels.c``) compute the bits of the NumPy formulas of
:mod:`qlinear.kernels.requant` / :mod:`qlinear.kernels.linear`, which the LiteRT / ONNX Runtime tests pin to the peers.
Property-based: random accumulators, multipliers, zero points, clamps, layouts and accumulator storage types."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qlinear.errors import OverflowRiskError
from qlinear.kernels import native as NK
from qlinear.kernels.linear import conv_accumulate
from qlinear.kernels.requant import mbqm_int64, requantize

pytestmark = pytest.mark.skipif(not NK.available(), reason="compiled kernels not built (no C compiler at install)")


@settings(max_examples=200)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["fixed_double", "fixed_single", "ruy_x86", "f64_round_away",
                                                    "f32_rne", "onednn"]),
       st.sampled_from([np.int32, np.int64, np.float32, np.float64]), st.integers(1, 5), st.integers(1, 40),
       st.booleans(), st.booleans(), st.sampled_from([np.int8, np.uint8, np.int16, np.uint16]))
def test_requant_equals_numpy(seed, mode, acc_dtype, c, inner, per_channel, with_bias, out_dtype):
    rng = np.random.default_rng(seed)
    lim = 2**24 if acc_dtype == np.float32 else 2**30
    acc = rng.integers(-lim, lim, (3, c, inner))
    ties = rng.integers(0, 2, acc.shape).astype(bool)
    m = np.exp(rng.uniform(np.log(1e-6), np.log(4.0), c if per_channel else 1))
    m[0] = [2.0**-5, 3 * 2.0**-7, 0.5][seed % 3]  # exact ties for some accumulators
    acc = np.where(ties, (acc // 64) * 64 + 32, acc)
    bias = rng.integers(-2**20, 2**20, c) if with_bias else None
    info = np.iinfo(out_dtype)
    zp = int(rng.integers(info.min, info.max + 1)) if info.min < 0 else int(rng.integers(0, info.max // 2))
    lo, hi = sorted(rng.integers(info.min, info.max + 1, 2).tolist())
    mult = NK.Multiplier(m)
    got = NK.requant(acc.astype(acc_dtype), mult, mode, zp, lo, hi, out_dtype, channel_axis=1, bias=bias)
    full = acc + (0 if bias is None else bias.reshape(1, c, 1))
    want = requantize(full, m if per_channel else m[0], zp, mode, qmin=lo, qmax=hi, channel_axis=1).astype(out_dtype)
    assert np.array_equal(got, want)


def test_requant_int64_reduced_and_overflow():
    rng = np.random.default_rng(0)
    acc = rng.integers(-2**40, 2**40, (2, 3, 50))
    m = np.array([1e-5, 3e-7, 2.0**-12])
    mult = NK.Multiplier(m)
    got = NK.requant(acc, mult, "int64_reduced", 0, -32768, 32767, np.int16, acc_bits=64)
    want = np.clip(mbqm_int64(acc, mult.q.reshape(1, 3, 1), mult.shift.reshape(1, 3, 1)), -32768, 32767)
    assert np.array_equal(got, want)
    with pytest.raises(OverflowRiskError, match="int32 accumulator overflow"):
        NK.requant(np.array([[2**31]]), NK.Multiplier(np.array([0.5])), "f32_rne", 0, -128, 127, np.int8)
    with pytest.raises(OverflowRiskError):  # the bias pushes it over
        NK.requant(np.array([[2**31 - 10]], np.int64), NK.Multiplier(np.array([0.5])), "fixed_double", 0, -128, 127,
                   np.int8, bias=np.array([11]))


@settings(max_examples=60)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.integers(1, 2),
       st.integers(1, 2), st.integers(0, 2), st.booleans())
def test_dwconv_equals_numpy(seed, mult, k, size, stride, dil, pad, int16):
    rng = np.random.default_rng(seed)
    c, h = 3, size + 2
    lo, hi = (-32768, 32767) if int16 else (-128, 127)
    x = rng.integers(lo, hi + 1, (2, c, h, h + 1))
    zx = int(rng.integers(lo, hi + 1))
    w = rng.integers(-127, 128, (c * mult, k, k))
    bias = rng.integers(-1000, 1000, c * mult)
    pads = (pad, pad + 1 if pad else 0, pad, pad)
    assume(h + 2 * pad - (k - 1) * dil > 0 and h + 1 + 2 * pad + 1 - (k - 1) * dil > 0)
    got = NK.dwconv(x, zx, w, mult, bias, (stride, stride), pads, (dil, dil))
    want = conv_accumulate(x, w.reshape(c * mult, 1, k, k), bias, zp_x=zx, stride=(stride, stride), pads=pads,
                           dilation=(dil, dil), groups=c)
    assert np.array_equal(got, want)
