"""TFLite / LiteRT export of Q/DQ ONNX models (:func:`export`), written with :mod:`flatbuffers` from the published
schema (:mod:`.schema`); no TensorFlow. The integers of the ``.tflite`` are the Q/DQ model's own, so
:func:`qlinear.kernels.run_integer` in mode ``litert_ref`` (``litert_xnnpack``) reproduces LiteRT's reference
(default) resolver bit for bit. :func:`convert` also names the float islands (operators outside the integer set,
written DEQUANTIZE -> float builtin -> QUANTIZE)."""

from qlinear.tflite.export import SUPPORTED, Converted, convert, export, island_note

__all__ = ["SUPPORTED", "Converted", "convert", "export", "island_note"]
