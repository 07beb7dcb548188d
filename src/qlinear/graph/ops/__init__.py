"""The operator registry: everything qlinear knows about an ONNX op type, in one place, one module per family.

==================  ========================================================================================
module              op types
==================  ========================================================================================
``linear``          Conv, ConvTranspose, Gemm, MatMul (weights, biases, fused activations, weight axes)
``elementwise``     Add, Sub, Mul
``pooling``         AveragePool, MaxPool, GlobalAveragePool, ReduceMean
``movement``        Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Identity, Concat, Pad, Slice, Gather...
``activation``      Relu, Clip, LeakyRelu, Softmax, Sigmoid, Tanh, LogSoftmax, HardSwish, Gelu...
``other``           non-float ops (Shape, ArgMax, Cast...), LayerNormalization, QuantizeLinear/DequantizeLinear
==================  ========================================================================================

Each op type has one :class:`OpSpec` (:mod:`qlinear.graph.ops.spec`). The plan (:mod:`qlinear.graph.plan`), the
integer check, the Q/DQ parser, the TFLite target rules (:mod:`qlinear.ptq.targets`), the integer executor
(:mod:`qlinear.kernels.run`, dispatching on ``OpSpec.kernel``) and the TFLite exporter (:mod:`qlinear.tflite.export`,
dispatching on ``OpSpec.tflite_writer``) read it; the constants below are its views under the names those modules
used to define themselves.
"""

from __future__ import annotations

from collections.abc import Container

import onnx

from qlinear.graph.ops import activation, elementwise, linear, movement, other, pooling  # noqa: F401 - registers
from qlinear.graph.ops.linear import conv_pads, input_axes, weight_channel_axis
from qlinear.graph.ops.spec import REGISTRY, ROLES, OpSpec, with_role

#: the families, in the order the views below list their op types
FAMILIES = ("linear", "elementwise", "pooling", "movement", "activation", "other")
REGISTRY.specs = dict(sorted(REGISTRY.specs.items(), key=lambda kv: FAMILIES.index(kv[1].family)))

WEIGHTED = with_role("weighted")
FUSING_PRODUCERS = with_role("fuses_activation")
FUSABLE_ACT = with_role("fusable_activation")
QDQ_FUSED_ACTIVATIONS = with_role("qdq_fused_activation")
DATA_MOVEMENT = with_role("data_movement")
NON_FLOAT_OPS = with_role("non_float")
SHAPE_COMPUTATIONS = with_role("shape_computation")
ACTIVATION_FNS = with_role("smooth_activation")
MLP_BOUNDARY = with_role("mlp_boundary")
TRANSFORMER_NORMS = with_role("transformer_norm")
AFFINE_NORMS = with_role("affine_norm")
LOOKUPS = with_role("lookup")
QDQ_STRUCTURE = with_role("qdq_structure")
CONSTANT_CLAMPS = with_role("constant_clamp")
CONSTANT_OPERAND_OPS = with_role("constant_operand")
#: op types ONNX Runtime's CPU session runs in float between Q/DQ (no integer kernel it fuses them into)
FLOAT_ON_ORT = with_role("float_on_ort")
SAME_SCALE_TFLITE = with_role("same_scale_tflite")
#: weighted op types ONNX Runtime runs as integer kernels only with a QuantizeLinear on their output
ORT_QUANTIZED_OUTPUT = with_role("ort_quantized_output")
FIXED_TFLITE = {t: s.fixed_tflite for t, s in REGISTRY.specs.items() if s.fixed_tflite is not None}
FIXED_TFLITE16 = {t: s.fixed_tflite16 for t, s in REGISTRY.specs.items() if s.fixed_tflite16 is not None}
#: functions whose output range is known whatever their input: op type -> (low, high)
OUTPUT_RANGES = {t: s.output_range for t, s in REGISTRY.specs.items() if s.output_range is not None}
TFLITE_EXPORTED = tuple(t for t, s in REGISTRY.specs.items() if s.tflite_writer is not None)
#: op types the TFLite export can write as a float island (DEQUANTIZE -> float builtin -> QUANTIZE)
TFLITE_ISLANDS = tuple(t for t, s in REGISTRY.specs.items() if s.tflite_island is not None)
#: op types the TFLite export moves as integers when input and outputs share their parameters
TFLITE_MOVED = tuple(t for t, s in REGISTRY.specs.items() if s.tflite_move is not None)
INTEGER_KERNEL_OPS = tuple(t for t, s in REGISTRY.specs.items() if s.kernel is not None)
#: operators that make an embedding (pooling, normalization) when they produce a graph output (report metrics)
EMBEDDING_PRODUCERS = ("Div", "ReduceMean", "ReduceSum", "ReduceL2", "LpNormalization", "LayerNormalization")
#: a decomposed normalization's statistics (:mod:`qlinear.graph.norm_stats`): the reductions that make them, the
#: operators they pass through to a square root, and those that take one (Sqrt, Pow by 0.5) or invert it
NORM_REDUCTIONS = ("ReduceMean", "ReduceSum")
NORM_THROUGH = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Neg", "Abs", "Reshape", "Expand", "Squeeze", "Unsqueeze",
                "Cast", "Identity", "Flatten", "Transpose")
NORM_ROOTS = ("Sqrt", "Pow", "Reciprocal")
#: a logarithm's input (:mod:`qlinear.graph.log_inputs`): the operators that take it, and those its values are
#: carried through from a linear layer with their dynamic range kept (no squashing function), back to the graph input
LOGS = ("Log",)
LOG_THROUGH = ("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Abs", "Neg", "Max", "Min", "Clip", "Conv", "ConvTranspose",
               "MatMul", "Gemm", "ReduceSum", "ReduceSumSquare", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceMax",
               "ReduceMin", "STFT", "DFT", "Reshape", "Expand", "Squeeze", "Unsqueeze", "Cast", "Identity", "Flatten",
               "Transpose", "Concat", "Slice", "Pad", "Split", "Where", "Gather", "GatherElements", "ScatterElements",
               "ScatterND", "Tile")
#: operators whose outputs include a recurrent state (report metrics: judged as a state, not by top-1)
RECURRENT = ("GRU", "LSTM", "RNN")
#: operators a graph output's kind is looked through (layout only, the values unchanged)
LAYOUT_PASSTHROUGH = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "Transpose", "Concat")
#: operators that quantize or dequantize
QUANTIZE_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")
#: operators of ONNX Runtime's integer kernels (its quantizers' QOperator and dynamic output: their parameters are
#: operator inputs, no Q/DQ pair)
ORT_INTEGER_OPS = ("QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "MatMulNBits", "QLinearAdd",
                      "QLinearMul", "QGemm", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "MatMulIntegerToFloat",
                      "QAttention", "QEmbedLayerNormalization", "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu",
                      "QLinearSoftmax", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearReduceMean",
                      "QLinearWhere", "QLinearConvTranspose")
#: the pair a Q/DQ model puts on a tensor (looked through to the nodes that read its values)
QDQ_PAIR = ("QuantizeLinear", "DequantizeLinear")
#: operators only a model quantized already holds (Q/DQ, ONNX Runtime's integer kernels): such a model is refused
QUANTIZED_MODEL_OPS = QUANTIZE_OPS + ORT_INTEGER_OPS
#: operators with a weight (input 1) that full-integer quantization would quantize (recurrent and attention too)
WEIGHT_BEARING = ("Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN", "Attention")


def spec(op_type: str) -> OpSpec | None:
    """The :class:`OpSpec` of ``op_type``, or None for an op type the registry does not know."""
    return REGISTRY.specs.get(op_type)


def kernel_of(op_type: str) -> str | None:
    """The integer kernel family that runs ``op_type`` (``OpSpec.kernel``), or None (it runs in float)."""
    s = REGISTRY.specs.get(op_type)
    return None if s is None else s.kernel


def tflite_writer_of(op_type: str) -> str | None:
    """The TFLite writer that exports ``op_type`` (``OpSpec.tflite_writer``), or None (not exported)."""
    s = REGISTRY.specs.get(op_type)
    return None if s is None else s.tflite_writer


def is_constant_clamp(node: onnx.NodeProto, constants: Container[str]) -> bool:
    """``node`` is a Max/Min of a tensor and a constant (a name in ``constants``): a clamp, per channel when the
    constant is (what cross-layer equalization writes for a Clip)."""
    return node.op_type in CONSTANT_CLAMPS and len(node.input) == 2 and node.input[1] in constants


def bias_input(op_type: str) -> int | None:
    """The index of ``op_type``'s bias input (Conv, ConvTranspose, Gemm: 2), or None."""
    s = REGISTRY.specs.get(op_type)
    return None if s is None else s.bias_input


__all__ = [
    "NORM_REDUCTIONS",
    "NORM_ROOTS",
    "NORM_THROUGH",
    "RECURRENT",
    "ACTIVATION_FNS",
    "AFFINE_NORMS",
    "CONSTANT_CLAMPS",
    "CONSTANT_OPERAND_OPS",
    "FLOAT_ON_ORT",
    "ORT_QUANTIZED_OUTPUT",
    "DATA_MOVEMENT",
    "FAMILIES",
    "FIXED_TFLITE",
    "FIXED_TFLITE16",
    "FUSABLE_ACT",
    "FUSING_PRODUCERS",
    "INTEGER_KERNEL_OPS",
    "LOOKUPS",
    "MLP_BOUNDARY",
    "NON_FLOAT_OPS",
    "ORT_INTEGER_OPS",
    "SHAPE_COMPUTATIONS",
    "OUTPUT_RANGES",
    "QDQ_FUSED_ACTIVATIONS",
    "QDQ_PAIR",
    "QDQ_STRUCTURE",
    "REGISTRY",
    "ROLES",
    "SAME_SCALE_TFLITE",
    "TFLITE_EXPORTED",
    "TFLITE_ISLANDS",
    "TFLITE_MOVED",
    "TRANSFORMER_NORMS",
    "WEIGHTED",
    "OpSpec",
    "bias_input",
    "conv_pads",
    "input_axes",
    "is_constant_clamp",
    "kernel_of",
    "spec",
    "tflite_writer_of",
    "weight_channel_axis",
    "with_role",
]
