"""int32 accumulators that cannot overflow: raising weight scales where a bias or a long reduction needs it.

A layer ``y = W x + b`` runs on integers as ``acc[c] = b_q[c] + sum_k (x_q[k] - z_x)(w_q[c,k] - z_w[c])`` with
``b_q = round(b / (s_x s_w[c]))``. When a channel's weights are nearly zero its weight scale is tiny, ``b_q`` does
not fit in int32 and every runtime's accumulator wraps (the float Q/DQ simulation hides it).

The rule (TFLite ``AdjustWeightsForBiasScale``; ONNX Runtime's quantizer adapted it with less margin):

1. **bias headroom**: ``|b_q[c]| <= 2^30`` (half the int32 range, TFLite's margin; ORT only asks ``< 2^31``), i.e.
   ``s_w[c] >= |b[c]| / (s_x 2^30)``; a channel whose scale is smaller gets exactly that scale (rounded up in
   float32, the type ONNX stores), the other channels are untouched;
2. **accumulator bound** (what :func:`qlinear.graph.check_integer` proves on the written model):
   the largest ``|b_q[c] + sum_k (x_q[k] - z_x)(w_q[c,k] - z_w[c])|`` over every input the activation type allows
   (:func:`accumulator_bound`, exact) stays ``<= 2^31 - 1``; a channel that exceeds it (a reduction of ~66k int8
   products) gets its scale raised in proportion until it fits.

An LPBQ layer runs as its blocks expand: 8-bit integers ``w_q * int_scale`` at the per-channel float scale ``s_c``,
so ``b_q = round(b / (s_x s_c))`` and the accumulator sums those integers (AIMET's int32 bias, QNN's 4-to-8-bit
expansion). Per-block and LPBQ weights raise every block scale of the channel by the same factor (LPBQ: the
per-channel float scale), so the block structure is kept. Asymmetric weights keep their zero point: the scaled grid
covers more than the old range.
"""

from __future__ import annotations

import numpy as np

from qlinear.core import granularity as gr
from qlinear.encodings.model import Encoding

I32_MAX = 2**31 - 1
BIAS_LIMIT = 2**30


def up32(v: np.ndarray) -> np.ndarray:
    """float64 values rounded up to the next float32 (so the stored scale is never below the bound)."""
    v = np.asarray(v, np.float64)
    s = v.astype(np.float32)
    s = np.where(s.astype(np.float64) < v, np.nextafter(s, np.float32(np.inf)), s)
    return s.astype(np.float64)


def _scale_channels(e: Encoding, ratio: np.ndarray, axis: int) -> Encoding:
    """``e`` with every scale of channel ``c`` (along tensor ``axis``) multiplied by ``ratio[c]`` (>= 1)."""
    if isinstance(e.grain, gr.PerTensor):
        return e.replace(scale=up32(e.scale * float(ratio.max())))
    s = np.asarray(e.scale, np.float64)
    if isinstance(e.grain, gr.PerAxis):
        return e.replace(scale=np.where(ratio > 1, up32(s * ratio), s))
    shape = [1] * s.ndim  # blocked / LPBQ scales keep the tensor's rank
    shape[axis] = ratio.size
    if s.shape[axis] == 1:  # an LPBQ per-channel scale on another axis layout: scale it uniformly
        return e.replace(scale=up32(s * float(ratio.max())))
    r = ratio.reshape(shape)
    return e.replace(scale=np.where(r > 1, up32(s * r), s))


def accumulator_bound(centered_w: np.ndarray, bias_q: np.ndarray | None, x_lo: int, x_hi: int,
                      channel_axis: int) -> np.ndarray:
    """Worst-case ``|acc[c]|`` per output channel over every input with ``x_q - z_x`` in ``[x_lo, x_hi]``
    (``x_lo <= 0 <= x_hi``): ``max(b + sum_k max(w x_hi, w x_lo), -b + sum_k max(-w x_hi, -w x_lo))``, reached by
    the input that takes ``x_hi`` where the weight is positive and ``x_lo`` elsewhere (or the reverse). int64, exact."""
    w = np.moveaxis(np.asarray(centered_w, np.int64), channel_axis, 0)
    w = w.reshape(w.shape[0], -1)
    pos = np.where(w > 0, w, 0).sum(1)
    neg = np.where(w < 0, -w, 0).sum(1)
    up = pos * int(x_hi) + neg * -int(x_lo)      # the largest sum
    down = neg * int(x_hi) + pos * -int(x_lo)    # minus the smallest sum
    b = np.zeros(w.shape[0], np.int64) if bias_q is None else np.asarray(bias_q, np.int64).reshape(-1)
    return np.maximum(b + up, down - b)


def bias_q(bias: np.ndarray, input_scale: float, weight_channel_scale: np.ndarray) -> np.ndarray:
    """The int32 bias values as :func:`qlinear.graph.apply` writes them: ``rint(b / float32(s_x s_w))``."""
    s = (np.float64(input_scale) * np.asarray(weight_channel_scale, np.float64)).astype(np.float32)
    return np.rint(np.asarray(bias, np.float64).reshape(-1) / s.astype(np.float64))


def fit_accumulator(weight: Encoding, w: np.ndarray, bias: np.ndarray | None, input_scale: float,
                    x_range: tuple[int, int] | None, channel_axis: int) -> tuple[Encoding, np.ndarray]:
    """The weight encoding with scales raised where the layer's int32 bias or accumulator needs it (module
    docstring), and the factor applied per output channel (1 where nothing changed). ``x_range`` is the range of
    ``x_q - z_x`` (``(qmin - z_x, qmax - z_x)``), or None to check the bias alone (16x8 layers: int64 accumulators)."""
    rank = w.ndim
    ax = channel_axis % rank
    n = w.shape[ax]
    ratio = np.ones(n)
    e = weight
    s_x = float(input_scale)
    if bias is not None:
        ws = np.broadcast_to(e.channel_scale(ax, rank), (n,)).astype(np.float64)
        need = np.abs(np.asarray(bias, np.float64).reshape(-1)) / (s_x * BIAS_LIMIT)
        r = np.where(need > ws, need / ws, 1.0)
        if np.any(r > 1):
            e = _scale_channels(e, r, ax)
            ratio *= r
    w32 = np.asarray(w, np.float32)
    for _ in range(8 if x_range is not None else 0):  # requantized weights round: a second small step may be needed
        ws = np.broadcast_to(e.channel_scale(ax, rank), (n,))
        bq = None if bias is None else bias_q(bias, s_x, ws)
        bound = accumulator_bound(e.kernel_integers(w32), bq, x_range[0], x_range[1], ax)
        over = bound > I32_MAX
        if not np.any(over):
            break
        r = np.where(over, bound / (I32_MAX * 0.98), 1.0)
        e = _scale_channels(e, r, ax)
        ratio *= r
    return e, ratio


__all__ = ["BIAS_LIMIT", "I32_MAX", "accumulator_bound", "bias_q", "fit_accumulator", "up32"]
