"""Linear operators: Conv, ConvTranspose, Gemm, MatMul — a weight (input 1) quantized per output channel, an
optional bias (input 2) that becomes int32 at ``input_scale * weight_scale``, a fused Relu/Clip after them.

Axes of a constant input, per consuming operator (AIMET's ``_get_quantization_axes``, ONNX Runtime's quantizer;
notes ``aimet.md`` §2.7):

==================  =======  =====
op                  channel  block
==================  =======  =====
Conv                0        1
ConvTranspose       1        0
Gemm transB=1       0        1
Gemm transB=0       1        0
MatMul              -1       -2
==================  =======  =====
"""

from __future__ import annotations

import onnx

from qlinear.graph.model import attr
from qlinear.graph.ops.spec import REGISTRY

FAMILY = "linear"
_FUSED = ("weighted", "fuses_activation")

REGISTRY.add(FAMILY, "Conv", _FUSED + ("mlp_boundary",), weight_input=1, bias_input=2,
             tflite_builtins=("CONV_2D", "DEPTHWISE_CONV_2D"), tflite_writer="conv", kernel="linear",
             tflite_island="conv")
REGISTRY.add(FAMILY, "ConvTranspose", _FUSED, weight_input=1, bias_input=2, tflite_builtins=("TRANSPOSE_CONV",),
             tflite_writer="transpose_conv", kernel="transpose_conv")
REGISTRY.add(FAMILY, "Gemm", _FUSED + ("mlp_boundary",), weight_input=1, bias_input=2,
             tflite_builtins=("FULLY_CONNECTED",), tflite_writer="fully_connected", kernel="linear")
REGISTRY.add(FAMILY, "MatMul", _FUSED + ("mlp_boundary",), weight_input=1,
             tflite_builtins=("FULLY_CONNECTED",), tflite_writer="fully_connected", kernel="linear",
             tflite_island="matmul")
# recurrent layers stay float (their weights named in a note); the .tflite unrolls them (qlinear.tflite.recurrent)
REGISTRY.add(FAMILY, ("LSTM", "GRU"), tflite_island="recurrent")


def input_axes(node: onnx.NodeProto, idx: int, rank: int) -> tuple[int, int] | None:
    """(channel axis, block axis) of input ``idx`` (rank ``rank`` >= 2) of ``node`` by the table above, or None
    when ``node`` says nothing about that input's axes."""
    op = node.op_type
    if op == "Conv" and idx == 1:
        return (0, 1)
    if op == "ConvTranspose" and idx == 1:
        return (1, 0)
    if op == "Gemm":
        tb = attr(node, "transB", 0) if idx == 1 else attr(node, "transA", 0)
        return (0, 1) if (tb if idx == 1 else not tb) else (1, 0)
    if op == "MatMul":
        return (rank - 1, rank - 2) if idx == 1 else (rank - 2, rank - 1)
    return None


def weight_channel_axis(node: onnx.NodeProto, rank: int) -> int:
    """The output-channel axis of the weight (input 1, rank ``rank``) of a linear operator."""
    ax = input_axes(node, 1, rank)
    return rank - 1 if ax is None else ax[0]
