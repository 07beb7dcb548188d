"""Runtime profiles of :func:`qlinear.kernels.run_integer`: which requantization formula each operator family uses
(the table in :mod:`qlinear.kernels.run`)."""

from __future__ import annotations

from dataclasses import dataclass

from qlinear.errors import KernelError
from qlinear.kernels.requant import FIXED_MODES, MODES


@dataclass(frozen=True)
class Profile:
    """Which formula each operator family uses (see the module docstring)."""

    name: str
    conv: str                 # requantization mode of Conv / depthwise
    fc: str                   # requantization mode of Gemm / MatMul (FULLY_CONNECTED)
    elementwise: str          # mode of Add/Sub/Mul/Mean/pool/requantize kernels (fixed modes: TFLite reference)
    quantize: str = "onnx"    # graph-input QuantizeLinear: "onnx" (true division, ties even) or "tflite"
    clamp: str = "away"       # rounding of fused-activation bounds: "away" (TFLite) or "even"
    mean: str = ""            # Mean / GlobalAveragePool formula (default: ``elementwise``; "xnnpack")
    add: str = ""             # Add / Sub formula (default: ``elementwise``; "xnnpack")
    softmax: str = "table"    # 8-bit Softmax: "table" (TFLite's optimized float table), "reference" (TFLite's
    #                           gemmlowp reference kernel) or "ort" (ONNX Runtime's QLinearSoftmax)
    fused_bits: int = 0       # only operators whose integer inputs (int32 biases aside) and output all have this
    #                           width run as integer kernels; the others run as the runtime runs them unfused: in
    #                           float between their DequantizeLinear and QuantizeLinear (0: every width)

    @property
    def mean_mode(self) -> str:
        return self.mean or self.elementwise

    @property
    def add_mode(self) -> str:
        return self.add or self.elementwise


def _uniform(mode: str) -> Profile:
    return Profile(mode, mode, mode, mode, "onnx", "away" if mode in FIXED_MODES else "even")


PROFILES: dict[str, Profile] = {m: _uniform(m) for m in MODES}
PROFILES["litert_ref"] = Profile("litert_ref", "fixed_double", "f64_round_away", "fixed_double", "tflite", "away",
                                 softmax="reference")
PROFILES["litert_xnnpack"] = Profile("litert_xnnpack", "f32_rne", "f32_rne", "f32_rne", "onnx", "away", "xnnpack",
                                     "xnnpack")
PROFILES["ort"] = Profile("ort", "f32_rne", "f32_rne", "f32_rne", "onnx", "even")
PROFILES["ort_fused"] = Profile("ort_fused", "f32_rne", "f32_rne", "f32_rne", "onnx", "even", "float", "mlas",
                                softmax="ort", fused_bits=8)  # the CPU provider fuses 8-bit Q/DQ patterns only


def profile(mode: str) -> Profile:
    if mode not in PROFILES:
        raise KernelError(f"unknown mode {mode!r}; expected one of {', '.join(PROFILES)}")
    return PROFILES[mode]


__all__ = ["PROFILES", "Profile", "profile"]
