"""Mergeable histograms on a dyadic grid.

Each group's histogram has ``2*half`` bins of width ``2^k`` covering ``[-half*2^k, half*2^k)``, anchored at 0. A
batch whose ``max|x|`` needs a wider range raises ``k``; old counts are merged ``2^d`` to one (bin edges of the
coarse grid are edges of the fine one). The histogram of the union of batches is therefore the histogram of all
the data at the final ``k``, whatever the order or split of the batches: :meth:`merge` is exact (integer counts),
which a data-dependent range (ORT's ``np.histogram`` over the first batch's range) cannot be.
"""

from __future__ import annotations

import numpy as np

K_EMPTY = -1100  # level of a group that has seen no finite non-zero value
USE_NATIVE = True  # tests switch the compiled kernel off to compare it with the NumPy path


def level(amax: np.ndarray, half: int) -> np.ndarray:
    """Smallest ``k`` with ``amax < half * 2^k`` (exact: frexp of a power-of-two quotient)."""
    _, e = np.frexp(np.asarray(amax, np.float64) / half)
    return np.where(amax > 0, e, K_EMPTY).astype(np.int64)


def rebin(counts: np.ndarray, k_old: np.ndarray, k_new: np.ndarray, half: int) -> np.ndarray:
    """Counts of each group moved from level ``k_old`` to the coarser ``k_new`` (exact)."""
    d = k_new - k_old
    if not np.any(d > 0):
        return counts
    out = counts.copy()
    nbins = 2 * half
    rel = np.arange(nbins, dtype=np.int64) - half
    for g in np.nonzero(d > 0)[0]:
        new_idx = (rel >> int(min(d[g], 62))) + half  # floor division by 2^d (arithmetic shift)
        out[g] = 0
        np.add.at(out[g], new_idx, counts[g])
    return out


def add(counts: np.ndarray, k: np.ndarray, x2d: np.ndarray, half: int) -> None:
    """Add the finite values of ``x2d`` (groups, n) to ``counts`` (groups, 2*half) at levels ``k``.

    float32 input goes through the compiled kernel (groups split across threads); the NumPy path computes the
    same bins.
    """
    g, n = x2d.shape
    nbins = 2 * half
    kk = np.where(k == K_EMPTY, 0, k)
    from qlinear.core import native

    if USE_NATIVE and native.available() and x2d.dtype == np.float32 and counts.dtype == np.int64 and counts.flags.c_contiguous:
        x = np.ascontiguousarray(x2d)
        mult = np.ldexp(1.0, -kk.astype(np.int32)).astype(np.float64)
        fn = native.lib().ql_hist_groups_f32
        threads = native.resolve_threads(None, x.size) if g > 1 else 1

        def run(lo: int, hi: int) -> None:
            fn(x[lo:hi].ctypes.data, hi - lo, n, mult[lo:hi].ctypes.data, half, counts[lo:hi].ctypes.data)

        if threads > 1:
            native.parallel_ranges(run, g, threads)
        else:
            run(0, g)
        return
    finite = np.isfinite(x2d)
    scaled = np.ldexp(np.where(finite, x2d, 0).astype(np.float64), -kk[:, None].astype(np.int32))
    idx = np.floor(scaled).astype(np.int64) + half
    np.clip(idx, 0, nbins - 1, out=idx)
    idx += (np.arange(g, dtype=np.int64) * nbins)[:, None]
    w = finite.reshape(-1)
    flat = idx.reshape(-1)
    if not w.all():
        flat = flat[w]
    counts += np.bincount(flat, minlength=g * nbins).reshape(g, nbins)


def compact(counts: np.ndarray, k: np.ndarray, half: int, target: int = 512) -> tuple[np.ndarray, np.ndarray,
                                                                                 np.ndarray]:
    """Each group's histogram restricted to its used span and merged ``2^j`` to one so that at most ``target`` bins
    remain: (left edges ``[G, target]``, bin width ``[G]``, counts ``[G, target]``). Mass is kept exactly; the
    merged bins are still dyadic (edges on the grid of width ``2^(k+j)``)."""
    g, nb = counts.shape
    used = counts > 0
    first = np.where(used.any(1), used.argmax(1), half)
    last = np.where(used.any(1), nb - 1 - used[:, ::-1].argmax(1), half)
    span = last - first + 1
    factor = np.maximum(1, 2 ** np.ceil(np.log2(np.maximum(span, 1) / target))).astype(np.int64)
    width = np.ldexp(1.0, np.where(k == K_EMPTY, 0, k).astype(np.int32))
    out_a = np.zeros((g, target))
    out_p = np.zeros((g, target))
    for f in np.unique(factor):
        rows = np.nonzero(factor == f)[0]
        start = first[rows]
        idx = start[:, None] + np.arange(target * f)[None, :]
        valid = idx < nb
        idxc = np.minimum(idx, nb - 1)
        w = np.take_along_axis(counts[rows], idxc, 1) * valid
        out_p[rows] = w.reshape(len(rows), target, f).sum(2)
        out_a[rows] = (start[:, None] - half + np.arange(target)[None, :] * f) * width[rows, None]
    return out_a, width * factor, out_p


def sparse(a: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep only the non-empty bins of each group (left-aligned, padded with empty bins): searches then cost the
    number of occupied bins, which is small for per-channel weights."""
    nz = w > 0
    m = int(max(nz.sum(1).max(initial=1), 1))
    order = np.argsort(~nz, axis=1, kind="stable")[:, :m]
    return np.take_along_axis(a, order, 1), np.take_along_axis(w * nz, order, 1)
