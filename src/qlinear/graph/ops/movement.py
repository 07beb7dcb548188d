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
             kernel="move", tflite_island="reshape")
REGISTRY.add(FAMILY, "Transpose", _MOVE, kernel="move", tflite_move="transpose", tflite_island="transpose")
REGISTRY.add(FAMILY, ("Squeeze", "Unsqueeze"), _MOVE, tflite_builtins=("RESHAPE",), tflite_writer="reshape",
             kernel="move", tflite_island="reshape")
REGISTRY.add(FAMILY, "Identity", ("data_movement",), tflite_builtins=("RESHAPE",), tflite_writer="identity",
             kernel="move", tflite_island="reshape")
REGISTRY.add(FAMILY, "Concat", ("same_scale_tflite",), tflite_builtins=("CONCATENATION",), tflite_writer="concat",
             kernel="concat", tflite_island="concat")
REGISTRY.add(FAMILY, "Pad", _MOVE, tflite_builtins=("PAD", "MIRROR_PAD"), tflite_writer="pad", tflite_island="pad")
REGISTRY.add(FAMILY, "Slice", _MOVE, tflite_move="slice", tflite_island="slice")
REGISTRY.add(FAMILY, "Gather", _MOVE + ("lookup",), tflite_move="gather", tflite_island="gather")
REGISTRY.add(FAMILY, ("GatherElements", "GatherND"), ("lookup",))
REGISTRY.add(FAMILY, ("SpaceToDepth", "DepthToSpace"), _MOVE)
REGISTRY.add(FAMILY, "Expand", ("data_movement",), tflite_island="broadcast")
REGISTRY.add(FAMILY, "Tile", ("data_movement",))
REGISTRY.add(FAMILY, "Split", ("data_movement",), tflite_move="split", tflite_island="split")
# Resize: TFLite wants its input's parameters on the output (RESIZE_NEAREST_NEIGHBOR/BILINEAR move or blend integers)
REGISTRY.add(FAMILY, "Resize", ("same_scale_tflite",), tflite_move="resize", tflite_island="resize", kernel="resize")
