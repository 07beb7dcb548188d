"""Operators whose outputs are not float data to quantize (shapes, indices, comparisons, logic, casts, constants),
the normalizations that mark transformer graphs, and the nodes of the Q/DQ encoding itself."""

from __future__ import annotations

from qlinear.graph.ops.spec import REGISTRY

FAMILY = "other"

REGISTRY.add(FAMILY, ("Shape", "Size"), ("non_float", "shape_computation"))
REGISTRY.add(FAMILY, ("NonZero", "ArgMax", "ArgMin", "TopK"), ("non_float",))
REGISTRY.add(FAMILY, "Constant", ("non_float", "qdq_structure"))
REGISTRY.add(FAMILY, ("ConstantOfShape", "Range"), ("non_float", "shape_computation"))
for _t, _b in (("Equal", "EQUAL"), ("Less", "LESS"), ("Greater", "GREATER")):
    REGISTRY.add(FAMILY, _t, ("non_float",), tflite_island="compare", tflite_float_builtin=_b)
REGISTRY.add(FAMILY, "Not", ("non_float",), tflite_island="unary", tflite_float_builtin="LOGICAL_NOT")
REGISTRY.add(FAMILY, ("And", "Or"), ("non_float",))
# a selection (divide_no_nan, masks): a TFLite float island (SELECT_V2)
REGISTRY.add(FAMILY, "Where", tflite_island="where")
REGISTRY.add(FAMILY, "Cast", ("non_float",), tflite_island="cast")
REGISTRY.add(FAMILY, "LayerNormalization", ("transformer_norm", "mlp_boundary", "affine_norm"),
             tflite_island="layer_norm")
REGISTRY.add(FAMILY, "SimplifiedLayerNormalization", ("transformer_norm", "affine_norm"))
REGISTRY.add(FAMILY, "RMSNormalization", ("affine_norm",))
REGISTRY.add(FAMILY, ("QuantizeLinear", "DequantizeLinear"), ("qdq_structure",))
# a BatchNormalization that did not fold into a Conv (after a ConvTranspose, say): a TFLite float island
REGISTRY.add(FAMILY, "BatchNormalization", tflite_island="batch_norm")
