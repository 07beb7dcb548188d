"""The PTQ pipeline on the bundled example (fast) and on EfficientNet-Lite0 (the accuracy bar, ../shared)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import qlinear
from qlinear import graph as G
from qlinear.errors import ConfigError, DataError, GraphError
from qlinear.examples import DATA, MODEL
from qlinear.ptq import QuantizeConfig, check_tflite
from qlinear.ptq.algorithms.equalize import equalize

SMALL = QuantizeConfig(calibration_samples=20, evaluation_samples=20)


def _run(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


@pytest.fixture(scope="module")
def example():
    return qlinear.quantize(MODEL, DATA, SMALL)


def test_example_quantizes_runs_and_round_trips(example, tmp_path):
    x = np.load(DATA)["input"][20:]
    y = _run(example.model, x)
    ref = _run(onnx.load(MODEL), x)
    assert np.corrcoef(y.ravel(), ref.ravel())[0, 1] > 0.99
    # the encodings validate against the quantized model and come back out of it unchanged
    assert G.validate(example.encodings, example.model).ok
    assert G.extract(example.model) == example.encodings
    # placement: BN folded, Conv+Relu fused (no quantizer on the Conv output), Flatten inherits, int32 biases
    names = set(example.encodings.names())
    assert "bn_out" not in names and "relu_out" in names and "dw_out" not in names
    assert example.encodings["flat_out"].scale == example.encodings["gap_out"].scale
    assert example.encodings["dw.bias"].dtype == "int32"
    np.testing.assert_allclose(example.encodings["dw.bias"].scale,
                               example.encodings["relu_out"].scale * example.encodings["dw.weight"].scale)
    example.save_onnx(tmp_path / "q.onnx")
    example.save_encodings(tmp_path / "q.encodings")
    assert G.load_encodings(tmp_path / "q.encodings", tmp_path / "q.onnx").same_parameters(example.encodings)


def test_report(example):
    rep = example.report()
    assert rep.samples == 20 and rep.outputs["logits"]["top1_agreement"] >= 0.9
    assert len(rep.ranking) == len(rep.tensors) and all(np.isfinite(t.sqnr_db) for t in rep.tensors)
    from qlinear.ptq.report.html import to_html, to_json

    assert "<svg" in to_html(example, rep)
    assert json.loads(to_json(example, rep))["report"]["samples"] == 20


def test_equalization_preserves_the_float_model():
    m = onnx.load(MODEL)
    from qlinear.graph.fold import fold_batchnorm

    fold_batchnorm(m)
    x = np.load(DATA)["input"]
    before = _run(m, x)
    assert equalize(m) >= 1
    np.testing.assert_allclose(_run(m, x), before, rtol=1e-4, atol=1e-5)


def test_bias_correction_reduces_the_output_bias():
    x = np.load(DATA)["input"]
    ref = _run(onnx.load(MODEL), x)
    err = {}
    for bc in (False, True):
        qm = qlinear.quantize(MODEL, DATA, QuantizeConfig(calibration_samples=40, weights="per-tensor",
                                                          weight_type="int4", bias_correction=bc, equalize=False))
        err[bc] = np.abs((_run(qm.model, x) - ref).mean(0)).mean()
    assert err[True] < err[False]


def test_targets(tmp_path):
    tfl = qlinear.quantize(MODEL, DATA, SMALL.replace(target="tflite"))
    assert check_tflite(tfl.model) == []
    assert all(e.dtype == "int8" for e in tfl.encodings.activations)
    ortm = qlinear.quantize(MODEL, DATA, SMALL)
    v = check_tflite(ortm.model)
    assert v and any("int8" in str(x) for x in v)
    qnn = qlinear.quantize(MODEL, DATA, SMALL.replace(target="qnn", activation_type="int16"))
    assert all(e.dtype == "uint16" for e in qnn.encodings.activations)
    qnn.save_encodings(tmp_path / "qnn.encodings")
    doc = json.loads((tmp_path / "qnn.encodings").read_text())
    assert doc["version"] == "2.0.0" and any(e["output_dtype"] == "int32" for e in doc["encodings"])


def test_config_validation(tmp_path):
    with pytest.raises(ConfigError, match="unknown option.*colour"):
        QuantizeConfig.from_dict({"colour": "blue"})
    with pytest.raises(ConfigError, match="weights"):
        QuantizeConfig(weights="per-row")
    with pytest.raises(ConfigError, match="calibration_samples"):
        QuantizeConfig(calibration_samples=0)
    p = tmp_path / "c.json"
    p.write_text('{"weights": "per-tensor", "activation_method": "sqnr"}')
    assert QuantizeConfig.from_file(p).weights == "per-tensor"
    p.write_text('{"weights": ')
    with pytest.raises(ConfigError, match="invalid JSON"):
        QuantizeConfig.from_file(p)


def test_data_sources(tmp_path):
    x = np.load(DATA)["input"][:6]
    d1 = tmp_path / "npy"
    d1.mkdir()
    for i, s in enumerate(x):
        np.save(d1 / f"{i:03d}.npy", s)
    d2 = tmp_path / "sets"
    for i, s in enumerate(x):
        (d2 / f"test_data_set_{i}").mkdir(parents=True)
        (d2 / f"test_data_set_{i}" / "input_0.pb").write_bytes(numpy_helper.from_array(s[None]).SerializeToString())
    d3 = tmp_path / "img"
    d3.mkdir()
    from PIL import Image

    for i, s in enumerate(x):
        Image.fromarray(((s.transpose(1, 2, 0) + 1) * 127).astype(np.uint8)).save(d3 / f"{i:04d}_x.png")
    cfg = QuantizeConfig(calibration_samples=6, evaluation_samples=0)
    encs = []
    for src in (d1, d2, {"input": x}):
        encs.append(qlinear.quantize(MODEL, src, cfg).encodings)
    assert encs[0].same_parameters(encs[1]) and encs[0].same_parameters(encs[2])
    qm = qlinear.quantize(MODEL, d3, cfg)
    assert qm.dataset.labels == list(range(6))
    with pytest.raises(DataError, match="not found"):
        qlinear.quantize(MODEL, tmp_path / "nope", cfg)
    with pytest.raises(DataError, match="missing model input"):
        qlinear.quantize(MODEL, {"other": x}, cfg)


def test_opset_and_external_data(tmp_path):
    m = onnx.load(MODEL)
    m.opset_import[0].version = 6
    with pytest.raises(GraphError, match="opset 6 is outside the supported range 7..25"):
        qlinear.quantize(m, DATA, SMALL)
    m = onnx.load(MODEL)
    p = tmp_path / "ext.onnx"
    onnx.save_model(m, p, save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    assert (tmp_path / "ext.onnx.data").exists()
    qm = qlinear.quantize(p, DATA, SMALL)
    assert len(qm.encodings) > 5


def test_cli_quantize_default_and_failure_keeps_outputs(tmp_path, monkeypatch, capsys):
    from qlinear.cli.main import EXIT_ERROR, EXIT_USAGE, main

    monkeypatch.chdir(tmp_path)
    assert main(["quantize"]) == 0
    out = tmp_path / "qlinear-out"
    files = sorted(p.name for p in out.iterdir())
    assert files == [".qlinear-outputs.json", "model.encodings", "model.float.onnx", "model.qdq.onnx", "report.html",
                     "report.json"]
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["quantize", str(MODEL), "--data", str(tmp_path / "missing.npz")]) == EXIT_ERROR
    assert "not found" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main(["quantize", "--weights", "per-row"]) == EXIT_ERROR
    assert main(["quantize", "--no-such-option"]) == EXIT_USAGE


@pytest.mark.slow
def test_efficientnet_per_channel_bar(shared_dir):
    """Issue bar: W8A8 per-channel within 0.3 top-1 points of float, >= 98.5 % agreement on 200 held-out images."""
    qm = qlinear.quantize(shared_dir / "models" / "efficientnet-lite0.onnx", shared_dir / "data" / "imagenet-dev",
                          QuantizeConfig())
    r = qm.report().outputs["logits"]
    assert r["top1_agreement"] >= 0.985
    assert r["quantized_top1"] >= r["float_top1"] - 0.003
    assert G.validate(qm.encodings, qm.model).ok


@pytest.mark.slow
def test_efficientnet_w4a8_adaround(shared_dir):
    """W4A8 per-channel (AdaRound) on 200 held-out images: far above min-max int4 (which loses ~29 points) and within
    6 top-1 points of float, and the written model is consistent: encodings on model.float.onnx give model.qdq.onnx.

    Not the issue's bar (within 1.0 point), which is not met: measured 0.83-0.88 against float 0.89 depending on the
    machine and the thread count (the fit changes with float summation order), every variant tried (ridge damping,
    hold-out stopping, mirrored images, 1,000 iterations, int16 activations, first and last layer int8) in 0.83-0.87;
    see the README ("Do the fitted methods generalise?"). Issue 23 stays open on it."""
    qm = qlinear.quantize(shared_dir / "models" / "efficientnet-lite0.onnx", shared_dir / "data" / "imagenet-dev",
                          QuantizeConfig(weight_type="int4", weight_method="adaround"))
    r = qm.report().outputs["logits"]
    assert r["quantized_top1"] >= r["float_top1"] - 0.060 - 1e-9
    assert r["top1_agreement"] >= 0.85
    again = G.apply(qm.encodings, qm.encoded_model)
    got = {t.name: numpy_helper.to_array(t) for t in again.graph.initializer}
    for t in qm.model.graph.initializer:
        np.testing.assert_array_equal(got[t.name], numpy_helper.to_array(t))
    assert qm.integer_check.ok
