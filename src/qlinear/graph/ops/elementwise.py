"""Elementwise arithmetic: Add, Sub, Mul — integer kernels with per-tensor requantization, TFLite ADD/SUB/MUL with a
fused activation; Add is also fused with a following Relu/Clip by the runtimes (residual blocks). Max/Min against a
constant are clamps (:func:`qlinear.graph.ops.is_constant_clamp`)."""

from __future__ import annotations

from qlinear.graph.ops.spec import REGISTRY

FAMILY = "elementwise"

REGISTRY.add(FAMILY, "Add", ("fuses_activation",), tflite_builtins=("ADD",), tflite_writer="binary",
             kernel="binary")
REGISTRY.add(FAMILY, "Sub", tflite_builtins=("SUB",), tflite_writer="binary", kernel="binary")
REGISTRY.add(FAMILY, "Mul", tflite_builtins=("MUL",), tflite_writer="binary", kernel="binary")
# Max/Min against a constant: the per-channel clip cross-layer equalization writes in place of a Clip
REGISTRY.add(FAMILY, ("Max", "Min"), ("constant_clamp",))
