"""The data-free weight-only ``mse`` method (:func:`qlinear.ptq.algorithms.grids.search_scale`) against its
definition: per block, the candidate scale (the grid's own, ``s0 n / (n + d)``, and each one's weighted
least-squares refit) with the least weighted error, recomputed here block by block in float64."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from qlinear.ptq.algorithms.grids import (
    STEPS,
    grid_end,
    padded,
    params,
    quantize_blocks,
    quantize_rtn,
    search_scale,
)

floats = st.floats(-4, 4, allow_nan=False, width=32)


def _err(w, s, z, bits, imp):
    """The weighted error of one block on scale ``s`` (float64 sums of the float32 rounding the writer does)."""
    q = quantize_blocks(w[None], np.float32([s]), np.int64([z]), bits)[0].astype(np.float64)
    d = (q - z) * np.float64(np.float32(s)) - w
    return float((imp * d * d).sum())


def _reference(w, bits, grid, imp, refit):
    """The definition, one block at a time: every candidate (with ``refit``: and its least-squares scale), the least
    error."""
    s0, z = params(w[None], bits, grid)
    s0, z = float(s0[0]), int(z[0])
    n = grid_end(bits, grid)
    cands = [s0]
    for d in STEPS:
        s = float(np.float32(s0 * np.float32(n / np.float32(n + d))))
        q = quantize_blocks(w[None], np.float32([s]), np.int64([z]), bits)[0].astype(np.float64) - z
        num, den = float((imp * w * q).sum()), float((imp * q * q).sum())
        cands += [s, num / den if den > 0 and num > 0 else s] if refit else [s]
    errs = [_err(w, c, z, bits, imp) for c in cands]
    return min(errs), errs[0]


@settings(deadline=None, max_examples=60)
@given(arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(1, 40)), elements=floats),
       st.sampled_from([8, 16]), st.sampled_from(["full", "symmetric", "asymmetric"]), st.booleans(), st.booleans())
def test_search_is_the_least_weighted_error_of_its_candidates(w, block, grid, given_importance, refit):
    """Each block's error is the least over the candidates (up to float32 sums) and never above round to
    nearest's; ``importance`` ``None`` is the plain squared error."""
    wb = padded(w, block)
    rng = np.random.default_rng(w.size)
    imp = rng.uniform(0.1, 3, wb.shape).astype(np.float32) if given_importance else None
    s, z = search_scale(wb, 4, grid, importance=imp, refit=refit)
    s0, z0 = params(wb, 4, grid)
    np.testing.assert_array_equal(z, z0)  # the grid's zero points stay
    for i in np.ndindex(wb.shape[:-1]):
        b = wb[i].astype(np.float64)
        ib = np.ones_like(b) if imp is None else imp[i].astype(np.float64)
        best, rtn = _reference(wb[i], 4, grid, ib, refit)
        got = _err(wb[i], float(s[i]), int(z[i]), 4, ib)
        tol = 1e-5 * rtn + 1e-6 * float((ib * b * b).sum()) + 1e-30  # float32 sums of the search
        assert got <= rtn + tol
        assert got <= best + tol


def test_search_lowers_the_error_of_heavy_tailed_weights():
    rng = np.random.default_rng(1)
    w = rng.standard_t(3, (64, 256)).astype(np.float32)
    wb = padded(w, 32)
    for grid in ("full", "symmetric", "asymmetric"):
        s0, z = params(wb, 4, grid)
        s, _ = search_scale(wb, 4, grid)

        def err(sc, z=z):
            q = quantize_blocks(wb, sc, z, 4).astype(np.float32)
            return float((((q - z[..., None]) * sc[..., None] - wb) ** 2).sum())
        assert err(s) < 0.97 * err(s0)  # not just "never worse": blocks do move
        assert (s != s0).mean() > 0.3


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_quantize_rtn_mse_integers_are_the_rounding_on_its_scales(dtype):
    """What the writer redoes from the scales (``quantize_blocks``) is what ``quantize_rtn`` returns; float16
    scales are float16 values."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 100)).astype(np.float32)
    bq = quantize_rtn(w, 4, 32, "full", method="mse", scale_dtype=np.dtype(dtype))
    z = np.zeros(bq.scale.shape, np.int64) if bq.zero_point is None else bq.zero_point.astype(np.int64)
    again = quantize_blocks(padded(w, 32), bq.scale, z, 4).reshape(8, -1)[:, :100]
    np.testing.assert_array_equal(bq.q, again)
    np.testing.assert_array_equal(bq.scale.astype(dtype).astype(np.float32), bq.scale)
