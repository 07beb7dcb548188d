"""Data movement: operators that move, select or repeat values without computing new ones. Their output reuses
their input's encoding (the plan's ``inherit``); the integer kernels move the integers; TFLite wants the same
parameters in and out. Concat merges its inputs' ranges into one encoding (the plan's ``tied``) only where the target
requires one scale (``same_scale_tflite``: TFLite); for ort/qnn each input keeps its own parameters and the integer
kernels requantize them (``concat``)."""

from __future__ import annotations

from qlinear.graph.ops.spec import REGISTRY

FAMILY = "movement"
_MOVE = ("data_movement", "same_scale_tflite")

REGISTRY.add(FAMILY, ("Reshape", "Flatten"), _MOVE, tflite_builtins=("RESHAPE",), tflite_writer="reshape",
             kernel="move")
REGISTRY.add(FAMILY, "Transpose", _MOVE, kernel="move")
REGISTRY.add(FAMILY, ("Squeeze", "Unsqueeze"), _MOVE, tflite_builtins=("RESHAPE",), tflite_writer="reshape",
             kernel="move")
REGISTRY.add(FAMILY, "Identity", ("data_movement",), tflite_builtins=("RESHAPE",), tflite_writer="identity",
             kernel="move")
REGISTRY.add(FAMILY, "Concat", ("same_scale_tflite",), tflite_builtins=("CONCATENATION",), tflite_writer="concat",
             kernel="concat")
REGISTRY.add(FAMILY, "Pad", _MOVE, tflite_builtins=("PAD",), tflite_writer="pad")
REGISTRY.add(FAMILY, "Slice", _MOVE)
REGISTRY.add(FAMILY, "Gather", _MOVE + ("lookup",))
REGISTRY.add(FAMILY, ("GatherElements", "GatherND"), ("lookup",))
REGISTRY.add(FAMILY, ("SpaceToDepth", "DepthToSpace"), _MOVE)
REGISTRY.add(FAMILY, ("Expand", "Tile", "Split"), ("data_movement",))
