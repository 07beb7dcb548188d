"""Choosing a range from a histogram: percentile, MSE-optimal, SQNR search (AIMET tf_enhanced-like) and entropy
(KL divergence, TensorRT-style). Vectorised over groups and candidates; loops run over candidate thresholds (entropy)
or group chunks, never over elements.

* **SQNR search** (notes ``aimet.md`` §2.4): candidates ``(delta, offset)`` — asymmetric ``f*delta0`` for
  f in {1..17}/16 with 21 offsets from ``-N`` to 0 plus the observed grid, each clamped to the observed range;
  symmetric ``f * 2*absmax/N`` for f = 0.01..1.01 with offset ``-ceil(N/2)``. Cost
  ``gamma * clipping error + rounding error`` over bin centres, ``gamma = 3`` (AIMET's constant).
* **MSE**: the same candidates with ``gamma = 1`` (the expected squared error itself).
* **Entropy**: the threshold ``t`` on the ``|x|`` histogram minimising ``KL(P || Q)`` where Q merges P's bins into
  ``2^(bits-1)`` levels (TensorRT / ORT ``get_entropy_threshold``).
* **Percentile**: bin edges where the cumulative count reaches ``p`` (and ``100-p`` on the low side).
"""

from __future__ import annotations

import numpy as np

from qlinear.calibration import histogram as H

GAMMA_SQNR = 3.0


def _candidates(lo: np.ndarray, hi: np.ndarray, n: float, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """(G, K) candidate ranges."""
    if symmetric:
        absmax = np.maximum(-lo, hi)
        f = np.arange(1, 102) / 100.0
        delta = (2 * absmax / n)[:, None] * f[None, :]
        nn = np.ceil(n / 2)
        return -nn * delta, (n - nn) * delta
    d0 = np.maximum((hi - lo) / n, 1e-38)
    f = np.arange(1, 18) / 16.0
    offs = np.trunc(-n + n / 20.0 * np.arange(21))
    delta = d0[:, None, None] * f[None, :, None]
    clo = (delta * offs[None, None, :]).reshape(len(lo), -1)
    chi = (delta * (offs[None, None, :] + n)).reshape(len(lo), -1)
    clo = np.concatenate([np.maximum(clo, lo[:, None]), lo[:, None]], 1)
    chi = np.concatenate([np.minimum(chi, hi[:, None]), hi[:, None]], 1)
    clo = np.minimum(clo, 0)
    chi = np.maximum(chi, np.maximum(clo + 1e-30, 0))
    return clo, chi


def search_range(c: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray, bits: int, *, symmetric: bool,
                 gamma: float, chunk: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """The candidate range with the lowest ``gamma*clip + quant`` squared error, per group."""
    n = 2.0 ** bits - 1
    lo = np.minimum(lo, 0.0)
    hi = np.maximum(hi, 0.0)
    out_lo, out_hi = lo.copy(), hi.copy()
    for s in range(0, len(lo), chunk):
        sl = slice(s, s + chunk)
        clo, chi = _candidates(lo[sl], hi[sl], n, symmetric)
        delta = np.maximum((chi - clo) / n, 1e-38)
        if symmetric:
            zp = np.full(delta.shape, np.ceil(n / 2))
        else:
            zp = np.clip(np.round(-clo / delta), 0, n)
        cc = c[sl][:, None, :].astype(np.float32)
        d3 = delta[:, :, None].astype(np.float32)
        z3 = zp[:, :, None].astype(np.float32)
        q = np.clip(np.round(cc / d3) + z3, 0, n)
        err = ((q - z3) * d3 - cc) ** 2
        clipped = (cc < (0 - z3) * d3) | (cc > (n - z3) * d3)
        cost = (np.where(clipped, np.float32(gamma), np.float32(1.0)) * err * w[sl][:, None, :].astype(np.float32)).sum(
            2, dtype=np.float64)
        best = cost.argmin(1)
        r = np.arange(len(best))
        d_b, z_b = delta[r, best], zp[r, best]
        out_lo[sl] = -z_b * d_b
        out_hi[sl] = (n - z_b) * d_b
    empty = w.sum(1) == 0
    out_lo[empty], out_hi[empty] = lo[empty], hi[empty]
    return out_lo, out_hi


def abs_counts(counts: np.ndarray, half: int) -> np.ndarray:
    """Histogram of |x| (bins [r*w, (r+1)*w], r = 0..half-1) from a signed dyadic histogram."""
    pos = counts[:, half:]
    neg = counts[:, :half][:, ::-1]
    return pos + neg


def percentile_range(counts: np.ndarray, k: np.ndarray, half: int, lo: np.ndarray, hi: np.ndarray, p: float, *,
                     symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    width = np.ldexp(1.0, np.where(k == H.K_EMPTY, 0, k).astype(np.int32))
    if symmetric:
        a = abs_counts(counts, half)
        cdf = np.cumsum(a, 1) / np.maximum(a.sum(1, keepdims=True), 1)
        i = (cdf < p / 100.0).sum(1)
        t = (i + 1) * width
        return np.maximum(-t, lo), np.minimum(t, hi)
    cdf = np.cumsum(counts, 1) / np.maximum(counts.sum(1, keepdims=True), 1)
    cut = (100.0 - p) / 100.0
    i_lo = (cdf <= cut).sum(1)
    i_hi = (cdf < 1 - cut).sum(1)
    rlo = (i_lo - half) * width
    rhi = (i_hi - half + 1) * width
    return np.maximum(rlo, lo), np.minimum(rhi, hi)


def _smooth(d: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Mix ``eps`` of a uniform distribution in, so empty bins do not make KL infinite (the role of TensorRT's
    ``smooth_distribution``, without its negative bins)."""
    return (d + eps / d.size) / (1.0 + eps)


def entropy_threshold(a: np.ndarray, width: float, bits: int, *, max_bins: int = 1024, candidates: int = 64) -> float:
    """KL-optimal |x| threshold of one group's |x| histogram ``a`` (bin width ``width``)."""
    last = int(np.nonzero(a)[0][-1]) + 1 if a.any() else 1
    f = max(1, int(2 ** np.ceil(np.log2(max(last, 1) / max_bins))))
    m = -(-last // f)
    h = np.zeros(m * f)
    h[:last] = a[:last]
    h = h.reshape(m, f).sum(1)
    w = width * f
    nq = 2 ** (bits - 1)
    if m <= nq:
        return m * w
    best, best_i = np.inf, m
    for i in np.unique(np.linspace(nq, m, min(candidates, m - nq + 1)).astype(int)):
        p = h[:i].copy()
        p[i - 1] += h[i:].sum()
        nz = p > 0
        # merge the unfolded slice into nq levels, spread each level's mass over its non-empty bins
        level_of = (np.arange(i) * nq) // i
        mass = np.bincount(level_of, weights=h[:i], minlength=nq)
        cnt = np.bincount(level_of, weights=nz, minlength=nq)
        q = np.where(nz, mass[level_of] / np.maximum(cnt[level_of], 1), 0.0)
        ps = _smooth(p / p.sum())
        qs = _smooth(q / max(q.sum(), 1e-300))
        kl = float(np.sum(ps * np.log(ps / qs)))
        if kl < best:
            best, best_i = kl, i
    return best_i * w


def entropy_range(counts: np.ndarray, k: np.ndarray, half: int, lo: np.ndarray, hi: np.ndarray,
                  bits: int) -> tuple[np.ndarray, np.ndarray]:
    a = abs_counts(counts, half)
    t = np.array([entropy_threshold(a[g], float(np.ldexp(1.0, int(k[g]) if k[g] != H.K_EMPTY else 0)), bits)
                  for g in range(len(a))])
    return np.maximum(-t, lo), np.minimum(t, hi)
