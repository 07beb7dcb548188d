"""GPTQ (Frantar et al. 2022, arXiv:2210.17323, Algorithm 1) for blocked weight-only quantization.

For a linear ``y = x W^T`` with ``W[N, K]`` and calibration inputs ``X[T, K]``, the layer error
``||X W^T - X W_q^T||^2`` is quadratic in ``W`` with Hessian ``H = 2 X^T X``. GPTQ quantizes the columns of ``W``
one at a time (in order, or by decreasing ``diag(H)`` with ``act_order``) and spreads each column's rounding error
over the columns not yet quantized through the Cholesky factor of ``H^-1``:

    err_j = (w_j - q(w_j)) / [U]_jj,        W[:, j+1:] -= err_j [U]_j,j+1:      (U = chol(H^-1), upper)

with the update batched in "lazy" blocks of ``lazy`` columns (the paper's §4 step 2). ``H`` is dampened by
``damp * mean(diag(H))``; columns that never see an input (``H_jj = 0``) are zeroed. The grid of each block of
``block`` columns (:mod:`qlinear.ptq.algorithms.grids`) is fixed when the algorithm reaches its first column, from
the weights as updated so far (the reference implementation's ``groupsize``); with ``act_order`` the columns are
visited out of order, so the grids are fixed beforehand from the original weights ("static groups") and the stored blocks stay contiguous along K,
as ONNX's blocked ``DequantizeLinear`` and ``MatMulNBits`` need. Act-order with static groups is qlinear's default
(SmolLM2 W4 block 32, held-out perplexity: 24.5 with it, 26.4 without, 27.7 for round to nearest).
"""

from __future__ import annotations

import numpy as np

from qlinear.errors import CalibrationError
from qlinear.ptq.algorithms.grids import (
    FLOAT32,
    BlockQuant,
    _representable,
    n_blocks,
    padded,
    params,
    search_clip,
)

#: the smallest damping tried, relative to the mean diagonal of H: below float64's resolution of H's diagonal a
#: smaller ``gptq_damp`` adds nothing (a config's 5.7e-277 left a singular Hessian singular through every retry)
DAMP_FLOOR = 1e-12


def _upper_inverse_cholesky(h: np.ndarray, damp: float) -> np.ndarray:
    """``chol(H^-1)`` (upper) of ``H + damp * mean(diag H) * I``, raising the damping (tenfold, from at least
    :data:`DAMP_FLOOR`) until it is positive definite."""
    k = h.shape[0]
    if not np.isfinite(h).all():
        raise CalibrationError(f"gptq: a layer's Hessian (its inputs' Gram matrix, {k} x {k}) holds NaN/inf values: "
                               "check the calibration data (or the layer's inputs) for NaN/inf")
    md = float(np.mean(np.diag(h)))
    lam = max(damp, DAMP_FLOOR) * md if md > 0 else 1e-6
    for _ in range(12):
        try:
            lo = np.linalg.cholesky(h + lam * np.eye(k))
            li = np.linalg.inv(lo)
            hinv = li.T @ li
            return np.linalg.cholesky(hinv).T
        except np.linalg.LinAlgError:
            lam *= 10
    raise CalibrationError(f"gptq: a layer's Hessian (its inputs' Gram matrix, {k} x {k}) is not positive definite "
                           f"even damped by {lam / 10:.3g}; raise gptq_damp")


def gptq(w: np.ndarray, h: np.ndarray, bits: int, block: int, grid: str, *, method: str = "minmax",
         damp: float = 0.01, act_order: bool = False, lazy: int = 128,
         fixed: tuple[np.ndarray, np.ndarray] | None = None,
         scale_dtype: np.dtype = FLOAT32) -> BlockQuant:
    """GPTQ of ``W[N, K]`` with Hessian ``h`` ``[K, K]`` (``X^T X``, any positive factor) onto ``bits``-bit blocks
    of ``block`` along K; ``method`` ``mse`` searches each block's clipping ratio (:func:`.grids.search_clip`).
    ``fixed``: block scales and zero points ``[N, nb]`` given beforehand (LPBQ's), used as static groups;
    ``scale_dtype`` float16 rounds the scales as float16 weights need.
    Returns the integers and block parameters; ``BlockQuant.dequantize()`` is the weight the model computes with."""
    n, k = w.shape
    nb = n_blocks(k, block)
    half = 2 ** (bits - 1)
    lazy = max(block, (lazy // block) * block) if block < k else k
    W = np.array(w, np.float32, copy=True)
    H = np.array(h, np.float64, copy=True)
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    S = np.ones((n, nb), np.float32)
    Z = np.zeros((n, nb), np.int64)
    static = act_order or fixed is not None
    if fixed is not None:
        S, Z = np.asarray(fixed[0], np.float32), np.asarray(fixed[1], np.int64)
    elif act_order:
        wb = padded(W, block)
        S, Z = params(wb, bits, grid, search_clip(wb, bits, grid) if method == "mse" else 1.0)
        S = _representable(S, scale_dtype) if scale_dtype != np.float32 else S
    if act_order:
        perm = np.argsort(-np.diag(H), kind="stable")
        W = W[:, perm]
        H = H[np.ix_(perm, perm)]
    else:
        perm = np.arange(k)
    U = _upper_inverse_cholesky(H, damp).astype(np.float32)
    Q = np.empty((n, k), np.int8)
    group_of = perm // block
    for i1 in range(0, k, lazy):
        i2 = min(i1 + lazy, k)
        W1T = np.ascontiguousarray(W[:, i1:i2].T)      # [cols, N]: each column contiguous
        ErrT = np.empty_like(W1T)
        for i in range(i2 - i1):
            col = i1 + i
            if not static and col % block == 0:
                g = col // block
                wg = W1T[i:i + block].T                    # the block's columns, as updated so far
                wgb = padded(wg, block)
                clip = search_clip(wgb, bits, grid) if method == "mse" else 1.0
                s, z = params(wgb, bits, grid, clip)
                if scale_dtype != np.float32:
                    s = _representable(s, scale_dtype)
                S[:, g], Z[:, g] = s[:, 0], z[:, 0]
            g = group_of[col]
            s, z = S[:, g], Z[:, g]
            wc = W1T[i]
            q = np.clip(np.rint(wc / s) + z, -half, half - 1)
            Q[:, perm[col]] = q
            err = (wc - (q - z) * s) / U[col, col]
            if i + 1 < i2 - i1:
                W1T[i + 1:] -= U[col, col + 1:i2, None] * err[None, :]
            ErrT[i] = err
        if i2 < k:
            W[:, i2:] -= ErrT.T @ U[i1:i2, i2:]
    Zs = Z.astype(np.int8)
    return BlockQuant(Q, S.astype(np.float32), Zs if Zs.any() else None, block)


def hessian_error(w: np.ndarray, wq: np.ndarray, h: np.ndarray) -> float:
    """``tr((W - W_q) H (W - W_q)^T)``: the layer output error GPTQ minimizes (``H = X^T X``)."""
    d = (np.asarray(w, np.float64) - np.asarray(wq, np.float64))
    return float(np.einsum("nk,kl,nl->", d, h, d))
