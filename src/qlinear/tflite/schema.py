"""The part of the TFLite flatbuffer schema qlinear writes, built directly with :mod:`flatbuffers`.

Source: the published ``schema.fbs`` (google-ai-edge/LiteRT ``tflite/converter/schema/schema.fbs``, file identifier
``TFL3``, schema version 3). Table fields are written by their slot (0-based declaration order; a union field takes
two slots: its type, then its value); enum values and the ``BuiltinOptions`` union indices are the schema's.
``tests/tflite`` checks every constant here against the generated code shipped in ``ai-edge-litert``.

Only what int8/int16 CNN models need is here: ``Model``, ``SubGraph``, ``Tensor``, ``QuantizationParameters``,
``Buffer``, ``OperatorCode``, ``Operator`` and the options tables of the operators :mod:`qlinear.tflite.export`
writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

FILE_IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3

# enum TensorType : byte
TENSOR_TYPE = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "int8": 9,
               "float64": 10, "uint16": 16, "int4": 17}

# enum BuiltinOperator : int32 (the ones written here)
OP = {"ADD": 0, "AVERAGE_POOL_2D": 1, "CONCATENATION": 2, "CONV_2D": 3, "DEPTHWISE_CONV_2D": 4, "DEQUANTIZE": 6,
      "FULLY_CONNECTED": 9, "LOGISTIC": 14, "MAX_POOL_2D": 17, "MUL": 18, "RELU": 19, "RELU_N1_TO_1": 20,
      "RELU6": 21, "RESHAPE": 22, "SOFTMAX": 25, "TANH": 28, "PAD": 34, "TRANSPOSE": 39, "MEAN": 40, "SUB": 41,
      "MAXIMUM": 55, "MINIMUM": 57, "QUANTIZE": 114, "HARD_SWISH": 117, "RESIZE_BILINEAR": 23, "GATHER": 36,
      "DIV": 42, "SQUEEZE": 43, "STRIDED_SLICE": 45, "EXP": 47, "SPLIT": 49, "CAST": 53, "NEG": 59, "SLICE": 65,
      "TRANSPOSE_CONV": 67, "EXPAND_DIMS": 70, "LOG": 73, "SUM": 74, "SQRT": 75, "RSQRT": 76, "POW": 78,
      "REDUCE_MAX": 82, "REDUCE_MIN": 89, "SQUARE": 92, "RESIZE_NEAREST_NEIGHBOR": 97, "LEAKY_RELU": 98,
      "ABS": 101, "SPLIT_V": 102, "BATCH_MATMUL": 126, "GELU": 150, "BROADCAST_TO": 130, "EQUAL": 71,
      "NOT_EQUAL": 72, "LESS": 58, "GREATER": 61, "SELECT_V2": 123, "LOGICAL_NOT": 87, "PRELU": 54, "MIRROR_PAD": 100, "SIGN": 158}

# union BuiltinOptions: 1-based position of each table in the union's declaration
OPTIONS = {"Conv2DOptions": 1, "DepthwiseConv2DOptions": 2, "Pool2DOptions": 5, "FullyConnectedOptions": 8,
           "SoftmaxOptions": 9, "ConcatenationOptions": 10, "AddOptions": 11, "ReshapeOptions": 17, "MulOptions": 21,
           "PadOptions": 22, "TransposeOptions": 26, "ReducerOptions": 27, "SubOptions": 28,
           "DequantizeOptions": 38, "MaximumMinimumOptions": 39, "QuantizeOptions": 89, "HardSwishOptions": 91,
           "ResizeBilinearOptions": 15, "GatherOptions": 23, "DivOptions": 29, "SqueezeOptions": 30,
           "StridedSliceOptions": 32, "ExpOptions": 33, "SplitOptions": 35, "CastOptions": 37,
           "SliceOptions": 48, "TransposeConvOptions": 49, "ExpandDimsOptions": 52, "PowOptions": 56,
           "ResizeNearestNeighborOptions": 74, "LeakyReluOptions": 75, "AbsOptions": 78, "SplitVOptions": 79,
           "NegOptions": 42, "GeluOptions": 116, "BatchMatMulOptions": 101, "BroadcastToOptions": 104,
           "EqualOptions": 53, "NotEqualOptions": 54, "LessOptions": 41, "GreaterOptions": 44,
           "SelectV2Options": 98, "LogicalNotOptions": 63, "MirrorPadOptions": 77}

# enum ActivationFunctionType : byte; enum Padding : byte
ACTIVATION = {None: 0, "NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4}
PADDING = {"SAME": 0, "VALID": 1}

#: options tables: name -> ordered (field, kind, default) with kind in int32/int8/bool/float/ivec
OPTION_FIELDS: dict[str, list[tuple[str, str, Any]]] = {
    "Conv2DOptions": [("padding", "int8", 0), ("stride_w", "int32", 0), ("stride_h", "int32", 0),
                      ("fused_activation_function", "int8", 0), ("dilation_w_factor", "int32", 1),
                      ("dilation_h_factor", "int32", 1), ("quantized_bias_type", "int8", 0)],
    "DepthwiseConv2DOptions": [("padding", "int8", 0), ("stride_w", "int32", 0), ("stride_h", "int32", 0),
                               ("depth_multiplier", "int32", 0), ("fused_activation_function", "int8", 0),
                               ("dilation_w_factor", "int32", 1), ("dilation_h_factor", "int32", 1)],
    "Pool2DOptions": [("padding", "int8", 0), ("stride_w", "int32", 0), ("stride_h", "int32", 0),
                      ("filter_width", "int32", 0), ("filter_height", "int32", 0),
                      ("fused_activation_function", "int8", 0)],
    "FullyConnectedOptions": [("fused_activation_function", "int8", 0), ("weights_format", "int8", 0),
                              ("keep_num_dims", "bool", False), ("asymmetric_quantize_inputs", "bool", False),
                              ("quantized_bias_type", "int8", 0)],
    "SoftmaxOptions": [("beta", "float", 0.0)],
    "ConcatenationOptions": [("axis", "int32", 0), ("fused_activation_function", "int8", 0)],
    "AddOptions": [("fused_activation_function", "int8", 0), ("pot_scale_int16", "bool", True)],
    "SubOptions": [("fused_activation_function", "int8", 0), ("pot_scale_int16", "bool", True)],
    "MulOptions": [("fused_activation_function", "int8", 0)],
    "ReshapeOptions": [("new_shape", "ivec", None)],
    "ReducerOptions": [("keep_dims", "bool", False)],
    "PadOptions": [], "TransposeOptions": [], "QuantizeOptions": [], "DequantizeOptions": [],
    "MaximumMinimumOptions": [], "HardSwishOptions": [],
    "ResizeBilinearOptions": [("new_height", "int32", 0), ("new_width", "int32", 0), ("align_corners", "bool", False),
                              ("half_pixel_centers", "bool", False)],
    "ResizeNearestNeighborOptions": [("align_corners", "bool", False), ("half_pixel_centers", "bool", False)],
    "GatherOptions": [("axis", "int32", 0), ("batch_dims", "int32", 0)],
    "DivOptions": [("fused_activation_function", "int8", 0)],
    "SqueezeOptions": [("squeeze_dims", "ivec", None)],
    "StridedSliceOptions": [("begin_mask", "int32", 0), ("end_mask", "int32", 0), ("ellipsis_mask", "int32", 0),
                            ("new_axis_mask", "int32", 0), ("shrink_axis_mask", "int32", 0), ("offset", "bool", False)],
    "SplitOptions": [("num_splits", "int32", 0)], "SplitVOptions": [("num_splits", "int32", 0)],
    "CastOptions": [("in_data_type", "int8", 0), ("out_data_type", "int8", 0)],
    "TransposeConvOptions": [("padding", "int8", 0), ("stride_w", "int32", 0), ("stride_h", "int32", 0),
                             ("fused_activation_function", "int8", 0), ("quantized_bias_type", "int8", 0)],
    "LeakyReluOptions": [("alpha", "float", 0.0)], "GeluOptions": [("approximate", "bool", False)],
    "BatchMatMulOptions": [("adj_x", "bool", False), ("adj_y", "bool", False),
                           ("asymmetric_quantize_inputs", "bool", False)],
    "SliceOptions": [], "ExpandDimsOptions": [], "ExpOptions": [], "PowOptions": [], "AbsOptions": [],
    "NegOptions": [], "BroadcastToOptions": [], "EqualOptions": [], "NotEqualOptions": [], "LessOptions": [],
    "GreaterOptions": [], "SelectV2Options": [], "LogicalNotOptions": [], "MirrorPadOptions": [("mode", "int8", 0)],
}


@dataclass
class Quant:
    scale: list[float]
    zero_point: list[int]
    quantized_dimension: int = 0


@dataclass
class Tensor:
    name: str
    shape: list[int]
    type: str
    buffer: int = 0
    quant: Quant | None = None


@dataclass
class Operator:
    opcode: int                      # index into Model.operator_codes
    inputs: list[int]
    outputs: list[int]
    options: str | None = None       # an OPTION_FIELDS key
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelDef:
    tensors: list[Tensor] = field(default_factory=list)
    operators: list[Operator] = field(default_factory=list)
    codes: list[tuple[int, int]] = field(default_factory=list)        # (builtin code, version)
    buffers: list[bytes] = field(default_factory=lambda: [b""])      # buffer 0: the empty sentinel
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    description: str = "qlinear"

    def opcode(self, name: str, version: int) -> int:
        key = (OP[name], version)
        if key not in self.codes:
            self.codes.append(key)
        return self.codes.index(key)

    def add_buffer(self, data: np.ndarray) -> int:
        a = np.asarray(data)
        self.buffers.append(np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes())
        return len(self.buffers) - 1


def _vec(b: Any, values: Any, kind: str) -> int:
    arr = np.asarray(values, {"int32": "<i4", "int64": "<i8", "float": "<f4", "uint8": "u1", "bool": "u1"}[kind])
    return b.CreateNumpyVector(arr)


def _bytes(b: Any, data: bytes, align: int = 16) -> int:
    """A ``[ubyte]`` vector aligned to ``align`` bytes (``Buffer.data`` has ``force_align: 16``)."""
    b.StartVector(1, len(data), align)
    b.head = b.head - len(data)
    b.Bytes[b.head:b.head + len(data)] = data
    b.vectorNumElems = len(data)
    return b.EndVector()


def _offsets(b: Any, offs: list[int]) -> int:
    b.StartVector(4, len(offs), 4)
    for o in reversed(offs):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _options(b: Any, name: str, values: dict[str, Any]) -> int:
    fields = OPTION_FIELDS[name]
    known = {f for f, _, _ in fields}
    unknown = set(values) - known
    if unknown:
        raise KeyError(f"{name} has no field(s) {sorted(unknown)}")
    vecs = {f: _vec(b, values[f], "int32") for f, kind, _ in fields if kind == "ivec" and values.get(f) is not None}
    b.StartObject(len(fields))
    for slot, (f, kind, default) in enumerate(fields):
        if f not in values:
            continue
        v = values[f]
        if kind == "int32":
            b.PrependInt32Slot(slot, int(v), default)
        elif kind == "int8":
            b.PrependInt8Slot(slot, int(v), default)
        elif kind == "bool":
            b.PrependBoolSlot(slot, bool(v), default)
        elif kind == "float":
            b.PrependFloat32Slot(slot, float(v), default)
        elif kind == "ivec" and f in vecs:
            b.PrependUOffsetTRelativeSlot(slot, vecs[f], 0)
    return b.EndObject()


def _quant(b: Any, q: Quant) -> int:
    scale = _vec(b, q.scale, "float")
    zp = _vec(b, q.zero_point, "int64")
    b.StartObject(7)  # min, max, scale, zero_point, details_type, details, quantized_dimension
    b.PrependUOffsetTRelativeSlot(2, scale, 0)
    b.PrependUOffsetTRelativeSlot(3, zp, 0)
    b.PrependInt32Slot(6, int(q.quantized_dimension), 0)
    return b.EndObject()


def _tensor(b: Any, t: Tensor) -> int:
    name = b.CreateString(t.name)
    shape = _vec(b, t.shape, "int32")
    quant = _quant(b, t.quant) if t.quant is not None else None
    b.StartObject(11)
    b.PrependUOffsetTRelativeSlot(0, shape, 0)
    b.PrependInt8Slot(1, TENSOR_TYPE[t.type], 0)
    b.PrependUint32Slot(2, int(t.buffer), 0)
    b.PrependUOffsetTRelativeSlot(3, name, 0)
    if quant is not None:
        b.PrependUOffsetTRelativeSlot(4, quant, 0)
    b.PrependBoolSlot(8, True, False)  # has_rank
    return b.EndObject()


def _operator(b: Any, op: Operator) -> int:
    ins = _vec(b, op.inputs, "int32")
    outs = _vec(b, op.outputs, "int32")
    opts = _options(b, op.options, op.values) if op.options else None
    b.StartObject(14)
    b.PrependUint32Slot(0, int(op.opcode), 0)
    b.PrependUOffsetTRelativeSlot(1, ins, 0)
    b.PrependUOffsetTRelativeSlot(2, outs, 0)
    if opts is not None:
        b.PrependUint8Slot(3, OPTIONS[op.options], 0)
        b.PrependUOffsetTRelativeSlot(4, opts, 0)
    return b.EndObject()


def _opcode(b: Any, code: int, version: int) -> int:
    b.StartObject(4)
    b.PrependInt8Slot(0, min(code, 127), 0)       # deprecated_builtin_code (PLACEHOLDER_FOR_GREATER_OP_CODES)
    b.PrependInt32Slot(2, int(version), 1)
    b.PrependInt32Slot(3, int(code), 0)
    return b.EndObject()


def serialize(md: ModelDef) -> bytes:
    """The ``.tflite`` bytes of ``md`` (one subgraph)."""
    import flatbuffers

    size = sum(len(x) for x in md.buffers) + 1024 * (len(md.tensors) + len(md.operators) + 8)
    b = flatbuffers.Builder(size)
    bufs = []
    for data in md.buffers:
        d = _bytes(b, data) if data else None
        b.StartObject(3)
        if d is not None:
            b.PrependUOffsetTRelativeSlot(0, d, 0)
        bufs.append(b.EndObject())
    tensors = [_tensor(b, t) for t in md.tensors]
    ops = [_operator(b, o) for o in md.operators]
    t_vec, o_vec = _offsets(b, tensors), _offsets(b, ops)
    ins, outs = _vec(b, md.inputs, "int32"), _vec(b, md.outputs, "int32")
    sg_name = b.CreateString("main")
    b.StartObject(6)
    b.PrependUOffsetTRelativeSlot(0, t_vec, 0)
    b.PrependUOffsetTRelativeSlot(1, ins, 0)
    b.PrependUOffsetTRelativeSlot(2, outs, 0)
    b.PrependUOffsetTRelativeSlot(3, o_vec, 0)
    b.PrependUOffsetTRelativeSlot(4, sg_name, 0)
    sg = b.EndObject()
    codes = [_opcode(b, c, v) for c, v in md.codes]
    c_vec, s_vec, b_vec = _offsets(b, codes), _offsets(b, [sg]), _offsets(b, bufs)
    desc = b.CreateString(md.description)
    b.StartObject(12)
    b.PrependUint32Slot(0, SCHEMA_VERSION, 0)
    b.PrependUOffsetTRelativeSlot(1, c_vec, 0)
    b.PrependUOffsetTRelativeSlot(2, s_vec, 0)
    b.PrependUOffsetTRelativeSlot(3, desc, 0)
    b.PrependUOffsetTRelativeSlot(4, b_vec, 0)
    b.Finish(b.EndObject(), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


__all__ = ["ACTIVATION", "FILE_IDENTIFIER", "ModelDef", "OP", "OPTIONS", "OPTION_FIELDS", "Operator", "PADDING",
           "Quant", "TENSOR_TYPE", "Tensor", "serialize"]
