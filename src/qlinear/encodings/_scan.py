"""Reading large encodings files: the number arrays lifted out of the JSON text before it is parsed.

An encodings file of a large model is millions of numbers in nested lists. Parsed as JSON, each number becomes a
Python float and each row a list, then NumPy converts them back, and the collector frees them: most of the time
goes there. ``ql_json_extract`` (``_jsonfast.c``) copies the text into a *skeleton* in which every rectangular
array of numbers is replaced by the string ``"\\u0000<k>"``, and writes the numbers of all arrays into one float64
buffer (``strtod`` in the C locale: correctly rounded, the same doubles as ``float()``). The skeleton is small and
parses quickly; :class:`Arrays` serves array ``k`` as a read-only view and has, per array, what the readers check
(all finite and > 0, all integers, minimum, maximum), each computed for all arrays in one vectorised pass.

Files the scanner does not take whole (a BOM, a ``\\u0000`` of their own, no compiled helper) are parsed as they are.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from qlinear.encodings import _json

_BOM = b"\xef\xbb\xbf"


class Arrays:
    """The arrays lifted out of a document: array ``k`` is ``floats(k)`` (read-only float64 view of ``nums``);
    ``positive[k]`` (all finite and > 0), ``integral[k]`` (all integers), ``lo[k]``, ``hi[k]`` are Python lists."""

    def __init__(self, nums: np.ndarray, table: np.ndarray) -> None:
        nums.setflags(write=False)
        self.nums = nums
        self.count = len(table)
        self.used = 0
        self.positive: list[bool] = []
        self.integral: list[bool] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self._views: list[np.ndarray] = []
        self._ints: list[np.ndarray] | None = None
        if not self.count:
            return
        start = table[:, 0]
        bad = ~(np.isfinite(nums) & (nums > 0))
        frac = ~np.isfinite(nums) | (nums != np.floor(nums))
        self.positive = (np.add.reduceat(bad, start) == 0).tolist()
        self.integral = (np.add.reduceat(frac, start) == 0).tolist()
        self.lo = np.minimum.reduceat(nums, start).tolist()
        self.hi = np.maximum.reduceat(nums, start).tolist()
        self._table = table
        self._views = self._slice(nums, table)

    @staticmethod
    def _slice(buf: np.ndarray, table: np.ndarray) -> list[np.ndarray]:
        """Views of every array: arrays lie back to back, so each run of equally shaped arrays is one reshape."""
        dims = table[:, 1:2 + int(table[:, 1].max())]
        cut = np.flatnonzero((dims[1:] != dims[:-1]).any(axis=1)) + 1
        views: list[np.ndarray] = []
        for a, b in zip([0, *cut.tolist()], [*cut.tolist(), len(table)]):
            ndim = int(dims[a, 0])
            shape = tuple(int(x) for x in dims[a, 1:1 + ndim])
            s0, size = int(table[a, 0]), math.prod(shape)
            views.extend(buf[s0:s0 + (b - a) * size].reshape((b - a, *shape)))
        return views

    @staticmethod
    def index(v: Any) -> int | None:
        """``k`` when ``v`` is the placeholder of array ``k``."""
        if type(v) is str and v[:1] == "\x00":
            return int(v[1:])
        return None

    def floats(self, k: int) -> np.ndarray:
        """Array ``k`` (read-only float64 view)."""
        self.used += 1
        return self._views[k]

    def ints(self, k: int) -> np.ndarray:
        """Array ``k`` as int64 (read-only view); only for arrays of integers inside the int64 range."""
        if self._ints is None:
            ints = np.zeros(len(self.nums), np.int64)
            ok = np.isfinite(self.nums) & (np.abs(self.nums) < 2.0 ** 62)
            ints[ok] = self.nums[ok].astype(np.int64)
            ints.setflags(write=False)
            self._ints = self._slice(ints, self._table)
        self.used += 1
        return self._ints[k]


def extract(data: bytes) -> tuple[bytes, Arrays] | None:
    """The skeleton of ``data`` and its lifted arrays, or None (parse ``data`` as it is)."""
    lib = _json._clib()
    if lib is None or data.startswith(_BOM) or b"\\u0000" in data:
        return None
    brackets = data.count(b"[")
    if not brackets:
        return None
    n = len(data)
    skel_cap = n + 24 * brackets
    nums_cap = n // 2 + 1  # a number and its separator take two bytes at least (pages never touched cost nothing)
    skel = np.empty(skel_cap, np.uint8)
    nums = np.empty(nums_cap, np.float64)
    table = np.empty((brackets, 10), np.int64)
    out = (ctypes.c_int64 * 3)()
    rc = lib.ql_json_extract(data, n, skel.ctypes.data, skel_cap, ctypes.byref(out, 0), nums.ctypes.data, nums_cap,
                             ctypes.byref(out, 8), table.ctypes.data, brackets, ctypes.byref(out, 16))
    if rc != 0:
        return None
    skel_len, n_nums, n_arrays = out[0], out[1], out[2]
    return skel[:skel_len].tobytes(), Arrays(nums[:n_nums], table[:n_arrays])
