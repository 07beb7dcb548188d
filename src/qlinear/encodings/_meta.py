"""The "meta" scales of AIMET encoding format 2.1.0 (notes ``aimet.md`` §3.5), read and written here for
:mod:`.v2_0_0` (which reads and writes 2.1.0 entries) and re-exported by :mod:`.v2_1_0`.

``y_scale`` may be an object ``{"x": quantized scale, "x_scale": its scale, "axis"?, "x_zero_point"?,
"input_dtype"?, "block_size"?}`` whose effective value is ``DequantizeLinear(x, x_scale, x_zero_point, axis)``;
qlinear reads integer meta scales as LPBQ and writes LPBQ this way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core.types import QType
from qlinear.encodings import _doc as d
from qlinear.encodings.model import Encoding
from qlinear.errors import UnsupportedError


def read_meta_scale(ctx: d.Ctx, ys: dict, where: str, t: QType, outer_axis: int | None) -> dict[str, Any]:
    if "input_dtype" in ys and str(ys["input_dtype"]).startswith(("float", "bfloat")):
        raise UnsupportedError(f"{ctx.path or ''}: {where}: float meta scales (input_dtype "
                               f"{ys['input_dtype']!r}, e.g. NVFP4) are not supported; integer (LPBQ) meta scales are")
    x = d.numbers(ctx, d.need(ctx, ys, "x", where), f"{where}.x")
    xs = d.numbers(ctx, d.need(ctx, ys, "x_scale", where), f"{where}.x_scale")
    if "x_zero_point" in ys:
        z = d.numbers(ctx, ys["x_zero_point"], f"{where}.x_zero_point")
        if np.any(z != 0):
            raise UnsupportedError(f"{ctx.path or ''}: {where}.x_zero_point: non-zero meta zero points are not "
                                   "supported")
    if x.ndim == 0:
        raise ctx.error(f"{where}.x", "expected a list of integer block scales")
    if xs.ndim == 0 or xs.size == 1:
        shape = [1] * x.ndim
    else:
        inner = d.integer(ctx, d.need(ctx, ys, "axis", where), f"{where}.axis", lo=-x.ndim, hi=x.ndim - 1) % x.ndim
        if xs.ndim != 1 or xs.size != x.shape[inner]:
            raise ctx.error(f"{where}.x_scale", f"has shape {xs.shape}; expected ({x.shape[inner]},) along axis "
                                                f"{inner} of x {x.shape}")
        shape = [1] * x.ndim
        shape[inner] = xs.size
    return {"int_scale": x, "scale": xs.reshape(shape), "decompressed_bits": 2 * t.bits}


def write_meta_scale(e: Encoding) -> dict[str, Any]:
    s = e.scale
    rank = s.ndim
    block = e.axis % rank
    inner = next((i for i in range(rank) if s.shape[i] > 1), next(i for i in range(rank) if i != block))
    return {"x": e.int_scale.tolist(), "x_scale": s.reshape(-1).tolist(), "axis": inner - rank}
