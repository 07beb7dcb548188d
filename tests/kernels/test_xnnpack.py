"""The formulas of LiteRT's default resolver (XNNPACK delegate) that differ from the float requantization of the other
kernels: ADD/SUB (integer multipliers with 20 bits, ties toward +inf) and MEAN (zero points folded into a float
bias). Random scales and zero points, one operator each, compared with the interpreter bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from qlinear.kernels import elementwise as EW
from qlinear.kernels import pool as P

LP = pytest.importorskip("litert_peer")
if not LP.available():  # pragma: no cover
    pytest.skip("ai-edge-litert is not installed (pip install '.[test]')", allow_module_level=True)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("op", ["ADD", "SUB"])
def test_add_sub_xnnpack(seed, op):
    rng = np.random.default_rng(seed)
    s1, s2, so = (float(np.float32(v)) for v in np.exp(rng.uniform(np.log(0.005), np.log(0.3), 3)))
    z1, z2, zo = (int(v) for v in rng.integers(-40, 40, 3))
    a = rng.integers(-128, 128, (1, 4096)).astype(np.int8)
    b = rng.integers(-128, 128, (1, 4096)).astype(np.int8)
    mb = LP.Builder()
    t1, t2, to = mb.tensor(a.shape, np.int8, s1, z1), mb.tensor(b.shape, np.int8, s2, z2), mb.tensor(a.shape, np.int8,
                                                                                                    so, zo)
    opts = (LP.S.BuiltinOptions.AddOptions, LP.S.AddOptionsT()) if op == "ADD" else \
        (LP.S.BuiltinOptions.SubOptions, LP.S.SubOptionsT())
    mb.op(getattr(LP.S.BuiltinOperator, op), [t1, t2], [to], *opts, version=2)
    y = LP.run(mb.build([t1, t2], [to]), [a, b], "auto")
    z = EW.add(a, b, s_a=s1, zp_a=z1, s_b=s2, zp_b=z2, s_out=so, zp_out=zo, mode="xnnpack", sub=op == "SUB")
    assert np.array_equal(y, z)


@pytest.mark.parametrize("seed", range(12))
def test_mean_xnnpack(seed):
    rng = np.random.default_rng(seed)
    s_in, s_out = float(np.float32(rng.uniform(0.01, 0.1))), float(np.float32(rng.uniform(0.005, 0.1)))
    z_in, z_out = int(rng.integers(-20, 20)), int(rng.integers(-20, 20))
    h = int(rng.integers(2, 9))
    x = rng.integers(-128, 128, (2, h, h, 16)).astype(np.int8)
    mb = LP.Builder()
    ti = mb.tensor(x.shape, np.int8, s_in, z_in)
    ta = mb.tensor([2], np.int32, data=np.array([1, 2], np.int32))
    to = mb.tensor([2, 1, 1, 16], np.int8, s_out, z_out)
    opt = LP.S.ReducerOptionsT()
    opt.keepDims = True
    mb.op(LP.S.BuiltinOperator.MEAN, [ti, ta], [to], LP.S.BuiltinOptions.ReducerOptions, opt, version=2)
    y = LP.run(mb.build([ti], [to]), [x], "auto").transpose(0, 3, 1, 2)
    z = P.mean(x.transpose(0, 3, 1, 2), (2, 3), s_in=s_in, zp_in=z_in, s_out=s_out, zp_out=z_out, mode="xnnpack")
    assert np.array_equal(y, z)
