"""Exhaustive tests over every value of the 2- and 4-bit types and of float8 / float4 (at most 256 each).

Integer types: every (x, zero point) pair dequantizes like both peers; quantizing every grid point, every
half-way tie and both float32 neighbours of every tie, for every zero point, equals both peers.
Float types: every code dequantizes like both peers; every representable value, every midpoint (a tie)
and the neighbours of every midpoint quantize like the reference (and ORT outside its known overflow
bugs, notes/onnx-ort.md §3.3), with saturate on and off.
"""

import numpy as np
import pytest
from onnx_peers import run_ort, run_reference, single_node_model, values_equal

import qlinear
from qlinear.core.types import qtype

SMALL_INT = ["int2", "uint2", "int4", "uint4"]
FLOATS = ["float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float4e2m1"]


def _all(t):
    return np.arange(1 << t.bits, dtype=np.uint8).view(t.storage)


@pytest.mark.parametrize("name", SMALL_INT)
def test_int_dequantize_every_pair(name):
    t = qtype(name)
    v = _all(t)
    x = np.repeat(v, v.size)          # every (x, zp) pair, per-axis over the zero points
    x = x.reshape(v.size, v.size).T.copy()   # row j: all x with zero point v[j]
    s = np.linspace(0.5, 3.0, v.size).astype(np.float32)
    for packed in (False, True):
        ours = qlinear.dequantize_linear(qlinear.pack(x) if packed else x, s, v, axis=0)
        feeds = {"x": x, "s": s, "z": v}
        m = single_node_model("DequantizeLinear", feeds, 1, list(x.shape), axis=0)
        assert values_equal(ours, run_reference(m, feeds)[0])
        assert values_equal(ours, run_ort(m, feeds)[0])


@pytest.mark.parametrize("name", SMALL_INT + ["int8", "uint8"])
def test_int_quantize_every_tie(name):
    t = qtype(name)
    zps = np.arange(t.qmin, t.qmax + 1).astype(t.storage)
    s = np.float32(0.25)  # power of two: (k + 0.5) * s is exact, so the quotient is exactly a tie
    k = np.arange(t.qmin - t.qmax - 2, t.qmax - t.qmin + 3, dtype=np.float64)
    base = np.concatenate([k, k + 0.5]) * 0.25
    f = base.astype(np.float32)
    x1 = np.concatenate([f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))])
    x = np.tile(x1, (zps.size, 1))  # per-axis: row j uses zero point zps[j]
    sv = np.full(zps.size, s, np.float32)
    for packed in (False, True) if t.is_subbyte else (False,):
        ours = qlinear.quantize_linear(x, sv, zps, axis=0, packed=packed)
        ours = ours.unpack() if packed else ours
        feeds = {"x": x, "s": sv, "z": zps}
        m = single_node_model("QuantizeLinear", feeds, t.onnx_type, list(x.shape), axis=0)
        assert values_equal(ours, run_reference(m, feeds)[0])
        assert values_equal(ours, run_ort(m, feeds)[0])


def _midpoints(t):
    v = _all(t).astype(np.float32)
    v = np.unique(v[np.isfinite(v)])
    mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)  # exact in float32
    top = np.float32(t.qmax)
    beyond = np.array([top * 1.0625, top * 1.125, top * 1.2, top * 2, 1e30, np.inf, -np.inf, np.nan], np.float32)
    xs = np.concatenate([v, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                         beyond, -beyond, np.array([0.0, -0.0], np.float32)])
    return xs


@pytest.mark.parametrize("name", FLOATS)
def test_float_dequantize_every_code(name):
    t = qtype(name)
    x = _all(t)
    s = np.float32(1.5)
    ours = qlinear.dequantize_linear(x, s)
    feeds = {"x": x, "s": s}
    m = single_node_model("DequantizeLinear", feeds, 1, [x.size])
    assert values_equal(ours, run_reference(m, feeds)[0])
    if name != "float4e2m1":  # not implemented in ORT CPU
        assert values_equal(ours, run_ort(m, feeds)[0])


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name", FLOATS)
def test_float_quantize_every_value_and_tie(name, saturate):
    t = qtype(name)
    x = _midpoints(t)
    s = np.float32(1.0)
    ours = qlinear.quantize_linear(x, s, output_dtype=name, saturate=saturate)
    feeds = {"x": x, "s": s}
    m = single_node_model("QuantizeLinear", feeds, t.onnx_type, [x.size], output_dtype=t.onnx_type,
                          saturate=int(saturate))
    mask = ~np.isnan(x) if name == "float4e2m1" else np.ones(x.size, bool)  # R5: spec says NaN -> 6
    assert values_equal(ours[mask], run_reference(m, feeds)[0][mask])
    if name != "float4e2m1":
        a = np.abs(x)
        if not saturate and name == "float8e4m3fn":
            mask &= ~((a >= 480) & (a < 496))
        if not saturate and name == "float8e5m2":
            mask &= ~((a >= 61440) & (a < 65536))
        assert values_equal(ours[mask], run_ort(m, feeds)[0][mask])
