"""The compiled integer-simulation kernels (``_intkernels.c``, loaded with :mod:`ctypes`), with NumPy fallbacks that
compute the same bits (the tests compare both).

* :func:`requant` — accumulators -> integers in any mode of :mod:`qlinear.kernels.requant`, per-channel
  multipliers, clamp, in one pass (NumPy needs ~10 int64 passes for the fixed-point modes);
* :func:`dwconv` — depthwise convolution with exact int64 accumulation.

Work is split over rows on the two cores (ctypes releases the GIL).
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from qlinear._ext import cdll
from qlinear.core.native import cpu_count, parallel_ranges
from qlinear.kernels.requant import MODES, check_accumulator, quantize_multiplier

_i64, _i32, _p = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
#: C mode numbers; "int64_reduced" is TFLite's MultiplyByQuantizedMultiplier for int64 (16x8) accumulators
MODE_CODE = {"fixed_double": 0, "fixed_single": 1, "ruy_x86": 2, "f64_round_away": 3, "f32_rne": 4, "onednn": 5,
             "int64_reduced": 6}
OUT_KIND = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int16): 2, np.dtype(np.uint16): 3}
_MIN_ROWS_PARALLEL = 1 << 15  # elements per call below which one thread is used
_THREADS: int | None = None


def set_threads(n: int | None) -> None:
    """Threads the integer kernels may use (None: all cores, up to 8)."""
    global _THREADS
    _THREADS = None if n is None else max(1, int(n))


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    lib = cdll("qlinear.kernels._intkernels")
    if lib is None:
        return None
    lib.ql_requant.argtypes = [_p, ctypes.c_int, ctypes.c_int, _i64, _i64, _i64, _i64, _p, _p, _p, _p, _p, _i64,
                               ctypes.c_int, _i32, _i32, _i32, _p, ctypes.c_int, _p]
    lib.ql_requant.restype = ctypes.c_int
    lib.ql_dwconv.argtypes = [_p, _i64, _i64, _i64, _i64, _i32, _p, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _i64,
                              _i64, _p, _p, _i64, _i64, _i64, _i64, _p]
    lib.ql_dwconv.restype = None
    return lib


def available() -> bool:
    return _lib() is not None


def _split(fn, rows: int, work: int) -> None:  # noqa: ANN001
    cap = _THREADS if _THREADS is not None else min(cpu_count(), 8)
    threads = cap if work >= _MIN_ROWS_PARALLEL and rows > 1 else 1
    parallel_ranges(fn, rows, threads, 1)


class Multiplier:
    """Per-channel requantization constants of a real multiplier ``m`` (one value or one per channel), for every
    mode: ``QuantizeMultiplier`` (single and double rounding builds) and the float32 / float64 values."""

    def __init__(self, m: np.ndarray) -> None:
        m = np.atleast_1d(np.asarray(m, np.float64))
        self.m64 = np.ascontiguousarray(m)
        self.m32 = np.ascontiguousarray(m.astype(np.float32))
        q, s = quantize_multiplier(m)
        self.q, self.shift = np.ascontiguousarray(q.astype(np.int32)), np.ascontiguousarray(s.astype(np.int32))
        qs, ss = quantize_multiplier(m, single_rounding=True)
        self.q1, self.shift1 = np.ascontiguousarray(qs.astype(np.int32)), np.ascontiguousarray(ss.astype(np.int32))

    @property
    def per_channel(self) -> bool:
        return self.m64.size > 1


def _requant_numpy(acc: np.ndarray, mult: Multiplier, mode: str, zp: int, lo: int, hi: int, channel_axis: int,
                   out_dtype: np.dtype) -> np.ndarray:
    from qlinear.kernels.requant import mbqm_int64, requantize

    if mode == "int64_reduced":
        shape = [1] * acc.ndim
        shape[channel_axis] = mult.q.size
        q, s = (mult.q, mult.shift) if not mult.per_channel else (mult.q.reshape(shape), mult.shift.reshape(shape))
        return np.clip(mbqm_int64(acc, q, s) + zp, lo, hi).astype(out_dtype)
    m = mult.m64 if mult.per_channel else mult.m64[0]
    return requantize(acc, m, zp, mode, qmin=lo, qmax=hi, channel_axis=channel_axis, acc_bits=64).astype(out_dtype)


ACC_KIND = {np.dtype(np.int32): 0, np.dtype(np.int64): 1, np.dtype(np.float32): 2, np.dtype(np.float64): 3}


def requant(acc: np.ndarray, mult: Multiplier, mode: str, zp: int, lo: int, hi: int, out_dtype: np.dtype,
            *, channel_axis: int = 1, acc_bits: int = 32, bias: np.ndarray | None = None) -> np.ndarray:
    """``clamp(requantize(acc + bias) + zp, lo, hi)`` as ``out_dtype``; the channel runs along ``channel_axis`` of
    ``acc`` (any rank; ``bias`` one int64 per channel). ``acc`` holds integers, as int32/int64 or exactly in
    float32/float64 (a BLAS result). Raises :class:`~qlinear.errors.OverflowRiskError` when an accumulator (with its
    bias) does not fit ``int{acc_bits}``."""
    if mode not in MODES and mode != "int64_reduced":
        from qlinear.errors import KernelError

        raise KernelError(f"unknown requantization mode {mode!r}")
    acc = np.asarray(acc)
    out_dtype = np.dtype(out_dtype)
    lib = _lib()
    ax = channel_axis % acc.ndim if acc.ndim else 0
    if lib is None or out_dtype not in OUT_KIND or acc.dtype not in ACC_KIND:
        a = acc.astype(np.int64)
        if bias is not None:
            shape = [1] * a.ndim
            shape[ax] = -1
            a = a + np.asarray(bias, np.int64).reshape(shape)
        check_accumulator(a, acc_bits)
        return _requant_numpy(a, mult, mode, zp, lo, hi, ax, out_dtype)
    a = np.ascontiguousarray(acc)
    outer = int(np.prod(a.shape[:ax], dtype=np.int64))
    c = a.shape[ax] if a.ndim else 1
    inner = int(np.prod(a.shape[ax + 1:], dtype=np.int64))
    if mult.per_channel and mult.m64.size != c:
        from qlinear.errors import KernelError

        raise KernelError(f"{mult.m64.size} multipliers for {c} channels")
    b = None if bias is None else np.ascontiguousarray(np.broadcast_to(np.asarray(bias, np.int64).reshape(-1), (c,)))
    out = np.empty(a.shape, out_dtype)
    q, s = (mult.q1, mult.shift1) if mode == "fixed_single" else (mult.q, mult.shift)
    args = (c, inner, None if b is None else b.ctypes.data, q.ctypes.data, s.ctypes.data, mult.m64.ctypes.data,
            mult.m32.ctypes.data, int(mult.per_channel), MODE_CODE[mode], int(zp), int(lo), int(hi), out.ctypes.data,
            OUT_KIND[out_dtype])
    bad = []

    def run(r0: int, r1: int) -> None:
        tmp = np.empty(max(inner, 1), np.int64)
        if lib.ql_requant(a.ctypes.data, ACC_KIND[a.dtype], acc_bits, r0, r1, *args, tmp.ctypes.data):
            bad.append(r0)

    rows = outer * c
    if rows:
        _split(run, rows, a.size)
    if bad:  # find and name the value (the slow path only runs on failure)
        full = a.astype(np.int64)
        if b is not None:
            shape = [1] * a.ndim
            shape[ax] = -1
            full = full + b.reshape(shape)
        check_accumulator(full, acc_bits)
    return out


def dwconv(x: np.ndarray, zx: int, w_centered: np.ndarray, mult: int, bias: np.ndarray | None,
           stride: tuple[int, int], pads: tuple[int, int, int, int], dilation: tuple[int, int]) -> np.ndarray:
    """int64 accumulators ``[N, C*mult, OH, OW]`` of a depthwise convolution of NCHW integers ``x`` (zero point
    ``zx``) with centered weights ``[C*mult, kh, kw]``; padding taps are skipped."""
    n, c, h, wd = x.shape
    o, kh, kw = w_centered.shape
    t, lft, b, r = pads
    oh = (h + t + b - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd + lft + r - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    lib = _lib()
    if lib is None:
        from qlinear.kernels.linear import conv_accumulate

        wq = w_centered.reshape(o, 1, kh, kw)
        return conv_accumulate(x, wq, bias, zp_x=zx, stride=stride, pads=pads, dilation=dilation, groups=c)
    xr = max(abs(int(x.min(initial=zx)) - zx), abs(int(x.max(initial=zx)) - zx)) if x.size else 0
    if xr * float(np.abs(w_centered).max(initial=0)) * kh * kw >= 2**31:  # int32 plane could overflow
        from qlinear.kernels.linear import conv_accumulate

        return conv_accumulate(x, w_centered.reshape(o, 1, kh, kw), bias, zp_x=zx, stride=stride, pads=pads,
                               dilation=dilation, groups=c)
    xi = np.ascontiguousarray(x, np.int32)
    wi = np.ascontiguousarray(w_centered, np.int32)
    bi = None if bias is None else np.ascontiguousarray(bias, np.int64)
    out = np.empty((n, o, oh, ow), np.int64)

    def run(r0: int, r1: int) -> None:
        plane = np.empty(max(oh * ow, 1), np.int32)
        lib.ql_dwconv(xi.ctypes.data, n, c, h, wd, int(zx), wi.ctypes.data, mult, kh, kw, stride[0], stride[1], t,
                      lft, dilation[0], dilation[1], None if bi is None else bi.ctypes.data, out.ctypes.data, oh, ow,
                      r0, r1, plane.ctypes.data)

    _split(run, n * o, out.size * kh * kw)
    return out


__all__ = ["MODE_CODE", "Multiplier", "available", "dwconv", "requant", "set_threads"]
