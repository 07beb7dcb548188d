"""Post-training quantization of ONNX models: :func:`quantize` with a :class:`QuantizeConfig`."""

from qlinear.ptq.config import QuantizeConfig
from qlinear.ptq.data import Dataset, ImagePreprocess, load_dataset
from qlinear.ptq.pipeline import QuantizedModel, quantize
from qlinear.ptq.targets import check_tflite

__all__ = ["Dataset", "ImagePreprocess", "QuantizeConfig", "QuantizedModel", "check_tflite", "load_dataset", "quantize"]
