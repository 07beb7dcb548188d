"""Differential property tests: qlinear vs onnx.reference and ONNX Runtime, each where it is right.

Random shapes, negative axes, partial blocks, every (x, scale, output) type combination the spec allows,
values on and next to .5 ties after division, huge values, subnormals, -0.0, NaN and +-inf.

Oracle rules (notes/onnx-ort.md §1.5, §3; the deviations themselves are pinned in test_deviations.py):

* onnx.reference, always run with an explicit ``precision`` equal to qlinear's division type, which
  sidesteps R2/R3 (the reference then divides exactly as the spec says). Elements whose quotient is NaN,
  +-inf or >= 2^31 in magnitude are not compared for integer outputs (R1: int32 wrap-around); NaN is not
  compared for float4 (R5). Float8 cases use no or zero zero points (R4).
* ONNX Runtime, wherever it implements the combination (not bfloat16/int32 x, bfloat16/int32/e8m0
  scales, float4, bfloat16 precision); for float8 saturate=0 the two known overflow ranges are masked.

Every example is compared with at least one peer.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx_peers import run_ort, run_reference, single_node_model, values_equal

import qlinear
from qlinear.core import granularity as gr
from qlinear.core.quantize import precision_dtype
from qlinear.core.types import qtype

X_TYPES = ["float32", "float16", "bfloat16", "int32"]
S_TYPES = ["float32", "float16", "bfloat16", "int32", "float8e8m0"]
INT_OUT = ["int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16"]
F8_OUT = ["float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"]
ORT_X = {"float32", "float16"}
ORT_S = {"float32", "float16"}


@st.composite
def layouts(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    kind = draw(st.sampled_from(["tensor", "axis", "block"]))
    axis = draw(st.integers(-rank, rank - 1))
    block = 0
    if kind == "block":
        d = shape[axis]
        block = draw(st.integers(1, d + 2))
    g = gr.resolve(shape, _scale_shape(shape, kind, axis, block), axis, block)
    return shape, kind, axis, block, g


def _scale_shape(shape, kind, axis, block):
    if kind == "tensor":
        return ()
    if kind == "axis":
        return (shape[axis],)
    s = list(shape)
    s[axis] = -(-shape[axis] // block)
    return tuple(s)


def _scales(rng, n, st_name, draw_kind):
    if st_name == "int32":
        return rng.integers(1, 7, n).astype(np.int32)
    if st_name == "float8e8m0":
        return (2.0 ** rng.integers(-6, 4, n)).astype(np.float32).astype(ml_dtypes.float8_e8m0fnu)
    if draw_kind == "pow2":  # quotients of ties are exact: the sharpest rounding test
        s = 2.0 ** rng.integers(-8, 3, n)
    elif draw_kind == "tiny":
        s = 10.0 ** rng.uniform(-12, -6, n)
    else:
        s = 10.0 ** rng.uniform(-3, 1, n)
    return s.astype(np.float32).astype(qtype(st_name).storage)


def _values(rng, s_full, lo, hi, zp_full, x_type, specials):
    """float64 values: ties, neighbours of ties, uniform, and (optionally) special values."""
    n = s_full.size
    s = s_full.astype(np.float64).ravel()
    k = rng.integers(int(lo) - 3, int(hi) + 4, n) - zp_full.ravel()
    choice = rng.integers(0, 6 if specials else 4, n)
    tie = (k + 0.5) * s
    x = np.where(choice == 0, tie, 0.0)
    x = np.where(choice == 1, rng.uniform(lo - 2, hi + 2, n) * s, x)
    x = np.where(choice == 2, k * s, x)
    x = np.where(choice == 3, tie, x)  # nudged below in the input type
    if specials:
        sp = np.array([np.nan, np.inf, -np.inf, -0.0, 1e30, -1e30, 1e-40, 3e9, 65504.0, 1e-7], np.float64)
        x = np.where(choice >= 4, sp[rng.integers(0, sp.size, n)], x)
    if x_type == "int32":
        x = np.nan_to_num(np.rint(x), nan=0.0, posinf=2**31 - 1, neginf=-(2**31))
        return np.clip(x, -(2**31), 2**31 - 1).astype(np.int32), choice
    xt = qtype(x_type).storage
    with np.errstate(over="ignore", invalid="ignore"):
        xc = x.astype(np.float32).astype(xt)
        nudge = rng.integers(-1, 2, n)
        f32 = xc.astype(np.float32)
        up = np.nextafter(f32, np.float32(np.inf)).astype(xt)
        dn = np.nextafter(f32, np.float32(-np.inf)).astype(xt)
        xc = np.where((choice == 3) & (nudge > 0), up, np.where((choice == 3) & (nudge < 0), dn, xc))
    return xc, choice


def _onnx_t(name):
    return qtype(name).onnx_type


def _compare(ours, peer, mask=None):
    if mask is not None:
        ours, peer = np.asarray(ours)[mask], np.asarray(peer).reshape(np.shape(ours))[mask]
    assert values_equal(ours, np.asarray(peer).reshape(np.shape(ours))), (ours, peer)


@given(layouts(), st.sampled_from(X_TYPES), st.sampled_from(S_TYPES), st.sampled_from(INT_OUT + F8_OUT + ["float4e2m1"]),
       st.sampled_from(["pow2", "rand", "tiny"]), st.booleans(), st.booleans(), st.booleans(),
       st.sampled_from([None, "float32", "float16", "bfloat16"]), st.integers(0, 2**32 - 1))
def test_quantize_matches_peers(lay, x_type, s_type, out, scale_kind, with_zp, specials, saturate, precision, seed):
    shape, kind, axis, block, g = lay
    rng = np.random.default_rng(seed)
    ot = qtype(out)
    sshape = gr.param_shape(shape, g)
    n_s = int(np.prod(sshape, dtype=np.int64))
    if s_type in ("int32", "float8e8m0"):
        precision = None if s_type == "int32" else precision
    s = _scales(rng, n_s, s_type, scale_kind).reshape(sshape)
    zp = None
    if ot.is_int and with_zp:
        zp = rng.integers(int(ot.qmin), int(ot.qmax) + 1, n_s).astype(ot.storage).reshape(sshape)
    elif ot.name == "float4e2m1" and with_zp:
        zp = rng.choice([-1.0, 0.0, 0.5, 2.0], n_s).astype(ot.storage).reshape(sshape)
    elif ot.is_float and with_zp:
        zp = np.zeros(sshape, ot.storage)
    zp_full = gr.expand(zp.astype(np.float64) if zp is not None and ot.is_int else np.zeros(sshape), shape, g)
    zp_full = np.broadcast_to(zp_full, shape)
    s_full = np.broadcast_to(gr.expand(s.astype(np.float32), shape, g), shape)
    lo, hi = (ot.qmin, ot.qmax) if ot.is_int else (-8, 8)
    x, choice = _values(rng, s_full, lo, hi, zp_full, x_type, specials)
    x = x.reshape(shape)
    attrs = dict(axis=axis, block_size=block, saturate=int(saturate))
    if zp is None:
        attrs["output_dtype"] = ot.onnx_type
    ours = qlinear.quantize_linear(x, s, zp, precision=precision, **{k: v for k, v in attrs.items() if k != "saturate"},
                                   saturate=saturate)
    assert ours.dtype == ot.storage and ours.shape == shape

    p = precision_dtype(qtype(s_type), precision)
    with np.errstate(all="ignore"):
        quot = np.true_divide(x.astype(p), s_full.astype(p)).astype(np.float64)
    compared = 0
    # --- onnx.reference with the division type made explicit (R2, R3 do not apply then)
    ref_attrs = dict(attrs)
    if s_type != "int32":
        ref_attrs["precision"] = qtype(p).onnx_type
    feeds = {"x": x, "s": s} | ({"z": zp} if zp is not None else {})
    model = single_node_model("QuantizeLinear", feeds, ot.onnx_type, list(shape), **ref_attrs)
    ref = run_reference(model, feeds)[0]
    if ot.is_int:
        mask = np.isfinite(quot) & (np.abs(quot) < 2.0**30)  # R1 (int32 cast and zero-point add wrap)
    elif ot.name == "float4e2m1":
        mask = ~np.isnan(quot)  # R5
    else:
        mask = np.ones(shape, bool)
    zero_sign = ot.is_float and zp is not None  # R4/R6: spec adds the zero point, so -0 + 0 = +0; peers keep -0
    if zero_sign:
        mask &= quot != 0
    _compare(ours, ref, mask)
    compared += 1
    # --- ONNX Runtime where it implements the combination
    p_name = qtype(p).name if p != np.float64 else "exact"
    ort_blocked_ok = not (kind == "block" and n_s == 1)  # ORT takes a 1-element scale as per-tensor, rejects block_size
    if x_type in ORT_X and s_type in ORT_S and ot.name != "float4e2m1" and p_name in ("float32", "float16") \
            and ort_blocked_ok:
        ort_attrs = dict(attrs)
        if precision is not None:
            ort_attrs["precision"] = qtype(precision).onnx_type
        model = single_node_model("QuantizeLinear", feeds, ot.onnx_type, list(shape), **ort_attrs)
        got = run_ort(model, feeds)[0]
        mask = (quot != 0) if zero_sign else np.ones(shape, bool)
        if ot.is_float and not saturate:  # ORT float8 overflow bugs (notes/onnx-ort.md §3.3)
            a = np.abs(quot)
            if ot.name == "float8e4m3fn":
                mask &= ~((a >= 480) & (a < 496))
            if ot.name == "float8e5m2":
                mask &= ~((a >= 61440) & (a < 65536))
        _compare(ours, got, mask)
        compared += 1
    assert compared >= 1


@given(layouts(), st.sampled_from(INT_OUT + ["int32"] + F8_OUT + ["float4e2m1"]),
       st.sampled_from(["float32", "float16", "bfloat16", "float8e8m0"]),
       st.sampled_from([None, "float32", "float16", "bfloat16"]), st.booleans(), st.booleans(), st.integers(0, 2**32 - 1))
def test_dequantize_matches_peers(lay, in_type, s_type, out_type, with_zp, packed, seed):
    shape, kind, axis, block, g = lay
    rng = np.random.default_rng(seed)
    it = qtype(in_type)
    sshape = gr.param_shape(shape, g)
    n_s = int(np.prod(sshape, dtype=np.int64))
    if s_type == "float8e8m0" and out_type is None:
        out_type = "float32"
    s = _scales(rng, n_s, s_type, "rand").reshape(sshape)
    n = int(np.prod(shape))
    ort_ok = s_type in ORT_S and (out_type or s_type) != "bfloat16" and it.name != "float4e2m1" \
        and not (kind == "block" and n_s == 1)
    if it.name == "int32" and with_zp and not ort_ok:
        with_zp = False  # R8: only ORT computes int32 - zp right (and only without int32 overflow)
    if it.is_int:
        lo, hi = (-(2**31), 2**31 - 1) if it.name == "int32" else (int(it.qmin), int(it.qmax))
        if it.name == "int32" and with_zp:
            lo, hi = -(2**30), 2**30
        x = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64).astype(np.int32 if it.name == "int32" else np.int64)
        x = x.astype(it.storage).reshape(shape)
        zp = rng.integers(lo, hi, n_s, endpoint=True, dtype=np.int64).astype(it.storage).reshape(sshape) if with_zp else None
    else:
        codes = rng.integers(0, 256 if it.bits == 8 else 16, n).astype(np.uint8)
        x = codes.view(it.storage).reshape(shape) if it.bits == 8 else (codes & 0xF).view(it.storage).reshape(shape)
        zp = np.zeros(sshape, it.storage) if with_zp else None  # R4: the reference ignores/refuses non-zero float zps
    xin = qlinear.pack(x) if packed and it.is_subbyte else x
    ours = qlinear.dequantize_linear(xin, s, zp, axis=axis, block_size=block, output_dtype=out_type)
    ot = qtype(out_type) if out_type else qtype(s_type)
    assert ours.dtype == ot.storage and ours.shape == shape
    feeds = {"x": x, "s": s} | ({"z": zp} if zp is not None else {})
    attrs = dict(axis=axis, block_size=block, output_dtype=qtype(out_type).onnx_type if out_type else None)
    model = single_node_model("DequantizeLinear", feeds, ot.onnx_type, list(shape), **attrs)
    compared = 0
    if not (it.name == "int32" and zp is not None):  # R8: the reference subtracts in float64
        _compare(ours, run_reference(model, feeds)[0])
        compared += 1
    if ort_ok:
        _compare(ours, run_ort(model, feeds)[0])
        compared += 1
    assert compared >= 1


@given(st.integers(1, 300), st.integers(0, 2**32 - 1), st.booleans())
def test_dynamic_quantize_matches_ort(n, seed, with_specials):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 10 ** rng.uniform(-3, 3)).astype(np.float32)
    if with_specials:
        x[rng.integers(0, n, 1)] = rng.choice([0.0, -0.0, 1e-40])
    model = single_node_model("DynamicQuantizeLinear", {"x": x}, T.UINT8, [n], opset=11, n_out=3,
                              out_types=[T.UINT8, T.FLOAT, T.UINT8])
    y, s, z = qlinear.dynamic_quantize_linear(x)
    ey, es, ez = run_ort(model, {"x": x})
    assert np.array_equal(y, ey) and np.float32(s) == es and np.uint8(z) == ez
    if min(x.min(), 0) != max(x.max(), 0):  # constant zero: reference scale 1/255, ORT and qlinear 1 (pinned)
        ry, rs, rz = run_reference(model, {"x": x})
        assert np.array_equal(y, ry) and np.float32(s) == rs and np.uint8(z) == rz
