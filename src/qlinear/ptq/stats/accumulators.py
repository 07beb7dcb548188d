"""Accumulators: running statistics of one tensor, updated batch by batch (:func:`qlinear.ptq.stats.accumulate`)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Accumulator(Protocol):
    """Anything updated with one batch of a tensor's values at a time (observers, means, Gram matrices)."""

    def update(self, x: np.ndarray) -> None: ...


class ChannelMean:
    """Running per-channel sum (axis 1) and count: the input means bias correction needs."""

    def __init__(self) -> None:
        self.sum: np.ndarray | None = None
        self.n = 0

    def update(self, x: np.ndarray) -> None:
        if x.ndim > 2:  # contiguous pairwise float32 sums over each plane, then float64 over planes
            s = x.reshape(x.shape[0], x.shape[1], -1).sum(-1).sum(0, dtype=np.float64)
        else:
            s = x.reshape(-1, x.shape[-1] if x.ndim > 1 else 1).sum(0, dtype=np.float64)
        self.sum = s if self.sum is None else self.sum + s
        self.n += x.size // (x.shape[1] if x.ndim > 1 else 1)

    @property
    def mean(self) -> np.ndarray:
        return self.sum / max(self.n, 1)


class Gram:
    """``X^T X`` over every row of the batches seen as ``[rows, features]`` (the last axis), and the row count:
    GPTQ's Hessian of a linear's input (``H = sum_t x_t x_t^T`` over every token). Accumulated in float32 (one BLAS
    product per batch, as GPTQ's reference implementation does); memory: one ``features x features`` matrix."""

    def __init__(self) -> None:
        self.matrix: np.ndarray | None = None
        self.rows = 0

    def update(self, x: np.ndarray) -> None:
        x2 = np.asarray(x, np.float32).reshape(-1, x.shape[-1])
        if self.matrix is None:
            self.matrix = x2.T @ x2
        else:
            self.matrix += x2.T @ x2
        self.rows += x2.shape[0]


__all__ = ["Accumulator", "ChannelMean", "Gram"]
