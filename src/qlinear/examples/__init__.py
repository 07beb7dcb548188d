"""The bundled example: a small CNN classifier (``example_cnn.onnx``) and 40 input samples (``example_data.npz``),
written by ``make_example.py``. ``qlinear quantize`` with no model runs on them."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = HERE / "example_cnn.onnx"
DATA = HERE / "example_data.npz"
