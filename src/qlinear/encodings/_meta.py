"""The "meta" scales of AIMET encoding format 2.1.0 (notes ``aimet.md`` §3.5), read and written here for
:mod:`.v2_0_0` (which reads and writes 2.1.0 entries) and re-exported by :mod:`.v2_1_0`.

``y_scale`` may be an object ``{"x": quantized scale, "x_scale": its scale, "axis"?, "x_zero_point"?,
"input_dtype"?, "block_size"?}`` whose effective value is ``DequantizeLinear(x, x_scale, x_zero_point, axis)``;
qlinear reads integer meta scales as LPBQ and writes LPBQ this way; float meta scales (NVFP4, ``input_dtype``
float8e4m3fn) are read as the effective per-block scale (:func:`_float_meta_scale`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core.types import QType, qtype
from qlinear.encodings import _doc as d
from qlinear.encodings.model import Encoding, aimet_refusal
from qlinear.errors import QlinearError, UnsupportedError


def read_meta_scale(ctx: d.Ctx, ys: dict, where: str, t: QType, outer_axis: int | None) -> dict[str, Any]:
    x = d.numbers(ctx, d.need(ctx, ys, "x", where), f"{where}.x")
    xs = d.numbers(ctx, d.need(ctx, ys, "x_scale", where), f"{where}.x_scale")
    if "input_dtype" in ys and str(ys["input_dtype"]).startswith(("float", "bfloat")):
        return {"scale": _float_meta_scale(ctx, ys, where, x, xs)}
    if "x_zero_point" in ys:
        z = d.numbers(ctx, ys["x_zero_point"], f"{where}.x_zero_point")
        if np.any(z != 0):
            raise UnsupportedError(f"{ctx.path or ''}: {where}.x_zero_point: non-zero meta zero points are not "
                                   "supported")
    if x.ndim == 0:
        raise ctx.error(f"{where}.x", "expected a list of integer block scales")
    return {"int_scale": x, "scale": xs.reshape(_scale_shape(ctx, ys, where, x, xs)),
            "decompressed_bits": 2 * t.bits}


def _scale_shape(ctx: d.Ctx, ys: dict, where: str, x: np.ndarray, xs: np.ndarray) -> list[int]:
    """The shape that broadcasts ``x_scale`` over ``x``: all ones for one value, else its length on ``axis``."""
    shape = [1] * x.ndim
    if xs.ndim == 0 or xs.size == 1:
        return shape
    inner = d.integer(ctx, d.need(ctx, ys, "axis", where), f"{where}.axis", lo=-x.ndim, hi=x.ndim - 1) % x.ndim
    if xs.ndim != 1 or xs.size != x.shape[inner]:
        raise ctx.error(f"{where}.x_scale", f"has shape {xs.shape}; expected ({x.shape[inner]},) along axis "
                                            f"{inner} of x {x.shape}")
    shape[inner] = xs.size
    return shape


def _float_meta_scale(ctx: d.Ctx, ys: dict, where: str, x: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """A float meta scale (NVFP4: ``x`` float8e4m3fn block scales, ``x_scale`` per tensor) as the effective block
    scale ``DequantizeLinear(x, x_scale)``, float32 like ONNX. The decomposition is not kept in the model: a re-save
    in the same version writes the file's entry back (encodings._layout), a conversion the effective scales."""
    name = d.string(ctx, ys["input_dtype"], f"{where}.input_dtype")
    try:
        it = qtype(name)
    except QlinearError:
        raise ctx.error(f"{where}.input_dtype", f"unknown input_dtype {name!r}; expected a float8/float4 type such "
                                                "as float8e4m3fn") from None
    if not it.is_float:
        raise ctx.error(f"{where}.input_dtype", f"{it.name} is not a float8/float4 type")
    why = aimet_refusal(name, it)
    if why is not None:
        raise ctx.error(f"{where}.input_dtype", why)
    if "x_zero_point" in ys and np.any(d.numbers(ctx, ys["x_zero_point"], f"{where}.x_zero_point") != 0):
        raise ctx.error(f"{where}.x_zero_point", "a float meta scale has no zero point")
    if x.ndim == 0:
        raise ctx.error(f"{where}.x", "expected a list of block scales")
    x32 = x.astype(np.float32)
    cast = x32.astype(it.storage).astype(np.float32)
    bad = ~(cast == x32) | ~(x32 > 0)
    if bad.any():
        k = "".join(f"[{int(i)}]" for i in np.argwhere(bad)[0])
        raise ctx.error(f"{where}.x{k}", f"{x[bad][0]!r} is not a positive {it.name} value")
    s32 = xs.reshape(_scale_shape(ctx, ys, where, x, xs)).astype(np.float32)
    return (x32 * s32).astype(np.float64)


def write_meta_scale(e: Encoding) -> dict[str, Any]:
    s = e.scale
    rank = s.ndim
    block = e.axis % rank
    inner = next((i for i in range(rank) if s.shape[i] > 1), next(i for i in range(rank) if i != block))
    return {"x": e.int_scale.tolist(), "x_scale": s.reshape(-1).tolist(), "axis": inner - rank}
