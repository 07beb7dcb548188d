"""Elementwise arithmetic: Add, Sub, Mul — integer kernels with per-tensor requantization, TFLite ADD/SUB/MUL with a
fused activation; Add is also fused with a following Relu/Clip by the runtimes (residual blocks). Max/Min against a
constant are clamps (:func:`qlinear.graph.ops.is_constant_clamp`)."""

from __future__ import annotations

from qlinear.graph.ops.spec import REGISTRY

FAMILY = "elementwise"

_ISLAND = {"tflite_island": "binary"}
REGISTRY.add(FAMILY, "Add", ("fuses_activation", "constant_operand", "conv_affine"), tflite_builtins=("ADD",),
             tflite_writer="binary", kernel="binary", tflite_float_builtin="ADD", **_ISLAND)
REGISTRY.add(FAMILY, "Sub", ("constant_operand", "conv_affine", "float_on_ort"), tflite_builtins=("SUB",), tflite_writer="binary",
             kernel="binary", tflite_float_builtin="SUB", **_ISLAND)
REGISTRY.add(FAMILY, "Mul", ("constant_operand", "conv_affine"), tflite_builtins=("MUL",), tflite_writer="binary",
             kernel="binary", tflite_float_builtin="MUL", **_ISLAND)
# Max/Min against a constant: the per-channel clip cross-layer equalization writes in place of a Clip
REGISTRY.add(FAMILY, "Max", ("constant_clamp",), tflite_float_builtin="MAXIMUM", **_ISLAND)
REGISTRY.add(FAMILY, "Min", ("constant_clamp",), tflite_float_builtin="MINIMUM", **_ISLAND)
# float-only arithmetic: TFLite float islands (DEQUANTIZE -> builtin -> QUANTIZE)
REGISTRY.add(FAMILY, "Div", ("float_on_ort",), tflite_float_builtin="DIV", **_ISLAND)
REGISTRY.add(FAMILY, "Pow", ("float_on_ort",), tflite_float_builtin="POW", **_ISLAND)
for _t, _b in (("Exp", "EXP"), ("Sqrt", "SQRT"), ("Neg", "NEG"), ("Abs", "ABS"), ("Log", "LOG")):
    REGISTRY.add(FAMILY, _t, ("float_on_ort",), tflite_island="unary", tflite_float_builtin=_b)
REGISTRY.add(FAMILY, "Reciprocal", ("float_on_ort",), tflite_island="reciprocal")
