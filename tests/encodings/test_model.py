"""The Encoding model: validation on construction, and driving the core quantize/dequantize (checked against ONNX
Runtime running the same QuantizeLinear/DequantizeLinear)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto
from onnx_peers import run_ort, single_node_model

from qlinear import encodings as E
from qlinear.errors import EncodingError, QlinearError


@pytest.mark.parametrize("kw, match", [
    (dict(scale=np.nan), "finite"),
    (dict(scale=-1.0), "finite and > 0"),
    (dict(scale=0.0), "> 0"),
    (dict(scale=0.1, zero_point=300), "outside the uint8 range"),
    (dict(scale=[0.1, 0.2], zero_point=[0, 1, 2], axis=0), "shape"),
    (dict(scale=[[0.1, 0.2]], block_size=-3, axis=1), "block_size"),
    (dict(scale=0.1, zero_point=0.5), "not an integer"),
    (dict(dtype="float8e8m0", scale=0.1), "scale type"),
    (dict(dtype="int7", scale=0.1), "unknown dtype"),
])
def test_invalid_encodings_raise(kw, match):
    args = dict(name="t", dtype="uint8") | kw
    with pytest.raises(EncodingError, match=match):
        E.Encoding(**args)


def test_immutable():
    e = E.Encoding("t", "uint8", scale=0.1, zero_point=3)
    with pytest.raises(ValueError):  # read-only array
        e.scale[...] = 1.0  # type: ignore[index]
    with pytest.raises(AttributeError):  # frozen dataclass
        e.name = "u"  # type: ignore[misc]


def test_duplicate_names():
    e = E.Encoding("t", "uint8", scale=0.1)
    with pytest.raises(EncodingError, match="duplicate"):
        E.EncodingSet((e, e))


@given(st.integers(0, 3), st.sampled_from(["uint8", "int8", "int4", "uint16"]), st.integers(0, 2**31 - 1))
def test_encoding_quantize_equals_onnxruntime(kind, dtype, seed):
    """Encoding.quantize/dequantize (per-tensor, per-channel, per-block, LPBQ) == ORT's QuantizeLinear/DQ."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((6, 32)) * 3).astype(np.float32)
    from qlinear.core.types import qtype

    t = qtype(dtype)
    if kind == 0:
        e = E.Encoding("w", dtype, scale=float(rng.uniform(0.01, 0.2)), zero_point=int(rng.integers(t.qmin, t.qmax + 1)))
    elif kind == 1:
        e = E.Encoding("w", dtype, scale=rng.uniform(0.01, 0.2, 6), zero_point=rng.integers(t.qmin, t.qmax + 1, 6), axis=0)
    elif kind == 2:
        e = E.Encoding("w", dtype, scale=rng.uniform(0.01, 0.2, (6, 2)), axis=1, block_size=16)
    else:
        if not t.signed or t.bits >= 16:
            return
        e = E.Encoding("w", dtype, scale=rng.uniform(0.001, 0.02, (6, 1)), int_scale=rng.integers(1, 17, (6, 2)),
                       axis=1, block_size=16, decompressed_bits=2 * t.bits)
    p = e.onnx_params(x.shape)
    ins = {"x": x, "s": p["scale"]}
    if p["zero_point"] is not None:
        ins["z"] = p["zero_point"]
    attrs = dict(axis=p["axis"], block_size=p["block_size"] or None)
    m = single_node_model("QuantizeLinear", ins, t.onnx_type, list(x.shape), opset=21, **attrs)
    want = run_ort(m, ins)[0]
    got = e.quantize(x)
    assert np.array_equal(got.astype(np.int32), want.astype(np.int32))
    m2 = single_node_model("DequantizeLinear", {"q": want} | {k: v for k, v in ins.items() if k != "x"},
                           TensorProto.FLOAT, list(x.shape), opset=21, **attrs)
    want_dq = run_ort(m2, {"q": want} | {k: v for k, v in ins.items() if k != "x"})[0]
    assert np.array_equal(e.dequantize(got).view(np.uint32), want_dq.view(np.uint32))


def test_shifted_int2_has_no_onnx_params_but_quantizes_on_its_grid():
    """ONNX zero points are integers, so no QuantizeLinear parameters; quantize/dequantize use AIMET's arithmetic
    (bit-exact against AIMET's own numbers in test_aimet_formats.py)."""
    e = E.Encoding("w", "int2", scale=[0.5, 0.25], zero_point=[-0.5, -0.5], axis=0)
    with pytest.raises(QlinearError, match="shifted"):
        e.onnx_params((2, 3))
    # ties (0.0, 0.5, 0.125, ...) round half away from zero on AIMET's unsigned grid: up, here
    x = np.array([[-9.0, -0.5, 0.0, 0.25, 0.5, 9.0], [-0.375, -0.125, 0.0, 0.125, 0.25, 0.375]], np.float32)
    q = e.quantize(x)
    assert q.dtype.name == "int2"
    np.testing.assert_array_equal(q.astype(np.int8), [[-2, -1, 0, 0, 1, 1], [-2, -1, 0, 0, 1, 1]])
    np.testing.assert_array_equal(e.dequantize(q), [[-0.75, -0.25, 0.25, 0.25, 0.75, 0.75],
                                                    [-0.375, -0.125, 0.125, 0.125, 0.375, 0.375]])
    with pytest.raises(QlinearError, match="saturate"):
        e.quantize(x, saturate=False)
