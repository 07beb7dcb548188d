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
    """(G, K) candidate ranges: AIMET's grids plus a fine grid just below the observed range (where the optimum
    lies at 8 bits) and the min-max range itself."""
    fine = np.linspace(0.80, 1.0, 21)
    if symmetric:
        absmax = np.maximum(-lo, hi)
        nn = np.ceil(n / 2)
        p_ = n - nn
        f = np.linspace(0.05, 1.0, 20)
        delta = (2 * absmax / n)[:, None] * f[None, :]
        mm = np.maximum(hi / p_, -lo / nn)[:, None]  # the min-max grid (AIMET symmetric formula)
        delta = np.concatenate([delta, mm, mm * fine[None, :]], 1)
        return -nn * delta, p_ * delta
    d0 = np.maximum((hi - lo) / n, 1e-38)
    f = np.arange(1, 18) / 16.0
    offs = np.trunc(-n + n / 20.0 * np.arange(21))
    delta = d0[:, None, None] * f[None, :, None]
    clo = (delta * offs[None, None, :]).reshape(len(lo), -1)
    chi = (delta * (offs[None, None, :] + n)).reshape(len(lo), -1)
    # shrink the observed range from both ends by the fine factors (keeps zero inside)
    slo = lo[:, None] * fine[None, :]
    shi = hi[:, None] * fine[None, :]
    clo = np.concatenate([np.maximum(clo, lo[:, None]), lo[:, None], slo, slo, lo[:, None] + 0 * slo], 1)
    chi = np.concatenate([np.minimum(chi, hi[:, None]), hi[:, None], shi, hi[:, None] + 0 * shi, shi], 1)
    clo = np.minimum(clo, 0)
    chi = np.maximum(chi, np.maximum(clo + 1e-30, 0))
    return clo, chi


def _saw(t: np.ndarray) -> np.ndarray:
    """Antiderivative of ``(t - round(t))^2`` (period 1, mean 1/12 per period), for exact in-bin rounding error."""
    u = t + 0.5
    n = np.floor(u)
    r = u - n
    return n / 12.0 + ((r - 0.5) ** 3 + 0.125) / 3.0


def _cost(a: np.ndarray, width: np.ndarray, w: np.ndarray, clo: np.ndarray, chi: np.ndarray, n: float,
          symmetric: bool, gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cost, delta, zero point) of candidate ranges ``[G, K]`` over histogram bins ``[a, a + width)``: the error of
    each bin is integrated exactly for a uniform density inside it (rounding: :func:`_saw`; clipping:
    ``∫(x - edge)^2``)."""
    delta = np.maximum((chi - clo) / n, 1e-38)
    zp = np.full(delta.shape, np.ceil(n / 2)) if symmetric else np.clip(np.round(-clo / delta), 0, n)
    d3 = delta[:, :, None]
    rlo = (-zp * delta)[:, :, None]
    rhi = ((n - zp) * delta)[:, :, None]
    a0 = a[:, None, :]
    a1 = a0 + width[:, None, None]
    i0 = np.clip(a0, rlo, rhi)
    i1 = np.clip(a1, rlo, rhi)
    inside = (_saw(i1 / d3) - _saw(i0 / d3)) * d3**3
    below = np.where(a0 < rlo, ((np.minimum(a1, rlo) - rlo) ** 3 - (a0 - rlo) ** 3) / 3.0, 0.0)
    above = np.where(a1 > rhi, ((a1 - rhi) ** 3 - (np.maximum(a0, rhi) - rhi) ** 3) / 3.0, 0.0)
    cost = ((inside + gamma * (below + above)) * (w / width[:, None])[:, None, :]).sum(2)
    return cost, delta, zp


def search_range(coarse: tuple[np.ndarray, np.ndarray, np.ndarray], fine: tuple[np.ndarray, np.ndarray, np.ndarray],
                 lo: np.ndarray, hi: np.ndarray, bits: int, *, symmetric: bool, gamma: float, keep: int = 10,
                 chunk: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """The candidate range with the lowest ``gamma*clipping + rounding`` squared error, per group.

    Two stages: every candidate is costed on a coarse histogram (``coarse`` = left edges, bin width, counts), then
    the ``keep`` best and the min-max range are costed again on a fine one (bins well below the quantization step)
    and the best of those wins.
    """
    n = 2.0 ** bits - 1
    lo = np.minimum(lo, 0.0)
    hi = np.maximum(hi, 0.0)
    out_lo, out_hi = lo.copy(), hi.copy()
    for s in range(0, len(lo), chunk):
        sl = slice(s, s + chunk)
        clo, chi = _candidates(lo[sl], hi[sl], n, symmetric)
        cost, _, _ = _cost(coarse[0][sl], coarse[1][sl], coarse[2][sl], clo, chi, n, symmetric, gamma)
        top = np.argsort(cost, axis=1)[:, :keep]
        mm_lo, mm_hi = _candidates_minmax(lo[sl], hi[sl], n, symmetric)
        flo = np.concatenate([np.take_along_axis(clo, top, 1), mm_lo], 1)
        fhi = np.concatenate([np.take_along_axis(chi, top, 1), mm_hi], 1)
        fcost, delta, zp = _cost(fine[0][sl], fine[1][sl], fine[2][sl], flo, fhi, n, symmetric, gamma)
        best = fcost.argmin(1)
        r = np.arange(len(best))
        d_b, z_b = delta[r, best], zp[r, best]
        out_lo[sl] = -z_b * d_b
        out_hi[sl] = (n - z_b) * d_b
    empty = coarse[2].sum(1) == 0
    out_lo[empty], out_hi[empty] = lo[empty], hi[empty]
    return out_lo, out_hi


def _candidates_minmax(lo: np.ndarray, hi: np.ndarray, n: float, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """The min-max range as a candidate ``[G, 1]`` (AIMET's symmetric grid, or the observed range)."""
    if symmetric:
        nn = np.ceil(n / 2)
        d = np.maximum(hi / (n - nn), -lo / nn)
        return (-nn * d)[:, None], ((n - nn) * d)[:, None]
    return lo[:, None], np.maximum(hi, lo + 1e-30)[:, None]


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


def entropy_threshold(a: np.ndarray, width: float, bits: int, *, max_bins: int = 1024, candidates: int = 64) -> float:
    """KL-optimal |x| threshold of one group's |x| histogram ``a`` (bin width ``width``)."""
    last = int(np.nonzero(a)[0][-1]) + 1 if a.any() else 1
    f = max(1, int(2 ** np.ceil(np.log2(max(last, 1) / max_bins))))
    m = -(-last // f)
    h = np.zeros(m * f)
    h[:last] = a[:last]
    h = h.reshape(m, f).sum(1)
    # the bin at zero holds the exact zeros of ReLU-like tensors: zero is on every grid, and its spike would make
    # KL favour tiny thresholds, so it does not take part
    h[0] = 0.0
    if not h.any():
        return m * width * f
    w = width * f
    nq = 2 ** (bits - 1)
    if m <= nq:
        return m * w
    # all candidate thresholds at once: row c keeps bins [0, i_c), folds the rest into bin i_c - 1, merges the
    # unfolded slice into nq levels and spreads each level's mass over its non-empty bins
    cands = np.unique(np.linspace(nq, m, min(candidates, m - nq + 1)).astype(int))
    j = np.arange(m)
    inside = j[None, :] < cands[:, None]
    hs = np.where(inside, h[None, :], 0.0)
    p = hs.copy()
    tail = np.cumsum(h[::-1])[::-1]  # tail[i] = sum(h[i:])
    last = cands - 1
    rows = np.arange(len(cands))
    p[rows, last] += np.where(cands < m, tail[np.minimum(cands, m - 1)], 0.0)
    nz = p > 0
    level = np.where(inside, (j[None, :] * nq) // cands[:, None], 0)
    flat = (rows[:, None] * nq + level)
    mass = np.bincount(flat[inside], weights=hs[inside], minlength=len(cands) * nq).reshape(len(cands), nq)
    cnt = np.bincount(flat[inside], weights=nz[inside].astype(float), minlength=len(cands) * nq).reshape(len(cands), nq)
    q = np.where(nz & inside, np.take_along_axis(mass, level, 1) / np.maximum(np.take_along_axis(cnt, level, 1), 1),
                 0.0)
    ps = p / p.sum(1, keepdims=True)
    qs = q / np.maximum(q.sum(1, keepdims=True), 1e-300)
    width = cands[:, None]
    eps = 1e-4
    # mix eps of a uniform distribution over each candidate's bins in, so empty bins do not make KL infinite
    # (the role of TensorRT's smooth_distribution, without its negative bins)
    ps = (ps + eps / width) / (1 + eps)
    qs = (qs + eps / width) / (1 + eps)
    kl = np.where(inside, ps * np.log(np.where(inside, ps / qs, 1.0)), 0.0).sum(1)
    best_i = int(cands[int(np.argmin(kl))])
    return best_i * w


def entropy_range(counts: np.ndarray, k: np.ndarray, half: int, lo: np.ndarray, hi: np.ndarray,
                  bits: int) -> tuple[np.ndarray, np.ndarray]:
    a = abs_counts(counts, half)
    t = np.array([entropy_threshold(a[g], float(np.ldexp(1.0, int(k[g]) if k[g] != H.K_EMPTY else 0)), bits)
                  for g in range(len(a))])
    return np.maximum(-t, lo), np.minimum(t, hi)
