"""Blocked integer grids for weight-only quantization: a weight is seen as ``W[N, K]`` (output channels by reduction
dimension), cut into blocks of ``block`` consecutive K elements (the last block may be partial: ``ceil(K / block)``
blocks, padding never enters a scale), and each block gets a scale ``s`` and an integer zero point ``z`` with the
QuantizeLinear rule (ONNX opset 21 §QuantizeLinear, round half to even in float32)::

    q = saturate(rint(w / s) + z),    w^ = (q - z) * s

Grids (``grid`` argument), for ``bits``-bit types with ``qmin = -2^(b-1)`` / ``qmax = 2^(b-1) - 1`` (signed):

* ``"full"``: symmetric full range, the grid of ONNX Runtime's ``MatMulNBitsQuantizer`` (``scale = w_e / -8``, a
  negative scale) and llama.cpp's Q4_0: ``w_e`` is the block's largest-magnitude weight and lands exactly on the
  grid's end. qlinear keeps the scale positive, ``s = |w_e| / 2^(b-1)``, and moves the grid instead: ``z = 0`` when
  ``w_e < 0`` (``w_e -> qmin``), ``z = -1`` when ``w_e > 0`` (``w_e -> qmax``); the dequantized weights are those of
  the negative-scale form bit for bit (``(q - z) * s == (-(q - z)) * (-s)``).
* ``"symmetric"``: ``z = 0``, ``s = max|w| / qmax`` (AIMET's symmetric grid; what LPBQ decomposes).
* ``"asymmetric"``: ``[min(w, 0), max(w, 0)]`` onto ``[qmin, qmax]`` with an integer zero point (ONNX Runtime's
  asymmetric MatMulNBits rule).

``clip`` (0 < clip <= 1) shrinks the range before the scale is computed; :func:`search_clip` picks it per block by the
weight error (GPTQ's ``mse`` grids). :func:`search_scale` (the weight-only ``mse`` method, data-free) searches each
block's scale on both sides of the grid's own by the weight error, as llama.cpp's ``make_qx_quants`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qlinear.core.types import qtype
from qlinear.errors import ConfigError

GRIDS = ("full", "symmetric", "asymmetric")
CLIPS = np.linspace(1.0, 0.55, 19)  # candidate clipping ratios of the MSE search
#: offsets ``d`` of the grid end ``n_max + d`` of the scale search (llama.cpp's ``nmax + 0.1 * is``, is = -9..9)
STEPS = np.arange(-9, 10, dtype=np.float32) / np.float32(10)
REFIT = True  #: :func:`search_scale` adds each candidate's least-squares scale (measured: better on both texts)
FLOAT32 = np.dtype(np.float32)  # the default scale type


@dataclass(frozen=True)
class BlockQuant:
    """The quantized blocks of ``W[N, K]``: integers ``q`` ``[N, K]`` (int8 storage), ``scale`` ``[N, nb]`` float32,
    ``zero_point`` ``[N, nb]`` int8 (``None`` when all zero)."""

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray | None
    block: int

    def dequantize(self) -> np.ndarray:
        """``(q - z) * s`` in float32, ``[N, K]``."""
        return dequantize(self.q, self.scale, self.zero_point, self.block)


def n_blocks(k: int, block: int) -> int:
    return -(-k // block)


def padded(w: np.ndarray, block: int) -> np.ndarray:
    """``W[N, K]`` as ``[N, nb, block]`` float32, the partial last block padded with zeros (zeros are exact on
    every grid, so they change neither a range that includes 0 nor an error)."""
    n, k = w.shape
    nb = n_blocks(k, block)
    if nb * block == k:
        return np.ascontiguousarray(w, np.float32).reshape(n, nb, block)
    out = np.zeros((n, nb * block), np.float32)
    out[:, :k] = w
    return out.reshape(n, nb, block)


def expand(p: np.ndarray, k: int, block: int) -> np.ndarray:
    """Per-block values ``[N, nb]`` repeated over their columns, ``[N, K]``."""
    return np.repeat(p, block, axis=1)[:, :k]


def params(wb: np.ndarray, bits: int, grid: str, clip: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Scale (float32) and zero point (int64) of each block of ``wb`` ``[..., block]`` (last axis reduced)."""
    if grid not in GRIDS:
        raise ConfigError(f"weight grid {grid!r}: expected one of {', '.join(GRIDS)}")
    half = 2 ** (bits - 1)
    clip = np.asarray(clip, np.float32)
    if grid == "asymmetric":
        lo = np.minimum(wb.min(-1), 0) * clip
        hi = np.maximum(wb.max(-1), 0) * clip
        s = ((hi - lo) / np.float32(2 * half - 1)).astype(np.float32)
        s = np.where(s > 0, s, np.float32(1.0))
        z = np.clip(-half - np.rint(lo / s), -half, half - 1)
        return s, z.astype(np.int64)
    e = _extreme(wb)
    mag = np.abs(e) * clip
    if grid == "full":
        s = (mag / np.float32(half)).astype(np.float32)
        z = np.where(e > 0, -1, 0).astype(np.int64)
    else:
        s = (mag / np.float32(half - 1)).astype(np.float32)
        z = np.zeros(s.shape, np.int64)
    s = np.where(s > 0, s, np.float32(1.0))
    return s, z


def _extreme(wb: np.ndarray) -> np.ndarray:
    """Each block's largest-magnitude value, signed (the first one on a tie of ``+a`` and ``-a``, as
    ``argmax(|w|)`` picks), from two fast reductions instead of ``|w|`` and an arg-reduction."""
    mx, mn = wb.max(-1), wb.min(-1)
    e = np.where(mx > -mn, mx, mn)
    tie = (mx == -mn) & (mx != 0)
    if tie.any():
        rows = wb[tie]
        e[tie] = np.take_along_axis(rows, np.abs(rows).argmax(-1)[:, None], -1)[:, 0]
    return e


def quantize_blocks(wb: np.ndarray, s: np.ndarray, z: np.ndarray, bits: int) -> np.ndarray:
    """``saturate(rint(w / s) + z)`` per block (float32 division, half to even), int8 ``[..., block]``."""
    half = 2 ** (bits - 1)
    q = np.divide(wb, s[..., None], dtype=np.float32)
    np.rint(q, out=q)
    if np.any(z):
        q += z[..., None].astype(np.float32)
    np.clip(q, -half, half - 1, out=q)
    return q.astype(np.int8)


def dequantize(q: np.ndarray, s: np.ndarray, z: np.ndarray | None, block: int) -> np.ndarray:
    k = q.shape[1]
    zz = 0 if z is None else expand(z, k, block).astype(np.float32)
    return ((q.astype(np.float32) - zz) * expand(s, k, block)).astype(np.float32)


def search_clip(wb: np.ndarray, bits: int, grid: str, clips: np.ndarray = CLIPS) -> np.ndarray:
    """Per block, the clipping ratio of ``clips`` with the least squared weight error (the ``mse`` method)."""
    best = np.full(wb.shape[:-1], np.inf, np.float32)
    arg = np.ones(wb.shape[:-1], np.float32)
    for c in clips:
        s, z = params(wb, bits, grid, c)
        q = quantize_blocks(wb, s, z, bits)
        err = np.square((q.astype(np.float32) - z[..., None]) * s[..., None] - wb).sum(-1)
        better = err < best
        best = np.where(better, err, best)
        arg = np.where(better, np.float32(c), arg)
    return arg


def grid_end(bits: int, grid: str) -> int:
    """The integer a block's extreme lands on, in magnitude: ``2^(b-1)`` (full), ``2^(b-1) - 1`` (symmetric),
    ``2^b - 1`` levels across the range (asymmetric)."""
    half = 2 ** (bits - 1)
    return {"full": half, "symmetric": half - 1}.get(grid, 2 * half - 1)


def weighted_error(wb: np.ndarray, s: np.ndarray, z: np.ndarray, bits: int, imp: np.ndarray | None) -> np.ndarray:
    """``sum_i imp_i (w_i - w^_i)^2`` of every block ``[...]`` (``w^``: round to nearest on scale ``s``, zero point
    ``z``; ``imp`` ``None``: all ones, the plain squared error)."""
    d = _dq(wb, s, z, bits) - wb
    return np.einsum("...i,...i->...", d, d) if imp is None else np.einsum("...i,...i->...", imp, d * d)


def search_scale(wb: np.ndarray, bits: int, grid: str, *, importance: np.ndarray | None = None,
                 steps: np.ndarray = STEPS, refit: bool = REFIT,
                 scale_dtype: np.dtype = FLOAT32) -> tuple[np.ndarray, np.ndarray]:
    """The weight-only ``mse`` method (data-free): per block, the scale with the least squared weight error
    :func:`weighted_error` among candidates around the grid's own, the search of llama.cpp's ``make_qx_quants``
    (ggml-quants.c: grid ends ``nmax + 0.1 is``, is = -9..9, each with its least-squares scale) on the grid's own
    integers and zero point. Candidates: the grid's scale ``s0`` (the block's extreme on the grid end ``n``,
    :func:`grid_end`: round to nearest), ``s0 n / (n + d)`` for the offsets ``d`` of ``steps`` (``d > 0`` saturates
    the extreme a little, ``d < 0`` leaves the end of the grid unused) and, with ``refit``, each one's
    least-squares scale ``s = sum imp w q' / sum imp q'^2`` on its integers ``q' = q - z``. Every candidate is judged
    by rounding again on its scale, as the written integers are, so a block's error is never above round to
    nearest's (one of the candidates). ``importance`` (broadcast to ``wb``'s shape; llama.cpp's ``rmse_type`` 1 is
    ``w^2``) weights the error; ``None`` is the plain error. Measured on SmolLM2 int4 block 32 (README): plain error
    with refit lowers the perplexity below round to nearest's on both held-out texts (at block 128 it raised it);
    without refit it helped on one text only; ``w^2`` or the norm weights squared as ``importance`` raised it above round to nearest's, as did the
    former search of clipping ratios down to 0.55.
    Returns the scales (float32, representable in ``scale_dtype``) and zero points (those of :func:`params`)."""
    s0, z = params(wb, bits, grid)
    if scale_dtype != np.float32:
        s0 = _representable(s0, scale_dtype)
    zf = z[..., None].astype(np.float32)
    imp = None if importance is None else np.broadcast_to(np.asarray(importance, np.float32), wb.shape)
    best_s, best = s0, weighted_error(wb, s0, z, bits, imp)
    n = np.float32(grid_end(bits, grid))
    for d in steps:
        s = (s0 * (n / (n + d))).astype(np.float32)
        cands = [s]
        if refit:
            qp = quantize_blocks(wb, s, z, bits).astype(np.float32) - zf
            iw = wb if imp is None else imp * wb
            num = np.einsum("...i,...i->...", iw, qp)
            den = np.einsum("...i,...i->...", qp if imp is None else imp * qp, qp)
            cands.append(np.where((den > 0) & (num > 0), num / np.where(den > 0, den, 1), s).astype(np.float32))
        for c in cands:
            if scale_dtype != np.float32:
                c = _representable(c, scale_dtype)
            err = weighted_error(wb, c, z, bits, imp)
            better = err < best
            best = np.where(better, err, best)
            best_s = np.where(better, c, best_s)
    return best_s.astype(np.float32), z


def quantize_rtn(w: np.ndarray, bits: int, block: int, grid: str, *, method: str = "minmax",
                 scale_dtype: np.dtype = FLOAT32) -> BlockQuant:
    """Round-to-nearest of ``W[N, K]`` with per-block ``params`` (``method`` ``minmax``: full range; ``mse``: the
    scales of :func:`search_scale`). ``scale_dtype`` float16 rounds the scales to float16 first (weights stored in
    float16 dequantize with float16 scales)."""
    n, k = w.shape
    wb = padded(w, block)
    if method == "mse":
        s, z = search_scale(wb, bits, grid, scale_dtype=scale_dtype)
    else:
        s, z = params(wb, bits, grid)
        if scale_dtype != np.float32:
            s = _representable(s, scale_dtype)
    q = quantize_blocks(wb, s, z, bits).reshape(n, -1)[:, :k]
    return BlockQuant(np.ascontiguousarray(q), s, z.astype(np.int8) if z.any() else None, block)


def _representable(s: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Scales rounded to ``dtype`` (float16) and back, the smallest positive value where they underflow."""
    t = s.astype(dtype)
    tiny = np.finfo(dtype).smallest_subnormal
    return np.where(t > 0, t, tiny).astype(np.float32)


def bits_of(type_name: str) -> int:
    t = qtype(type_name)
    return int(t.bits)


# --- activation-aware grid ("aag"): clipping and scales chosen by the layer's output error --------------------------


def block_grams(h: np.ndarray, k: int, block: int) -> np.ndarray:
    """The diagonal blocks ``G_bb`` ``[nb, block, block]`` (float32) of a ``[K, K]`` Gram matrix ``X^T X``, the
    partial last block padded with zeros (padded weights are zero and stay zero: they add no error)."""
    nb = n_blocks(k, block)
    out = np.zeros((nb, block, block), np.float32)
    for b in range(nb):
        lo, hi = b * block, min((b + 1) * block, k)
        out[b, :hi - lo, :hi - lo] = h[lo:hi, lo:hi]
    return out


def block_output_error(wb: np.ndarray, wq: np.ndarray, gbb: np.ndarray) -> np.ndarray:
    """``||X_b (w_b - w^_b)||^2 = d^T G_bb d`` of every block ``[N, nb]`` (``d = w_b - w^_b``): the output error of
    each block on its own input columns (the cross-block terms of ``tr(dW G dW^T)`` left out, as AWQ's clipping
    search does, so that every block is chosen independently)."""
    d = (wb - wq).astype(np.float32)
    return np.einsum("nbi,bij,nbj->nb", d, gbb, d, optimize=True)


def _dq(wb: np.ndarray, s: np.ndarray, z: np.ndarray, bits: int) -> np.ndarray:
    q = quantize_blocks(wb, s, z, bits)
    return (q.astype(np.float32) - z[..., None]) * s[..., None]


def search_clip_output(wb: np.ndarray, gbb: np.ndarray, bits: int, grid: str,
                       clips: np.ndarray = CLIPS) -> tuple[np.ndarray, np.ndarray]:
    """Per block, the clipping ratio of ``clips`` with the least output error (:func:`block_output_error`) instead
    of the weight error of :func:`search_clip`; returns the ratios and their errors ``[N, nb]``."""
    best = np.full(wb.shape[:-1], np.inf, np.float32)
    arg = np.ones(wb.shape[:-1], np.float32)
    for c in clips:
        s, z = params(wb, bits, grid, c)
        err = block_output_error(wb, _dq(wb, s, z, bits), gbb)
        better = err < best
        best = np.where(better, err, best)
        arg = np.where(better, np.float32(c), arg)
    return arg, best


def refine_scales(wb: np.ndarray, gbb: np.ndarray, s: np.ndarray, z: np.ndarray, bits: int, *, iters: int = 4,
                  scale_dtype: np.dtype = FLOAT32) -> tuple[np.ndarray, np.ndarray]:
    """HQQ-like alternating refinement of the block scales under the output error: with the integers ``q`` fixed,
    the scale minimising ``(w - s q')^T G_bb (w - s q')`` (``q' = q - z``) is ``s = q'^T G_bb w / q'^T G_bb q'`` in
    closed form; the integers are then rounded again on the new scale, ``iters`` times. A block keeps a new scale only
    where its output error went down, so the result is never worse than the given grid; the zero points stay
    (integers, as ONNX stores them). Returns the scales and each block's output error."""
    best_s = s.astype(np.float32)
    best = block_output_error(wb, _dq(wb, best_s, z, bits), gbb)
    cur = best_s
    zf = z[..., None].astype(np.float32)
    for _ in range(iters):
        qp = quantize_blocks(wb, cur, z, bits).astype(np.float32) - zf
        gq = np.einsum("bij,nbj->nbi", gbb, qp, optimize=True)
        num, den = (gq * wb).sum(-1), (gq * qp).sum(-1)
        ok = den > 0
        cur = np.where(ok & (num > 0), num / np.where(ok, den, 1), cur).astype(np.float32)
        if scale_dtype != np.float32:
            cur = _representable(cur, scale_dtype)
        err = block_output_error(wb, _dq(wb, cur, z, bits), gbb)
        better = err < best
        best = np.where(better, err, best)
        best_s = np.where(better, cur, best_s)
    return best_s, best


def activation_aware_grid(w: np.ndarray, h: np.ndarray, bits: int, block: int, grid: str, *, iters: int = 4,
                          clips: np.ndarray = CLIPS, scale_dtype: np.dtype = FLOAT32) -> BlockQuant:
    """The ``aag`` weight-only method: round to nearest of ``W[N, K]`` on per-block grids chosen by the layer's
    output error with Gram matrix ``h = X^T X`` ``[K, K]`` rather than by the weight error: the clipping ratio of
    ``clips`` per block (:func:`search_clip_output`, the full range is one of the candidates), then ``iters``
    closed-form scale refinements (:func:`refine_scales`). Each block's output error
    (:func:`block_output_error`) is never above round to nearest's on the full range. The integers are
    ``quantize_blocks`` of the weight on the returned scales (rounding again from the scales gives them back)."""
    n, k = w.shape
    wb = padded(w, block)
    gbb = block_grams(np.asarray(h, np.float32), k, block)
    clip, _ = search_clip_output(wb, gbb, bits, grid, clips)
    s, z = params(wb, bits, grid, clip)
    if scale_dtype != np.float32:
        s = _representable(s, scale_dtype)
    if iters:
        s, _ = refine_scales(wb, gbb, s, z, bits, iters=iters, scale_dtype=scale_dtype)
    q = quantize_blocks(wb, s, z, bits).reshape(n, -1)[:, :k]
    return BlockQuant(np.ascontiguousarray(q), s.astype(np.float32), z.astype(np.int8) if z.any() else None, block)
