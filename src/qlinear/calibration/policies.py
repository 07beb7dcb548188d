"""Range -> (scale, zero point): the rules of AIMET, ONNX Runtime and the TFLite converter, reproduced exactly.

All functions are vectorised over any number of ranges (per-channel, per-block) and return float64 scales and
int64 zero points in the ONNX convention (``q = clamp(round(x/scale) + zero_point)`` on the type's own grid), plus
the quantized type name.

* :func:`aimet` — ``getComputedEncodings`` of AIMET 2.42 (notes ``aimet.md`` §2.2): ``N = 2^bw - 1`` (strict
  symmetric ``N - 1``); symmetric ``delta = max(max/floor(N/2) [+1 for int2], -min/ceil(N/2))``, offset
  ``-ceil(N/2)``; asymmetric ``delta = (max - min)/N``, offset ``clamp(round(min/delta), -N, 0)`` (ties away from
  zero, C++ ``round``); the 2.42 scale floor ``delta >= min(fp32 eps, 0.01/N)``; finite clamps; unsigned
  symmetric = asymmetric grid on non-negative data.
* :func:`onnxruntime` — ``quant_utils.compute_scale_zp`` of ORT 1.32 (notes ``onnx-ort.md`` §5.2), with
  ``get_qmin_qmax_for_qType`` (symmetric int8 [-127, 127], ``reduce_range`` 7-bit weights).
* :func:`tflite` — the converter (notes ``int8-kernels.md`` §3): activations asymmetric with the zero point
  nudged (``zp = round(qmin - rmin/scale)`` ties away, clamped; MLIR's choice between the min- and max-based zero
  point), weights symmetric narrow range ``absmax/127`` in [-127, 127], bias int32 at ``s_in * s_w``.
* :func:`float8` — ``scale = max(amax / max_representable, FLT_MIN)`` (AIMET ``_create_float_encoding_from_min_max``).
* :func:`lpbq` — per-channel float scale ``max_b(s)/2^sbits`` and per-block integer scales
  ``clip(round(s/pcfs), 1, 2^sbits)`` (AIMET ``lpbq_utils``, notes §2.9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qlinear.core.types import int_type, qtype
from qlinear.errors import CalibrationError, DTypeError, UnsupportedError

FLT_MAX = float(np.finfo(np.float32).max)
FLT_EPS = float(np.finfo(np.float32).eps)
FLT_MIN = float(np.finfo(np.float32).tiny)


@dataclass(frozen=True)
class Params:
    """Quantization parameters computed by a policy (arrays of the range's shape)."""

    dtype: str
    scale: np.ndarray
    zero_point: np.ndarray | None


def _round_away(v: np.ndarray) -> np.ndarray:
    """C ``round``: half away from zero."""
    return np.copysign(np.floor(np.abs(v) + 0.5), v)


def _int_name(bits: int, signed: bool) -> str:
    try:
        return int_type(bits, signed).name
    except DTypeError:
        raise UnsupportedError(f"{bits}-bit {'signed' if signed else 'unsigned'} integers are not an ONNX type "
                               "(supported widths: 2, 4, 8, 16, and 32 signed)") from None


def aimet(lo: np.ndarray, hi: np.ndarray, bits: int, *, symmetric: bool = False, strict: bool = False,
          unsigned_symmetric: bool = False) -> Params:
    """AIMET 2.42 ``getComputedEncodings`` (see module docstring), vectorised."""
    if not 2 <= bits <= 32:
        raise CalibrationError(f"AIMET bit widths are 2..32, got {bits}")
    lo = np.asarray(lo, np.float64)
    hi = np.asarray(hi, np.float64)
    n = 2.0 ** bits - 1
    if symmetric and strict:
        n -= 1
    lo = np.clip(np.nan_to_num(lo, nan=0.0), -0.99 * FLT_MAX, 0.0)
    hi = np.clip(np.nan_to_num(hi, nan=0.0), 0.0, 0.99 * FLT_MAX)
    floor = min(FLT_EPS, 0.01 / n)
    use_sym = np.full(lo.shape, bool(symmetric))
    if symmetric and unsigned_symmetric:
        use_sym &= ~(lo >= 0)
    if symmetric and unsigned_symmetric and not np.all(use_sym == use_sym.flat[0]):
        raise CalibrationError("unsigned symmetric gives a signed grid for some channels and an unsigned grid for "
                               "others; calibrate them separately")
    sym = bool(use_sym.flat[0]) if use_sym.size else bool(symmetric)
    if sym:
        p = np.floor(n / 2)
        nn = n - p
        extra = 1.0 if n == 3 else 0.0
        delta = np.maximum(hi / (p + extra), -lo / nn)
        delta = np.maximum(delta, floor)
        offset = np.full(lo.shape, -nn)
    else:
        delta = np.maximum((hi - lo) / n, floor)
        offset = np.clip(_round_away(lo / delta), -n, 0.0)
    neg = offset < 0
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = np.where(neg, np.minimum(delta, 0.99 * -FLT_MAX / np.where(neg, offset, -1.0)), delta)
        top = offset + n
        delta = np.where(top > 0, np.minimum(delta, 0.99 * FLT_MAX / np.where(top > 0, top, 1.0)), delta)
    if sym:
        # signed grid: offset_signed = offset + 2^(bw-1); strict symmetric keeps zero point 0 on [-(2^(b-1)-1), ..]
        dtype = _int_name(bits, True)
        zp = np.zeros(lo.shape, np.int64)
    else:
        dtype = _int_name(bits, False)
        zp = (-offset).astype(np.int64)
    return Params(dtype, delta, zp)


def aimet_min_max(p: Params, bits: int, *, strict: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """AIMET's grid-exact (min, max) of an encoding: ``delta*offset``, ``delta*(offset + N)`` (unsigned grid)."""
    t = qtype(p.dtype)
    n = 2.0 ** bits - 1 - (1 if strict and t.signed else 0)
    off = -p.zero_point.astype(np.float64) - (2.0 ** (bits - 1) if t.signed else 0)
    if strict and t.signed:
        off = off + 1
    return p.scale * off, p.scale * (off + n)


def ort_qmin_qmax(dtype: str, *, symmetric: bool = False, reduce_range: bool = False) -> tuple[int, int]:
    """``get_qmin_qmax_for_qType`` of ORT 1.32."""
    if reduce_range:
        table = {"uint8": (0, 127), "int8": (-64, 64), "uint16": (0, 32767), "int16": (-16384, 16384),
                 "uint4": (0, 7), "int4": (-4, 3)}
    elif symmetric:
        table = {"int8": (-127, 127), "int16": (-32767, 32767)}
    else:
        table = {}
    if dtype in table:
        return table[dtype]
    t = qtype(dtype)
    if not t.is_int or t.name in ("int32",):
        raise UnsupportedError(f"ONNX Runtime's compute_scale_zp has no integer range for {dtype}")
    return int(t.qmin), int(t.qmax)


def onnxruntime(lo: np.ndarray, hi: np.ndarray, dtype: str, *, symmetric: bool = False, reduce_range: bool = False,
                min_real_range: float | None = None) -> Params:
    """``onnxruntime.quantization.quant_utils.compute_scale_zp`` (1.32), vectorised; float32 ranges as ORT gets
    them from its calibrators."""
    qmin, qmax = ort_qmin_qmax(dtype, symmetric=symmetric, reduce_range=reduce_range)
    rdtype = np.asarray(lo).dtype if np.asarray(lo).dtype.kind == "f" else np.dtype(np.float32)
    lo = np.minimum(np.asarray(lo, rdtype), rdtype.type(0))
    hi = np.maximum(np.asarray(hi, rdtype), rdtype.type(0))
    if min_real_range is not None:
        hi = np.maximum(hi, lo + rdtype.type(min_real_range))
    if symmetric:
        absmax = np.maximum(np.abs(lo), np.abs(hi))
        lo, hi = -absmax, absmax
    scale = (hi.astype(np.float64) - lo.astype(np.float64)) / (np.float64(qmax) - np.float64(qmin))
    tiny = scale < np.finfo(rdtype).tiny
    if symmetric:
        zp = np.full(scale.shape, np.round((qmin + qmax) / np.float64(2.0)))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            zp = np.round(qmin - lo.astype(np.float64) / scale)
    zp = np.where(tiny, 0, zp).astype(np.int64)
    scale = np.where(tiny, 1.0, scale).astype(rdtype).astype(np.float64)
    return Params(dtype, scale, zp)


def tflite_activation(lo: np.ndarray, hi: np.ndarray, *, bits: int = 8, narrow_range: bool = False,
                      mlir: bool = True) -> Params:
    """Asymmetric activations (MLIR ``fakeQuantAttrsToType``; ``mlir=False``: the legacy tool, zero point from the
    minimum only, in float32)."""
    qmin, qmax = (-(2 ** (bits - 1)) + (1 if narrow_range else 0), 2 ** (bits - 1) - 1)
    ft = np.float64 if mlir else np.float32
    lo = np.minimum(np.asarray(lo, ft), 0)
    hi = np.maximum(np.asarray(hi, ft), 0)
    if mlir:
        small = (hi - lo) <= 1e-6
        lo = np.where(small, np.minimum(lo, -5e-7), lo)
        hi = np.where(small, np.maximum(hi, 5e-7), hi)
    scale = (hi - lo) / ft(qmax - qmin)
    zmin = ft(qmin) - lo / scale
    if mlir:
        zmax = ft(qmax) - hi / scale
        use_min = (abs(qmin) + np.abs(lo / scale)) < (abs(qmax) + np.abs(hi / scale))
        zreal = np.where(use_min, zmin, zmax)
    else:
        zreal = zmin
    zp = np.where(zreal < qmin, qmin, np.where(zreal > qmax, qmax, _round_away(zreal))).astype(np.int64)
    return Params(_int_name(bits, True), scale.astype(np.float32).astype(np.float64), zp)


def tflite_weight(lo: np.ndarray, hi: np.ndarray, *, bits: int = 8) -> Params:
    """Symmetric narrow-range weights: ``scale = absmax / (2^(b-1) - 1)`` (float32), zero point 0; values are then
    clamped to [-127, 127] (``SymmetricPerChannelQuantizeValues``). A channel whose range ``2 absmax`` is at most
    1e-6 (all zero, or dead: trained weights decayed to subnormals) takes the range [-5e-7, 5e-7], as the MLIR
    converter's ``ExpandVerySmallRange`` gives every weight (``GetQuantizedType``): ``scale = 1e-6/254``, not a
    subnormal whose int32 bias scale ``s_in s_w`` would underflow to 0."""
    absmax = np.maximum(np.abs(np.asarray(lo, np.float32)), np.abs(np.asarray(hi, np.float32)))
    absmax = np.where(2 * absmax.astype(np.float64) <= 1e-6, np.float32(5e-7), absmax)
    scale = (absmax / np.float32(2 ** (bits - 1) - 1)).astype(np.float32)
    return Params(_int_name(bits, True), scale.astype(np.float64), np.zeros(scale.shape, np.int64))


def bias_scale(input_scale: np.ndarray, weight_scale: np.ndarray) -> np.ndarray:
    """int32 bias scale ``s_in * s_w`` (per channel when the weight is), as a float64 product (MLIR
    ``GetUniformQuantizedTypeForBias``, ORT, AIMET analytic bias)."""
    return np.asarray(input_scale, np.float64) * np.asarray(weight_scale, np.float64)


def float8(lo: np.ndarray, hi: np.ndarray, dtype: str = "float8e4m3fn") -> Params:
    """``scale = max(amax / max_representable, FLT_MIN)`` (AIMET, notes §2.3); no zero point."""
    t = qtype(dtype)
    if not t.is_float:
        raise CalibrationError(f"{dtype} is not a float8/float4 type")
    amax = np.maximum(np.abs(np.asarray(lo, np.float64)), np.abs(np.asarray(hi, np.float64)))
    return Params(t.name, np.maximum(amax / float(t.qmax), FLT_MIN), None)


def lpbq(block_scale: np.ndarray, block_axis: int, *, scale_bits: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """LPBQ decomposition of per-block symmetric scales (AIMET ``lpbq_utils``, notes §2.9): returns the keepdims
    per-channel float scale ``max over blocks / 2^sbits`` and the per-block integer scales in ``[1, 2^sbits]``.
    The channel axis is the other one of the first two (``[K, N]``/``[N, K]`` matrices, ``[O, I, kh, kw]`` Conv
    weights): a 4-D weight's float scale has one value per output channel, its spatial positions are blocks too."""
    s = np.asarray(block_scale, np.float64)
    b = block_axis % max(s.ndim, 1)
    keep = (1 if b == 0 else 0) if s.ndim >= 2 else None
    pc = s.max(axis=tuple(a for a in range(s.ndim) if a != keep), keepdims=True) / 2.0 ** scale_bits
    ints = np.clip(np.round(s / pc), 1, 2 ** scale_bits).astype(np.int64)
    return pc, ints
