"""The quantized-type registry: one table, one row per type, named as ONNX names them.

Spec: ``onnx-quantizelinear-25.txt`` ("Saturation is done according to: ..."), the Cast-25 float8
table, the float4e2m1 and float6 technical notes (``notes/onnx-ort.md`` §1.2; onnx "Float stored in 6
bits"), the QuantizeLinear-28 schema for float6e2m3/float6e3m2, ``onnx.proto`` for the
``TensorProto.DataType`` numbers (kept here as plain integers so that importing the core does not
import ``onnx``; ``tests/core/test_types.py`` checks them against ``onnx.TensorProto``).

A :class:`QType` knows its bit width, signedness, saturation range, NumPy storage dtype
(``ml_dtypes`` for sub-byte and float8/float6/float4 types), how ONNX packs it (``bits`` wide codes in an
LSB-first bit stream: 2 per byte for 4-bit, 4 per byte for 2-bit, 4 in 3 bytes for 6-bit), whether it
can store Inf/NaN, the opset that introduced it, and what it may be used for (quantized values, scales
only, or plain floats).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Union

import ml_dtypes
import numpy as np

from qlinear.errors import DTypeError


class Kind(enum.Enum):
    """What a type is in the quantization formulas."""

    INT = "int"  #: integer grid, saturates to [qmin, qmax]
    FLOAT = "float"  #: low-precision float output of QuantizeLinear (float8, float6, float4)
    SCALE = "scale"  #: scale-only type (float8e8m0: powers of two)
    REAL = "real"  #: full-precision float (inputs, scales, fp16 "float" encodings)


@dataclass(frozen=True)
class QType:
    """One row of the type table.

    Attributes:
        name: ONNX spelling (``"int4"``, ``"float8e4m3fn"``, ``"float32"``).
        onnx_type: ``TensorProto.DataType`` value.
        bits: bit width.
        signed: two's complement (ints) or has a sign bit (floats).
        kind: see :class:`Kind`.
        qmin, qmax: saturation range (ints: spec table; floats: +-largest finite value).
        storage: NumPy dtype holding one element per byte (``ml_dtypes.int4`` ...).
        per_byte: whole elements per byte in ONNX ``raw_data`` (2 for 4-bit, 4 for 2-bit, else 1; 6-bit types
            pack 4 elements in 3 bytes, see :attr:`pack_group`).
        finite: no Inf/NaN encodings (float4e2m1, float6): out-of-range values and +-Inf always saturate,
            ``saturate`` has no effect (QuantizeLinear-28 schema).
        nan_as: what NaN becomes in a ``finite`` type when its technical note says so (float4e2m1: 6);
            None: the note leaves it open, see :func:`qlinear.core.floatcast.to_lowp_float`.
        opset: the ``ai.onnx`` opset whose QuantizeLinear/DequantizeLinear first accept the type.
    """

    name: str
    onnx_type: int
    bits: int
    signed: bool
    kind: Kind
    qmin: float
    qmax: float
    storage: np.dtype
    per_byte: int = 1
    finite: bool = False
    nan_as: float | None = None
    opset: int = 10

    # --- derived facts -------------------------------------------------------------------
    @property
    def is_int(self) -> bool:
        return self.kind is Kind.INT

    @property
    def is_float(self) -> bool:
        """Low-precision float output type (float8 / float6 / float4)."""
        return self.kind is Kind.FLOAT

    @property
    def is_subbyte(self) -> bool:
        """Packed in ONNX ``raw_data`` (2, 4 and 6 bits)."""
        return self.bits < 8

    @property
    def pack_group(self) -> tuple[int, int]:
        """(elements, bytes) of the smallest whole-byte packing unit: (2, 1) for 4-bit, (4, 1) for 2-bit,
        (4, 3) for 6-bit, (1, bits / 8) otherwise."""
        g = math.gcd(8, self.bits)
        return (8 // g, self.bits // g) if self.bits < 8 else (1, self.bits // 8)

    @property
    def levels(self) -> int:
        """Number of integer levels ``qmax - qmin + 1`` (ints only)."""
        return int(self.qmax - self.qmin + 1)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"QType({self.name})"


def _i(name: str, onnx_type: int, bits: int, signed: bool, storage: Any, opset: int) -> QType:
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return QType(name, onnx_type, bits, signed, Kind.INT, lo, hi, np.dtype(storage), max(1, 8 // bits),
                 opset=opset)


def _f(name: str, onnx_type: int, bits: int, storage: Any, opset: int, kind: Kind = Kind.FLOAT,
       nan_as: float | None = None) -> QType:
    fmax = float(ml_dtypes.finfo(storage).max)  # ml_dtypes.finfo also covers the NumPy float types
    signed = kind is not Kind.SCALE
    with np.errstate(invalid="ignore"):
        finite = not np.isnan(np.float32(np.nan).astype(storage).astype(np.float32))  # no NaN code
    return QType(name, onnx_type, bits, signed, kind, -fmax if signed else 0.0, fmax, np.dtype(storage),
                 8 // bits if bits in (2, 4) else 1, finite, nan_as, opset)


#: The table. Order: by role, then width.
TABLE: tuple[QType, ...] = (
    _i("int2", 26, 2, True, ml_dtypes.int2, 25),
    _i("uint2", 25, 2, False, ml_dtypes.uint2, 25),
    _i("int4", 22, 4, True, ml_dtypes.int4, 21),
    _i("uint4", 21, 4, False, ml_dtypes.uint4, 21),
    _i("int8", 3, 8, True, np.int8, 10),
    _i("uint8", 2, 8, False, np.uint8, 10),
    _i("int16", 5, 16, True, np.int16, 21),
    _i("uint16", 4, 16, False, np.uint16, 21),
    _i("int32", 6, 32, True, np.int32, 10),
    _f("float8e4m3fn", 17, 8, ml_dtypes.float8_e4m3fn, 19),
    _f("float8e4m3fnuz", 18, 8, ml_dtypes.float8_e4m3fnuz, 19),
    _f("float8e5m2", 19, 8, ml_dtypes.float8_e5m2, 19),
    _f("float8e5m2fnuz", 20, 8, ml_dtypes.float8_e5m2fnuz, 19),
    _f("float6e2m3", 27, 6, ml_dtypes.float6_e2m3fn, 28),
    _f("float6e3m2", 28, 6, ml_dtypes.float6_e3m2fn, 28),
    _f("float4e2m1", 23, 4, ml_dtypes.float4_e2m1fn, 23, nan_as=6.0),
    _f("float8e8m0", 24, 8, ml_dtypes.float8_e8m0fnu, 24, Kind.SCALE),
    _f("float16", 10, 16, np.float16, 1, Kind.REAL),
    _f("bfloat16", 16, 16, ml_dtypes.bfloat16, 1, Kind.REAL),
    _f("float32", 1, 32, np.float32, 1, Kind.REAL),
)

_BY_NAME = {t.name: t for t in TABLE}
_BY_NAME.update({"float": _BY_NAME["float32"], "fp16": _BY_NAME["float16"], "bf16": _BY_NAME["bfloat16"],
                 "fp32": _BY_NAME["float32"], "half": _BY_NAME["float16"]})
_BY_ONNX = {t.onnx_type: t for t in TABLE}
_BY_DTYPE = {t.storage: t for t in TABLE}

#: Types QuantizeLinear-28 may output (T3); float6e2m3 / float6e3m2 need opset 28 (``QType.opset``).
QUANTIZE_OUTPUTS = tuple(t for t in TABLE if t.kind in (Kind.INT, Kind.FLOAT) and t.name != "int32")
#: Types DequantizeLinear-28 accepts as input (T1).
DEQUANTIZE_INPUTS = tuple(t for t in TABLE if t.kind in (Kind.INT, Kind.FLOAT))
#: QuantizeLinear-25 x (T1) and scale (T2) types; DequantizeLinear-25 scale and output types.
QUANTIZE_X = ("float32", "float16", "bfloat16", "int32")
QUANTIZE_SCALE = ("float32", "float16", "bfloat16", "int32", "float8e8m0")
DEQUANTIZE_SCALE = ("float32", "float16", "bfloat16", "float8e8m0")
DEQUANTIZE_OUTPUT = ("float32", "float16", "bfloat16")

TypeLike = Union[QType, str, int, np.dtype, type]


def qtype(spec: TypeLike, *, arg: str = "dtype") -> QType:
    """Look a type up by QType, ONNX name, ``TensorProto`` number, or NumPy/ml_dtypes dtype.

    >>> qtype("int4").qmin, qtype("int4").qmax
    (-8, 7)
    >>> qtype(3).name
    'int8'
    """
    if isinstance(spec, QType):
        return spec
    if isinstance(spec, str):
        hit = _BY_NAME.get(spec)
        if hit is not None:  # exact ONNX spelling: the common case, no normalisation needed
            return hit
        key = spec.lower().replace("_", "").replace("tensorproto.", "")
        key = {"float8e4m3fn": "float8e4m3fn"}.get(key, key)
        t = _BY_NAME.get(key) or _BY_NAME.get(_ML_ALIASES.get(key, ""))
        if t is None:
            raise DTypeError(f"{arg}: unknown type {spec!r}; expected one of {', '.join(_BY_NAME)}")
        return t
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        t = _BY_ONNX.get(int(spec))
        if t is None:
            raise DTypeError(f"{arg}: TensorProto data type {int(spec)} is not a quantization type")
        return t
    try:
        dt = np.dtype(spec)
    except TypeError:
        raise DTypeError(f"{arg}: cannot interpret {spec!r} as a type") from None
    t = _BY_DTYPE.get(dt)
    if t is None:
        raise DTypeError(f"{arg}: NumPy dtype {dt} is not a quantization type")
    return t


# ml_dtypes spellings (float8_e4m3fn -> float8e4m3fn after removing "_")
_ML_ALIASES = {"float4e2m1fn": "float4e2m1", "float8e8m0fnu": "float8e8m0", "float6e2m3fn": "float6e2m3",
               "float6e3m2fn": "float6e3m2"}


def int_type(bits: int, signed: bool, *, arg: str = "dtype") -> QType:
    """The integer type of ``bits`` bits and signedness ``signed`` (``int_type(16, False)`` is uint16)."""
    t = _BY_INT.get((int(bits), bool(signed)))
    if t is None:
        raise DTypeError(f"{arg}: there is no {bits}-bit {'signed' if signed else 'unsigned'} integer type; expected "
                         f"one of {', '.join(t.name for t in TABLE if t.is_int)}")
    return t


_BY_INT = {(t.bits, t.signed): t for t in TABLE if t.kind is Kind.INT}


def dtype_of(a: np.ndarray, *, arg: str, allowed: tuple[str, ...] | None = None, what: str = "the type") -> QType:
    """The :class:`QType` of an array's dtype; with ``allowed``, also checks membership. Errors name ``arg``."""
    t = _BY_DTYPE.get(a.dtype)
    if t is None or (allowed is not None and t.name not in allowed):
        got = t.name if t is not None else str(a.dtype)
        expected = f"one of {', '.join(allowed)}" if allowed else "a quantization type"
        raise DTypeError(f"{arg}: {what} must be {expected}, got {got}")
    return t


def require(t: QType, allowed: tuple[str, ...], *, arg: str, what: str) -> QType:
    """Check that an already-resolved type is one of ``allowed``."""
    if t.name not in allowed:
        raise DTypeError(f"{arg}: {what} must be one of {', '.join(allowed)}, got {t.name}")
    return t


__all__ = ["Kind", "QType", "TABLE", "qtype", "dtype_of", "int_type", "require"]
