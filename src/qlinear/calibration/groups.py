"""Granularity of statistics: which elements share one set of parameters.

A :class:`Grouping` turns a batch into a 2-D view ``(groups, elements)`` (a copy only when the layout demands it)
and knows the parameter shape: ``()`` per-tensor, ``(C,)`` per-channel along ``axis``, and the ONNX blocked shape
(``D`` on every axis except ``ceil(D/B)`` on ``block_axis``) per-block. A partial last block is padded with NaN,
which every observer ignores.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from qlinear.core.granularity import Granularity, PerAxis, PerBlock, PerTensor
from qlinear.errors import CalibrationError


@dataclass(frozen=True)
class Grouping:
    axis: int | None = None
    block_size: int = 0
    block_axis: int | None = None

    def __post_init__(self) -> None:
        if self.block_size < 0:
            raise CalibrationError(f"block_size must be >= 0, got {self.block_size}")
        if self.block_size and self.block_axis is None:
            raise CalibrationError("block_size needs block_axis (the axis the blocks run along)")
        if self.block_size and self.axis is not None:
            raise CalibrationError("give either axis (per-channel) or block_size/block_axis (per-block), not both")

    @cached_property
    def granularity(self) -> Granularity:
        """The core granularity (axes as given, possibly negative)."""
        if self.block_size:
            return PerBlock(self.block_axis, self.block_size)
        return PerAxis(self.axis) if self.axis is not None else PerTensor()

    def param_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.block_size:
            b = self._norm(self.block_axis, len(shape), "block_axis")
            return tuple(-(-d // self.block_size) if i == b else d for i, d in enumerate(shape))
        if self.axis is not None:
            return (shape[self._norm(self.axis, len(shape), "axis")],)
        return ()

    @staticmethod
    def _norm(axis: int, rank: int, arg: str) -> int:
        if not -rank <= axis < rank:
            raise CalibrationError(f"{arg}={axis} is out of range for data of rank {rank}")
        return axis % rank

    def view(self, x: np.ndarray) -> np.ndarray:
        """``(groups, elements)`` view of ``x`` in parameter order."""
        if self.block_size:
            b = self._norm(self.block_axis, x.ndim, "block_axis")
            xm = np.moveaxis(x, b, -1)
            d = xm.shape[-1]
            nb = -(-d // self.block_size)
            bs = self.block_size if nb > 1 else d  # one block: its elements are the whole axis, no padding
            if nb * bs != d:
                pad = np.full(xm.shape[:-1] + (nb * bs - d,), np.nan, x.dtype)
                xm = np.concatenate([xm, pad], axis=-1)
            g = xm.reshape(xm.shape[:-1] + (nb, bs))
            # parameter order: original axes with the block axis holding nb
            g = np.moveaxis(g, -2, b)
            return g.reshape(-1, bs)
        if self.axis is not None:
            a = self._norm(self.axis, x.ndim, "axis")
            return np.moveaxis(x, a, 0).reshape(x.shape[a], -1)
        return x.reshape(1, -1)
