"""Exact int32 accumulation through float64 BLAS, and the zero-point algebra of the quantized matrix product.

Spec ``tflite-int8-spec.md`` (quantized matrix product)::

    acc[i, j] = sum_k (x[i,k] - zx) (w[j,k] - zw[j])
              = sum_k x w  -  zw[j] sum_k x[i,k]  -  zx sum_k w[j,k]  +  K zx zw[j]

The last two terms do not depend on the activations: :class:`PreparedWeights` computes them **once per weight
tensor** (with the bias folded in). The first term is one float64 GEMM: every product of two 8-bit (or 16-bit
signed/unsigned) integers and every partial sum is an integer below 2^53, so the float64 result is exact (BLAS may
reorder or fuse the additions; all intermediate values are still exact integers). The bound is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qlinear.errors import KernelError

EXACT = 2.0**53


EXACT32 = 2.0**24


def int_matmul(a: np.ndarray, b_t: np.ndarray) -> np.ndarray:
    """``a @ b_t.T`` of integer arrays, exactly, via BLAS. ``a``: (M, K); ``b_t``: (N, K).

    float32 GEMM (twice the SIMD width of float64) over chunks of K short enough that every partial sum stays below
    2^24 (exact in float32), the chunk results summed in float64; float64 GEMM when a chunk would be too short.
    """
    a = np.asarray(a)
    b_t = np.asarray(b_t)
    k = a.shape[-1]
    amax = float(np.abs(a).max(initial=0))
    bmax = float(np.abs(b_t).max(initial=0))
    prod = max(amax * bmax, 1.0)
    if prod * k >= EXACT:
        raise KernelError(f"reduction of length {k} could exceed 2^53: float64 accumulation would not be exact")
    chunk = int(EXACT32 // prod) - 1
    if chunk >= 64:
        a32 = a.astype(np.float32)
        b32 = b_t.astype(np.float32)
        if chunk >= k:
            return (a32 @ b32.T).astype(np.int64)
        acc = np.zeros((a.shape[0], b_t.shape[0]), np.float64)
        for s in range(0, k, chunk):  # loop over K chunks (a few), not over elements
            acc += a32[:, s:s + chunk] @ b32[:, s:s + chunk].T
        return acc.astype(np.int64)
    return (a.astype(np.float64) @ b_t.astype(np.float64).T).astype(np.int64)


@dataclass(frozen=True)
class PreparedWeights:
    """Weights ``w`` (N, K) with per-row zero points ``zw`` and the activation zero point ``zx``; ``offset[j]`` =
    ``bias[j] - zx*sum_k w[j,k] + K*zx*zw[j]`` is the activation-independent part of the accumulator."""

    w: np.ndarray
    zw: np.ndarray
    zx: int
    offset: np.ndarray

    @classmethod
    def prepare(cls, w: np.ndarray, zw: np.ndarray | int, zx: int, bias: np.ndarray | None = None) -> "PreparedWeights":
        w = np.asarray(w)
        n, k = w.shape
        zw = np.broadcast_to(np.asarray(zw, np.int64), (n,)).copy()
        wsum = w.astype(np.int64).sum(1)
        b = np.zeros(n, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(n)
        return cls(w, zw, int(zx), b - int(zx) * wsum + k * int(zx) * zw)

    def accumulate(self, x: np.ndarray) -> np.ndarray:
        """int64 accumulators (M, N) for integer activations ``x`` (M, K)."""
        xsum = np.asarray(x, np.int64).sum(1)
        return int_matmul(x, self.w) - xsum[:, None] * self.zw[None, :] + self.offset[None, :]
