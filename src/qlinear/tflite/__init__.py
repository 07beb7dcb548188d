"""TFLite / LiteRT export of Q/DQ ONNX models (:func:`export`), written with :mod:`flatbuffers` from the published
schema (:mod:`.schema`); no TensorFlow. The integers of the ``.tflite`` are the Q/DQ model's own, so
:func:`qlinear.kernels.run_integer` in mode ``litert_ref`` (``litert_xnnpack``) reproduces LiteRT's reference
(default) resolver bit for bit."""

from qlinear.tflite.export import SUPPORTED, export

__all__ = ["SUPPORTED", "export"]
