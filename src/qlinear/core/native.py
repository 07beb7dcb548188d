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
    return lib


#: signatures of further kernels (calibration reductions), filled by their modules
_EXTRA_SIGNATURES: dict[str, tuple[list, object]] = {
    "ql_minmax_f32": ([_ptr, _i64, _i64, _i64, _ptr, _ptr], ctypes.c_int),
    "ql_hist_groups_f32": ([_ptr, _i64, _i64, _ptr, _i64, _ptr], ctypes.c_int),
}


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


def parallel_ranges(fn, n: int, threads: int, align: int = 1) -> None:
    """Call ``fn(e0, e1)`` over [0, n) split into ``threads`` ranges whose starts are multiples of ``align``."""
    if threads <= 1 or n < 2 * align:
        fn(0, n)
        return
    step = -(-n // threads)
    step = -(-step // align) * align
    bounds = [(a, min(a + step, n)) for a in range(0, n, step)]
    if len(bounds) == 1:
        fn(0, n)
        return
    list(_pool(threads).map(lambda b: fn(*b), bounds))


def addr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


__all__ = ["available", "check_threads", "lib", "parallel_ranges", "resolve_threads", "cpu_count", "addr"]
