"""Fully connected / matmul and Conv2D (regular, grouped, depthwise) in integer arithmetic.

Accumulation is exact (:mod:`qlinear.kernels.gemm`: float64 BLAS + precomputed weight terms); requantization is
one of the named modes (:mod:`qlinear.kernels.requant`). Layouts are ONNX's: activations ``[N, K]`` / NCHW, weights
``[out, in]`` / OIHW, per-channel parameters along the output channel. Padding uses the input zero point, which is
TFLite's "skip the tap" and ONNX's zero padding of the real value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.kernels.gemm import PreparedWeights, int_matmul
from qlinear.kernels.requant import requantize


def _mult(s_x: float, s_w: Any, s_out: float, mode: str) -> np.ndarray:
    """Effective multiplier per output channel, as the runtime forms it: double ``s_x*s_w/s_out`` (TFLite), or
    float32 ``s_x*s_w/s_out`` (ORT/MLAS, XNNPACK, oneDNN)."""
    if mode in ("f32_rne", "onednn"):
        return (np.float32(s_x) * np.asarray(s_w, np.float32) / np.float32(s_out)).astype(np.float64)
    return np.float64(np.float32(s_x)) * np.asarray(s_w, np.float32).astype(np.float64) / np.float64(np.float32(s_out))


def fully_connected(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, zp_x: int, zp_w: Any = 0,
                    s_x: float, s_w: Any, s_out: float, zp_out: int, mode: str, qmin: int = -128, qmax: int = 127,
                    prepared: PreparedWeights | None = None) -> np.ndarray:
    """``y = requant(sum_k (x - zx)(w - zw) + bias)``; x ``[M, K]``, w ``[N, K]`` (per-channel along N)."""
    pw = prepared or PreparedWeights.prepare(w, zp_w, zp_x, bias)
    acc = pw.accumulate(x.reshape(-1, x.shape[-1]))
    y = requantize(acc, _mult(s_x, s_w, s_out, mode), zp_out, mode, qmin=qmin, qmax=qmax)
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def _windows(x: np.ndarray, kh: int, kw: int, stride: tuple[int, int], dilation: tuple[int, int],
             pads: tuple[int, int, int, int], pad_value: int) -> np.ndarray:
    """(N, C, OH, OW, kh, kw) view of the padded input."""
    t, lft, b, r = pads
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (t, b), (lft, r)), constant_values=pad_value)
    eh, ew = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (eh, ew), axis=(2, 3))
    win = win[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]
    return win


def conv_accumulate(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, zp_x: int, zp_w: Any = 0,
                    stride: tuple[int, int] = (1, 1), pads: tuple[int, int, int, int] = (0, 0, 0, 0),
                    dilation: tuple[int, int] = (1, 1), groups: int = 1) -> np.ndarray:
    """int64 accumulators ``[N, O, OH, OW]`` of an NCHW x OIHW convolution (groups, depthwise)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    zw = np.broadcast_to(np.asarray(zp_w, np.int64), (o,))
    b = np.zeros(o, np.int64) if bias is None else np.asarray(bias, np.int64)
    og = o // groups
    if kh == kw == 1 and groups == 1 and stride == (1, 1) and not any(pads):  # pointwise: one GEMM, no windows
        cols = x.transpose(0, 2, 3, 1).reshape(-1, c)
        pw = PreparedWeights.prepare(w.reshape(o, c), zw, zp_x, b)
        return pw.accumulate(cols).reshape(n, h, wd, o).transpose(0, 3, 1, 2)
    if cg == 1 and groups == c:  # depthwise: loop over the kh*kw taps, each a vectorised multiply-add
        t, lft, bt, r = pads
        xp = np.pad(x.astype(np.int32) - zp_x, ((0, 0), (0, 0), (t, bt), (lft, r)))
        oh = (h + t + bt - (kh - 1) * dilation[0] - 1) // stride[0] + 1
        ow = (wd + lft + r - (kw - 1) * dilation[1] - 1) // stride[1] + 1
        xr = np.repeat(xp, og, axis=1) if og > 1 else xp
        wk = w.reshape(o, kh, kw).astype(np.int32) - zw.reshape(o, 1, 1).astype(np.int32)
        acc = np.zeros((n, o, oh, ow), np.int64)
        for i in range(kh):
            for j in range(kw):
                ys, xs = i * dilation[0], j * dilation[1]
                patch = xr[:, :, ys:ys + (oh - 1) * stride[0] + 1:stride[0], xs:xs + (ow - 1) * stride[1] + 1:stride[1]]
                acc += patch * wk[None, :, i, j, None, None]  # |product| < 2^16, exact in int32
        return acc + b[None, :, None, None]
    win = _windows(x, kh, kw, stride, dilation, pads, zp_x)
    _, _, oh, ow, _, _ = win.shape
    out = np.empty((n, o, oh, ow), np.int64)
    for g in range(groups):
        cols = win[:, g * cg:(g + 1) * cg].transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, cg * kh * kw)
        pw = PreparedWeights.prepare(w[g * og:(g + 1) * og].reshape(og, -1), zw[g * og:(g + 1) * og], zp_x,
                                     b[g * og:(g + 1) * og])
        out[:, g * og:(g + 1) * og] = pw.accumulate(cols).reshape(n, oh, ow, og).transpose(0, 3, 1, 2)
    return out


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, zp_x: int, zp_w: Any = 0, s_x: float,
           s_w: Any, s_out: float, zp_out: int, mode: str, stride: tuple[int, int] = (1, 1),
           pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1), groups: int = 1,
           qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """Quantized Conv2D, NCHW/OIHW (ONNX layout; ``pads`` = top, left, bottom, right)."""
    acc = conv_accumulate(x, w, bias, zp_x=zp_x, zp_w=zp_w, stride=stride, pads=pads, dilation=dilation,
                          groups=groups)
    return requantize(acc, _mult(s_x, s_w, s_out, mode), zp_out, mode, qmin=qmin, qmax=qmax, channel_axis=1)


__all__ = ["conv2d", "conv_accumulate", "fully_connected", "int_matmul"]
