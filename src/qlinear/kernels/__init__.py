"""Integer kernels: the int8 arithmetic of TFLite/LiteRT, ONNX Runtime and oneDNN, bit-exact per named mode.

* :mod:`.requant` — requantization modes (``fixed_double``, ``fixed_single``, ``ruy_x86``, ``f64_round_away``,
  ``f32_rne``, ``onednn``);
* :mod:`.gemm` — exact int32 accumulation through float64 BLAS, weight terms precomputed once;
* :mod:`.linear` (fully connected, Conv2D, depthwise), :mod:`.elementwise` (add, sub, mul, requantize),
  :mod:`.pool` (average/max pool, mean, concat), :mod:`.activation` (softmax, logistic, tanh);
* :func:`run_integer` — integer execution of a Q/DQ ONNX model; :class:`IntegerModel` compiles it once and runs it
  many times.
"""

from qlinear.kernels.activation import logistic, softmax, tanh
from qlinear.kernels.elementwise import add, mul, requantize_tensor
from qlinear.kernels.gemm import PreparedWeights, int_matmul
from qlinear.kernels.linear import conv2d, conv_accumulate, fully_connected
from qlinear.kernels.pool import avg_pool2d, concat, max_pool2d, mean
from qlinear.kernels.requant import MODES, activation_range, quantize_multiplier, requantize
from qlinear.kernels.run import IntegerModel, run_integer

__all__ = ["IntegerModel", "MODES", "PreparedWeights", "activation_range", "add", "avg_pool2d", "concat", "conv2d", "conv_accumulate",
           "fully_connected", "int_matmul", "logistic", "max_pool2d", "mean", "mul", "quantize_multiplier",
           "requantize", "requantize_tensor", "run_integer", "softmax", "tanh"]

from qlinear.kernels.onednn import epilogue as onednn_epilogue  # noqa: E402

__all__ += ["onednn_epilogue"]
