"""Issue 24: the AIMET format additions, against files AIMET 2.42 wrote itself (tests/encodings/aimet_formats,
INDEX.md there): 1.0.0 ``zero_point_shift`` (int2 shifted grid), 2.0.0 float8 / float4 entries, and the "0.6.2"
version no AIMET release writes. Byte-exact re-save, conversions that reproduce AIMET's own entries, the shifted
grid dequantized bit for bit as AIMET's quantizer did, and errors naming the field where a version cannot
express an entry."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlinear import encodings as E
from qlinear import graph as G
from qlinear.errors import EncodingError, QlinearError

DATA = Path(__file__).parent / "aimet_formats"
MODEL = DATA / "probe_model.onnx"
FILES = sorted(DATA.glob("*.encodings"))
SHIFT = {v: DATA / f"aimet-onnx-2.42.0_int2_shift_v{v}.encodings" for v in ("0.6.1", "1.0.0", "2.0.0")}
FLOAT_FILES = [f for f in FILES if "float" in f.name or "fp4" in f.name]
TORCH_SHIFT = [f for f in FILES if f.name.startswith("aimet-torch-2.42.0_int2_shift")]
WEIGHTS = ("conv.weight", "fc1.weight", "fc2.weight")


def _model(f: Path) -> Path:
    """The model of a file: the probe model for aimet-onnx files (the Conv-block probe's for its two), the 2.0.0
    export's ONNX for aimet-torch ones."""
    if "_conv_" in f.name:
        return DATA / "conv_blocks_model.onnx"
    if not f.name.startswith("aimet-torch"):
        return MODEL
    if f.with_suffix(".onnx").exists():
        return f.with_suffix(".onnx")
    stem = f.name.split("_legacy_v")[0].split("_v")[0]
    return f.parent / f"{stem}_v2.0.0.onnx"


def _canon(entries: dict) -> dict:
    """Entries as canonical text (an int offset -2 and a float -2.0 differ, as in the file)."""
    return {k: json.dumps(v, sort_keys=True) for k, v in entries.items()}


def _entries(doc: dict, version: str) -> dict:
    if version == "0.6.1":
        return {**doc["activation_encodings"], **doc["param_encodings"]}
    if version == "1.0.0":
        return {e["name"]: e for e in doc["activation_encodings"] + doc["param_encodings"]}
    return {e["name"]: e for e in doc["encodings"]}


def test_the_probe_files_are_there():
    assert len(FILES) == 27 and len(FLOAT_FILES) == 7 and len(TORCH_SHIFT) == 12
    assert (DATA / "int2_shift_qdq.npz").exists() and (DATA / "int2_shift_qdq_torch.npz").exists() and MODEL.exists()
    assert all(_model(f).exists() for f in FILES)


@pytest.mark.parametrize("f", FILES, ids=lambda p: p.name)
def test_aimet_files_resave_byte_for_byte(f, tmp_path):
    text = f.read_text()
    es = E.load(f)
    assert E.dumps(es) == text
    out = tmp_path / f.name
    E.save(es, out)
    assert out.read_bytes() == f.read_bytes()
    if f.name.endswith("v0.6.1.encodings") and ("block" in f.name or f.name.startswith("aimet-onnx")):
        return  # AIMET writes per-block weights into 0.6.1 as flat per-block dicts: no axes fit them (below)
    resolved = G.resolve(E.load(f), _model(f))
    assert E.dumps(resolved) == text  # axes from the model change no byte of a file that had them or lacked them


def test_int2_shift_read_in_every_version():
    es = {v: E.load(f) for v, f in SHIFT.items()}
    for v, s in es.items():
        for n in WEIGHTS:
            e = s[n]
            assert e.dtype == "int2" and e.shifted and np.all(e.zero_point == -0.5), (v, n)
    assert es["2.0.0"]["conv.weight"].granularity == "per_tensor"
    assert es["2.0.0"]["fc1.weight"].granularity == "per_channel" and es["2.0.0"]["fc1.weight"].axis == 0
    fc2 = es["2.0.0"]["fc2.weight"]
    assert fc2.granularity == "per_block" and fc2.axis == 0 and fc2.block_size == 16 and fc2.scale.shape == (4, 16)
    r1 = G.resolve(es["1.0.0"], MODEL)
    assert r1.same_parameters(G.resolve(es["2.0.0"], MODEL).with_encodings(
        [e for e in es["2.0.0"] if e.name in r1]))  # 1.0.0 lacks only the int32 biases and flat_out
    # 0.6.1 states the per-tensor shift as offset -1.5
    assert es["0.6.1"]["conv.weight"] == es["2.0.0"]["conv.weight"]
    doc = json.loads(SHIFT["1.0.0"].read_text())
    e = _entries(doc, "1.0.0")["fc2.weight"]
    assert set(e["offset"]) == {-2.0} and set(e["zero_point_shift"]) == {0.5}


@pytest.mark.parametrize("src", ["1.0.0", "2.0.0"])
@pytest.mark.parametrize("dst", ["0.6.1", "1.0.0", "2.0.0"])
def test_conversions_write_what_aimet_wrote(src, dst):
    """Converting AIMET's int2-shift file to another version gives, entry for entry, the file AIMET exported in that
    version (offset -2.0 + zero_point_shift 0.5 / y_zero_point -0.5 / offset -1.5 with grid-exact min and max)."""
    es = G.load_encodings(SHIFT[src], MODEL)
    if dst == "0.6.1":
        with pytest.raises(EncodingError, match=r"fc2\.weight.*0\.6\.1"):
            E.dumps(es, dst)  # per-block: 0.6.1 has no blocks (AIMET writes a flat list without axes instead)
        es = es.with_encodings([e for e in es if e.name != "fc2.weight"])
    ours = _entries(json.loads(E.dumps(es, dst)), dst)
    aimet = _entries(json.loads(SHIFT[dst].read_text()), dst)
    common = set(ours) & set(aimet)
    assert {"conv.weight", "fc1.weight", "x", "y"} <= common
    ours, aimet = _canon(ours), _canon(aimet)
    for n in common:
        assert ours[n] == aimet[n], n
    back = G.resolve(E.loads(E.dumps(es, dst)), MODEL)
    assert back.same_parameters(es)


def test_int2_shift_round_trips_1_0_0_and_2_0_0_losslessly():
    es = G.load_encodings(SHIFT["2.0.0"], MODEL)
    one = E.dumps(es, "1.0.0")
    assert '"zero_point_shift"' in one
    again = G.resolve(E.loads(one), MODEL)
    assert again.same_parameters(es)
    two = _entries(json.loads(E.dumps(again, "2.0.0")), "2.0.0")
    assert two == _entries(json.loads(SHIFT["2.0.0"].read_text()), "2.0.0")  # AIMET's own 2.0.0 entries, back
    assert G.resolve(E.loads(E.dumps(es, "2.1.0")), MODEL).same_parameters(es)


def test_0_6_1_blockwise_flat_list_cannot_be_resolved():
    """AIMET writes the per-block fc2.weight into 0.6.1 as one dict per block (64 for 16 channels): qlinear reads and
    re-saves it, and resolving it against the model says what does not fit."""
    es = E.load(SHIFT["0.6.1"])
    assert es["fc2.weight"].scale.shape == (64,) and not es["fc2.weight"].resolved
    with pytest.raises(QlinearError, match=r"fc2\.weight.*64"):
        G.resolve(es, MODEL)


@pytest.mark.parametrize("version", ["0.6.1", "1.0.0", "2.0.0"])
def test_shifted_grid_dequantizes_bit_for_bit_as_aimet(version):
    """int2_shift_qdq.npz holds AIMET's QcQuantizeOp.quantize_dequantize of each weight and of a probe of grid points
    and exact ties (k/2 * scale): qlinear's fake_quantize must give the same float32 bits."""
    qdq = np.load(DATA / "int2_shift_qdq.npz")
    es = E.load(SHIFT[version])
    if version != "0.6.1":
        es = G.resolve(es, MODEL)
    checked = 0
    for n in WEIGHTS:
        e = es[n]
        if not e.resolved:
            continue  # 0.6.1 per-channel: no axes
        for x, want in ((qdq[f"{n}/w"], qdq[f"{n}/qdq"]), (qdq[f"{n}/probe"], qdq[f"{n}/probe_qdq"])):
            got = e.fake_quantize(x)
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=n)
            q = e.quantize(x)
            assert q.dtype.name == "int2" and q.astype(np.int8).min() >= -2 and q.astype(np.int8).max() <= 1
            checked += x.size
        # AIMET's grid: {-1.5, -0.5, 0.5, 1.5} * scale, every value of it reached by the probe
        probe = qdq[f"{n}/probe"]
        grid = e.fake_quantize(probe).astype(np.float64) / _full_scale(e, probe.shape)
        snapped = np.round(grid * 2) / 2  # float32 products: within 1 ulp of the grid
        np.testing.assert_allclose(grid, snapped, rtol=1e-6)
        assert set(np.unique(snapped).tolist()) == {-1.5, -0.5, 0.5, 1.5}
    assert checked >= (2 * 1152 if version == "0.6.1" else 2 * (1152 + 2048 + 1024))
    with pytest.raises(QlinearError, match="shifted"):
        es["conv.weight"].onnx_params((32, 4, 3, 3))  # still no ONNX QuantizeLinear for it


def _full_scale(e: E.Encoding, shape: tuple[int, ...]) -> np.ndarray:
    s = np.asarray(e.scale, np.float32).astype(np.float64)
    if e.granularity == "per_tensor":
        return np.broadcast_to(s.reshape(()), shape)
    if e.granularity == "per_block":
        return np.repeat(s, e.block_size, axis=e.axis)
    return np.broadcast_to(s.reshape([-1 if i == e.axis % len(shape) else 1 for i in range(len(shape))]), shape)


def _aimet_reference(x: np.ndarray, scale: float) -> list[float]:
    """libpymo quantizeValueCpu/dequantizeValueCpu for the int2 shifted grid (offset -1.5 on the unsigned grid),
    float32 steps, C round() (half away from zero), written element by element."""
    s = np.float32(scale)
    lo, hi = np.float32(-1.5 * float(s)), np.float32(1.5 * float(s))
    out = []
    for v in x.tolist():
        c = np.float32(min(max(np.float32(v), lo), hi))
        u = float(np.float32(np.float32(c / s) + np.float32(1.5)))
        r = math.copysign(math.floor(abs(u) + 0.5), u)
        out.append(float(np.float32(s * np.float32(r - 1.5))))
    return out


@settings(max_examples=60, deadline=None)
@given(scale=st.floats(0.0009765625, 16.0, width=32),
       ks=st.lists(st.integers(-8, 8), min_size=1, max_size=20),
       noise=st.lists(st.floats(-20.0, 20.0, width=32), min_size=1, max_size=20))
def test_shifted_grid_matches_aimet_arithmetic(scale, ks, noise):
    e = E.Encoding("w", "int2", scale=float(scale), zero_point=-0.5, role="param")
    s = np.float32(scale)
    x = np.array([np.float32(k / 2) * s for k in ks] + [np.float32(v) * s for v in noise], np.float32)
    np.testing.assert_array_equal(e.fake_quantize(x), np.array(_aimet_reference(x, float(s)), np.float32))


@pytest.mark.parametrize("f", FLOAT_FILES, ids=lambda p: p.name)
def test_float8_float4_entries(f):
    es = G.resolve(E.load(f), _model(f))
    floats = [e for e in es if e.qtype.is_float]
    assert floats and all(e.zero_point is None for e in floats)
    for v in ("0.6.1", "1.0.0"):  # AIMET refuses these too ("cannot be exported to 1.0.0 encoding format")
        with pytest.raises(EncodingError) as ei:
            E.dumps(es, v)
        assert any(e.name in str(ei.value) for e in floats) and v in str(ei.value)
    for v in ("2.0.0", "2.1.0"):
        back = G.resolve(E.loads(E.dumps(es, v)), _model(f))
        assert back.same_parameters(es), v


def test_float_dtypes_and_granularities_as_aimet_wrote_them():
    onnx_f8 = E.load(DATA / "aimet-onnx-2.42.0_float8_v2.0.0.encodings")
    assert onnx_f8["conv.weight"].dtype == "float8e5m2" and onnx_f8["conv.weight"].granularity == "per_tensor"
    assert onnx_f8["fc1.weight"].dtype == "float8e4m3fn" and onnx_f8["fc1.weight"].axis == 0
    fc2 = onnx_f8["fc2.weight"]
    assert fc2.dtype == "float8e4m3fn" and fc2.granularity == "per_block" and fc2.scale.shape == (4, 16)
    assert onnx_f8["relu2_out"].dtype == "float8e4m3fn" and onnx_f8["relu2_out"].role == "activation"
    f4 = E.load(DATA / "aimet-torch-2.42.0_float4_block_v2.0.0.encodings")["fc1.weight"]
    assert f4.dtype == "float4e2m1" and f4.axis == 1 and f4.block_size == 16 and f4.scale.shape == (8, 4)
    fnuz = E.load(DATA / "aimet-torch-2.42.0_float8_channel_v2.0.0.encodings")["fc1.weight"]
    assert fnuz.dtype == "float8e4m3fnuz" and fnuz.granularity == "per_channel"
    # AIMET's float8 scale is amax / max_representable (57344 for e5m2): the weights of the probe model say so
    import onnx
    from onnx import numpy_helper

    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(MODEL).graph.initializer}
    np.testing.assert_allclose(onnx_f8["conv.weight"].scale, np.abs(w["conv.weight"]).max() / 57344, rtol=1e-6)
    np.testing.assert_allclose(onnx_f8["fc1.weight"].scale, np.abs(w["fc1.weight"]).max(axis=1) / 448, rtol=1e-6)


@pytest.mark.parametrize("entry,where,words", [
    (dict(bw=8, offset=[-128.0]), "zero_point_shift", "2-bit"),
    (dict(zero_point_shift=[0.25]), "zero_point_shift[0]", "0.25"),
    (dict(zero_point_shift=[0.5, 0.5]), "zero_point_shift", "2 values"),
    (dict(zero_point_shift=["half"]), "zero_point_shift[0]", "string"),
    (dict(enc_type="LPBQ", bw=8, offset=[-128], block_size=16, compressed_bw=4, per_block_int_scale=[1, 2]),
     "zero_point_shift", "LPBQ"),
])
def test_zero_point_shift_errors_name_the_field(entry, where, words):
    base = {"name": "w", "dtype": "INT", "bw": 2, "is_sym": True, "enc_type": "PER_TENSOR", "scale": [0.5],
            "offset": [-2.0], "zero_point_shift": [0.5]}
    doc = {"version": "1.0.0", "activation_encodings": [], "param_encodings": [dict(base, **entry)]}
    with pytest.raises(EncodingError, match=words) as ei:
        E.loads(json.dumps(doc), path="bad.encodings")
    assert ei.value.where == f"param_encodings[0].{where}"
    assert "bad.encodings" in str(ei.value)


def test_zero_shift_and_a_plain_int2_grid_are_not_shifted():
    doc = {"version": "1.0.0", "activation_encodings": [], "param_encodings": [
        {"name": "w", "dtype": "INT", "bw": 2, "is_sym": True, "enc_type": "PER_TENSOR", "scale": [0.5],
         "offset": [-2.0], "zero_point_shift": [0.0]}]}
    text = json.dumps(doc, indent=4, sort_keys=True)
    es = E.loads(text)
    assert not es["w"].shifted and E.dumps(es) == text  # the file's zero shift is kept on re-save
    assert "zero_point_shift" not in E.dumps(es.with_encodings([es["w"].replace(scale=0.25)]))


def test_version_0_6_2_is_refused_with_the_version_to_use():
    """No AIMET release writes "0.6.2" (aimet-onnx 2.42: ValueError "Unsupported encoding_version '0.6.2'"; the
    probe's output): reading or writing it names 0.6.1, the legacy layout QNN's custom I/O reads."""
    doc = json.loads(SHIFT["0.6.1"].read_text())
    doc["version"] = "0.6.2"
    with pytest.raises(EncodingError, match="0.6.1") as ei:
        E.loads(json.dumps(doc))
    assert ei.value.where == "version"
    with pytest.raises(EncodingError, match="use version 0.6.1"):
        E.dumps(E.load(SHIFT["1.0.0"]), "0.6.2")
    assert "Unsupported encoding_version '0.6.2'" in (DATA / "probe_output.txt").read_text()


@pytest.mark.parametrize("case", ["tensor", "channel", "block"])
def test_aimet_torch_int2_shift_files_agree(case):
    """aimet-torch writes the shift its own way: 0.6.1 integer offset -2 plus "zero_point_shift": 0.5 in each dict
    (min/max of the unshifted grid), 1.0.0 integer offsets plus the shift list, 2.0.0 y_zero_point -0.5. All four
    files of a case hold the same fc1.weight encoding."""
    files = sorted(DATA.glob(f"aimet-torch-2.42.0_int2_shift_{case}_*.encodings"))
    assert len(files) == 4
    model = DATA / f"aimet-torch-2.42.0_int2_shift_{case}_v2.0.0.onnx"
    want = G.resolve(E.load(files[-1]), model)["fc1.weight"]  # the 2.0.0 file (names sort last)
    assert want.shifted and want.granularity == {"tensor": "per_tensor", "channel": "per_channel",
                                                 "block": "per_block"}[case]
    for f in files:
        es = E.load(f)
        assert es["fc1.weight"].shifted, f.name
        if f.name.endswith("v0.6.1.encodings") and case == "block":
            continue  # 32 flat per-block dicts, no axes
        assert G.resolve(es, model)["fc1.weight"] == want, f.name


@pytest.mark.parametrize("case", ["tensor", "channel"])
def test_aimet_torch_style_conversion_writes_what_aimet_torch_wrote(case):
    """A file with integer offsets (aimet-torch) converted to 0.6.1 states the shift as aimet-torch does."""
    one = E.load(DATA / f"aimet-torch-2.42.0_int2_shift_{case}_legacy_v1.0.0.encodings")
    ours = _canon(_entries(json.loads(E.dumps(one, "0.6.1")), "0.6.1"))
    aimet = _canon(_entries(json.loads(
        (DATA / f"aimet-torch-2.42.0_int2_shift_{case}_legacy_v0.6.1.encodings").read_text()), "0.6.1"))
    assert ours["fc1.weight"] == aimet["fc1.weight"]  # (activations: aimet-torch's min/max are float32 values)
    zero = E.load(DATA / f"aimet-torch-2.42.0_int2_shift_{case}_legacy_v0.6.1.encodings")
    ours1 = _canon(_entries(json.loads(E.dumps(zero, "1.0.0")), "1.0.0"))
    aimet1 = _canon(_entries(json.loads(
        (DATA / f"aimet-torch-2.42.0_int2_shift_{case}_legacy_v1.0.0.encodings").read_text()), "1.0.0"))
    assert ours1["fc1.weight"] == aimet1["fc1.weight"]


@pytest.mark.parametrize("case", ["tensor", "channel", "block"])
def test_aimet_torch_rounds_shifted_ties_to_even(case):
    """aimet-torch's quantize_dequantize (torch.round: half to even) and aimet-onnx's C++ quantizer (round half away
    from zero) disagree on exact ties of the shifted grid (x an integer multiple of the scale); qlinear follows
    aimet-onnx. Off the ties both, and qlinear, agree bit for bit."""
    qdq = np.load(DATA / "int2_shift_qdq_torch.npz")
    f = DATA / f"aimet-torch-2.42.0_int2_shift_{case}_v2.0.0.encodings"
    e = G.resolve(E.load(f), _model(f))["fc1.weight"]
    w = qdq[f"{case}/w"]
    np.testing.assert_array_equal(e.fake_quantize(w).view(np.uint32), qdq[f"{case}/qdq"].view(np.uint32))
    probe, want = qdq[f"{case}/probe"], qdq[f"{case}/probe_qdq"]
    got = e.fake_quantize(probe)
    s = _full_scale(e, probe.shape).astype(np.float32)
    ratio = (probe / s).astype(np.float64)
    tie = (np.abs(ratio - np.round(ratio)) < 1e-6) & (np.abs(ratio) <= 1.5)  # midpoints -1, 0, 1 of the grid
    assert tie.sum() > 50 and np.array_equal(got[~tie], want[~tie])
    differ = got != want
    assert differ.any() and not (differ & ~tie).any()
    np.testing.assert_allclose(np.abs(got - want)[differ], s[differ], rtol=1e-6)  # one grid step apart


def test_nvfp4_float_meta_scale_is_read_as_its_effective_block_scale():
    """aimet-torch writes NVFP4 only in 2.1.0: y_scale {"x": float8e4m3fn block scales, "x_scale": per-tensor,
    "input_dtype": "float8e4m3fn"}. qlinear reads the effective scale DequantizeLinear(x, x_scale) (float32), re-saves
    the file byte for byte, and converts it to 2.0.0 as plain float4 blocks with the same scales."""
    f = DATA / "aimet-torch-2.42.0_nvfp4_v2.1.0.encodings"
    raw = _entries(json.loads(f.read_text()), "2.1.0")["fc1.weight"]["y_scale"]
    x = np.array(raw["x"], np.float64)
    import ml_dtypes

    assert np.array_equal(x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64), x)  # the file's x are float8 values
    es = G.resolve(E.load(f), _model(f))
    e = es["fc1.weight"]
    assert e.dtype == "float4e2m1" and e.granularity == "per_block" and e.axis == 1 and e.block_size == 16
    want = (x.astype(np.float32) * np.float32(raw["x_scale"])).astype(np.float64)
    np.testing.assert_array_equal(e.scale, want)
    assert E.dumps(es) == f.read_text()
    plain = json.loads(E.dumps(es, "2.0.0"))
    assert isinstance(_entries(plain, "2.0.0")["fc1.weight"]["y_scale"], list)
    assert G.resolve(E.loads(json.dumps(plain)), _model(f)).same_parameters(es)
    mx = E.load(DATA / "aimet-torch-2.42.0_mxfp4_v2.0.0.encodings")["fc1.weight"]  # MXFP4: power-of-2 scales
    assert mx.dtype == "float4e2m1" and np.all(np.frexp(mx.scale)[0] == 0.5)
    assert E.load(DATA / "aimet-torch-2.42.0_mxfp4_v2.1.0.encodings").same_parameters(
        E.load(DATA / "aimet-torch-2.42.0_mxfp4_v2.0.0.encodings"))


@pytest.mark.parametrize("meta,where,words", [
    ({"x": [[416.0, 417.0]], "x_scale": 1e-4, "input_dtype": "float8e4m3fn"}, "y_scale.x[0][1]", "float8e4m3fn"),
    ({"x": [[416.0, 0.0]], "x_scale": 1e-4, "input_dtype": "float8e4m3fn"}, "y_scale.x[0][1]", "positive"),
    ({"x": [[416.0, 448.0]], "x_scale": 1e-4, "input_dtype": "float9"}, "y_scale.input_dtype", "float9"),
    ({"x": [[4.0, 8.0]], "x_scale": 1e-4, "input_dtype": "float6e3m2"}, "y_scale.input_dtype", "float6"),
    ({"x": [[416.0, 448.0]], "x_scale": 1e-4, "input_dtype": "float8e4m3fn", "x_zero_point": 1},
     "y_scale.x_zero_point", "zero point"),
])
def test_float_meta_scale_errors_name_the_field(meta, where, words):
    doc = {"version": "2.1.0", "encodings": [{"name": "w", "output_dtype": "float4e2m1", "y_scale": meta,
                                               "axis": 1, "block_size": 16}]}
    with pytest.raises(EncodingError, match=words) as ei:
        E.loads(json.dumps(doc))
    assert ei.value.where == f"encodings[0].{where}"


@pytest.mark.parametrize("shape,scale_shape,axis,block", [
    ((6, 32, 3, 3), (6, 2, 1, 1), 1, 16),  # Conv per-block as AIMET writes it: (O, I/B, 1, 1)
    ((32, 6), (6,), 1, 0),                 # MatMul per-channel on axis 1
    ((32, 6), (2, 6), 0, 16),              # MatMul per-block on axis 0
])
def test_shifted_grid_every_granularity_matches_aimet_arithmetic(shape, scale_shape, axis, block):
    rng = np.random.default_rng(7)
    s = rng.uniform(0.01, 0.5, scale_shape).astype(np.float32).astype(np.float64)
    e = E.Encoding("w", "int2", scale=s, zero_point=np.full(scale_shape, -0.5), axis=axis, block_size=block,
                   role="param")
    full = np.repeat(s, block, axis=axis) if block else s.reshape([-1 if i == axis else 1 for i in range(len(shape))])
    full = np.broadcast_to(full, shape)
    k = rng.integers(-8, 9, shape)
    x = np.where(rng.random(shape) < 0.5, (k / 2) * full, rng.normal(0, 0.5, shape)).astype(np.float32)
    want = np.array([_aimet_reference(np.array([v], np.float32), float(sc))[0]
                     for v, sc in zip(x.reshape(-1), full.reshape(-1))], np.float32).reshape(shape)
    np.testing.assert_array_equal(e.fake_quantize(x), want)


@pytest.mark.parametrize("f", [f for f in FILES if "_v2." in f.name], ids=lambda p: p.name)
def test_bulk_reader_takes_the_new_entries_and_agrees(f):
    """The fast reader of large 2.x files (half-integer int2 zero points, float8/float4) gives what the plain one
    gives; only the NVFP4 meta scale (an object) goes to the plain reader."""
    from qlinear.encodings import io as eio

    text = f.read_text()
    fast, slow = eio._loads_lifted(text, f.name), eio._loads_parsed(text, f.name)
    assert (fast is None) == ("nvfp4" in f.name)
    if fast is not None:
        assert fast == slow and E.dumps(fast) == text
        for a, b in zip(fast, slow):
            assert (a.zero_point is None) == (b.zero_point is None)
            assert a.zero_point is None or a.zero_point.dtype == b.zero_point.dtype


def test_mixed_half_and_whole_zero_points_keep_their_text():
    """[-0.5, -1] (not what AIMET writes) is left to the plain reader, which re-saves the file's own text."""
    from qlinear.encodings import io as eio

    doc = {"encodings": [{"axis": 0, "name": "w", "output_dtype": "int2", "y_scale": [0.5, 0.25],
                          "y_zero_point": [-0.5, -1]}], "version": "2.0.0"}
    text = json.dumps(doc, indent=4, sort_keys=True)
    assert eio._loads_lifted(text, None) is None
    es = E.loads(text)
    assert E.dumps(es) == text and es["w"].shifted
    np.testing.assert_array_equal(es["w"].zero_point, [-0.5, -1.0])


def test_export_options_int32_bias_and_signed_activations():
    """export_int32_bias=True puts int32 biases into 0.6.1 / 1.0.0; converting either file to the other gives AIMET's
    own entries. force_activation_as="signed" writes int8 activations in 2.0.0: the model tells their role."""
    for src, dst in (("1.0.0", "0.6.1"), ("0.6.1", "1.0.0")):
        es = E.load(DATA / f"aimet-onnx-2.42.0_int32_bias_v{src}.encodings")
        assert es["conv.bias"].dtype == "int32" and es["fc1.bias"].dtype == "int32"
        ours = _canon(_entries(json.loads(E.dumps(es, dst)), dst))
        aimet = _canon(_entries(json.loads((DATA / f"aimet-onnx-2.42.0_int32_bias_v{dst}.encodings").read_text()), dst))
        assert ours == aimet
    signed = G.resolve(E.load(DATA / "aimet-onnx-2.42.0_signed_act_v2.0.0.encodings"), MODEL)
    for n in ("x", "relu1_out", "y"):
        assert signed[n].dtype == "int8" and signed[n].role == "activation"
    unsigned = G.resolve(E.load(SHIFT["2.0.0"]), MODEL)  # the same calibration data and activations, uint8
    x_s, x_u = signed["x"], unsigned["x"]
    assert x_s.scale == x_u.scale and int(x_s.zero_point_or_zeros) == int(x_u.zero_point_or_zeros) - 128
    legacy = json.loads(E.dumps(signed, "1.0.0"))
    assert {e["name"] for e in legacy["activation_encodings"]} >= {"x", "relu1_out", "y"}


@pytest.mark.parametrize("extra,where,words", [
    ({"bitwidth": 8, "offset": -128}, "zero_point_shift", "2-bit"),
    ({"zero_point_shift": 0.25}, "zero_point_shift", "0.25"),
    ({"zero_point_shift": "0.5"}, "zero_point_shift", "string"),
])
def test_0_6_1_zero_point_shift_errors_name_the_field(extra, where, words):
    entry = dict({"bitwidth": 2, "dtype": "int", "is_symmetric": "True", "min": -0.16, "max": 0.08, "offset": -2,
                  "scale": 0.08, "zero_point_shift": 0.5}, **extra)
    doc = {"activation_encodings": {}, "param_encodings": {"w": [entry]}, "version": "0.6.1"}
    with pytest.raises(EncodingError, match=words) as ei:
        E.loads(json.dumps(doc))
    assert ei.value.where == f"param_encodings.w[0].{where}"


def test_0_6_1_shift_applies_to_min_max_only_entries_too():
    entry = {"bitwidth": 2, "dtype": "int", "is_symmetric": "True", "min": -1.0, "max": 0.5, "zero_point_shift": 0.5}
    e = E.loads(json.dumps({"activation_encodings": {}, "param_encodings": {"w": [entry]}}))["w"]
    assert e.shifted and float(e.scale) == 0.5 and float(e.zero_point) == -0.5


def _conv_blocks(kernel: int, lpbq: bool) -> E.EncodingSet:
    """int4 blocks of 2 input channels on a Conv weight [4, 4, k, k], at each kernel position as ONNX blocks them."""
    rng = np.random.default_rng(0)
    if lpbq:
        e = E.Encoding("conv.weight", "int4", scale=rng.uniform(0.001, 0.02, (4, 1, 1, 1)),
                       int_scale=rng.integers(1, 17, (4, 2, kernel, kernel)), axis=1, block_size=2,
                       decompressed_bits=8, role="param")
    else:
        e = E.Encoding("conv.weight", "int4", scale=rng.uniform(0.01, 0.2, (4, 2, kernel, kernel)), axis=1,
                       block_size=2, role="param")
    return E.EncodingSet([e])


@pytest.mark.parametrize("lpbq", [False, True])
def test_1_0_0_refuses_conv_blocks_that_vary_over_the_kernel(lpbq):
    """1.0.0 stores one value per (channel, block): AIMET 2.42 reshapes it to (O, I/B, 1, 1) (load_encodings_to_sim:
    "cannot reshape array of size 144 into shape (16,1,1,1)"; encodings_to_onnx_qdq fails too) and qlinear's own
    resolve refused the longer list, so the 3x3 file was unreadable: the writer refuses it and names 2.0.0."""
    with pytest.raises(EncodingError, match=r"conv\.weight.*1\.0\.0.*2\.0\.0"):
        E.dumps(_conv_blocks(3, lpbq), "1.0.0")
    two = json.loads(E.dumps(_conv_blocks(3, lpbq), "2.0.0"))["encodings"][0]
    key = "per_block_int_scale" if lpbq else "y_scale"
    assert np.asarray(two[key]).shape == (4, 2, 3, 3)
    one = json.loads(E.dumps(_conv_blocks(1, lpbq), "1.0.0"))["param_encodings"][0]  # 1x1: (O, I/B, 1, 1) as AIMET
    assert len(one[key if lpbq else "scale"]) == 8
