"""oneDNN's int8 epilogue: output scales with a dimension mask, then post-ops, then down-conversion.

Spec ``onednn-quantization-attributes.txt``: ``dst = downconvert(post_ops(output_scale * acc_s32))``; the output
scales are applied first (``mask = sum 2^d`` over the destination dims that have their own scale;
``scales.size() == prod D_d``), the post-ops after, in the order given (for example ``eltwise`` then ``sum``:
``dst = scale_sum * dst_prev + eltwise(output_scale * acc)``); the result goes to the integer type with
round-to-nearest-even and saturation (the zero point, when given, is added in float before rounding, as oneDNN
documents ``dst = post_ops(...) / scale_dst + zp_dst``). Computation in float32, as oneDNN does.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from qlinear.errors import KernelError

ELTWISE = {
    "relu": lambda x, a, b: np.where(x > 0, x, np.float32(a) * x),
    "clip": lambda x, a, b: np.clip(x, np.float32(a), np.float32(b)),
    "tanh": lambda x, a, b: np.tanh(x.astype(np.float64)).astype(np.float32),
    "logistic": lambda x, a, b: (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32),
    "linear": lambda x, a, b: np.float32(a) * x + np.float32(b),
}


def scales_for_mask(scales: Any, mask: int, dst_shape: Sequence[int]) -> np.ndarray:
    """Broadcastable float32 scales for ``mask`` (bit ``d`` set: one scale per index of destination dim ``d``)."""
    s = np.asarray(scales, np.float32).reshape(-1)
    dims = [d for d in range(len(dst_shape)) if mask >> d & 1]
    if mask >> len(dst_shape):
        raise KernelError(f"output-scale mask {mask:#b} has bits beyond the destination rank {len(dst_shape)}")
    want = int(np.prod([dst_shape[d] for d in dims])) if dims else 1
    if s.size != want:
        raise KernelError(f"output-scale mask {mask:#b} over dims {dims} of {list(dst_shape)} needs {want} scales, "
                          f"got {s.size}")
    shape = [dst_shape[d] if d in dims else 1 for d in range(len(dst_shape))]
    return s.reshape(shape)


def epilogue(acc: np.ndarray, scales: Any, mask: int = 0, *, post_ops: Sequence[tuple] = (), dst_prev: Any = None,
             zp_dst: int = 0, dst_dtype: str = "int8") -> np.ndarray:
    """``downconvert(post_ops(scales * acc))``. ``post_ops``: ``("eltwise", kind, alpha, beta, scale)`` or
    ``("sum", scale[, zero_point])`` (the sum reads ``dst_prev``, the destination's previous integers)."""
    acc = np.asarray(acc)
    y = acc.astype(np.float32) * scales_for_mask(scales, mask, acc.shape)
    for p in post_ops:
        if p[0] == "eltwise":
            kind, alpha, beta, scale = (list(p[1:]) + [0.0, 0.0, 1.0])[:4]
            if kind not in ELTWISE:
                raise KernelError(f"unknown eltwise post-op {kind!r}; expected one of {', '.join(ELTWISE)}")
            y = (np.float32(scale) * ELTWISE[kind](y, alpha, beta)).astype(np.float32)
        elif p[0] == "sum":
            if dst_prev is None:
                raise KernelError("a sum post-op needs dst_prev (the destination's previous values)")
            scale = np.float32(p[1])
            zp = np.float32(p[2] if len(p) > 2 else 0)
            y = (y + scale * (np.asarray(dst_prev).astype(np.float32) - zp)).astype(np.float32)
        else:
            raise KernelError(f"unknown post-op {p[0]!r}; expected 'eltwise' or 'sum'")
    lo, hi = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2**31), 2**31 - 1)}[dst_dtype]
    return np.clip(np.rint(y + np.float32(zp_dst)).astype(np.float64), lo, hi).astype(np.int64)
