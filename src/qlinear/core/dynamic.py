"""DynamicQuantizeLinear (opset 11): scale and zero point from the data, then QuantizeLinear to uint8.

Spec (DynamicQuantizeLinear-11)::

    y_scale = (maximum(0, max(x)) - minimum(0, min(x))) / (qmax - qmin)        qmin, qmax = 0, 255
    intermediate_zero_point = qmin - min(x) / y_scale
    y_zero_point = cast(round(saturate(intermediate_zero_point)))              round half to even
    y = saturate(round(x / y_scale) + y_zero_point)

All arithmetic is float32, as in both peers. Two cases the spec leaves open, answered as ONNX Runtime
does: NaN inputs are ignored when taking min and max (and quantize to 0), and a constant-zero input
(max == min) gets ``y_scale = 1`` (the reference evaluator returns 1/255 there; its own comment
quotes ORT's ``max == min ? 1.0f``).

The range-to-parameters step is the ``onnxruntime`` policy's rule with the data range widened to
contain 0 (:func:`dynamic_params`); calibration reuses it for oneDNN's dynamic recipe.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core.quantize import quantize_linear
from qlinear.core.types import dtype_of


def dynamic_params(xmin: float, xmax: float) -> tuple[np.float32, np.uint8]:
    """(y_scale, y_zero_point) of DynamicQuantizeLinear for an observed (min, max), float32 arithmetic."""
    maxx = np.float32(max(np.float32(0.0), np.float32(xmax)))
    minx = np.float32(min(np.float32(0.0), np.float32(xmin)))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        scale = np.float32(1.0) if maxx == minx else np.float32(maxx - minx) / np.float32(255.0)
        izp = np.float32(0.0) - minx / scale
    zp = np.rint(np.clip(izp, np.float32(0.0), np.float32(255.0))) if np.isfinite(izp) else np.float32(0.0)
    return np.float32(scale), np.uint8(zp)


def dynamic_quantize_linear(x: Any) -> tuple[np.ndarray, np.float32, np.uint8]:
    """ONNX DynamicQuantizeLinear: returns ``(y, y_scale, y_zero_point)`` with y uint8.

    >>> import numpy as np
    >>> y, s, z = dynamic_quantize_linear(np.array([0, 2, -3, -2.5, 1.34, 0.5], np.float32))
    >>> y.tolist(), float(s), int(z)
    ([153, 255, 0, 26, 221, 179], 0.019607843831181526, 153)
    """
    x = np.asarray(x)
    dtype_of(x, arg="x", allowed=("float32",), what="the DynamicQuantizeLinear input type")
    lo, hi = 0.0, 0.0
    if x.size and not np.isnan(x).all():
        lo, hi = np.nanmin(x), np.nanmax(x)
    scale, zp = dynamic_params(lo, hi)
    y = quantize_linear(x, scale, zp)
    return y, scale, zp


__all__ = ["dynamic_quantize_linear", "dynamic_params"]
