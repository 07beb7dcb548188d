"""Weighted layers as grouped matrix products, and the input statistics per-layer weight methods need.

Every Conv (regular, grouped, depthwise), Gemm and MatMul with a constant weight is ``Y[g] = W[g] X[g]``: ``W`` of
shape ``(groups, out_per_group, K)`` and ``X`` the ``(groups, K, P)`` columns of its input (im2col patches for a
convolution, rows for a fully connected layer), ``P`` positions. The layer's output error for any candidate weight
``W'`` is then a quadratic form in two Gram matrices of the inputs, accumulated in one pass over the calibration data::

    || W X_f - W' X_q ||^2 = tr(W F W^T) - 2 tr(W M W'^T) + tr(W' G W'^T)
    G = X_q X_q^T,  M = X_f X_q^T,  F = X_f X_f^T          (per group, K x K)

with ``X_f`` the layer's input in the float model and ``X_q`` in the quantized one. AdaRound (:mod:`.adaround`) and
sequential MSE (:mod:`.seqmse`) work on ``G``, ``M``, ``F`` alone: memory is bounded by ``K^2`` per layer, whatever
the number of samples, and an iteration costs ``O K^2`` instead of ``O K P``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from qlinear.graph.model import GraphIndex, attr
from qlinear.graph.plan import WeightSpec

#: output positions per sample whose input patches a convolution's statistics use (an evenly strided subset beyond):
#: at most ``MAX_POSITIONS``, and ``POSITIONS_PER_INPUT`` per input of the layer (a 3x3 depthwise convolution has 9
#: inputs per output: 144 positions per sample, 14,400 over 100 samples, estimate its 9 x 9 Gram matrix well)
MAX_POSITIONS = 1024
POSITIONS_PER_INPUT = 16


_BUFFERS: dict[str, np.ndarray] = {}


def _buffer(name: str | None, shape: tuple[int, ...]) -> np.ndarray:
    """A float32 array of ``shape``: fresh, or a view of the reused buffer ``name`` (grown when too small)."""
    size = int(np.prod(shape))
    if name is None:
        return np.empty(shape, np.float32)
    buf = _BUFFERS.get(name)
    if buf is None or buf.size < size:
        buf = _BUFFERS[name] = np.empty(size, np.float32)
    return buf[:size].reshape(shape)


def release_buffers() -> None:
    """Free the scratch buffers of :meth:`Layer.columns`."""
    _BUFFERS.clear()


@dataclass
class Layer:
    """A weighted layer as a grouped matrix product (module docstring)."""

    spec: WeightSpec
    node: onnx.NodeProto
    kind: str                  # "conv", "fc" (Gemm / MatMul)
    shape: tuple[int, ...]     # the weight's ONNX shape
    groups: int = 1
    transposed: bool = False   # FC weight stored [K, N] (MatMul, Gemm transB=0)
    G: np.ndarray | None = None
    M: np.ndarray | None = None
    F: np.ndarray | None = None
    P: int = 0
    sum_f: np.ndarray | None = None   # (groups, K) column sums of X_f and X_q: the inputs' means, for bias correction
    sum_q: np.ndarray | None = None
    cols_f: list[np.ndarray] | None = None   # the columns themselves, kept while P <= K (then they are cheaper)
    cols_q: list[np.ndarray] | None = None
    @property
    def K(self) -> int:
        return int(self.G.shape[-1]) if self.G is not None else 0

    @property
    def Xf(self) -> np.ndarray | None:
        return None if self.cols_f is None else np.concatenate(self.cols_f, axis=2)

    @property
    def Xq(self) -> np.ndarray | None:
        return None if self.cols_q is None else np.concatenate(self.cols_q, axis=2)

    # ------------------------------------------------------------------------------------------ weights
    def to_matrix(self, w: np.ndarray) -> np.ndarray:
        """``(groups, out_per_group, K)`` view of a weight in its ONNX layout (any float or integer array)."""
        if self.kind == "fc":
            wm = w.T if self.transposed else w
            return np.asarray(wm).reshape(1, wm.shape[0], wm.shape[1])
        o = w.shape[0]
        return np.asarray(w).reshape(self.groups, o // self.groups, -1)

    def from_matrix(self, wm: np.ndarray) -> np.ndarray:
        if self.kind == "fc":
            w = wm.reshape(wm.shape[1], wm.shape[2])
            return np.ascontiguousarray(w.T if self.transposed else w)
        return np.ascontiguousarray(wm.reshape(self.shape))

    # ------------------------------------------------------------------------------------------ inputs
    def columns(self, x: np.ndarray, max_positions: int = MAX_POSITIONS, *, scratch: str | None = None) -> np.ndarray:
        """``(groups, K, P)`` float32 columns of a batch of this layer's input; a convolution with more than
        ``max_positions`` output positions per sample keeps every ``s``-th row and column of them (the same ones for
        any input of that shape, so that float and quantized columns stay aligned). With ``scratch`` the result lives
        in a reused module buffer of that name (valid until the next call with the same name): on this kind of VM,
        first-touching a fresh 100 MB array costs more than filling it."""
        x = np.asarray(x, np.float32)
        if self.kind == "fc":
            rows = x.reshape(-1, x.shape[-1])
            return np.ascontiguousarray(rows.T)[None]
        if x.ndim == 3:  # a 1-D convolution: a 2-D one over [N, C, 1, L]
            x = x[:, :, None, :]
        n, c, h, w = x.shape
        cg, kh, kw, pads, st, dl = self.geometry(h, w)
        g = self.groups
        eh, ew = (kh - 1) * dl[0] + 1, (kw - 1) * dl[1] + 1
        oh = (h + pads[0] + pads[2] - eh) // st[0] + 1
        ow = (w + pads[1] + pads[3] - ew) // st[1] + 1
        step = max(1, int(np.ceil(np.sqrt(oh * ow / max_positions))))
        if kh == kw == 1 and not any(pads):  # pointwise: the input itself, every step-th position
            sub = x[:, :, (step // 2) * st[0]::st[0] * step, (step // 2) * st[1]::st[1] * step]
            sub = sub[:, :, :len(range(step // 2, oh, step)), :len(range(step // 2, ow, step))]
            p = sub.shape[2] * sub.shape[3]
            cols = sub.reshape(n, g, cg, p).transpose(1, 2, 0, 3)
            return np.ascontiguousarray(cols).reshape(g, cg, n * p)
        if any(pads):
            x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
        r0, c0 = (step // 2) * st[0], (step // 2) * st[1]
        ph, pw = len(range(step // 2, oh, step)), len(range(step // 2, ow, step))
        out = _buffer(scratch, (g, cg, kh * kw, n, ph, pw))
        xs = np.ascontiguousarray(x.reshape(n, g, cg, x.shape[2], x.shape[3]).transpose(1, 2, 0, 3, 4))  # (g, cg, n, H, W)
        for i in range(kh):  # one strided copy per kernel tap
            for j in range(kw):
                r, c = r0 + i * dl[0], c0 + j * dl[1]
                out[:, :, i * kw + j] = xs[:, :, :, r:r + (ph - 1) * st[0] * step + 1:st[0] * step,
                                           c:c + (pw - 1) * st[1] * step + 1:st[1] * step]
        return out.reshape(g, cg * kh * kw, n * ph * pw)

    def geometry(self, h: int, w: int) -> tuple[int, int, int, list[int], tuple[int, int], tuple[int, int]]:
        """``(in channels per group, kh, kw, pads [top, left, bottom, right], strides, dilations)`` of the
        convolution as a 2-D one over an ``h x w`` input (a 1-D one has ``h`` 1), ``auto_pad`` made explicit."""
        one = len(self.shape) == 3
        _, cg, *k = self.shape
        kh, kw = (1, k[0]) if one else (k[0], k[1])
        st = tuple(attr(self.node, "strides", [1] if one else [1, 1]))
        dl = tuple(attr(self.node, "dilations", [1] if one else [1, 1]))
        st, dl = ((1, st[0]), (1, dl[0])) if one else (st, dl)
        auto = attr(self.node, "auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else str(auto)
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0, 0, 0, 0]
            for i, (size, kk) in enumerate(((h, kh), (w, kw))):
                total = max((-(-size // st[i]) - 1) * st[i] + (kk - 1) * dl[i] + 1 - size, 0)
                lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
                pads[i], pads[i + 2] = lo, total - lo
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        else:
            p = list(attr(self.node, "pads", [0, 0] if one else [0, 0, 0, 0]))
            pads = [0, p[0], 0, p[1]] if one else p
        return cg, kh, kw, pads, st, dl

    def accumulate(self, x_f: np.ndarray, x_q: np.ndarray) -> None:
        """Add a batch's float and quantized inputs to ``G``, ``M`` and ``F`` (float64 sums of float32 GEMMs)."""
        keep = self.cols_f is not None or self.G is None
        k = int(np.prod(self.shape[1:])) if self.kind == "conv" else 0
        mp = min(MAX_POSITIONS, max(64, POSITIONS_PER_INPUT * k))
        cf = self.columns(x_f, mp, scratch=None if keep else "f")
        cq = self.columns(x_q, mp, scratch=None if keep else "q")
        g = np.matmul(cq, cq.transpose(0, 2, 1)).astype(np.float64)
        mm = np.matmul(cf, cq.transpose(0, 2, 1)).astype(np.float64)
        ff = np.matmul(cf, cf.transpose(0, 2, 1)).astype(np.float64)
        if self.G is None:
            self.G, self.M, self.F = g, mm, ff
            self.cols_f, self.cols_q = [], []
            self.sum_f, self.sum_q = cf.sum(2).astype(np.float64), cq.sum(2).astype(np.float64)
        else:
            self.G += g
            self.M += mm
            self.F += ff
            self.sum_f += cf.sum(2)
            self.sum_q += cq.sum(2)
        self.P += cq.shape[2]
        if self.cols_f is not None:
            if self.P <= cq.shape[1]:
                self.cols_f.append(cf)
                self.cols_q.append(cq)
            else:
                self.cols_f = self.cols_q = None

    def output_shift(self, w: np.ndarray, w_new: np.ndarray) -> np.ndarray:
        """Per-output-channel mean of ``w X_f - w' X_q`` (flat, in channel order): what a bias must add to remove the
        systematic error of the quantized layer (empirical bias correction with quantized inputs)."""
        p = max(self.P, 1)
        mf, mq = self.sum_f / p, self.sum_q / p
        return (np.einsum("gok,gk->go", w, mf) - np.einsum("gok,gk->go", w_new, mq)).reshape(-1)

    def free(self) -> None:
        """Drop the statistics (the layer is done)."""
        self.G = self.M = self.F = self.sum_f = self.sum_q = None
        self.cols_f = self.cols_q = None

    def error(self, w: np.ndarray, w_new: np.ndarray) -> np.ndarray:
        """Per-output-channel ``||w X_f - w' X_q||^2 / P`` for matrices ``(groups, out, K)``."""
        return quad(w, self.F, w, w_new, self.M, self.G) / max(self.P, 1)


def quad(w: np.ndarray, F: np.ndarray, _w: np.ndarray, w_new: np.ndarray, M: np.ndarray, G: np.ndarray) -> np.ndarray:
    """``w F w^T - 2 w M w'^T + w' G w'^T`` row by row (``(groups, out)``), through batched GEMMs."""
    a = np.sum(np.matmul(w, F) * w, -1)
    b = np.sum(np.matmul(w, M) * w_new, -1)
    c = np.sum(np.matmul(w_new, G) * w_new, -1)
    return a - 2 * b + c


def layers_of(m: onnx.ModelProto, specs: list[WeightSpec]) -> list[Layer]:
    """The :class:`Layer` of every weight spec whose node is a 1-D or 2-D Conv (any padding), a Gemm or a MatMul with
    a 2-D weight."""
    g = GraphIndex.build(m, infer_shapes=False)
    by_name = {n.name or n.output[0]: n for n in m.graph.node}
    out = []
    for spec in specs:
        node = by_name.get(spec.node)
        if node is None or spec.name not in g.initializers:
            continue
        shape = tuple(g.initializers[spec.name].dims)
        if node.op_type == "Conv" and len(shape) in (3, 4):
            out.append(Layer(spec, node, "conv", shape, groups=attr(node, "group", 1)))
        elif node.op_type == "Gemm" and len(shape) == 2 and not attr(node, "transA", 0):
            out.append(Layer(spec, node, "fc", shape, transposed=not attr(node, "transB", 0)))
        elif node.op_type == "MatMul" and len(shape) == 2:
            out.append(Layer(spec, node, "fc", shape, transposed=True))
    return out


__all__ = ["Layer", "layers_of", "quad"]
