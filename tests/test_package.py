"""Package-level promises: light import, one exception root, public API."""

import subprocess
import sys

import qlinear
from qlinear import errors


def test_import_does_not_load_onnx_or_ort():
    code = "import sys, qlinear; print(sorted(m for m in ('onnx', 'onnxruntime', 'typer', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_every_error_derives_from_qlinear_error():
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.QlinearError)
    assert qlinear.QlinearError is errors.QlinearError


def test_public_api():
    for name in ("quantize_linear", "dequantize_linear", "dynamic_quantize_linear", "pack", "unpack", "qtype"):
        assert callable(getattr(qlinear, name))


def test_readme_names_are_exported():
    from qlinear import kernels as K

    assert K.IntegerModel.__module__ == "qlinear.kernels.run" and "IntegerModel" in K.__all__
    for name in K.__all__:
        assert hasattr(K, name), name
    assert qlinear.__version__ == "0.1.0"
