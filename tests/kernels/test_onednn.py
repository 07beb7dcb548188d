"""oneDNN epilogue (output scales with masks, post-ops in order). No oneDNN peer runs here (PyTorch's ``onednn``
engine is the optional peer and is not installed), so these tests use the float formula of the spec with the
exact tolerance the issue allows (one unit) and the ``onednn`` requantization mode where they overlap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qlinear import kernels as K
from qlinear.errors import KernelError


@given(st.integers(0, 2**31 - 1), st.sampled_from([0, 2, 1 | 2]))
def test_masks_and_post_ops_against_the_formula(seed, mask):
    rng = np.random.default_rng(seed)
    acc = rng.integers(-20000, 20000, (2, 6, 3, 4)).astype(np.int64)
    dims = [d for d in range(4) if mask >> d & 1]
    scales = rng.uniform(1e-4, 1e-2, int(np.prod([acc.shape[d] for d in dims])) if dims else 1).astype(np.float32)
    prev = rng.integers(-128, 128, acc.shape)
    ops = [("eltwise", "relu", 0.0, 0.0, 1.0), ("sum", 0.5)]
    got = K.onednn_epilogue(acc, scales, mask, post_ops=ops, dst_prev=prev)
    shape = [acc.shape[d] if d in dims else 1 for d in range(4)]
    exact = np.maximum(acc * scales.astype(np.float64).reshape(shape), 0) + 0.5 * prev
    assert np.abs(got - np.clip(np.rint(exact), -128, 127)).max() <= 1
    # without post-ops and with a per-channel mask this is the onednn requantization mode exactly
    plain = K.onednn_epilogue(acc, scales.reshape(-1)[:6] if mask == 2 else scales, mask, zp_dst=3)
    if mask == 2:
        assert np.array_equal(plain, K.requantize(acc, scales.astype(np.float64), 3, "onednn", channel_axis=1))


def test_order_matters_and_errors():
    acc = np.array([[-1000, 1000]])
    a = K.onednn_epilogue(acc, [0.01], 0, post_ops=[("eltwise", "relu"), ("sum", 1.0)], dst_prev=np.array([[5, 5]]))
    b = K.onednn_epilogue(acc, [0.01], 0, post_ops=[("sum", 1.0), ("eltwise", "relu")], dst_prev=np.array([[5, 5]]))
    assert a.tolist() == [[5, 15]] and b.tolist() == [[0, 15]]
    with pytest.raises(KernelError, match="needs 2 scales"):
        K.onednn_epilogue(acc, [0.1, 0.2, 0.3], 2)
    with pytest.raises(KernelError, match="dst_prev"):
        K.onednn_epilogue(acc, [0.1], 0, post_ops=[("sum", 1.0)])
