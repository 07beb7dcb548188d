"""float6e2m3 / float6e3m2 QuantizeLinear / DequantizeLinear (opset 28) against onnx.reference 1.23.

ONNX Runtime 1.32 has no opset-28 Q/DQ kernel, so the peers are ``onnx.reference`` (run on opset-28 models)
and the spec text: the QuantizeLinear-28 schema, the onnx note "Float stored in 6 bits" and ``onnx.proto``
(4 codes in 3 bytes, LSB first, zero padded; checked through ``numpy_helper.from_array``). The onnx 1.23 wheel
has no float6 backend case, so these are our own:

* every float16 bit pattern (NaN, +-inf, subnormals, -0 included) quantized per-tensor, per-axis and blocked
  (partial last block), for several scales (powers of two, random, tiny enough to overflow the float16
  quotient), scale types and ``precision`` values, with and without zero points, ``saturate`` 0 and 1;
  compared bit for bit, unpacked and packed; the results dequantized again (unpacked and packed input);
* every (code, zero point) pair dequantized;
* hypothesis over float32 inputs (random bit patterns, ties of the float6 grid and their neighbours);
* the two choices the spec leaves open, pinned: NaN (module doc of :mod:`qlinear.core.floatcast`) and the
  zero point added to a float16 quotient (module doc of :mod:`qlinear.core.quantize`), the latter against
  exact arithmetic as well.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import numpy_helper
from onnx_peers import bits_equal, run_reference, single_node_model

import qlinear
from qlinear.core import granularity as gr
from qlinear.core.floatcast import to_lowp_float
from qlinear.core.types import qtype
from qlinear.errors import DTypeError, ShapeError

F6 = ["float6e2m3", "float6e3m2"]
OPSET = 28


def _codes(t, n=None, rng=None):
    k = 1 << t.bits
    c = np.arange(k, dtype=np.uint8) if rng is None else rng.integers(0, k, n).astype(np.uint8)
    return c.view(t.storage)


def _all_float16(rows=64):
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(rows, -1)


def _ref_quantize(x, s, z, t, *, axis=1, block_size=0, saturate=True, precision=None):
    feeds = {"x": x, "s": s} | ({"z": z} if z is not None else {})
    attrs = dict(axis=axis, block_size=block_size or None, saturate=int(saturate),
                 output_dtype=t.onnx_type if z is None else None,
                 precision=qtype(precision).onnx_type if precision else None)
    m = single_node_model("QuantizeLinear", feeds, t.onnx_type, list(x.shape), opset=OPSET, **attrs)
    return run_reference(m, feeds)[0]


def _ref_dequantize(x, s, z, *, axis=1, block_size=0, output_dtype=None):
    feeds = {"x": x, "s": s} | ({"z": z} if z is not None else {})
    ot = qtype(output_dtype) if output_dtype else qtype(s.dtype)
    m = single_node_model("DequantizeLinear", feeds, ot.onnx_type, list(x.shape), opset=OPSET, axis=axis,
                          block_size=block_size or None, output_dtype=ot.onnx_type if output_dtype else None)
    return run_reference(m, feeds)[0]


def _check_quantize(x, s, z, t, **kw):
    """qlinear == reference bit for bit, unpacked and packed, and the dequantized result too."""
    ref = _ref_quantize(x, s, z, t, **kw)
    q_kw = {k: v for k, v in kw.items() if k in ("axis", "block_size", "saturate", "precision")}
    ours = qlinear.quantize_linear(x, s, z, output_dtype=t.name, **q_kw)
    assert ref.dtype == t.storage and bits_equal(ours, ref)
    packed = qlinear.quantize_linear(x, s, z, output_dtype=t.name, packed=True, **q_kw)
    assert packed.tobytes() == numpy_helper.from_array(ref).raw_data
    assert packed.data.size == -(-x.size * 6 // 8)
    assert bits_equal(packed.unpack(), ref)
    d_kw = {k: v for k, v in kw.items() if k in ("axis", "block_size")}
    dref = _ref_dequantize(ref, s, z, **d_kw) if s.dtype != np.int32 else None
    if dref is not None:
        assert bits_equal(qlinear.dequantize_linear(ours, s, z, **d_kw), dref)
        assert bits_equal(qlinear.dequantize_linear(packed, s, z, **d_kw), dref)
    return ours


# (scale dtype, precision): the division runs in the scale's type or in ``precision``; the reference is given
# the same precision explicitly when it differs from NumPy's promotion of (float16 x, scale)
DIVISIONS = [("float16", None), ("float32", None), ("float32", "float16"), ("float16", "bfloat16")]


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("division", DIVISIONS, ids=lambda d: f"{d[0]}-{d[1]}")
@pytest.mark.parametrize("name", F6)
def test_every_float16_per_tensor(name, division, saturate):
    t = qtype(name)
    x = _all_float16()
    st_name, precision = division
    sdt = qtype(st_name).storage
    zps = [None, np.array(0.0, t.storage), np.array(-1.5, t.storage), np.array(t.qmax, t.storage)]
    for s in (1.0, 0.0625, 0.3, 3e-5, 1000.0):
        for z in zps:
            _check_quantize(x, np.array(s, np.float32).astype(sdt), z, t, saturate=saturate, precision=precision)


@pytest.mark.parametrize("name", F6)
def test_every_bfloat16_and_int32_inputs(name):
    # bfloat16 x: every bit pattern, divided in bfloat16 (its scale's type) or float32; int32 x with the division
    # type made explicit for the reference (without it NumPy divides int32 by float32 in float64, deviation R3)
    t = qtype(name)
    xb = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16).reshape(64, -1)
    z = _codes(t)
    for s in (np.array(0.3, ml_dtypes.bfloat16), np.full(64, 0.0625, ml_dtypes.bfloat16)):
        _check_quantize(xb, s, z if s.ndim else None, t, axis=0)
        _check_quantize(xb, s.astype(np.float32), z if s.ndim else np.array(1.0, t.storage), t, axis=0)
    xi = np.random.default_rng(3).integers(-(2**31), 2**31, (64, 256), dtype=np.int64).astype(np.int32)
    xi[:, :128] //= 2**26  # small quotients as well as saturated ones
    _check_quantize(xi, np.linspace(0.5, 40, 64).astype(np.float32), z, t, axis=0, precision="float32")


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name", F6)
def test_every_float16_per_axis_every_zero_point(name, saturate):
    # 64 rows: row i has zero point code i (all 64 codes, both zeros) and its own scale
    t = qtype(name)
    x = _all_float16(64)
    rng = np.random.default_rng(1)
    z = _codes(t)
    for s in (np.full(64, 0.5, np.float16), (10.0 ** rng.uniform(-4, 2, 64)).astype(np.float16)):
        _check_quantize(x, s, z, t, axis=0, saturate=saturate)
        _check_quantize(x.T.copy(), s.astype(np.float32), z, t, axis=-1, saturate=saturate)


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name", F6)
def test_every_float16_blocked(name, saturate):
    t = qtype(name)
    x = _all_float16(64)  # (64, 1024), blocks of 100 on axis 1: 11 blocks, the last one partial (24)
    rng = np.random.default_rng(2)
    s = (10.0 ** rng.uniform(-3, 1, (64, 11))).astype(np.float16)
    z = _codes(t, s.size, rng).reshape(s.shape)
    _check_quantize(x, s, z, t, axis=1, block_size=100, saturate=saturate)
    _check_quantize(x, s, None, t, axis=1, block_size=100, saturate=saturate)
    xt = x.T.copy()  # blocks on axis 0 (-2)
    _check_quantize(xt, s.T.astype(np.float32).copy(), z.T.copy(), t, axis=-2, block_size=100, saturate=saturate)


@pytest.mark.parametrize("output_dtype", [None, "float16", "bfloat16"])
@pytest.mark.parametrize("name", F6)
def test_dequantize_every_code_and_zero_point(name, output_dtype):
    t = qtype(name)
    v = _codes(t)
    x = np.tile(v, (64, 1))  # row i: every code, zero point code i
    for s in (np.linspace(0.25, 4, 64).astype(np.float32), np.full(64, 3.0, np.float16)):
        ref = _ref_dequantize(x, s, v, axis=0, output_dtype=output_dtype)
        for xin in (x, qlinear.pack(x)):
            assert bits_equal(qlinear.dequantize_linear(xin, s, v, axis=0, output_dtype=output_dtype), ref)
        ref = _ref_dequantize(x, s, None, axis=0, output_dtype=output_dtype)
        assert bits_equal(qlinear.dequantize_linear(qlinear.pack(x), s, None, axis=0, output_dtype=output_dtype), ref)


@st.composite
def _cases(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    kind = draw(st.sampled_from(["tensor", "axis", "block"]))
    block = draw(st.integers(1, shape[axis] + 2)) if kind == "block" else 0
    sshape = () if kind == "tensor" else (shape[axis],) if kind == "axis" else \
        tuple(-(-d // block) if i == axis % rank else d for i, d in enumerate(shape))
    return shape, axis, block, sshape


@given(_cases(), st.sampled_from(F6), st.sampled_from(["float32", "float16", "bfloat16"]),
       st.sampled_from([None, "float32", "float16", "bfloat16"]), st.booleans(), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_float32_inputs_match_reference(case, name, s_type, precision, with_zp, saturate, seed):
    shape, axis, block, sshape = case
    t = qtype(name)
    rng = np.random.default_rng(seed)
    g = gr.resolve(shape, sshape, axis, block)
    n_s = int(np.prod(sshape, dtype=np.int64))
    s = (10.0 ** rng.uniform(-4, 2, n_s)).astype(np.float32).astype(qtype(s_type).storage).reshape(sshape)
    z = _codes(t, n_s, rng).reshape(sshape) if with_zp else None
    n = int(np.prod(shape))
    # random bit patterns, grid points and midpoints of the float6 grid (times the scale), their neighbours
    grid = np.unique(_codes(t).astype(np.float32))
    mids = (grid[:-1] + grid[1:]) / 2
    pts = np.concatenate([grid, mids, [t.qmax * 1.0625, t.qmax * 2, 1e30, np.inf, -np.inf, np.nan]])
    se = np.broadcast_to(gr.expand(s.astype(np.float32), shape, g), shape).reshape(-1)
    choice = rng.integers(0, 4, n)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    on = (pts[rng.integers(0, pts.size, n)] * se).astype(np.float32)
    x = np.where(choice == 1, on, x)
    x = np.where(choice == 2, np.nextafter(on, np.float32(np.inf)), x)
    x = np.where(choice == 3, np.nextafter(on, np.float32(-np.inf)), x).astype(np.float32).reshape(shape)
    # the reference divides in NumPy's promotion of (float32, scale) unless told: always tell it qlinear's type
    p = precision or s_type
    _check_quantize(x, s, z, t, axis=axis, block_size=block, saturate=saturate, precision=p)


# --- the choices the spec leaves open -------------------------------------------------------------------------
NAN32 = np.array([0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFFC00000, 0xFF800001, 0xFFFFFFFF], np.uint32).view(np.float32)


@pytest.mark.parametrize("name", F6)
def test_nan_becomes_zero_as_the_note_shows(name):
    # onnx "Float stored in 6 bits": nan -> -0.0 (unspecified). qlinear: zero, sign bit opposite to the NaN's
    # (what ml_dtypes, hence onnx.reference, gives), whatever saturate says; float4e2m1 keeps its own rule (6).
    t = qtype(name)
    for saturate in (True, False):
        ours = qlinear.quantize_linear(NAN32, np.float32(1), output_dtype=name, saturate=saturate)
        assert ours.view(np.uint8).tolist() == [0x20, 0x20, 0x20, 0x00, 0x00, 0x00]
        assert bits_equal(ours, _ref_quantize(NAN32, np.float32(1), None, t, saturate=saturate))
    with np.errstate(invalid="ignore"):
        narrow = (NAN32.astype(np.float64), NAN32.astype(np.float16), NAN32.astype(ml_dtypes.bfloat16))
    for v in narrow:
        assert to_lowp_float(v, t, True).view(np.uint8).tolist() == [0x20, 0x20, 0x20, 0x00, 0x00, 0x00]
    assert qlinear.quantize_linear(NAN32[:1], np.float32(1), output_dtype="float4e2m1").astype(np.float32)[0] == 6


@pytest.mark.parametrize("name", F6)
def test_saturation_and_infinities(name):
    t = qtype(name)
    x = np.array([np.inf, -np.inf, 1e30, -1e30, t.qmax * 1.0625, -t.qmax * 1.0625, -0.0, 0.0], np.float32)
    for saturate in (True, False):
        ours = qlinear.quantize_linear(x, np.float32(1), output_dtype=name, saturate=saturate).astype(np.float32)
        m = t.qmax
        assert ours.tolist() == [m, -m, m, -m, m, -m, 0.0, 0.0] and np.signbit(ours[6]) and not np.signbit(ours[7])


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", F6 + ["float4e2m1"])
def test_zero_point_added_once_after_a_narrow_division(name, precision):
    # every float16 / bfloat16 quotient + every zero point: one rounding of the exact sum (float64 is exact
    # here), not a float16 sum rounded again; and what the reference computes (it adds float4 zero points too)
    t = qtype(name)
    pt = qtype(precision).storage
    q = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(pt)
    q = q[np.isfinite(q.astype(np.float32))]
    z = _codes(t)
    x = np.tile(q, (z.size, 1))
    ones = np.ones(z.size, pt)
    ours = qlinear.quantize_linear(x, ones, z, axis=0)
    exact = to_lowp_float(x.astype(np.float64) + z.astype(np.float64)[:, None], t, True)
    assert bits_equal(ours, exact)
    ref = _ref_quantize(x, ones, z, t, axis=0, precision=precision)
    assert bits_equal(ours, ref)
    # the double rounding avoided: 0.25 + 2^-12 + 4 is 4.25 (a tie -> 4) in float16; exactly it rounds to 4.5
    if name == "float6e2m3" and precision == "float16":
        y = qlinear.quantize_linear(np.array([0.25 + 2**-12], np.float16), np.float16(1), np.array(4.0, t.storage))
        assert y.astype(np.float32).tolist() == [4.5]


def test_types_and_errors():
    e2, e3 = qtype("float6e2m3"), qtype("float6e3m2")
    assert (e2.qmax, e3.qmax, e2.bits, e2.pack_group, e2.finite, e2.opset) == (7.5, 28.0, 6, (4, 3), True, 28)
    assert qtype(ml_dtypes.float6_e3m2fn) is e3 and qtype("float6_e2m3fn") is e2 and qtype(27) is e2
    assert qlinear.pack(np.zeros(5, ml_dtypes.float6_e2m3fn)).data.size == 4
    with pytest.raises(ShapeError, match="need 3 bytes, got 4"):
        qlinear.unpack(np.zeros(4, np.uint8), "float6e3m2", (4,))
    with pytest.raises(DTypeError, match="x_zero_point: type float6e3m2 must equal the type of x"):
        qlinear.dequantize_linear(np.zeros(2, e2.storage), np.float32(1), np.zeros((), e3.storage))
