"""GPTQ: lower layer-output error than round to nearest on correlated inputs (the quantity it minimizes, measured
on the inputs themselves, not on the Hessian formula), act-order and fixed (LPBQ) groups, dead inputs."""

import numpy as np
import pytest

from qlinear.ptq.algorithms.gptq import gptq, hessian_error
from qlinear.ptq.algorithms.grids import quantize_rtn


def _problem(n=48, k=96, t=2000, seed=0):
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((k, k)) / np.sqrt(k)
    x = (rng.standard_normal((t, k)) @ mix * (1 + 3 * rng.random(k))).astype(np.float32)   # correlated, uneven
    w = rng.standard_normal((n, k)).astype(np.float32)
    return x, w


def _out_err(x, w, wq):
    return float(np.square(x @ w.T - x @ wq.T).sum())


@pytest.mark.parametrize("grid", ["full", "symmetric", "asymmetric"])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_beats_round_to_nearest_on_layer_output(grid, act_order):
    x, w = _problem()
    h = x.T.astype(np.float64) @ x
    rtn = quantize_rtn(w, 4, 32, grid).dequantize()
    g = gptq(w, h, 4, 32, grid, act_order=act_order)
    assert g.q.min() >= -8 and g.q.max() <= 7
    e_rtn, e_g = _out_err(x, w, rtn), _out_err(x, w, g.dequantize())
    assert e_g < 0.8 * e_rtn
    assert hessian_error(w, g.dequantize(), h) == pytest.approx(e_g, rel=1e-3)


def test_gptq_partial_last_block_and_fixed_groups():
    x, w = _problem(k=72)
    h = x.T.astype(np.float64) @ x
    rtn = quantize_rtn(w, 4, 32, "symmetric")
    g = gptq(w, h, 4, 32, "symmetric", fixed=(rtn.scale, np.zeros(rtn.scale.shape, np.int64)))
    np.testing.assert_array_equal(g.scale, rtn.scale)        # static groups kept as given
    assert _out_err(x, w, g.dequantize()) < _out_err(x, w, rtn.dequantize())


def test_gptq_dead_inputs_zeroed():
    x, w = _problem(k=64)
    x[:, 5] = 0
    h = x.T.astype(np.float64) @ x
    g = gptq(w, h, 4, 32, "full")
    assert np.all(g.dequantize()[:, 5] == 0)


def test_a_vanishing_damping_on_a_singular_hessian_is_floored():
    """A singular Hessian (rank 8 of 96: fewer calibration rows than inputs) with ``gptq_damp`` 5.7e-277 (hypothesis
    found it): the damping started below float64's resolution of the diagonal and stayed there through every retry,
    ending in numpy's LinAlgError. It starts at DAMP_FLOOR now; a Hessian with NaN gets one CalibrationError."""
    from qlinear.errors import CalibrationError

    x, w = _problem(t=8)
    h = x.T.astype(np.float64) @ x
    g = gptq(w, h, 4, 32, "symmetric", damp=5.679601126466277e-277)
    assert np.isfinite(g.dequantize()).all()
    with pytest.raises(CalibrationError, match="NaN/inf"):
        gptq(w, np.full_like(h, np.nan), 4, 32, "symmetric")
