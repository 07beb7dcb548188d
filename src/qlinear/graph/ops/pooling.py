"""Pooling and reductions: MaxPool (moves values: same parameters in and out), AveragePool, GlobalAveragePool and
ReduceMean (TFLite MEAN). TFLite requires the pools' (MAX_POOL_2D, AVERAGE_POOL_2D) output parameters to be their
input's; MEAN (GlobalAveragePool, ReduceMean) requantizes (``s_in / s_out``) and keeps its own output parameters, as
the converter gives ``tfl.mean`` (a mean spans a fraction of its input's range: PP-OCR's text-direction classifier's
squeeze-excite means on their inputs' grids lost 15-21 dB against a min-max grid of their own)."""

from __future__ import annotations

from qlinear.graph.ops.spec import REGISTRY

FAMILY = "pooling"

REGISTRY.add(FAMILY, "AveragePool", ("same_scale_tflite",), tflite_builtins=("AVERAGE_POOL_2D",),
             tflite_writer="pool", kernel="pool")
REGISTRY.add(FAMILY, "MaxPool", ("same_scale_tflite", "data_movement"), tflite_builtins=("MAX_POOL_2D",),
             tflite_writer="pool", kernel="pool")
REGISTRY.add(FAMILY, "GlobalAveragePool", tflite_builtins=("MEAN",), tflite_writer="pool", kernel="pool")
# ReduceMean is the decomposed form of LayerNormalization in exported transformers
REGISTRY.add(FAMILY, "ReduceMean", ("transformer_norm",), tflite_builtins=("MEAN",), tflite_writer="reduce_mean",
             kernel="mean", tflite_island="reduce", tflite_float_builtin="MEAN")
# reductions outside the integer set: TFLite float islands (SUM, REDUCE_MAX, REDUCE_MIN)
REGISTRY.add(FAMILY, "ReduceSum", ("float_on_ort",), tflite_island="reduce", tflite_float_builtin="SUM")
REGISTRY.add(FAMILY, ("ReduceMax", "GlobalMaxPool"), tflite_island="reduce",
             tflite_float_builtin="REDUCE_MAX")
REGISTRY.add(FAMILY, "ReduceMin", tflite_island="reduce", tflite_float_builtin="REDUCE_MIN")
