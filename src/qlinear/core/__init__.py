"""qlinear's core math: quantized types, packing, granularity, QuantizeLinear / DequantizeLinear.

Pure NumPy (+ ml_dtypes and an optional compiled kernel); no I/O and no ``onnx`` import.
"""

from qlinear.core.dequantize import dequantize_linear
from qlinear.core.dynamic import dynamic_params, dynamic_quantize_linear
from qlinear.core.granularity import LPBQ, PerAxis, PerBlock, PerTensor
from qlinear.core.packing import PackedTensor, pack, unpack
from qlinear.core.quantize import quantize_linear
from qlinear.core.types import TABLE, Kind, QType, qtype

__all__ = [
    "LPBQ",
    "Kind",
    "PackedTensor",
    "PerAxis",
    "PerBlock",
    "PerTensor",
    "QType",
    "TABLE",
    "dequantize_linear",
    "dynamic_params",
    "dynamic_quantize_linear",
    "pack",
    "qtype",
    "quantize_linear",
    "unpack",
]
