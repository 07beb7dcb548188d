"""Sub-byte packing exactly as ONNX stores it (``onnx.proto``, ``raw_data`` comments).

* 4-bit types (int4, uint4, float4e2m1): two elements per byte, the first element in the 4 low bits,
  the second in the 4 high bits; an odd count pads the last high nibble with 0.
* 2-bit types (int2, uint2): four elements per byte, ``x0 | x1 << 2 | x2 << 4 | x3 << 6``; the tail is
  padded with 0.
* 6-bit types (float6e2m3, float6e3m2; ``onnx.proto`` IR 14, onnx note "Float stored in 6 bits"): four
  elements in three bytes, a contiguous LSB-first bit stream (``b0 = x0 | x1 << 6``, ``b1 = x1 >> 2 | x2 << 4``,
  ``b2 = x2 >> 4 | x3 << 2``); ``ceil(6 n / 8)`` bytes, the unused high bits of the last byte are 0.

All three are one rule: ``bits``-wide codes in an LSB-first bit stream, ``ceil(bits * n / 8)`` bytes, zero
padding (:attr:`QType.pack_group` elements per group of whole bytes). The packed bytes are identical to
``onnx.numpy_helper.from_array(a).raw_data`` and, for 2 and 4 bits, to ONNX Runtime's in-memory layout.
All functions are vectorised; none loops over elements in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qlinear.core.types import QType, TypeLike, qtype
from qlinear.errors import DTypeError, ShapeError


@dataclass(frozen=True)
class PackedTensor:
    """A sub-byte tensor in ONNX packed layout.

    Attributes:
        data: ``uint8`` array of ``ceil(size * bits / 8)`` bytes.
        shape: logical shape of the tensor.
        qtype: element type (int4, uint4, float4e2m1, int2, uint2, float6e2m3, float6e3m2).
    """

    data: np.ndarray
    shape: tuple[int, ...]
    qtype: QType

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def unpack(self) -> np.ndarray:
        """The tensor as an array of the type's ml_dtypes storage dtype (one element per byte)."""
        return unpack(self.data, self.qtype, self.shape)

    def tobytes(self) -> bytes:
        return self.data.tobytes()


def packed_nbytes(n: int, t: TypeLike) -> int:
    """Bytes needed to store ``n`` elements of type ``t`` packed."""
    return -(-int(n) * qtype(t).bits // 8)


def codes(a: np.ndarray, t: QType) -> np.ndarray:
    """The ``bits``-wide bit patterns of ``a`` (uint8, high bits cleared), without copying if possible."""
    return a.view(np.uint8) & np.uint8((1 << t.bits) - 1)


_SUBBYTE = "int4, uint4, float4e2m1, int2, uint2, float6e2m3, float6e3m2"


def pack(a: np.ndarray, t: TypeLike | None = None) -> PackedTensor:
    """Pack a sub-byte array (ml_dtypes int4/uint4/int2/uint2/float4_e2m1fn/float6_e2m3fn/float6_e3m2fn) into
    ONNX layout.

    >>> import ml_dtypes, numpy as np
    >>> pack(np.array([1, -2, 3, 7, -8], ml_dtypes.int4)).data.tolist()
    [225, 115, 8]
    >>> pack(np.array([1.0, -0.125, 7.5], ml_dtypes.float6_e2m3fn)).data.tolist()
    [72, 248, 1]
    """
    a = np.asarray(a)
    t = qtype(a.dtype if t is None else t, arg="t")
    if not t.is_subbyte:
        raise DTypeError(f"pack: {t.name} is not a sub-byte type (expected {_SUBBYTE})")
    if a.dtype != t.storage:
        raise DTypeError(f"pack: array dtype {a.dtype} does not match type {t.name} (expected {t.storage})")
    c = codes(np.ascontiguousarray(a).reshape(-1), t)
    n = c.size
    k, nb = t.pack_group
    pad = (-n) % k
    if pad:
        c = np.concatenate([c, np.zeros(pad, np.uint8)])
    wt = np.uint8 if nb == 1 else np.uint32  # one group's bits: 8, or 24 for 6-bit
    c = c.reshape(-1, k).astype(wt, copy=False)
    word = c[:, 0].copy()
    for j in range(1, k):  # k <= 4: a loop over code positions, not elements
        word |= c[:, j] << wt(j * t.bits)
    if nb == 1:
        return PackedTensor(word, tuple(a.shape), t)
    shifts = (np.arange(nb, dtype=np.uint32) * np.uint32(8))[None, :]
    out = ((word[:, None] >> shifts) & np.uint32(0xFF)).astype(np.uint8).reshape(-1)[:packed_nbytes(n, t)]
    return PackedTensor(out, tuple(a.shape), t)


def unpack(data: np.ndarray | bytes, t: TypeLike, shape: tuple[int, ...] | list[int]) -> np.ndarray:
    """Unpack ONNX-packed bytes into an array of ``t``'s storage dtype and the given shape."""
    t = qtype(t, arg="t")
    if not t.is_subbyte:
        raise DTypeError(f"unpack: {t.name} is not a sub-byte type")
    buf = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else np.asarray(data)
    if buf.dtype != np.uint8:
        raise DTypeError(f"unpack: data must be uint8 bytes, got {buf.dtype}")
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64))
    need = packed_nbytes(n, t)
    if buf.size != need:
        raise ShapeError(f"unpack: {n} elements of {t.name} need {need} bytes, got {buf.size}")
    k, nb = t.pack_group
    buf = buf.reshape(-1)
    if nb == 1:
        mask = np.uint8((1 << t.bits) - 1)
        shifts = (np.arange(k, dtype=np.uint8) * np.uint8(t.bits))[None, :]
        c = (buf[:, None] >> shifts) & mask
    else:  # 6-bit: 3 bytes -> one 24-bit word -> 4 codes
        pad = (-buf.size) % nb
        if pad:
            buf = np.concatenate([buf, np.zeros(pad, np.uint8)])
        b = buf.reshape(-1, nb).astype(np.uint32)
        word = b[:, 0] | (b[:, 1] << np.uint32(8)) | (b[:, 2] << np.uint32(16))
        shifts = (np.arange(k, dtype=np.uint32) * np.uint32(t.bits))[None, :]
        c = ((word[:, None] >> shifts) & np.uint32((1 << t.bits) - 1)).astype(np.uint8)
    # ml_dtypes stores a sub-byte value as its bit pattern in the low bits (-1 as int4 is 0x0F):
    # the masked codes are already the canonical representation.
    return c.reshape(-1)[:n].view(t.storage).reshape(shape)


__all__ = ["PackedTensor", "pack", "unpack", "packed_nbytes", "codes"]
