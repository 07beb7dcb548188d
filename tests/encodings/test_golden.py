"""Golden files written by AIMET 2.42 itself (../shared/aimet-golden): byte-exact re-save, lossless conversions,
and the values of the model against the notes' table (aimet.md §3.6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qlinear import encodings as E
from qlinear import graph as G
from qlinear.errors import EncodingError

VERSIONS = E.VERSIONS


@pytest.fixture(scope="module")
def golden(shared_dir):
    files = sorted((shared_dir / "aimet-golden").glob("*.encodings"))
    assert len(files) == 16
    return files


@pytest.fixture(scope="module")
def tiny(shared_dir):
    return shared_dir / "aimet-golden" / "tiny_model.onnx"


def test_every_golden_resaves_byte_for_byte(golden):
    for f in golden:
        es = E.load(f)
        assert E.dumps(es) == f.read_text(), f.name
        assert es.version == f.name.rsplit("_v", 1)[1].removesuffix(".encodings")


def test_resave_to_disk_is_identical(golden, tmp_path):
    for f in golden:
        out = tmp_path / f.name
        E.save(E.load(f), out)
        assert out.read_bytes() == f.read_bytes(), f.name


def _expressible(es: E.EncodingSet, version: str) -> bool:
    for e in es:
        if version == "0.6.1" and (e.granularity in ("per_block", "lpbq") or e.qtype.is_float):
            return False
        if version == "1.0.0" and e.qtype.is_float:
            return False
        if version.startswith("2.") and e.granularity == "float":
            return False
    return True


def test_convert_to_every_version_and_back_keeps_every_parameter(golden, tiny):
    converted = 0
    for f in golden:
        es = G.load_encodings(f, tiny)
        for v in VERSIONS:
            if not _expressible(es, v):
                with pytest.raises(EncodingError) as ei:
                    E.dumps(es, v)
                bad = [e.name for e in es if not _expressible(E.EncodingSet((e,)), v)]
                assert any(n in str(ei.value) for n in bad)
                continue
            other = G.resolve(E.loads(E.dumps(es, v)), tiny)
            assert other.same_parameters(es), (f.name, v)
            back = G.resolve(E.loads(E.dumps(other, es.version)), tiny)
            assert back.same_parameters(es), (f.name, v)
            converted += 1
    assert converted >= 50


def test_same_model_in_every_version_agrees(golden, tiny):
    """The per-tensor files of the three versions describe the same quantizers (params and activations)."""
    by = {f.name: G.load_encodings(f, tiny) for f in golden}
    a = by["aimet-onnx-2.42.0_per_tensor_tf_v0.6.1.encodings"]
    b = by["aimet-onnx-2.42.0_per_tensor_tf_v1.0.0.encodings"]
    c = by["aimet-onnx-2.42.0_per_tensor_tf_v2.0.0.encodings"]
    assert a.same_parameters(b)
    for e in b:
        assert c[e.name] == e, e.name
    # notes aimet.md §3.6: input x is uint8 with zero point 124 (legacy offset -124), conv.weight int8 zp 0
    assert c["x"].dtype == "uint8" and int(c["x"].zero_point) == 124
    assert c["conv.weight"].dtype == "int8" and not np.any(c["conv.weight"].zero_point_or_zeros)
    # the 2.0.0 int32 bias is input_scale * weight_scale
    assert c["conv.bias"].dtype == "int32"
    np.testing.assert_allclose(c["conv.bias"].scale, c["x"].scale * c["conv.weight"].scale, rtol=1e-6)


def test_legacy_offsets_and_grids(golden, tiny):
    by = {f.name: G.load_encodings(f, tiny) for f in golden}
    m0 = by["aimet-onnx-2.42.0_mixed_fp16_int16_int2_v0.6.1.encodings"]
    m1 = by["aimet-onnx-2.42.0_mixed_fp16_int16_int2_v1.0.0.encodings"]
    m2 = by["aimet-onnx-2.42.0_mixed_fp16_int16_int2_v2.0.0.encodings"]
    for m in (m0, m1, m2):  # int2 shifted grid: 0.6.1 offset -1.5, 1.0.0 -2.0 + 0.5, 2.0.0 y_zero_point -0.5
        w = m["fc2.weight"]
        assert w.dtype == "int2" and w.shifted and np.all(w.zero_point == -0.5)
    assert m0["relu2_out"].dtype == "float16" and m1["relu2_out"].dtype == "float16"
    assert "relu2_out" not in m2
    lp1 = by["aimet-onnx-2.42.0_lpbq_tf_v1.0.0.encodings"]
    lp2 = by["aimet-onnx-2.42.0_lpbq_tf_v2.0.0.encodings"]
    for n in ("fc1.weight", "fc2.weight"):
        assert lp1[n] == lp2[n]
        assert lp1[n].granularity == "lpbq" and lp1[n].int_scale.max() == 16 and lp1[n].int_scale.min() >= 1
    # 1.0.0 block transpose: MatMul fc2 [64,16] blocks on axis 0 -> (4, 16) scales in 2.0.0
    bw1 = by["aimet-onnx-2.42.0_blockwise_tf_v1.0.0.encodings"]
    bw2 = by["aimet-onnx-2.42.0_blockwise_tf_v2.0.0.encodings"]
    assert bw2["fc2.weight"].scale.shape == (4, 16) and bw2["fc1.weight"].scale.shape == (64, 2)
    assert bw1["fc2.weight"] == bw2["fc2.weight"] and bw1["fc1.weight"] == bw2["fc1.weight"]


def test_unresolved_axes_need_the_model(golden):
    f = next(f for f in golden if f.name.endswith("per_channel_tf_v1.0.0.encodings"))
    es = E.load(f)
    assert not es["conv.weight"].resolved
    with pytest.raises(EncodingError, match=r"conv\.weight.*model"):
        E.dumps(es, "2.0.0")
    assert E.loads(E.dumps(es, "0.6.1")).same_parameters(es)  # no axes needed between legacy versions


def test_fp16_into_2x_needs_opt_in(golden):
    f = next(f for f in golden if f.name.endswith("mixed_fp16_int16_int2_v1.0.0.encodings"))
    es = G.load_encodings(f, f.parent / "tiny_model.onnx")
    with pytest.raises(EncodingError, match="relu2_out"):
        E.dumps(es, "2.0.0")
    out = E.loads(E.dumps(es, "2.0.0", drop_float=True))
    assert "relu2_out" not in out and len(out) == len(es) - 1


def test_version_2_1_0_meta_scales_round_trip(golden, tiny):
    es = E.load(next(f for f in golden if f.name.endswith("lpbq_tf_v2.0.0.encodings")))
    text = E.dumps(es, "2.1.0")
    import json

    doc = json.loads(text)
    fc1 = next(e for e in doc["encodings"] if e["name"] == "fc1.weight")
    assert set(fc1["y_scale"]) == {"x", "x_scale", "axis"} and fc1["y_scale"]["axis"] < 0 and fc1["axis"] >= 0
    assert E.loads(text).same_parameters(es)


def _relayout(doc, top_first=(), entry_first=(), widen_minmax=False):
    """A golden document laid out another way: top-level keys in another order, entry keys in another order, 0.6.1
    min/max as float32 values widened to double (what aimet-torch writes)."""
    import numpy as np

    def entry(e):
        if isinstance(e, list):
            return [entry(x) for x in e]
        if not isinstance(e, dict):
            return e
        out = {k: e[k] for k in entry_first if k in e}
        out.update((k, v) for k, v in e.items() if k not in out)
        if widen_minmax:
            for k in ("min", "max"):
                if isinstance(out.get(k), float):
                    out[k] = float(np.float32(out[k]) * np.float32(1.0000001))
        return out

    new = {k: doc[k] for k in top_first if k in doc}
    new.update((k, v) for k, v in doc.items() if k not in new)
    for sec in ("activation_encodings", "param_encodings", "encodings"):
        s = new.get(sec)
        if isinstance(s, dict):
            new[sec] = {n: entry(v) for n, v in s.items()}
        elif isinstance(s, list):
            new[sec] = [entry(v) for v in s]
    return new


@pytest.mark.parametrize("name,kw,indent", [
    ("lpbq_tf_v1.0.0", dict(top_first=("producer", "version")), 2),             # aimet-torch 1.0.0 LPBQ
    ("lpbq_tf_v2.0.0", dict(entry_first=("name", "output_dtype", "axis", "block_size")), 2),  # aimet-torch 2.0.0
    ("per_channel_tf_v0.6.1", dict(widen_minmax=True), 4),                    # aimet-torch 0.6.1 min/max
    ("per_tensor_tf_v0.6.1", dict(widen_minmax=True, top_first=("version",)), 4),
    ("per_tensor_tf_v1.0.0", dict(top_first=("version", "quantizer_args"), entry_first=("name", "offset")), "\t"),
])
def test_unknown_layouts_resave_byte_for_byte(shared_dir, tiny, name, kw, indent):
    """Issue 14: a layout qlinear does not write itself re-saves in the same version with the file's key order and
    values; a changed encoding is written the writer's way, the others keep theirs."""
    import json

    src = json.loads((shared_dir / "aimet-golden" / f"aimet-onnx-2.42.0_{name}.encodings").read_text())
    text = json.dumps(_relayout(src, **kw), indent=indent)
    assert E.dumps(E.loads(text)) == text
    es = G.resolve(E.loads(text), tiny)  # axes resolved against the model: the parameters are still the file's
    assert E.dumps(es) == text
    assert E.loads(E.dumps(es, "2.1.0" if es.version != "2.1.0" else "2.0.0")).same_parameters(es)
    first = es.encodings[0]
    changed = es.with_encodings([first.replace(scale=np.asarray(first.scale) * 2)] + list(es.encodings[1:]))
    again = G.resolve(E.loads(E.dumps(changed)), tiny)
    assert again.same_parameters(changed)
    assert E.dumps(changed) != text and E.dumps(changed).count("\n") == text.count("\n")


TORCH_FILES = sorted((Path(__file__).parent / "aimet_torch").glob("*.encodings"))


@pytest.mark.parametrize("f", TORCH_FILES, ids=lambda p: p.name)
def test_aimet_torch_files_resave_byte_for_byte_and_convert(f):
    """Files written by aimet-torch 2.42 itself (tests/encodings/aimet_torch/INDEX.md)."""
    text = f.read_text()
    es = E.loads(text)
    assert E.dumps(es) == text
    model = f.parent / ("torch_lpbq.onnx" if "lpbq" in f.name else "torch_onnx.onnx" if "onnx" in f.name
                        else "torch.onnx")
    es = G.resolve(E.loads(text), model)
    assert E.dumps(es) == text
    for v in E.VERSIONS:
        try:
            other = G.resolve(E.loads(E.dumps(es, v)), model)
        except EncodingError:
            continue  # e.g. LPBQ in 0.6.1: refused with a named error
        assert other.same_parameters(es), v
