"""qlinear: linear quantization exact to ONNX QuantizeLinear/DequantizeLinear-25, AIMET encodings,
calibration as AIMET / ONNX Runtime / TFLite compute it, bit-exact integer kernels, and post-training
quantization of ONNX models.

Importing ``qlinear`` loads only the core (NumPy + ml_dtypes); the encodings, calibration, kernels and
ONNX layers load on first use.
"""

from __future__ import annotations

from typing import Any

from qlinear.core import (
    PackedTensor,
    QType,
    dequantize_linear,
    dynamic_quantize_linear,
    pack,
    qtype,
    quantize_linear,
    unpack,
)
from qlinear.errors import QlinearError

__version__ = "0.1.0"

_LAZY = {
    "calibrate": ("qlinear.calibration", "calibrate"),
    "quantize": ("qlinear.ptq", "quantize"),
    "QuantizeConfig": ("qlinear.ptq", "QuantizeConfig"),
    "Encoding": ("qlinear.encodings", "Encoding"),
    "EncodingSet": ("qlinear.encodings", "EncodingSet"),
    "encodings": ("qlinear.encodings", None),
    "calibration": ("qlinear.calibration", None),
    "kernels": ("qlinear.kernels", None),
    "graph": ("qlinear.graph", None),
    "ptq": ("qlinear.ptq", None),
    "tflite": ("qlinear.tflite", None),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod_name, attr = _LAZY[name]
        mod = importlib.import_module(mod_name)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'qlinear' has no attribute {name!r}")


__all__ = [
    "PackedTensor",
    "QType",
    "QlinearError",
    "__version__",
    "dequantize_linear",
    "dynamic_quantize_linear",
    "pack",
    "qtype",
    "quantize_linear",
    "unpack",
    *_LAZY,
]
