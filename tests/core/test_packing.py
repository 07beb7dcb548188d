"""Sub-byte packing against onnx.numpy_helper (raw_data layout), exhaustively over every bit pattern."""

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import numpy_helper

import qlinear
from qlinear.core.packing import pack, packed_nbytes, unpack
from qlinear.errors import DTypeError, ShapeError

SUB = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn, ml_dtypes.int2, ml_dtypes.uint2]


def _all_values(dt):
    bits = 2 if dt in (ml_dtypes.int2, ml_dtypes.uint2) else 4
    return np.arange(1 << bits, dtype=np.uint8).view(dt)


@pytest.mark.parametrize("dt", SUB, ids=lambda d: np.dtype(d).name)
def test_every_pair_and_quad_matches_onnx(dt):
    vals = _all_values(dt)
    k = 4 if vals.size == 4 else 2
    # every ordered k-tuple of values: all byte patterns; plus odd tails
    combos = np.array(list(itertools.product(range(vals.size), repeat=k)), np.intp).ravel()
    a = vals[combos]
    for n in (a.size, a.size - 1, a.size - 3, 1):
        arr = a[:n]
        ours = pack(arr)
        assert ours.tobytes() == numpy_helper.from_array(arr).raw_data
        back = unpack(ours.data, np.dtype(dt), arr.shape)
        assert back.tobytes() == arr.view(np.uint8).tobytes() or np.array_equal(back.astype(np.float32), arr.astype(np.float32))
        t = numpy_helper.from_array(arr)
        assert np.array_equal(numpy_helper.to_array(t).astype(np.float32), back.astype(np.float32))


@given(st.sampled_from(SUB), st.lists(st.integers(1, 5), min_size=0, max_size=4), st.integers(0, 2**32 - 1))
def test_roundtrip_shapes(dt, shape, seed):
    rng = np.random.default_rng(seed)
    vals = _all_values(dt)
    a = vals[rng.integers(0, vals.size, int(np.prod(shape)))].reshape(shape)
    p = qlinear.pack(a)
    assert p.data.size == packed_nbytes(a.size, np.dtype(dt)) and p.shape == tuple(shape)
    assert p.tobytes() == numpy_helper.from_array(a).raw_data
    assert np.array_equal(p.unpack().view(np.uint8), a.view(np.uint8) & ((1 << (2 if vals.size == 4 else 4)) - 1))


def test_canonical_int4_pattern_and_errors():
    a = np.array([1, -2, 3, 7, -8], ml_dtypes.int4)
    assert pack(a).data.tolist() == [0xE1, 0x73, 0x08]  # notes/onnx-ort.md §1.3
    with pytest.raises(DTypeError, match="not a sub-byte type"):
        pack(np.zeros(3, np.int8))
    with pytest.raises(ShapeError, match="need 3 bytes, got 2"):
        unpack(np.zeros(2, np.uint8), "int4", (5,))
