"""From a range to an :class:`~qlinear.encodings.Encoding`: dispatch to a named policy
(:mod:`qlinear.calibration.policies`) and shape the result for the granularity."""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.calibration import policies as P
from qlinear.calibration.groups import Grouping
from qlinear.core.granularity import PerAxis, PerTensor
from qlinear.core.types import QType, qtype
from qlinear.encodings.model import Encoding
from qlinear.errors import CalibrationError

POLICIES = ("aimet", "onnxruntime", "tflite", "dynamic")


def _regrid(p: P.Params, t: QType) -> P.Params:
    """The same grid on the requested signedness (AIMET ``force_activation_as``: zp +- 2^(bw-1))."""
    have = qtype(p.dtype)
    if have.name == t.name:
        return p
    if have.bits != t.bits or not t.is_int:
        raise CalibrationError(f"policy produced {have.name}, which cannot be re-expressed as {t.name}")
    shift = 2 ** (t.bits - 1)
    zp = p.zero_point + (shift if have.signed else -shift)
    return P.Params(t.name, p.scale, zp)


def params(lo: np.ndarray, hi: np.ndarray, t: QType, *, symmetric: bool = False, strict: bool = False,
           policy: str = "aimet", **opt: Any) -> P.Params:
    if t.is_float:
        return P.float8(lo, hi, t.name)
    if not t.is_int:
        raise CalibrationError(f"cannot calibrate for {t.name}: not a quantized integer or float8 type")
    if policy == "aimet":
        p = P.aimet(lo, hi, t.bits, symmetric=symmetric, strict=strict,
                    unsigned_symmetric=opt.pop("unsigned_symmetric", False))
    elif policy == "onnxruntime":
        lo32 = np.asarray(lo, np.float32)
        hi32 = np.asarray(hi, np.float32)
        p = P.onnxruntime(lo32, hi32, t.name, symmetric=symmetric, reduce_range=opt.pop("reduce_range", False),
                          min_real_range=opt.pop("min_real_range", None))
        return p
    elif policy == "dynamic":
        # DynamicQuantizeLinear / oneDNN dynamic quantization: uint8, float32 arithmetic (core.dynamic)
        from qlinear.core.dynamic import dynamic_params

        if t.name != "uint8" or symmetric:
            raise CalibrationError("the dynamic policy (DynamicQuantizeLinear) is asymmetric uint8 only")
        lo_f, hi_f = np.asarray(lo, np.float64).reshape(-1), np.asarray(hi, np.float64).reshape(-1)
        sz = [dynamic_params(a, b) for a, b in zip(lo_f, hi_f)]
        if any(float(s) == 0.0 for s, _ in sz):
            raise CalibrationError("the DynamicQuantizeLinear scale (max - min) / 255 underflows to 0 in float32 for "
                                   "this range (subnormal data); an encoding needs a scale > 0")
        shape = np.shape(lo)
        return P.Params("uint8", np.array([float(s) for s, _ in sz]).reshape(shape),
                        np.array([int(z) for _, z in sz], np.int64).reshape(shape))
    elif policy == "tflite":
        if symmetric:
            p = P.tflite_weight(lo, hi, bits=t.bits)
        else:
            p = P.tflite_activation(lo, hi, bits=t.bits, narrow_range=opt.pop("narrow_range", False),
                                    mlir=opt.pop("mlir", True))
    else:
        raise CalibrationError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    if opt:
        raise CalibrationError(f"unknown options for policy {policy!r}: {', '.join(sorted(opt))}")
    return _regrid(p, t)


def to_encoding(lo: np.ndarray, hi: np.ndarray, t: QType, *, symmetric: bool = False, strict: bool = False,
                policy: str = "aimet", grouping: Grouping | None = None, name: str = "tensor",
                role: str = "activation", lpbq_scale_bits: int | None = None, **opt: Any) -> Encoding:
    grouping = grouping or Grouping()
    p = params(lo, hi, t, symmetric=symmetric, strict=strict, policy=policy, **opt)
    scale = np.asarray(p.scale, np.float64)
    zp = None if p.zero_point is None else np.asarray(p.zero_point)
    if isinstance(grouping.granularity, PerTensor):
        return Encoding(name, p.dtype, scale=scale.reshape(()), zero_point=None if zp is None else zp.reshape(()),
                        role=role)
    if isinstance(grouping.granularity, PerAxis):
        return Encoding(name, p.dtype, scale=scale.reshape(-1), zero_point=None if zp is None else zp.reshape(-1),
                        axis=grouping.axis, role=role)
    b = grouping.block_axis % scale.ndim
    if lpbq_scale_bits:
        if not symmetric or not qtype(p.dtype).signed:
            raise CalibrationError(f"{name}: LPBQ is symmetric only (pass symmetric=True)")
        pc, ints = P.lpbq(scale, b, scale_bits=lpbq_scale_bits)
        return Encoding(name, p.dtype, scale=pc, int_scale=ints, axis=b, block_size=grouping.block_size, role=role,
                        decompressed_bits=qtype(p.dtype).bits + lpbq_scale_bits)
    return Encoding(name, p.dtype, scale=scale, zero_point=zp, axis=b, block_size=grouping.block_size, role=role)
