"""Loader and thread driver for the compiled kernels in ``_native.c``.

The C library is built by ``pip install`` as the extension file ``qlinear/core/_native*.so`` and
loaded here with :mod:`ctypes` (no NumPy C API, no import-time cost until first use). ctypes releases
the GIL during a call, so disjoint element ranges run in parallel on Python threads.

Why this design (issue 3 closing note has the measurements): a NumPy expression
``clip(rint(x / s) + zp)`` makes four passes over memory and four temporaries; at 2^26 elements it
reaches ~0.7 GB/s against ONNX Runtime's 8 GB/s. A fused loop makes one pass (read x, write y) and
runs at memory bandwidth; threads add the second core's bandwidth.

If the extension was not built, :func:`available` is False and callers use the NumPy path, which
computes identical bits.

SIMD (issue 24): the kernel holds a baseline entry (plain C for any x86-64), an AVX2+FMA entry and an
AVX-512 (F/BW/DQ/VL) entry with the same arithmetic in the same order, so every entry gives the same bits.
The CPU picks the entry once; the environment variable ``QLINEAR_SIMD`` (``auto``, ``avx512``, ``avx2``,
``scalar``) or :func:`set_simd` forces a lower one (tests run every entry the machine has).
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from qlinear._ext import cdll

_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p

#: below this many elements one thread is used (thread start-up would dominate)
PARALLEL_MIN = 1 << 18
#: outputs of at least this many bytes are written with non-temporal (streaming) stores
STREAM_MIN_BYTES = 1 << 23


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    lib = cdll("qlinear.core._native")
    if lib is None:
        return None
    common = [_i64, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _i64]
    lib.ql_quantize_f32.argtypes = [_ptr, _ptr, ctypes.c_int, _ptr, _ptr] + common + [ctypes.c_float, ctypes.c_float]
    lib.ql_quantize_f32.restype = ctypes.c_int
    lib.ql_dequantize_f32.argtypes = [_ptr, ctypes.c_int, _ptr, _ptr, _ptr] + common + [ctypes.c_int]
    lib.ql_dequantize_f32.restype = ctypes.c_int
    for name, args in _EXTRA_SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes, fn.restype = args
    lib.ql_simd_set(SIMD_LEVELS[_simd_from_env(lib)])
    return lib


#: kernel entries, lowest first (the C side numbers them 0, 1, 2)
SIMD_LEVELS = {"scalar": 0, "avx2": 1, "avx512": 2}
SIMD_ENV = "QLINEAR_SIMD"


def _simd_from_env(lib_: ctypes.CDLL) -> str:
    """The entry named by ``QLINEAR_SIMD`` (default ``auto``: the best the CPU has); refused if unknown or unsupported."""
    value = os.environ.get(SIMD_ENV, "auto").strip().lower() or "auto"
    best = _name_of(lib_.ql_simd_supported())
    if value == "auto":
        return best
    _check_simd(value, best, f"environment variable {SIMD_ENV}={value!r}")
    return value


def _name_of(level: int) -> str:
    return next(k for k, v in SIMD_LEVELS.items() if v == level)


def _check_simd(name: object, best: str, what: str) -> None:
    from qlinear.errors import ConfigError

    if name not in SIMD_LEVELS:
        raise ConfigError(f"{what}: unknown SIMD path; use one of auto, {', '.join(SIMD_LEVELS)}")
    if SIMD_LEVELS[name] > SIMD_LEVELS[best]:
        raise ConfigError(f"{what}: this CPU supports at most {best!r}; use {best!r} or lower (or auto)")


#: signatures of further kernels (calibration reductions), filled by their modules
_EXTRA_SIGNATURES: dict[str, tuple[list, object]] = {
    "ql_hist_groups_f32": ([_ptr, _i64, _i64, _ptr, _i64, _ptr], ctypes.c_int),
    "ql_simd_supported": ([], ctypes.c_int),
    "ql_simd_get": ([], ctypes.c_int),
    "ql_simd_set": ([ctypes.c_int], ctypes.c_int),
    "ql_set_quantize_stream_min": ([_i64], _i64),
}


def simd_supported() -> str:
    """The best kernel entry this CPU runs: ``"avx512"``, ``"avx2"`` or ``"scalar"`` (``"none"`` without the kernel)."""
    lib_ = _lib()
    return "none" if lib_ is None else _name_of(lib_.ql_simd_supported())


def simd() -> str:
    """The kernel entry in use: ``"avx512"``, ``"avx2"`` or ``"scalar"`` (``"none"`` without the kernel)."""
    lib_ = _lib()
    return "none" if lib_ is None else _name_of(lib_.ql_simd_get())


def set_simd(name: str) -> str:
    """Use kernel entry ``name`` (``"auto"`` = the best the CPU has) from now on, in every thread; returns the previous
    one. Raises ConfigError for an unknown name or one this CPU cannot run."""
    prev = simd()
    best = simd_supported()
    target = best if name == "auto" else name
    _check_simd(target, best, f"set_simd({name!r})")
    lib().ql_simd_set(SIMD_LEVELS[target])
    return prev


def set_quantize_stream_min(nbytes: int) -> int:
    """Quantize writes its output with non-temporal stores when one thread's range has >= ``nbytes`` output bytes
    (AVX2/AVX-512 entries); returns the previous threshold (tests lower it to reach that code on small arrays)."""
    return int(lib().ql_set_quantize_stream_min(int(nbytes)))


def available() -> bool:
    """True when the compiled kernel is installed and loadable."""
    return _lib() is not None


def lib() -> ctypes.CDLL:
    lib_ = _lib()
    assert lib_ is not None, "compiled kernel not available"
    return lib_


def cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@lru_cache(maxsize=8)
def _pool(n: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=n, thread_name_prefix="qlinear")


def check_threads(threads: object) -> None:
    """``threads`` must be None (automatic) or an int >= 1."""
    if threads is not None and (not isinstance(threads, (int, np.integer)) or isinstance(threads, bool)
                                or threads < 1):
        from qlinear.errors import ConfigError

        raise ConfigError(f"threads must be an int >= 1 (or None for automatic), got {threads!r}")


def resolve_threads(threads: int | None, n: int) -> int:
    """Threads to use for ``n`` elements: the explicit value, or all cores for large inputs."""
    check_threads(threads)
    if threads is None:
        return 1 if n < PARALLEL_MIN else min(cpu_count(), 8)
    return int(threads)


#: large inputs are split into this many pieces per thread (each of at least PIECE_MIN elements), handed out as
#: threads become free: a thread slowed down by another process no longer holds the whole call back
PIECES_PER_THREAD = 4
PIECE_MIN = 1 << 20


def parallel_ranges(fn, n: int, threads: int, align: int = 1) -> None:
    """Call ``fn(e0, e1)`` over [0, n) split into ``threads`` ranges whose starts are multiples of ``align`` (into
    ``PIECES_PER_THREAD`` times as many when every piece still has ``PIECE_MIN`` elements), on ``threads`` threads."""
    if threads <= 1 or n < 2 * align:
        fn(0, n)
        return
    pieces = threads * PIECES_PER_THREAD if n >= threads * PIECES_PER_THREAD * PIECE_MIN else threads
    step = -(-n // pieces)
    step = -(-step // align) * align
    bounds = [(a, min(a + step, n)) for a in range(0, n, step)]
    if len(bounds) == 1:
        fn(0, n)
        return
    list(_pool(threads).map(lambda b: fn(*b), bounds))


def addr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


__all__ = ["available", "check_threads", "lib", "parallel_ranges", "resolve_threads", "cpu_count", "addr", "simd",
           "simd_supported", "set_simd", "set_quantize_stream_min", "SIMD_LEVELS", "SIMD_ENV"]
