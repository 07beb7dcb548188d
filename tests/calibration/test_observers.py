"""Observers: merge() over split data equals one observer over all the data, bit for bit, for every method and
granularity; streaming over batches equals one call on the concatenation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qlinear
from qlinear.calibration import METHODS, Grouping, make_observer
from qlinear.errors import CalibrationError, DataError

GROUPINGS = [Grouping(), Grouping(axis=1), Grouping(axis=-1), Grouping(block_size=5, block_axis=2)]


@given(st.sampled_from(METHODS), st.sampled_from(range(len(GROUPINGS))), st.integers(1, 6), st.integers(0, 2**31 - 1),
       st.booleans())
def test_merge_equals_single_observer(method, gi, parts, seed, symmetric):
    g = GROUPINGS[gi]
    rng = np.random.default_rng(seed)
    batches = [(rng.standard_normal((2, 4, 12)) * rng.uniform(0.01, 50)).astype(np.float32) for _ in range(6)]
    if rng.random() < 0.3:
        batches[0][0, 0, 0] = np.nan
    one = make_observer(method, g)
    for b in batches:
        one.update(b)
    split = np.array_split(np.arange(len(batches)), parts)
    obs = []
    for idx in split:
        o = make_observer(method, g)
        for i in idx:
            o.update(batches[i])
        obs.append(o)
    merged = obs[0]
    for o in obs[1:]:
        merged.merge(o)
    dt = "int8" if symmetric else "uint8"
    a = one.compute(dt, symmetric=symmetric)
    b = merged.compute(dt, symmetric=symmetric)
    assert a == b


def test_histogram_methods_clip_outliers_and_minmax_does_not():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200_000).astype(np.float32)
    x[:10] = 80.0
    mm = qlinear.calibrate(x, "int8", symmetric=True)
    for m in ("percentile", "entropy"):
        e = qlinear.calibrate(x, "int8", method=m, symmetric=True)
        assert float(e.scale) < float(mm.scale) / 3, m


@pytest.mark.parametrize("bits", [4, 8])
def test_mse_and_sqnr_beat_minmax_on_heavy_tails(bits):
    rng = np.random.default_rng(bits)
    x = rng.laplace(size=300_000).astype(np.float32)
    dt = f"int{bits}"

    def err(e):
        return float(np.mean((e.fake_quantize(x).astype(np.float64) - x) ** 2))

    base = err(qlinear.calibrate(x, dt, symmetric=True))
    for m in ("mse", "sqnr"):
        assert err(qlinear.calibrate(x, dt, method=m, symmetric=True)) < base, m


def test_errors():
    with pytest.raises(CalibrationError, match="unknown calibration method"):
        qlinear.calibrate(np.ones(3), method="magic")
    with pytest.raises(CalibrationError, match="policy"):
        qlinear.calibrate(np.ones(3), policy="tensorrt")
    with pytest.raises(DataError, match="empty"):
        qlinear.calibrate([], "uint8")
    with pytest.raises(CalibrationError, match="axis=5"):
        qlinear.calibrate(np.ones((2, 3)), "int8", axis=5)
    o = qlinear.calibration.MinMaxObserver(Grouping(axis=0))
    o.update(np.ones((3, 2)))
    with pytest.raises(DataError, match="groups"):
        o.update(np.ones((4, 2)))
    with pytest.raises(CalibrationError, match="no data"):
        qlinear.calibration.MinMaxObserver().compute()


def test_per_block_partial_last_block_and_lpbq():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 70)).astype(np.float32)
    e = qlinear.calibrate(w, "int4", symmetric=True, block_size=32, block_axis=1)
    assert e.scale.shape == (8, 3)
    # the partial block's scale comes from its 6 elements only
    np.testing.assert_allclose(e.scale[:, 2], np.maximum(w[:, 64:].max(1) / 7, -w[:, 64:].min(1) / 8), rtol=1e-6)
    lp = qlinear.calibrate(w, "int4", symmetric=True, block_size=32, block_axis=1, lpbq_scale_bits=4)
    assert lp.int_scale.shape == (8, 3) and lp.int_scale.max() == 16 and lp.scale.shape == (8, 1)
    q = lp.quantize(w)
    assert q.shape == w.shape


@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 3, 64]))
def test_native_histogram_equals_numpy(seed, groups):
    from qlinear.calibration import histogram as H
    from qlinear.core import native

    if not native.available():
        pytest.skip("compiled kernel not built")  # the NumPy path is then the only path
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((groups, 4099)) * rng.uniform(1e-6, 1e6)).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    k = H.level(np.nanmax(np.where(np.isfinite(x), np.abs(x), np.nan), axis=1), 2048) + rng.integers(0, 3, groups)
    a = np.zeros((groups, 4096), np.int64)
    b = np.zeros((groups, 4096), np.int64)
    H.add(a, k, x, 2048)
    try:
        H.USE_NATIVE = False
        H.add(b, k, x, 2048)
    finally:
        H.USE_NATIVE = True
    assert np.array_equal(a, b)
