"""Average / max pooling, mean and concatenation (TFLite reference formulas, notes ``int8-kernels.md`` §2).

* average pool: sum of the raw values over the valid window (padding not counted), divided with C-style rounding
  ``(acc ± n/2) / n`` (ties away from zero); input and output share scale and zero point;
* max pool: max over the valid window;
* mean (``QuantizedMeanOrSum``): ``sum = Σq - zp_in*N``; ``MBQM(sum, q', shift - sh) + zp_out`` with
  ``q' = (q << sh) / N`` (fixed modes); float modes ``rint(sum * s_in / (N * s_out)) + zp_out``; ``xnnpack``
  (LiteRT's XNNPACK delegate, measured): ``rint(Σq * sc + (zp_out - N zp_in sc))``, ``sc = s_in / (s_out N)``,
  all float32;
* concatenation: inputs requantized to the output parameters (identity when they are equal, as int8 TFLite requires).
"""

from __future__ import annotations

import math

import numpy as np

from qlinear.kernels.elementwise import requantize_tensor
from qlinear.kernels.requant import FIXED_MODES, mbqm, quantize_multiplier


def _valid_windows(x: np.ndarray, k: tuple[int, int], stride: tuple[int, int], pads: tuple[int, int, int, int],
                   fill: float) -> tuple[np.ndarray, np.ndarray]:
    t, lft, b, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (lft, r)), constant_values=np.nan)
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=(2, 3))[:, :, ::stride[0], ::stride[1]]
    valid = ~np.isnan(win)
    return np.where(valid, win, fill), valid


def avg_pool2d(x: np.ndarray, kernel: tuple[int, int], *, stride: tuple[int, int] = (1, 1),
               pads: tuple[int, int, int, int] = (0, 0, 0, 0), qmin: int = -128, qmax: int = 127) -> np.ndarray:
    win, valid = _valid_windows(x, kernel, stride, pads, 0.0)
    acc = win.sum((-1, -2)).astype(np.int64)
    n = valid.sum((-1, -2)).astype(np.int64)
    half = n // 2
    num = np.where(acc > 0, acc + half, acc - half)
    q = np.where(num >= 0, num // n, -((-num) // n))  # C division truncates toward zero
    return np.clip(q, qmin, qmax)


def max_pool2d(x: np.ndarray, kernel: tuple[int, int], *, stride: tuple[int, int] = (1, 1),
               pads: tuple[int, int, int, int] = (0, 0, 0, 0)) -> np.ndarray:
    win, _ = _valid_windows(x, kernel, stride, pads, -np.inf)
    return win.max((-1, -2)).astype(np.int64)


def mean(x: np.ndarray, axes: tuple[int, ...], *, s_in: float, zp_in: int, s_out: float, zp_out: int, mode: str,
         keepdims: bool = True, qmin: int = -128, qmax: int = 127) -> np.ndarray:
    x = np.asarray(x, np.int64)
    n = int(np.prod([x.shape[a] for a in axes]))
    total = x.sum(axis=axes, keepdims=keepdims) - zp_in * n
    if mode in FIXED_MODES:
        q, shift = quantize_multiplier(np.float64(np.float32(s_in)) / np.float64(np.float32(s_out)))
        q, shift = int(q), int(shift)
        sh = min(int(math.floor(math.log2(n))), 32, 31 + shift)
        qn = (q << sh) // n
        return np.clip(mbqm(total, qn, shift - sh) + zp_out, qmin, qmax)
    if mode == "xnnpack":  # XNNPACK qs8 mean: the raw sum scaled, the zero points folded into a float bias
        raw = x.sum(axis=axes, keepdims=keepdims)
        sc = np.float32(s_in) / (np.float32(s_out) * np.float32(n))
        bias = np.float32(zp_out) - np.float32(zp_in * n) * sc
        return np.clip(np.rint(raw.astype(np.float32) * sc + bias), qmin, qmax).astype(np.int64)
    m = np.float32(s_in) / (np.float32(n) * np.float32(s_out))
    return np.clip(np.rint(total.astype(np.float32) * m) + zp_out, qmin, qmax).astype(np.int64)


def concat(xs: list[np.ndarray], params: list[tuple[float, int]], *, s_out: float, zp_out: int, axis: int,
           mode: str, qmin: int = -128, qmax: int = 127) -> np.ndarray:
    parts = []
    for x, (s, z) in zip(xs, params):
        if np.float32(s) == np.float32(s_out) and z == zp_out:
            parts.append(np.asarray(x, np.int64))
        else:
            parts.append(requantize_tensor(x, s_in=s, zp_in=z, s_out=s_out, zp_out=zp_out, mode=mode, qmin=qmin,
                                           qmax=qmax))
    return np.concatenate(parts, axis=axis)
