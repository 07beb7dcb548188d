"""Integers kept until the model is written (GPTQ's: they cannot be redone from the weight and the scales as round
to nearest's are): packed, integers of 4 bits or less two to a byte, and held in a :class:`KeptStore`, one
temporary file per run, instead of memory. The run's memory then holds none of the model's integers (an eighth of
the float weights at 4 bits: 4 GB for an 8B model); each weight's are read back when the file is written.

:func:`kept` returns the function the writer calls (:attr:`qlinear.ptq.weightonly.writer.WeightResult.integers`);
it returns the integers exactly as given (type, shape, values).
"""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Callable

import numpy as np

from qlinear.errors import OutputError


class KeptStore:
    """An append-only temporary file of byte strings (created on first use in ``folder``, default the system's
    temporary folder; unnamed, gone when the store is dropped or the process ends)."""

    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder
        self.size = 0
        self._file = None
        self._lock = threading.Lock()

    def put(self, data: np.ndarray) -> tuple[int, int]:
        """Append the bytes of ``data``; returns ``(offset, length)`` for :meth:`get`."""
        b = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        with self._lock:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="qlinear-kept-", dir=self.folder)
            off, done = self.size, 0
            while done < len(b):
                n = os.pwrite(self._file.fileno(), b[done:], off + done)
                if n <= 0:
                    raise OutputError(f"cannot write the kept integers to {self.folder or tempfile.gettempdir()}")
                done += n
            self.size += len(b)
        return off, len(b)

    def fileno(self) -> int:
        return self._file.fileno()

    def get(self, offset: int, length: int) -> np.ndarray:
        """The ``length`` bytes at ``offset`` (``uint8``, writable)."""
        out = np.empty(length, np.uint8)
        got = 0
        while got < length:
            n = os.preadv(self._file.fileno(), [memoryview(out[got:])], offset + got)
            if n <= 0:
                raise OutputError("the temporary file of the kept integers was truncated")
            got += n
        return out


def pack4(q: np.ndarray) -> np.ndarray:
    """Integers in ``[-8, 15]`` two to a byte (low nibble first; an odd count padded with 0)."""
    flat = (q.reshape(-1) & 0xF).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    return flat[0::2] | (flat[1::2] << 4)


def kept(q: np.ndarray, bits: int, store: KeptStore | None = None) -> Callable[[], np.ndarray]:
    """``q`` kept until written: integers of 4 bits or less two to a byte (half the memory of int8), in ``store``
    when given (else in memory); the function returns them as they were (type, shape, values)."""
    dtype, shape = q.dtype, q.shape
    if bits > 4:
        raw = np.ascontiguousarray(q)
        if store is None:
            return lambda: raw
        off, n = store.put(raw)
        return lambda: store.get(off, n).view(dtype).reshape(shape)
    signed = bool(q.min(initial=0) < 0)
    packed = pack4(q)
    if store is None:
        def read() -> np.ndarray:
            return packed
    else:
        off, n = store.put(packed)
        del packed

        def read() -> np.ndarray:
            return store.get(off, n)

    def unpack() -> np.ndarray:
        p = read()
        out = np.empty(p.size * 2, np.int16)
        out[0::2], out[1::2] = p & 0xF, p >> 4
        if signed:
            out[out >= 8] -= 16
        return out[:int(np.prod(shape))].astype(dtype).reshape(shape)
    return unpack


__all__ = ["KeptStore", "kept", "pack4"]
