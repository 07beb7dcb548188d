"""Weight-only quantization of MatMul/Gemm weights (W4A16, W8A16): blocked, per-channel or LPBQ grids, round to
nearest, MSE clipping or GPTQ, written as Q/DQ ONNX or ONNX Runtime's MatMulNBits, streamed one tensor at a time."""

from qlinear.ptq.algorithms.gptq import gptq
from qlinear.ptq.algorithms.grids import BlockQuant, quantize_rtn
from qlinear.ptq.weightonly.api import StreamedWeights, quantize_weights
from qlinear.ptq.weightonly.plan import Linear, find_linears

__all__ = ["BlockQuant", "Linear", "StreamedWeights", "find_linears", "gptq", "quantize_rtn", "quantize_weights"]
