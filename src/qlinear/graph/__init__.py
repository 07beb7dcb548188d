"""The ONNX graph layer: loading models, per-parameter axes, and the bridge between encodings and Q/DQ models.

Importing this package loads ``onnx``.
"""

from qlinear.graph.check import IntegerCheck, LayerCheck, check_integer  # noqa: E402

__all__ = ["IntegerCheck", "LayerCheck", "check_integer"]
