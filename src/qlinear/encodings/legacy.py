"""AIMET's legacy offset convention (files 0.6.1 and 1.0.0 only; spec §2/§3, notes ``aimet.md`` §2.1).

AIMET quantizes as ``q = clamp(round(x/scale) - offset, qmin, qmax)`` and states ``offset`` on the
**unsigned** grid ``[-(2^bw - 1), 0]`` whatever the signedness; a symmetric (signed) encoding is shifted by
``2^(bw-1)``. So, with ``zero_point`` in the ONNX convention on the type's own grid::

    unsigned:  offset = -zero_point
    signed:    offset = -zero_point - 2^(bw-1)

(int8 symmetric: offset -128 <-> zero point 0; int2 shifted grid: offset -1.5 <-> zero point -0.5.)
"""

from __future__ import annotations

import numpy as np

from qlinear.core.types import Kind, QType, qtype
from qlinear.errors import DTypeError, UnsupportedError


def int_dtype(bits: int, signed: bool, *, name: str) -> str:
    """The ONNX integer type name for an AIMET (bitwidth, is_symmetric) pair."""
    n = f"{'int' if signed else 'uint'}{bits}"
    try:
        t = qtype(n)
    except DTypeError:
        raise UnsupportedError(f"{name}: {bits}-bit {'signed' if signed else 'unsigned'} integers are not an ONNX "
                               "quantization type (supported: int2/4/8/16/32, uint2/4/8/16)") from None
    if t.kind is not Kind.INT:
        raise UnsupportedError(f"{name}: {n} is not an integer type")
    return t.name


def zero_point_from_offset(offset: np.ndarray, t: QType) -> np.ndarray:
    shift = 2.0 ** (t.bits - 1) if t.signed else 0.0
    return -(np.asarray(offset, np.float64) + shift) + 0.0  # + 0.0: no -0.0


def offset_from_zero_point(zp: np.ndarray, t: QType) -> np.ndarray:
    shift = 2.0 ** (t.bits - 1) if t.signed else 0.0
    return -np.asarray(zp, np.float64) - shift + 0.0
