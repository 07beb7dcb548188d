"""LiteRT's int8/int16 RESIZE_BILINEAR (``reference_ops::ResizeBilinearInteger``), bit for bit: source positions in
10-bit fixed point (``scale_10 = round(1024 * in / out)``, or ``(in - 1) / (out - 1)`` with align_corners; half-pixel
centres ``v * scale_10 + scale_10 / 2 - 512``), the four neighbours weighted in 20-bit fixed point on the raw
integers (input and output share their parameters), divided by 2^20 rounding half away from zero."""

from __future__ import annotations

import numpy as np


def _positions(n_out: int, n_in: int, align: bool, half: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if align and n_out > 1:
        scale = ((1 << 10) * (n_in - 1) + (n_out - 1) // 2) // (n_out - 1)
    else:
        scale = ((1 << 10) * n_in + n_out // 2) // n_out
    v = np.arange(n_out, dtype=np.int64)
    pos = v * scale + scale // 2 - (1 << 9) if half else v * scale
    lo = np.maximum(np.trunc(pos / 1024).astype(np.int64), 0)  # C division truncates toward zero
    hi = np.minimum(np.trunc((pos + 1023) / 1024).astype(np.int64), n_in - 1)
    return pos, lo, hi


def resize_bilinear(x: np.ndarray, out_hw: tuple[int, int], *, align_corners: bool = False,
                    half_pixel_centers: bool = False) -> np.ndarray:
    """``x`` ([N, C, H, W] integers) resized to ``out_hw`` as LiteRT's integer RESIZE_BILINEAR (module docstring)."""
    x = np.asarray(x)
    n, c, h, w = x.shape
    py, y0, y1 = _positions(out_hw[0], h, align_corners, half_pixel_centers)
    px, x0, x1 = _positions(out_hw[1], w, align_corners, half_pixel_centers)
    dy = (py - 1024 * y0)[:, None]
    dx = (px - 1024 * x0)[None, :]
    xi = x.astype(np.int64)
    acc = (xi[:, :, y0][:, :, :, x0] * ((1024 - dy) * (1024 - dx)) + xi[:, :, y1][:, :, :, x0] * (dy * (1024 - dx))
           + xi[:, :, y0][:, :, :, x1] * ((1024 - dy) * dx) + xi[:, :, y1][:, :, :, x1] * (dy * dx))
    rnd = np.where(acc > 0, 1 << 19, -(1 << 19))
    s = acc + rnd
    y = np.where(s >= 0, s >> 20, -((-s) >> 20))
    return y.astype(x.dtype)


__all__ = ["resize_bilinear"]
