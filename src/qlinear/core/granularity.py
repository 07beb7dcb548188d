"""Quantization granularity as data: per-tensor, per-axis, blocked.

Spec: ``onnx-quantizelinear-25.txt`` ("There are three supported quantization granularities,
determined by the shape of y_scale"):

* per-tensor: the scale is a scalar (qlinear, like ONNX's own test data, also accepts a 1-element 1-D
  scale when ``block_size == 0``);
* per-axis: the scale is 1-D with length ``D[axis]``;
* blocked: the scale has the input's rank and shape except ``S[axis] = ceil(D[axis] / B)``; the last
  block may be partial. The accepted block sizes are ``[ceil(D/S), ceil(D/(S-1)) - 1]``, i.e. exactly
  those with ``ceil(D / B) == S``.

``axis`` may be negative (``[-r, r-1]``); it is only checked when it is used (per-axis, blocked).

The same objects describe a run's configuration (``qlinear.ptq.config``: ``per-channel`` is ``PerAxis(None)``,
``per-block`` ``PerBlock(None, B)``, ``lpbq`` ``LPBQ(None, B, 4)``): ``axis=None`` means the axis is chosen per
tensor (a weight's channel or block axis); :func:`with_axis` binds it. :class:`LPBQ` (AIMET's low-power blocked
quantization) is blocked: its effective scale ``int_scale * per-axis float scale`` has the blocked shape, with
``scale_bits``-bit integer block scales.

Every input is canonicalised to a 3-level view ``x[outer, D, inner]`` (:class:`Layout`), which both
the NumPy path and the compiled kernel use.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

import numpy as np

from qlinear.errors import AxisError, BlockSizeError, ShapeError


@dataclass(frozen=True)
class PerTensor:
    """One scale and zero point for the whole tensor."""


@dataclass(frozen=True)
class PerAxis:
    """One scale per index of ``axis`` (normalised to ``0 <= axis < rank``; ``None``: chosen per tensor)."""

    axis: int | None


@dataclass(frozen=True)
class PerBlock:
    """One scale per block of ``block_size`` consecutive indices along ``axis`` (last block may be partial;
    ``axis=None``: chosen per tensor)."""

    axis: int | None
    block_size: int


@dataclass(frozen=True)
class LPBQ(PerBlock):
    """Blocked, with each block scale a ``scale_bits``-bit integer (``[1, 2^scale_bits]``) times a float scale per
    index of the other axis (AIMET's low-power blocked quantization, W4 with 4-bit block scales)."""

    scale_bits: int = 4


Granularity = Union[PerTensor, PerAxis, PerBlock, LPBQ]


def with_axis(g: Granularity, axis: int | None) -> Granularity:
    """``g`` on ``axis`` (per-tensor has none)."""
    return g if isinstance(g, PerTensor) else replace(g, axis=axis)


def normalize_axis(axis: int, rank: int, *, arg: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise AxisError(f"{arg}={axis} is out of range for an input of rank {rank}; expected [{-rank}, {rank - 1}]")
    return axis + rank if axis < 0 else axis


def resolve(x_shape: tuple[int, ...], scale_shape: tuple[int, ...], axis: int, block_size: int,
            *, scale_arg: str = "y_scale") -> Granularity:
    """Granularity implied by the scale's shape (spec: "determined by the shape of y_scale")."""
    rank = len(x_shape)
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise AxisError(f"axis must be an int, got {type(axis).__name__} {axis!r}")
    if not isinstance(block_size, (int, np.integer)) or isinstance(block_size, bool):
        raise BlockSizeError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size < 0:
        raise BlockSizeError(f"block_size must be >= 0 (0 = not blocked), got {block_size}")
    size = int(np.prod(scale_shape, dtype=np.int64))
    if block_size == 0:
        if len(scale_shape) == 0 or (len(scale_shape) == 1 and size == 1):
            return PerTensor()
        if len(scale_shape) != 1:
            raise ShapeError(
                f"{scale_arg}: shape {tuple(scale_shape)} has rank {len(scale_shape)} but block_size is 0; "
                f"per-tensor needs a scalar, per-axis a 1-D scale; for blocked quantization pass block_size > 0")
        if rank == 0:
            raise ShapeError(f"{scale_arg}: a 1-D scale of length {size} needs an input of rank >= 1, got a scalar")
        ax = normalize_axis(axis, rank)
        if scale_shape[0] != x_shape[ax]:
            raise ShapeError(f"{scale_arg}: per-axis scale must have length D[axis={axis}] = {x_shape[ax]}, "
                             f"got length {scale_shape[0]} (input shape {tuple(x_shape)})")
        return PerAxis(ax)
    if len(scale_shape) != rank:
        raise ShapeError(f"{scale_arg}: blocked quantization (block_size={block_size}) needs a scale of the "
                         f"input's rank {rank}, got shape {tuple(scale_shape)} (input shape {tuple(x_shape)})")
    ax = normalize_axis(axis, rank)
    for d, (xs, ss) in enumerate(zip(x_shape, scale_shape)):
        if d != ax and xs != ss:
            raise ShapeError(f"{scale_arg}: blocked scale shape {tuple(scale_shape)} must equal the input shape "
                             f"{tuple(x_shape)} except on axis {ax}; dimension {d} is {ss}, expected {xs}")
    nb = -(-x_shape[ax] // block_size)
    if nb != scale_shape[ax]:
        lo = -(-x_shape[ax] // scale_shape[ax]) if scale_shape[ax] else 0
        hi = (-(-x_shape[ax] // (scale_shape[ax] - 1)) - 1) if scale_shape[ax] > 1 else "inf"
        raise BlockSizeError(
            f"block_size={block_size} gives ceil({x_shape[ax]}/{block_size}) = {nb} blocks on axis {ax}, but "
            f"{scale_arg} has {scale_shape[ax]} there; accepted block sizes are [{lo}, {hi}]")
    return PerBlock(ax, int(block_size))


def _check_bound(g: Granularity) -> None:
    if not isinstance(g, PerTensor) and g.axis is None:
        raise AxisError(f"{g}: the axis is not chosen yet; bind it with with_axis(g, axis)")


def param_shape(x_shape: tuple[int, ...], g: Granularity) -> tuple[int, ...]:
    """The scale / zero-point shape that granularity ``g`` needs for an input of ``x_shape``."""
    _check_bound(g)
    if isinstance(g, PerTensor):
        return ()
    if isinstance(g, PerAxis):
        return (x_shape[g.axis],)
    s = list(x_shape)
    s[g.axis] = -(-x_shape[g.axis] // g.block_size)
    return tuple(s)


def check_zero_point(zp_shape: tuple[int, ...], scale_shape: tuple[int, ...], g: Granularity,
                     *, zp_arg: str, scale_arg: str) -> None:
    """Spec: "y_zero_point must have the same shape as y_scale" (1-element per-tensor forms are equivalent)."""
    if tuple(zp_shape) == tuple(scale_shape):
        return
    if isinstance(g, PerTensor) and int(np.prod(zp_shape, dtype=np.int64)) == 1 and len(zp_shape) <= 1:
        return
    raise ShapeError(f"{zp_arg}: shape {tuple(zp_shape)} must equal the shape of {scale_arg} {tuple(scale_shape)}")


@dataclass(frozen=True)
class Layout:
    """``x`` viewed as ``[outer, D, inner]`` around the quantization axis, plus the block size.

    Per-tensor is ``outer = 1, D = 1, inner = size``; per-axis has ``block = 1``.
    """

    outer: int
    D: int
    inner: int
    block: int
    nb: int  #: number of blocks along D (== D for per-axis, 1 for per-tensor)


def layout(x_shape: tuple[int, ...], g: Granularity) -> Layout:
    _check_bound(g)
    size = int(np.prod(x_shape, dtype=np.int64))
    if isinstance(g, PerTensor):
        return Layout(1, 1, size, 1, 1)
    ax = g.axis
    outer = int(np.prod(x_shape[:ax], dtype=np.int64))
    inner = int(np.prod(x_shape[ax + 1:], dtype=np.int64))
    D = x_shape[ax]
    if isinstance(g, PerAxis):
        return Layout(outer, D, inner, 1, D)
    return Layout(outer, D, inner, g.block_size, -(-D // g.block_size))


def expand(p: np.ndarray, x_shape: tuple[int, ...], g: Granularity) -> np.ndarray:
    """``p`` (scale or zero point) made broadcastable against ``x`` (a view where possible)."""
    _check_bound(g)
    if isinstance(g, PerTensor):
        return p.reshape(())
    if isinstance(g, PerAxis):
        shape = [1] * len(x_shape)
        shape[g.axis] = x_shape[g.axis]
        return p.reshape(shape)
    rep = np.repeat(p, g.block_size, axis=g.axis)
    if rep.shape[g.axis] != x_shape[g.axis]:
        rep = np.take(rep, np.arange(x_shape[g.axis]), axis=g.axis)
    return rep


__all__ = ["LPBQ", "Granularity", "Layout", "PerAxis", "PerBlock", "PerTensor", "expand", "layout", "normalize_axis",
           "param_shape", "resolve", "with_axis"]
