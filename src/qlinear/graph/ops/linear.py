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

REGISTRY.add(FAMILY, "Conv", _FUSED + ("mlp_boundary", "ort_quantized_output"), weight_input=1, bias_input=2,
             tflite_builtins=("CONV_2D", "DEPTHWISE_CONV_2D"), tflite_writer="conv", kernel="linear",
             tflite_island="conv")
REGISTRY.add(FAMILY, "ConvTranspose", _FUSED + ("ort_quantized_output",), weight_input=1, bias_input=2,
             tflite_builtins=("TRANSPOSE_CONV",), tflite_writer="transpose_conv", kernel="transpose_conv")
REGISTRY.add(FAMILY, "Gemm", _FUSED + ("mlp_boundary",), weight_input=1, bias_input=2,
             tflite_builtins=("FULLY_CONNECTED",), tflite_writer="fully_connected", kernel="linear")
REGISTRY.add(FAMILY, "MatMul", _FUSED + ("mlp_boundary",), weight_input=1,
             tflite_builtins=("FULLY_CONNECTED",), tflite_writer="fully_connected", kernel="linear",
             tflite_island="matmul")
# recurrent layers stay float (their weights named in a note; ONNX Runtime fuses no Q/DQ into them); the .tflite
# unrolls them (qlinear.tflite.recurrent)
REGISTRY.add(FAMILY, ("LSTM", "GRU"), ("float_on_ort",), tflite_island="recurrent")
REGISTRY.add(FAMILY, "RNN", ("float_on_ort",))


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


def conv_pads(node: onnx.NodeProto, spatial: tuple, kernel: tuple) -> list[int]:
    """A Conv's padding as ``pads`` lists it (every spatial begin, then every end), ``auto_pad`` resolved as ONNX
    defines it for an input of ``spatial`` size and a ``kernel``: VALID none; SAME_UPPER / SAME_LOWER
    ``ceil(in / stride)`` outputs, the odd pad at the end / at the beginning (TFLite's SAME is SAME_UPPER)."""
    ap = attr(node, "auto_pad", b"NOTSET")
    ap = ap.decode() if isinstance(ap, bytes) else ap
    n = len(spatial)
    if ap == "NOTSET":
        return list(attr(node, "pads", [0] * (2 * n)))
    if ap == "VALID":
        return [0] * (2 * n)
    if ap not in ("SAME_UPPER", "SAME_LOWER"):
        raise ValueError(f"node {node.name or node.op_type}: auto_pad {ap!r} is not an ONNX padding")
    strides, dil = list(attr(node, "strides", [1] * n)), list(attr(node, "dilations", [1] * n))
    total = [max((-(-int(i) // s) - 1) * s + (k - 1) * d + 1 - int(i), 0)
             for i, k, s, d in zip(spatial, kernel, strides, dil)]
    small = [t // 2 for t in total]
    begin = small if ap == "SAME_UPPER" else [t - h for t, h in zip(total, small)]
    return begin + [t - h for t, h in zip(total, begin)]

