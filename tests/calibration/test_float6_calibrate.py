"""calibrate() for the float6 types: like float8/float4, no zero point and scale = amax / largest value, per
tensor, per channel and per block; the calibrated encoding maps each group's largest magnitude to the type's
largest value exactly."""

from __future__ import annotations

import numpy as np
import pytest

from qlinear.calibration.api import calibrate

TOP = {"float6e2m3": 7.5, "float6e3m2": 28.0}


@pytest.mark.parametrize("method", ["minmax", "moving_average"])
@pytest.mark.parametrize("name", sorted(TOP))
def test_float6_scales(name, method):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 40)) * np.linspace(0.5, 4, 6)[:, None]).astype(np.float32)
    for kw, amax in ((dict(), np.abs(x).max()),
                     (dict(axis=0), np.abs(x).max(axis=1)),
                     (dict(block_size=16, block_axis=1),
                      np.stack([np.abs(x[:, i:i + 16]).max(axis=1) for i in range(0, 40, 16)], axis=1))):
        e = calibrate(x, name, method=method, **kw)
        assert e.dtype == name and e.zero_point is None
        assert np.allclose(e.scale.reshape(amax.shape), amax.astype(np.float64) / TOP[name], rtol=1e-12, atol=0)
        q = e.quantize(x).astype(np.float32)
        assert np.abs(q).max() == TOP[name] and np.isfinite(e.fake_quantize(x)).all()
