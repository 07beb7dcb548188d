"""Activations.

* Clamps (Relu, Clip): fused into the operator before them by the runtimes — no quantizer in between; TFLite's fused
  activations RELU, RELU6, RELU_N1_TO_1. Alone they requantize and clamp.
* LeakyRelu is no clamp: no runtime fuses it into a Conv's integer kernel (ONNX Runtime's QLinearConv, TFLite's
  CONV_2D), so the tensor before it is quantized and it runs alone (LEAKY_RELU, ONNX Runtime's QLinearLeakyRelu).
  With no quantizer in between, ONNX Runtime ran the Conv in float: openwakeword's speech embedding took 0.98 ms per
  window against 0.47 ms in float and 0.38 ms with it.
* Fixed-output functions: TFLite requires Softmax/Logistic outputs at ``1/256, -128``, Tanh at ``1/128, 0``
  (LogSoftmax ``16/256, 127``), and with 16-bit activations (16x8) ``1/32768, 0`` (``GetFixedOutputRange``).
* Smooth functions (Gelu and its Erf/Tanh forms, SiLU/SwiGLU's Sigmoid, ...) mark the heavy-tailed inputs of
  transformer MLP MatMuls.
"""

from __future__ import annotations

from qlinear.graph.ops.spec import REGISTRY

FAMILY = "activation"
_CLAMP = ("fusable_activation", "qdq_fused_activation")
_RELUS = ("RELU", "RELU6", "RELU_N1_TO_1")
_FIXED8 = (1 / 256, -128)
_FIXED16 = (1 / 32768, 0)

REGISTRY.add(FAMILY, "Relu", _CLAMP, tflite_builtins=_RELUS, tflite_writer="clamp", kernel="clamp",
             tflite_island="unary", tflite_float_builtin="RELU")
REGISTRY.add(FAMILY, "Clip", _CLAMP, tflite_builtins=_RELUS, tflite_writer="clamp", kernel="clamp",
             tflite_island="clip")
REGISTRY.add(FAMILY, "LeakyRelu", tflite_builtins=("LEAKY_RELU",), tflite_writer="unary", kernel="activation")
# a learned slope per channel (MTCNN, keras2onnx): a TFLite float island (PRELU)
REGISTRY.add(FAMILY, "PRelu", tflite_island="prelu")
REGISTRY.add(FAMILY, "Softmax", ("mlp_boundary",), fixed_tflite=_FIXED8, fixed_tflite16=_FIXED16,
             output_range=(0.0, 1.0), tflite_builtins=("SOFTMAX",), tflite_writer="softmax", kernel="activation")
REGISTRY.add(FAMILY, "Sigmoid", ("smooth_activation",), fixed_tflite=_FIXED8, fixed_tflite16=_FIXED16,
             output_range=(0.0, 1.0),
             tflite_builtins=("LOGISTIC",), tflite_writer="unary", kernel="activation", tflite_island="unary",
             tflite_float_builtin="LOGISTIC")
REGISTRY.add(FAMILY, "Tanh", ("smooth_activation", "float_on_ort"), fixed_tflite=(1 / 128, 0), fixed_tflite16=_FIXED16,
             output_range=(-1.0, 1.0),
             tflite_builtins=("TANH",), tflite_writer="unary", kernel="activation", tflite_island="unary",
             tflite_float_builtin="TANH")
REGISTRY.add(FAMILY, "LogSoftmax", fixed_tflite=(16 / 256, 127))
REGISTRY.add(FAMILY, "HardSwish", tflite_builtins=("HARD_SWISH",), tflite_writer="unary", kernel="activation",
             tflite_island="unary",
             tflite_float_builtin="HARD_SWISH")
REGISTRY.add(FAMILY, ("Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Softplus"), ("smooth_activation", "float_on_ort"))
REGISTRY.add(FAMILY, "Erf", ("smooth_activation", "float_on_ort"), tflite_island="erf")   # GELU as torch exports it: x * (1 + erf)
# HardSigmoid = clip(alpha * x + beta, 0, 1): no TFLite builtin, a float island of MUL, ADD, MINIMUM, MAXIMUM
REGISTRY.add(FAMILY, "HardSigmoid", ("smooth_activation", "float_on_ort"), tflite_island="hard_sigmoid", output_range=(0.0, 1.0))
