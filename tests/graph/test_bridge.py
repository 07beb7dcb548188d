"""validate / apply / extract against ONNX Runtime: the golden model with every golden file."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from qlinear import encodings as E
from qlinear import graph as G
from qlinear.errors import EncodingError


@pytest.fixture(scope="module")
def gold(shared_dir):
    d = shared_dir / "aimet-golden"
    return d, d / "tiny_model.onnx", np.load(d / "calib_inputs.npz")["x"]


def _run(m, x):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _dq_params(m):
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[1] in inits:
            out[n.output[0]] = inits[n.input[1]]
    return out


def test_apply_every_golden_file_runs_in_ort_and_extracts_back(gold):
    d, model, xs = gold
    ref = _run(onnx.load(model), xs[0])
    for f in sorted(d.glob("*.encodings")):
        es = G.load_encodings(f, model)
        assert G.validate(es, model).ok, f.name
        q = G.apply(es, model)
        y = _run(q, xs[0])
        assert y.shape == ref.shape and np.isfinite(y).all()
        # quantization noise only: the Q/DQ model stays close to the float model (int2 weights: coarse)
        assert np.corrcoef(y.ravel(), ref.ravel())[0, 1] > (0.7 if "int2" in f.name else 0.98), f.name
        back = G.extract(q)
        assert back == es, f.name
        assert E.dumps(back) == E.dumps(es)  # extract(apply) re-saves to the same bytes
        if f.name.endswith("v2.0.0.encodings"):
            assert E.dumps(back, "2.0.0") == f.read_text()


def test_q_dq_parameters_equal_the_file(gold):
    d, model, xs = gold
    for f in sorted(d.glob("*v2.0.0.encodings")):
        es = G.load_encodings(f, model)
        q = G.apply(es, model)
        params = _dq_params(q)
        for e in es:
            if e.granularity in ("lpbq",) or e.shifted:
                continue
            got = params[e.name] if e.role == "param" else params[f"{e.name}_dequantized"] if e.name != "y" else params["y"]
            wshape = tuple(next(t.dims for t in onnx.load(model).graph.initializer if t.name == e.name)) \
                if e.role == "param" else None
            want = e.onnx_params(wshape)["scale"]
            assert np.array_equal(got, np.broadcast_to(want, got.shape)), (f.name, e.name)
        # without the metadata, extract reads float32 scales: the same parameters at float32
        stripped = onnx.ModelProto()
        stripped.CopyFrom(q)
        del stripped.metadata_props[:]
        raw = G.extract(stripped)
        for e in es:
            r = raw[e.name]
            if e.qtype.bits == 2:
                continue
            assert np.array_equal(r.effective_scale.astype(np.float32), e.effective_scale.astype(np.float32)), e.name


def test_activation_dequantized_values_match_the_encoding(gold):
    """ORT's Q/DQ of the input equals Encoding.fake_quantize bit for bit."""
    d, model, xs = gold
    es = E.load(d / "aimet-onnx-2.42.0_per_tensor_tf_v2.0.0.encodings")
    q = G.apply(es, model)
    q.graph.output.append(onnx.helper.make_tensor_value_info("x_dequantized", onnx.TensorProto.FLOAT, None))
    s = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    got = s.run(["x_dequantized"], {"x": xs[1]})[0]
    assert np.array_equal(got.view(np.uint32), es["x"].fake_quantize(xs[1]).view(np.uint32))


def test_validate_reports_every_problem(gold):
    d, model, _ = gold
    es = E.load(d / "aimet-onnx-2.42.0_per_channel_tf_v2.0.0.encodings")
    bad = es.with_encodings([
        *es.encodings,
        E.Encoding("nope", "uint8", scale=0.1),
        E.Encoding("fc2.weight_x", "int8", scale=[0.1] * 3, axis=5, role="param"),
    ])
    bad = bad.with_encodings([e if e.name != "conv.weight" else e.replace(scale=e.scale[:7]) for e in bad])
    rep = G.validate(bad, model)
    names = {p.tensor for p in rep.problems}
    assert {"nope", "fc2.weight_x", "conv.weight"} <= names and not rep.ok
    with pytest.raises(EncodingError, match="problem"):
        G.apply(bad, model)


def test_extract_reads_onnxruntime_quantize_static(gold, tmp_path):
    """A model quantized by ORT's own tool: extract finds its params and activations, and apply() of them
    reproduces ORT's scales."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    d, model, xs = gold

    class R(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": xs[i]} for i in range(4)])

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "ort_qdq.onnx"
    quantize_static(str(model), str(out), R(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    es = G.extract(out)
    assert "conv.weight" in es and es["conv.weight"].granularity == "per_channel" and es["conv.weight"].axis == 0
    assert es["x"].dtype == "uint8" and es["x"].role == "activation"
    ort_params = _dq_params(onnx.load(out))
    assert any(np.array_equal(v, es["x"].scale.astype(np.float32)) for v in ort_params.values())
    q = G.apply(es.with_encodings(e for e in es if e.role == "param" or e.name in ("x",)), model)
    assert _run(q, xs[0]).shape == (1, 16)


# --------------------------------------------------------------------------------------------- metadata
DATA = __import__("pathlib").Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["aimet-onnx-2.42.0_per_channel_tf_v2.0.0",
                                  "aimet-onnx-2.42.0_mixed_fp16_int16_int2_v2.0.0"])
def test_files_of_earlier_versions_extract_exactly(gold, name):
    """Q/DQ files written by qlinear before the scales were packed (decimal ``"exact"`` lists in the metadata, made by
    ``apply`` of that version) still extract to the exact encodings; re-applied, they get the packed metadata."""
    d, model, _ = gold
    old = onnx.load(DATA / f"{name}.qlinear-0.qdq.onnx")
    meta = json.loads(old.metadata_props[0].value)
    assert "exact" in meta and G.bridge.EXACT_KEY not in meta and meta["exact"]  # really the old format
    es = G.load_encodings(d / f"{name}.encodings", model)
    assert G.extract(old) == es
    new = G.apply(es, model)
    assert G.extract(new) == es
    new_meta = json.loads(new.metadata_props[0].value)
    assert "exact" not in new_meta and set(new_meta[G.bridge.EXACT_KEY]) == set(meta["exact"])
    assert len(new.metadata_props[0].value) < len(old.metadata_props[0].value)


def test_packed_scales_are_exact_and_compact(gold):
    """Random float64 scales (none exact in float32, some float32 subnormal) come back bit for bit; the metadata
    takes ~5.3 characters a scale where decimal JSON took ~20."""
    d, model, _ = gold
    es = G.load_encodings(d / "aimet-onnx-2.42.0_per_channel_tf_v2.0.0.encodings", model)
    rng = np.random.default_rng(0)
    fl = []
    for e in es:
        s = np.exp(rng.uniform(-9, 2, np.shape(e.scale))) * (1 + 1e-12)
        if e.name == "conv.weight":
            s.reshape(-1)[:2] = [3e-39, 1.5e-40]  # float32 subnormal: the difference does not fit in int32
        fl.append(e.replace(scale=s))
    es2 = es.with_encodings(fl)
    q = G.apply(es2, model)
    back = G.extract(q)
    for e in es2:
        assert np.array_equal(back[e.name].scale.view(np.int64), e.scale.view(np.int64)), e.name
    meta = json.loads(q.metadata_props[0].value)[G.bridge.EXACT_KEY]
    assert "float64" in meta["conv.weight"]  # a single scale stays decimal text (shorter than a packed entry)
    assert all(("ulps" in v) == (np.size(es2[k].scale) > 1) for k, v in meta.items() if k != "conv.weight")
    n = sum(np.size(e.scale) for e in es2)
    assert len(q.metadata_props[0].value) < 600 + 8 * n < len(json.dumps([e.scale.tolist() for e in es2]))


def test_packed_scales_of_edited_file_are_ignored(gold):
    """A scale changed in the file after it was written: its packed entry (relative to the old float32 scale) is not
    applied; extract reads the file's float32 scale."""
    d, model, _ = gold
    es = G.load_encodings(d / "aimet-onnx-2.42.0_per_channel_tf_v2.0.0.encodings", model)
    es2 = es.with_encodings(e.replace(scale=np.asarray(e.scale, np.float64) * (1 + 1e-12)) for e in es)
    q = G.apply(es2, model)
    t = next(i for i in q.graph.initializer if i.name == "conv.weight_scale")
    a = numpy_helper.to_array(t).copy()
    a[0] = np.nextafter(a[0], np.float32(1))
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    back = G.extract(q)
    assert np.array_equal(back["conv.weight"].scale, a.astype(np.float64))
    assert np.array_equal(back["fc1.weight"].scale, es2["fc1.weight"].scale)


def test_int32_bias_scales_are_stored_as_products():
    """qlinear's int32 bias scale is the float64 product of its input's and weight's scales: the metadata names the
    two instead of packing it, and extract gives the exact product back (bit for bit, as quantize computed it)."""
    import qlinear
    from qlinear.examples import DATA, MODEL

    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=8, evaluation_samples=0))
    meta = json.loads(qm.model.metadata_props[0].value)[G.bridge.EXACT_KEY]
    biases = [e for e in qm.encodings if e.dtype == "int32"]
    prods = {k: v["product"] for k, v in meta.items() if "product" in v}
    assert biases and set(prods) == {e.name for e in biases if e.name in meta}
    for b in biases:
        x, w = (qm.encodings[t] for t in prods[b.name])
        assert np.array_equal(b.scale.reshape(-1), np.float64(x.scale) * w.scale.reshape(-1))
    back = G.extract(qm.model)
    assert back == qm.encodings
    assert all(np.array_equal(back[b.name].scale.view(np.int64), b.scale.view(np.int64)) for b in biases)
