"""Target qnn blocks a Conv weight over input channels across its whole kernel, as AIMET does (scales
``(O, I/B, 1, 1)``): QNN takes AIMET's layout, and AIMET 2.42 refused qlinear's per-position blocks (its sim for
per-block weights, both its readers for LPBQ). The Conv weight's encoding equals, value for value, what AIMET itself
computes on the same model (``tests/encodings/aimet_formats``, written by ``benchmarks/aimet_conv_blocks_probe.py``);
1.0.0 holds it; target ort keeps ONNX's per-position blocks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import qlinear
from qlinear import encodings as E

GOLD = Path(__file__).resolve().parents[1] / "encodings" / "aimet_formats"
X = {"x": np.random.default_rng(2).normal(size=(6, 1, 64, 6, 6)).astype(np.float32).reshape(6, 64, 6, 6)}


def _conv_weight(text: str) -> dict:
    return next(e for e in json.loads(text)["encodings"] if e["name"] == "conv.weight")


@pytest.mark.parametrize("kind, weights", [("lpbq", "lpbq"), ("blockwise", "per-block")])
def test_target_qnn_conv_blocks_are_aimets(kind, weights, tmp_path):
    m = onnx.load(GOLD / "conv_blocks_model.onnx")
    cfg = dict(target="qnn", weights=weights, weight_type="int4", block_size=16, calibration_samples=6,
               evaluation_samples=0)
    qm = qlinear.quantize(m, X, cfg)
    ours = _conv_weight(E.dumps(qm.encodings, "2.0.0"))
    aimet = _conv_weight((GOLD / f"aimet-onnx-2.42.0_conv_{kind}_v2.0.0.encodings").read_text())
    keys = ("per_block_int_scale", "per_channel_float_scale") if kind == "lpbq" else ("y_scale",)
    for k in keys:
        assert np.array_equal(np.asarray(ours[k]), np.asarray(aimet[k])), k
    assert {k: ours[k] for k in ("axis", "block_size", "output_dtype")} == \
        {k: aimet[k] for k in ("axis", "block_size", "output_dtype")}
    assert np.asarray(ours[keys[0]]).shape == (8, 4, 1, 1)
    one = E.loads(E.dumps(qm.encodings, "1.0.0"))   # one value per channel and block: 1.0.0 holds it
    back = qlinear.graph.resolve(one, qm.encoded_model)
    assert np.array_equal(back["conv.weight"].scale, qm.encodings["conv.weight"].scale)
    ort_run = qlinear.quantize(m, X, dict(cfg, target="ort"))   # ONNX's blocks: one grid per kernel position
    e = ort_run.encodings["conv.weight"]
    assert (e.int_scale if kind == "lpbq" else e.scale).shape == (8, 4, 3, 3)


@pytest.mark.parametrize("kind, weights", [("lpbq", "lpbq"), ("blockwise", "per-block")])
def test_target_qnn_conv_bias_scale_is_aimets(kind, weights):
    """The int32 bias of a blocked Conv is at AIMET's scale: input scale x per-channel float scale for LPBQ (the
    8-bit integers its blocks expand to; qlinear used the largest block scale, 16x coarser), x the largest block
    scale for per-block weights. AIMET multiplies in float32, qlinear in float64: equal to a float32 rounding."""
    m = onnx.load(GOLD / "conv_blocks_model.onnx")
    cfg = dict(target="qnn", weights=weights, weight_type="int4", block_size=16, calibration_samples=6,
               evaluation_samples=0, activation_type="uint8")
    qm = qlinear.quantize(m, X, cfg)
    ours = {e["name"]: e for e in json.loads(E.dumps(qm.encodings, "2.0.0"))["encodings"]}
    gold = GOLD / f"aimet-onnx-2.42.0_conv_{kind}_v2.0.0.encodings"
    aimet = {e["name"]: e for e in json.loads(gold.read_text())["encodings"]}
    assert ours["x"]["y_scale"] == aimet["x"]["y_scale"]
    np.testing.assert_allclose(ours["conv.bias"]["y_scale"], aimet["conv.bias"]["y_scale"], rtol=2.0 ** -22)
    assert qlinear.graph.check_integer(qm.model).ok
