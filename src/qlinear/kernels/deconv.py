"""Integer ConvTranspose (TFLite TRANSPOSE_CONV): exact int64 accumulation of ``(x - z_x) * (w - z_w)`` scattered
onto the output grid, the int64 bias, then per-channel requantization in the profile's Conv mode (LiteRT's reference
TRANSPOSE_CONV uses the convolution's ``MultiplyByQuantizedMultiplier`` with double-precision multipliers).

ONNX weight ``[C_in, C_out, kh, kw]`` (group 1), channel axis 1; pads crop the full ``(H - 1) * s + k`` grid;
``output_padding`` and dilations other than 1 and groups are refused (:class:`~qlinear.kernels.layer.NotInteger`).
"""

from __future__ import annotations

import numpy as np

from qlinear.errors import OverflowRiskError
from qlinear.graph.model import attr
from qlinear.graph.qdq import QOp
from qlinear.kernels import native as NK
from qlinear.kernels.layer import NotInteger, fused_clamp
from qlinear.kernels.profiles import Profile


class TransposeConvLayer:
    """A prepared ConvTranspose (module docstring)."""

    def __init__(self, op: QOp, prof: Profile) -> None:
        node = op.node
        x, w, out = op.inputs[0], op.inputs[1], op.output
        if x is None or w is None or w.const is None or out is None or not x.params.per_tensor \
                or not out.params.per_tensor or w.params.block_size or np.asarray(w.const).ndim != 4:
            raise NotInteger
        if attr(node, "group", 1) != 1 or any(d != 1 for d in attr(node, "dilations", [1, 1])) \
                or any(attr(node, "output_padding", [0, 0])) or attr(node, "output_shape") is not None \
                or attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise NotInteger
        if not w.params.per_tensor and w.params.axis != 1:
            raise NotInteger
        wq = np.asarray(w.const).astype(np.int64)
        wz = w.params.zero_point.astype(np.int64)
        self.w = wq - (wz.reshape(1, -1, 1, 1) if wz.size > 1 else int(wz.reshape(-1)[0]))  # [C_in, O, kh, kw]
        n_out = self.w.shape[1]
        self.stride = tuple(attr(node, "strides", [1, 1]))
        self.pads = tuple(attr(node, "pads", [0, 0, 0, 0]))
        b = op.inputs[2] if len(op.inputs) > 2 else None
        if len(node.input) > 2 and node.input[2] and (b is None or b.const is None):
            raise NotInteger
        self.bias = None if b is None else np.broadcast_to(np.asarray(b.const).astype(np.int64).reshape(-1),
                                                           (n_out,)).copy()
        self.zx = x.params.z
        self.wide = x.params.dtype.bits > 8
        mode = prof.conv
        # 16x8: LiteRT has one TRANSPOSE_CONV kernel for int16 (the reference's, int64 accumulator and reduced
        # multiplier) under either resolver (XNNPACK and the optimized builtins have none)
        self.mode = "int64_reduced" if self.wide else mode
        s_x, ws, s_o = np.float32(x.params.s), w.params.scale.astype(np.float32), np.float32(out.params.s)
        if self.mode in ("f32_rne", "onednn"):
            m = (s_x * ws / s_o).astype(np.float64)
        else:
            m = np.float64(s_x) * ws.astype(np.float64) / np.float64(s_o)
        self.mult = NK.Multiplier(np.broadcast_to(m, (n_out,)) if m.size > 1 else m.reshape(-1))
        self.zo, self.out_dtype = out.params.z, out.params.dtype.storage
        self.lo, self.hi = fused_clamp(op, out.params, prof)
        self.name = op.name

    def accumulate(self, xq: np.ndarray) -> np.ndarray:
        n, c, h, wd = xq.shape
        _, o, kh, kw = self.w.shape
        sh, sw = self.stride
        xc = xq.astype(np.int64) - self.zx
        full = np.zeros((n, o, (h - 1) * sh + kh, (wd - 1) * sw + kw), np.int64)
        for i in range(kh):
            for j in range(kw):
                full[:, :, i:i + (h - 1) * sh + 1:sh, j:j + (wd - 1) * sw + 1:sw] += np.einsum(
                    "nchw,co->nohw", xc, self.w[:, :, i, j])
        t, lft, b, r = self.pads
        return full[:, :, t:full.shape[2] - b, lft:full.shape[3] - r]

    def __call__(self, xq: np.ndarray) -> np.ndarray:
        acc = self.accumulate(xq)
        try:
            return NK.requant(acc, self.mult, self.mode, self.zo, self.lo, self.hi, self.out_dtype, channel_axis=1,
                              acc_bits=64 if self.wide else 32, bias=self.bias)
        except OverflowRiskError as e:
            raise OverflowRiskError(f"node {self.name} (ConvTranspose): {e}") from None


__all__ = ["TransposeConvLayer"]
