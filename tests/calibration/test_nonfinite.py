"""``qlinear.calibrate`` on finite and non-finite data: every finite input gives a finite positive scale, any
+inf/-inf/NaN is refused before a (silently useless) encoding is made; the observers refuse non-finite ranges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import qlinear
from qlinear.calibration import Grouping, make_observer
from qlinear.errors import CalibrationError, DataError

METHODS = ("minmax", "moving_average", "percentile", "mse", "sqnr", "entropy")
QTYPES = ("uint8", "int8", "int4", "uint4", "int16", "uint16", "int2")
POLICIES = ("aimet", "onnxruntime", "tflite")

F32 = np.finfo(np.float32)
# every finite float32, with its extremes drawn often: the largest magnitudes, the smallest normal and subnormal
finite32 = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False),
                     st.sampled_from([float(F32.max), -float(F32.max), float(F32.tiny), -float(F32.tiny), 1e-45,
                                      -1e-45, 0.0, -0.0]))
arrays = hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), elements=finite32)


def _kw(policy: str, qt: str, symmetric: bool) -> dict:
    if policy == "tflite" and qt.startswith("uint") and symmetric:  # TFLite has no symmetric unsigned grid
        symmetric = False
    return {"policy": policy, "symmetric": symmetric}


@given(arrays, st.sampled_from(METHODS), st.sampled_from(QTYPES), st.sampled_from(POLICIES), st.booleans(),
       st.booleans())
def test_finite_data_gives_a_finite_positive_scale(x, method, qt, policy, symmetric, per_channel):
    axis = 0 if per_channel else None
    e = qlinear.calibrate(x, qt, method=method, axis=axis, **_kw(policy, qt, symmetric))
    s = np.asarray(e.scale, np.float64)
    assert np.isfinite(s).all() and (s > 0).all(), (s, float(np.min(x)), float(np.max(x)))
    assert s.size == (1 if axis is None else x.shape[0])


@given(arrays, st.sampled_from([np.inf, -np.inf, np.nan]), st.data(), st.sampled_from(METHODS),
       st.booleans(), st.integers(1, 3))
def test_any_non_finite_value_is_refused(x, bad, data, method, per_channel, n_batches):
    i = data.draw(st.integers(0, x.size - 1))
    y = x.copy()
    y.reshape(-1)[i] = bad
    which = data.draw(st.integers(0, n_batches - 1))
    batches = [x] * n_batches
    batches[which] = y
    idx = [int(k) for k in np.unravel_index(i, y.shape)]
    with pytest.raises(DataError, match=rf"argument 'data', batch {which} holds a non-finite value "
                                        rf"\({bad} at index {idx}\)".replace("[", r"\[").replace("]", r"\]")):
        qlinear.calibrate(batches if n_batches > 1 else y, "int8", method=method, axis=0 if per_channel else None)


def test_the_issues_examples():
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    x[10] = np.inf
    with pytest.raises(DataError, match=r"qlinear.calibrate\('act'\): argument 'data'.*inf at index \[10\].*nan_to_num"):
        qlinear.calibrate(x, "uint8", name="act")
    with pytest.raises(DataError, match=r"nan at index \[0\]"):
        qlinear.calibrate(np.full(16, np.nan, np.float32), "uint8")
    with pytest.raises(DataError, match=r"batch 2 holds.*-inf"):
        qlinear.calibrate([np.ones(4, np.float32)] * 2 + [np.array([1.0, -np.inf])], "int8")


def test_a_weight_holding_nan_names_the_weight():
    w = np.ones((4, 3), np.float32)
    w[2, 1] = np.nan
    with pytest.raises(DataError, match=r"^weight 'fc.weight' .* \(nan at index \[2, 1\]\); a weight holding "
                                        r"inf/NaN cannot be quantized: fix the model"):
        qlinear.calibrate(w, "int8", name="fc.weight", role="param", axis=0, symmetric=True)


def test_float64_beyond_float32_is_refused():
    with pytest.raises(DataError, match=r"batch 0 holds 1e\+300 at index \[1\], beyond float32's range"):
        qlinear.calibrate(np.array([1.0, 1e300]), "int8")
    e = qlinear.calibrate(np.array([1.0, -3e38]), "int8")  # float64 within float32's range is fine
    assert np.isfinite(e.scale).all()


def test_large_batches_are_checked_in_chunks():
    x = np.zeros(3 * (1 << 20) + 5, np.float32)
    x[-1] = np.nan
    with pytest.raises(DataError, match=rf"nan at index \[{x.size - 1}\]"):
        qlinear.calibrate(x, "int8")


# ------------------------------------------------------------------------------------------------ observers
@pytest.mark.parametrize("method", ["minmax", "moving_average", "mse", "sqnr"])
def test_observer_refuses_an_infinite_range(method):
    x = np.random.default_rng(1).standard_normal((2, 50)).astype(np.float32)
    x[0, 3] = np.inf
    o = make_observer(method).update(x)
    with pytest.raises(CalibrationError, match=r"^act: has the non-finite range .*percentile or entropy"):
        o.compute("int8", name="act")


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_percentile_and_entropy_ignore_infinities(method):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5000)).astype(np.float32)
    ref = make_observer(method).update(x).compute("int8", symmetric=True)
    x[0, 3], x[1, 7] = np.inf, -np.inf
    e = make_observer(method).update(x).compute("int8", symmetric=True)
    assert np.isfinite(e.scale).all()
    # the infinities only enlarge the histogram's top level: the chosen range stays that of the finite data
    assert abs(float(e.scale) / float(ref.scale) - 1) < 0.05


def test_observer_ignores_nan_but_refuses_a_group_of_nan_only():
    x = np.random.default_rng(3).standard_normal((3, 20)).astype(np.float32)
    x[0, 0] = np.nan  # ignored: activations may hold NaN (a fully masked Softmax row)
    e = make_observer("minmax", Grouping(axis=0)).update(x).compute("int8", name="w")
    assert np.isfinite(e.scale).all() and (np.asarray(e.scale) > 0).all()
    x[2] = np.nan
    with pytest.raises(CalibrationError, match=r"^w: group 2 \(1 of 3 groups\) saw NaN only"):
        make_observer("minmax", Grouping(axis=0)).update(x).compute("int8", name="w")
