"""``qlinear debug``: exit statuses, the first jump printed and in ``--json``, the runtime comparison."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper

import qlinear
from qlinear.cli.main import EXIT_ERROR, EXIT_OK, EXIT_PROBLEMS, main
from qlinear.examples import DATA, MODEL


def _outdir(tmp_path, **cfg):
    out = tmp_path / "out"
    qlinear.quantize(MODEL, DATA, dict(calibration_samples=20, evaluation_samples=20, **cfg)).save(out, report=False)
    return out


def test_debug_float_quant_names_the_corrupted_tensor(tmp_path, capsys):
    out = _outdir(tmp_path)
    f, q = str(out / "model.float.onnx"), str(out / "model.qdq.onnx")
    assert main(["debug", f, q, "--data", str(DATA), "--samples", "8"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "relu6_out" in text and "no tensor loses more than 15 dB against its inputs" in text
    m = onnx.load(q)
    for t in m.graph.initializer:
        if t.name == "pw_out_scale":
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(10), t.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(m, bad)
    assert main(["debug", f, str(bad), "--data", str(DATA), "--samples", "8"]) == EXIT_PROBLEMS
    assert "first jump: pw_out (activation of Conv pw)" in capsys.readouterr().out
    assert main(["debug", f, str(bad), "--data", str(DATA), "--json"]) == EXIT_PROBLEMS
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_jump"] == "pw_out" and doc["samples"] == 16


def test_debug_refuses_the_models_the_other_way_round(tmp_path, capsys):
    """QUANT.onnx FLOAT.onnx printed a table of SQNRs with no warning; now refused, saying which goes first."""
    out = _outdir(tmp_path)
    f, q = str(out / "model.float.onnx"), str(out / "model.qdq.onnx")
    assert main(["debug", q, f, "--data", str(DATA), "--samples", "4"]) == EXIT_ERROR
    assert "give the float model first, then the quantized one" in " ".join(capsys.readouterr().err.split())


def test_debug_runtime(tmp_path, capsys):
    out = _outdir(tmp_path, target="tflite")
    q, t = str(out / "model.qdq.onnx"), str(out / "model.tflite")
    assert main(["debug", q, t, "--data", str(DATA), "--samples", "4"]) == EXIT_OK
    assert "every compared tensor is equal bit for bit" in capsys.readouterr().out
    assert main(["debug", q, t, "--data", str(DATA), "--samples", "4", "--mode", "f32_rne", "--json"]) == EXIT_PROBLEMS
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_difference"] == "relu_out_quantized" and doc["runtime"] == "litert"


def test_debug_usage_errors(tmp_path, capsys):
    assert main(["debug", str(MODEL), str(MODEL)]) == EXIT_ERROR
    assert "--data is required" in capsys.readouterr().err
    assert main(["debug", str(MODEL), "--data", str(DATA)]) == EXIT_ERROR
    assert main(["debug", str(MODEL), "--data", str(DATA), "--runtime", "tvm"]) == EXIT_ERROR
    assert "--runtime 'tvm'" in capsys.readouterr().err


def test_quantize_sensitivity_option(tmp_path):
    out = tmp_path / "out"
    assert main(["quantize", "-o", str(out), "--sensitivity"]) == EXIT_OK
    doc = json.loads((out / "report.json").read_text())
    roles = {r["role"] for r in doc["sensitivity"]}
    assert roles == {"weight", "activation"} and len(doc["sensitivity"]) == 11  # 4 weights, 7 activations
    assert main(["quantize", "-o", str(tmp_path / "plain")]) == EXIT_OK
    assert "sensitivity" not in json.loads((tmp_path / "plain" / "report.json").read_text())
    # refused before any work where there is no report to put it in
    assert main(["quantize", "-o", str(tmp_path / "x"), "--no-report", "--sensitivity"]) == EXIT_ERROR
    assert main(["quantize", str(MODEL), "--data", str(DATA), "--activation-type", "float", "-o", str(tmp_path / "y"),
                 "--sensitivity"]) == EXIT_ERROR
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
