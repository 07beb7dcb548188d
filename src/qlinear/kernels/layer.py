"""A Conv / Gemm / MatMul layer prepared for integer execution (:class:`IntegerLayer`: centered weights, int64 bias,
per-channel multipliers, the fused clamp), exact integer products through float32 GEMMs, and the clamp a fused
Relu/Clip puts on an integer output."""

from __future__ import annotations

import numpy as np
import onnx

from qlinear.errors import OverflowRiskError
from qlinear.graph.model import attr
from qlinear.graph.ops import conv_pads, weight_channel_axis
from qlinear.graph.qdq import QOp, QParams, QValue
from qlinear.kernels import native as NK
from qlinear.kernels.profiles import Profile
from qlinear.kernels.requant import FIXED_MODES, check_accumulator, round_half_away

EXACT32 = float(2**24)


class NotInteger(Exception):
    """The pattern is not one the integer kernels run: the node falls back to float."""


def qrange(p: QParams) -> tuple[int, int]:
    return int(p.dtype.qmin), int(p.dtype.qmax)


def _centered_weight(node: onnx.NodeProto, w: QValue) -> np.ndarray:
    """``w_q - z_w`` (int64) of a Conv (OIHW) or Gemm/MatMul (as [N_out, K]) weight, or :class:`NotInteger` when
    the layer is not one the integer kernels run (transA/alpha/beta, not 2-D, scales off the channel axis).
    """
    wq = np.asarray(w.const).astype(np.int64)
    wz = w.params.zero_point.astype(np.int64)
    if node.op_type == "Conv":
        if wq.ndim not in (3, 4):
            raise NotInteger
    elif node.op_type == "Gemm":
        if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
            raise NotInteger
    elif wq.ndim != 2:
        raise NotInteger
    ch_axis = weight_channel_axis(node, wq.ndim)  # the operator registry's weight axes
    if not w.params.per_tensor and w.params.axis != ch_axis:
        raise NotInteger
    if wz.size > 1:
        shape = [1] * wq.ndim
        shape[ch_axis] = wq.shape[ch_axis]
        wc = wq - wz.reshape(shape)
    else:
        wc = wq - int(wz.reshape(-1)[0])
    if node.op_type == "Conv":
        return wc if wc.ndim == 4 else wc[:, :, None, :]   # a 1-D Conv as a 2-D one of height 1
    return wc if ch_axis == 0 else wc.T


class IntegerLayer:
    """A prepared Conv / Gemm / MatMul layer: centered float32 weights, int64 bias, multipliers, clamp."""

    def __init__(self, op: QOp, prof: Profile) -> None:
        node = op.node
        self.op = op
        x, w = op.inputs[0], op.inputs[1]
        out = op.output
        if x is None or w is None or w.const is None or not x.params.per_tensor or w.params.block_size \
                or not x.params.dtype.is_int or not w.params.dtype.is_int:
            raise NotInteger
        if out is not None and (not out.params.per_tensor or not out.params.dtype.is_int):
            raise NotInteger
        # no QuantizeLinear after it: integer accumulation, float output (ORT's MatMulIntegerToFloat)
        self.float_out = out is None
        self.wide = x.params.dtype.bits > 8  # 16x8: int64 accumulators (TFLite)
        self.kind = node.op_type
        ws = w.params.scale.astype(np.float32)
        self.w = _centered_weight(node, w)  # Conv: OIHW; Gemm/MatMul: [N_out, K]
        n_out = self.w.shape[0]
        self.groups = attr(node, "group", 1) if self.kind == "Conv" else 1
        self.one_d = self.kind == "Conv" and np.ndim(w.const) == 3   # [N, C, L]: run as [N, C, 1, L]
        lead = [1] if self.one_d else []
        self.stride = tuple(lead + list(attr(node, "strides", [1] * (2 - len(lead))))) if self.kind == "Conv" \
            else (1, 1)
        self.node = node
        self.pads = self._pads(None)   # auto_pad SAME_*: resolved from each input's shape (accumulate)
        self.dil = tuple(lead + list(attr(node, "dilations", [1] * (2 - len(lead))))) if self.kind == "Conv" \
            else (1, 1)
        b = op.inputs[2] if len(op.inputs) > 2 else None
        self.float_bias = None
        if len(node.input) > 2 and node.input[2] and (b is None or b.const is None):
            if not self.float_out:
                raise NotInteger  # float bias: not an integer kernel
            self.float_bias = node.input[2]
        self.bias = None if b is None else np.broadcast_to(np.asarray(b.const).astype(np.int64).reshape(-1),
                                                           (n_out,)).copy()
        self.zx = x.params.z
        self.x_dtype = x.params.dtype
        mode = prof.conv if self.kind == "Conv" else prof.fc
        self.mode = "int64_reduced" if self.wide and mode in FIXED_MODES else mode
        s_x = np.float32(x.params.s)
        self.scale_out = np.broadcast_to(s_x * ws, (n_out,)).astype(np.float32)  # float output: acc * s_x * s_w
        if not self.float_out:
            s_o = np.float32(out.params.s)
            if mode in ("f32_rne", "onednn"):
                m = (s_x * ws / s_o).astype(np.float64)
            else:
                m = np.float64(s_x) * ws.astype(np.float64) / np.float64(s_o)
            self.mult = NK.Multiplier(np.broadcast_to(m, (n_out,)) if m.size > 1 else m.reshape(-1))
            self.zo = out.params.z
            self.out_dtype = out.params.dtype.storage
            self.lo, self.hi = fused_clamp(op, out.params, prof)
        xr = max(self.zx - int(self.x_dtype.qmin), int(self.x_dtype.qmax) - self.zx)
        wmax = float(np.abs(self.w).max(initial=1))
        self.chunk = max(1, int((EXACT32 - 1) // max(1.0, xr * wmax)))
        self.w32 = self.w.astype(np.float32)
        self.depthwise = self.kind == "Conv" and self.w.shape[1] == 1 and self.groups > 1
        if self.kind == "Conv" and not self.depthwise:
            o, cg, kh, kw = self.w.shape
            self.w2 = self.w32.reshape(o, cg * kh * kw)

    def _pads(self, spatial: tuple | None) -> tuple[int, int, int, int]:
        """(top, left, bottom, right) of a Conv (a 1-D one as height 1); ``auto_pad`` resolved for ``spatial``
        (:func:`qlinear.graph.ops.conv_pads`; None: the ``pads`` attribute, zeros for SAME until a shape comes)."""
        if self.kind != "Conv":
            return (0, 0, 0, 0)
        k = self.w.shape[2:] if not self.one_d else self.w.shape[3:]
        ap = attr(self.node, "auto_pad", b"NOTSET")
        if spatial is None and ap not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
            return (0, 0, 0, 0)
        p = conv_pads(self.node, tuple(spatial or k), tuple(k))
        return (0, p[0], 0, p[1]) if self.one_d else (p[0], p[1], p[2], p[3])

    def accumulate(self, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Accumulators (integers, possibly held in float32/float64) and the bias still to add (or None)."""
        if self.kind == "Conv" and attr(self.node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            self.pads = self._pads(tuple(xq.shape[2:]))
        if self.kind != "Conv":
            xc = np.subtract(xq.reshape(-1, xq.shape[-1]), np.float32(self.zx), dtype=np.float32)
            acc = exact_matmul(xc, self.w32.T, self.chunk)  # [M, N_out]
            return acc.reshape(xq.shape[:-1] + (self.w.shape[0],)), self.bias
        if self.one_d:
            acc, bias = self.accumulate_2d(xq[:, :, None, :])
            return acc[:, :, 0, :], bias
        return self.accumulate_2d(xq)

    def accumulate_2d(self, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        if self.depthwise:
            o, _, kh, kw = self.w.shape
            return NK.dwconv(xq, self.zx, self.w.reshape(o, kh, kw), o // xq.shape[1], self.bias, self.stride,
                             self.pads, self.dil), None
        return self._conv(xq), self.bias

    def _conv(self, xq: np.ndarray) -> np.ndarray:
        n, c, h, wd = xq.shape
        o, cg, kh, kw = self.w.shape
        xc = np.subtract(xq, np.float32(self.zx), dtype=np.float32)  # zero-point padding = real 0 = centered 0
        t, lft, b, r = self.pads
        if kh == kw == 1 and self.stride == (1, 1) and not any(self.pads) and self.groups == 1:
            cols = xc.reshape(n, c, h * wd)
            oh, ow = h, wd
        else:
            xp = np.pad(xc, ((0, 0), (0, 0), (t, b), (lft, r))) if any(self.pads) else xc
            eh, ew = (kh - 1) * self.dil[0] + 1, (kw - 1) * self.dil[1] + 1
            win = np.lib.stride_tricks.sliding_window_view(xp, (eh, ew), axis=(2, 3))
            win = win[:, :, ::self.stride[0], ::self.stride[1], ::self.dil[0], ::self.dil[1]]
            oh, ow = win.shape[2], win.shape[3]
            cols = None
        og = o // self.groups
        if self.groups == 1:
            cg_cols = cols if cols is not None else np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(
                n, cg * kh * kw, oh * ow)
            return exact_matmul(self.w2, cg_cols, self.chunk).reshape(n, o, oh, ow)
        acc = np.empty((n, o, oh * ow), np.float64)
        for g in range(self.groups):
            if cols is None:
                cg_cols = np.ascontiguousarray(win[:, g * cg:(g + 1) * cg].transpose(0, 1, 4, 5, 2, 3)).reshape(
                    n, cg * kh * kw, oh * ow)
            else:
                cg_cols = cols
            wg = self.w2[g * og:(g + 1) * og]
            acc[:, g * og:(g + 1) * og] = exact_matmul(wg, cg_cols, self.chunk)
        return acc.reshape(n, o, oh, ow)

    def __call__(self, xq: np.ndarray) -> np.ndarray:
        acc, bias = self.accumulate(xq)
        axis = 1 if self.kind == "Conv" else -1
        try:
            if self.float_out:
                acc = acc.astype(np.int64)
                shape = [1] * acc.ndim
                shape[axis] = self.scale_out.size
                if bias is not None:
                    acc = acc + bias.reshape(shape)
                check_accumulator(acc, 64 if self.wide else 32)
                return acc.astype(np.float32) * self.scale_out.reshape(shape)
            return NK.requant(acc, self.mult, self.mode, self.zo, self.lo, self.hi, self.out_dtype,
                              channel_axis=axis, acc_bits=64 if self.wide else 32, bias=bias)
        except OverflowRiskError as e:
            raise OverflowRiskError(f"node {self.op.name} ({self.kind}): {e}") from None


def exact_matmul(a: np.ndarray, b: np.ndarray, chunk: int) -> np.ndarray:
    """``a @ b`` of integer-valued float32 arrays, exactly: one float32 GEMM when every partial sum stays below 2^24
    (float32 result), else float32 GEMMs over chunks of the reduction that do, added in float64 (float64 result).
    ``a``: [..., M, K], ``b``: [..., K, N]."""
    k = a.shape[-1]
    if k <= chunk:
        return np.matmul(a, b)  # float32, every value an exact integer
    acc = None
    for s in range(0, k, chunk):
        part = np.matmul(a[..., s:s + chunk], b[..., s:s + chunk, :]).astype(np.float64)
        acc = part if acc is None else acc + part
    return acc  # float64, exact


def fused_clamp(op: QOp, p: QParams, prof: Profile) -> tuple[int, int]:
    qmin, qmax = qrange(p)
    lo, hi = op.act_bounds
    if op.act is None:
        return qmin, qmax
    rnd = round_half_away if prof.clamp == "away" else np.rint

    def q(f: float) -> int:
        return p.z + int(rnd(np.float32(f) / np.float32(p.s)))

    return (max(qmin, q(lo)) if np.isfinite(lo) else qmin, min(qmax, q(hi)) if np.isfinite(hi) else qmax)


__all__ = ["EXACT32", "IntegerLayer", "NotInteger", "exact_matmul", "fused_clamp", "qrange"]
