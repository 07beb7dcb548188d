"""AdaRound: learned rounding of weights (Nagel et al. 2020, "Up or Down? Adaptive Rounding for Post-Training
Quantization", arXiv:2004.10568), in NumPy with analytic gradients.

For a layer ``Y = W X`` (:class:`~qlinear.ptq.layers.Layer`) with scale ``s`` and zero point ``z`` per weight (any
granularity), each weight is rounded down or up: ``W~ = s * clip(floor(W/s) + h(V), qmin - z, qmax - z)`` with the
rectified sigmoid ``h(V) = clip(sigmoid(V) (zeta - gamma) + gamma, 0, 1)``, ``zeta = 1.1``, ``gamma = -0.1``. ``V`` is
learned by Adam on

    L(V) = || W X_f - W~ X_q ||^2 / (P * out)  +  lambda * sum (1 - |2 h(V) - 1|^beta)

(the reconstruction of the layer's float output from its quantized input, paper eq. 25, and the regularizer that
drives ``h`` to 0 or 1, ``beta`` annealed from 20 to 2 after a warm start without it, AIMET's schedule). The layer is
linear in its weights, so the gradient is exact and closed-form: ``dL/dW~ = 2 (W~ G - W M) / (P out)`` with the Gram
matrices of :mod:`qlinear.ptq.layers` (or from the columns themselves when there are fewer positions than inputs, as
in a classifier after global pooling). Memory is one layer's ``K x K``; an iteration costs ``out * K^2``.

The result changes the integers, not the format: :func:`adaround` returns weights that sit exactly on the grid, so
the ordinary Q/DQ model stores the learned integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qlinear.encodings.model import Encoding
from qlinear.ptq.layers import Layer

ZETA, GAMMA = 1.1, -0.1


@dataclass(frozen=True)
class AdaRoundOptions:
    iterations: int = 300
    lr: float = 0.05
    reg: float = 3.0             # lambda, on the mean regularizer against the error relative to nearest rounding
    warm_start: float = 0.2      # fraction of iterations without the regularizer
    beta: tuple[float, float] = (20.0, 2.0)
    asymmetric: bool = True      # target W X_f (float input) rather than W X_q
    check_every: int = 10        # with held-back samples: iterations between two checkpoints of the hard rounding


def grid(e: Encoding, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-weight ``(scale, zero point, lo, hi)`` arrays of ``shape`` for an integer encoding (any granularity), with
    ``lo = qmin - z`` and ``hi = qmax - z`` the representable integer offsets."""
    from qlinear.core import granularity as gr

    p = e.onnx_params(shape)
    s = np.asarray(p["scale"], np.float64)
    z = np.zeros(s.shape) if p["zero_point"] is None else np.asarray(p["zero_point"]).astype(np.float64)
    g = gr.resolve(shape, s.shape, p["axis"], p["block_size"])
    sf = np.broadcast_to(gr.expand(s, shape, g), shape)
    zf = np.broadcast_to(gr.expand(z, shape, g), shape)
    t = e.qtype
    return sf, zf, t.qmin - zf, t.qmax - zf


def _h(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """h(V) and dh/dV (in ``v``'s float type)."""
    one = v.dtype.type(1)
    sig = one / (one + np.exp(-v))
    raw = sig * v.dtype.type(ZETA - GAMMA) + v.dtype.type(GAMMA)
    h = np.clip(raw, 0, 1)
    dh = sig * (one - sig) * v.dtype.type(ZETA - GAMMA)
    dh[(raw <= 0) | (raw >= 1)] = 0
    return h, dh


class _Problem:
    """The reconstruction term of AdaRound's loss for one layer, and its exact gradient in ``V``."""

    def __init__(self, layer: Layer, W: np.ndarray, S: np.ndarray, base: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, asymmetric: bool) -> None:
        self.S, self.base, self.lo, self.hi = S, base, lo, hi
        self.norm = 1.0
        self.data = layer.Xq is not None  # few positions: the columns themselves are cheaper than K x K Grams
        if self.data:
            self.Xq = layer.Xq.astype(np.float32)
            self.T = np.matmul(W, (layer.Xf if asymmetric else layer.Xq).astype(np.float32))  # target outputs
        else:
            self.G = layer.G.astype(np.float32)
            self.WM = np.matmul(W, (layer.M if asymmetric else layer.G).astype(np.float32))
            yy = np.sum(np.matmul(W.astype(np.float64), layer.F if asymmetric else layer.G) * W, -1)
            self.yy = float(yy.sum())
        near = np.clip(np.round(W / S) - base, 0.0, 1.0)  # nearest rounding as h
        self.norm = 1.0 / max(self.loss_grad(None, h=near)[0], 1e-30)

    def weights(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = self.base + h
        return self.S * np.clip(q, self.lo, self.hi), (q >= self.lo) & (q <= self.hi)

    def loss_grad(self, V: np.ndarray | None, *, h: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """``||W X_f - W~ X_q||^2`` relative to its value at nearest rounding, and its gradient in ``V``."""
        if V is None:
            return self.loss_grad_h(h, np.zeros_like(h))
        return self.loss_grad_h(*_h(V))

    def loss_grad_h(self, h: np.ndarray, dh: np.ndarray, *, need_loss: bool = True) -> tuple[float, np.ndarray]:
        """:meth:`loss_grad` from ``h(V)`` and ``dh/dV``."""
        Wq, inside = self.weights(h)
        loss = 0.0
        if self.data:
            r = np.matmul(Wq, self.Xq) - self.T
            if need_loss:
                loss = float(np.sum(r.astype(np.float64) ** 2))
            gw = np.matmul(r, self.Xq.transpose(0, 2, 1))
        else:
            WqG = np.matmul(Wq, self.G)
            if need_loss:
                loss = float(np.sum(WqG * Wq, dtype=np.float64) - 2 * np.sum(self.WM * Wq, dtype=np.float64)
                             + self.yy)
            gw = WqG - self.WM
        return loss * self.norm, (2 * self.norm) * gw * self.S * inside * dh


def regularizer(V: np.ndarray, beta: float) -> tuple[float, np.ndarray]:
    """``sum (1 - |2 h(V) - 1|^beta)`` and its gradient in ``V`` (paper eq. 24)."""
    h, dh = _h(V)
    return float(np.sum(1 - np.abs(2 * h - 1) ** beta)), _reg_grad(h, dh, beta)


def _reg_grad(h: np.ndarray, dh: np.ndarray, beta: float) -> np.ndarray:
    d = 2 * h - 1
    a = np.abs(d)
    return (-2 * beta) * a ** (beta - 1) * np.sign(d) * dh


class _Held:
    """The output error ``||W X_f - W~ X_q||^2`` of hard-rounded weights on held-back samples (a second
    :class:`~qlinear.ptq.layers.Layer` of the same layer, not fitted on), one GEMM per checkpoint."""

    def __init__(self, held: Layer, W: np.ndarray, asymmetric: bool) -> None:
        self.Xq = held.Xq  # few positions: the columns themselves, as in _Problem
        if self.Xq is not None:
            self.Xq = self.Xq.astype(np.float32)
            self.T = np.matmul(W, (held.Xf if asymmetric else held.Xq).astype(np.float32))
            return
        Wd = W.astype(np.float64)
        self.G = held.G.astype(np.float32)
        self.WM = np.matmul(W, (held.M if asymmetric else held.G).astype(np.float32))
        self.yy = float(np.sum(np.matmul(Wd, held.F if asymmetric else held.G) * Wd))

    def loss(self, Wq: np.ndarray) -> float:
        if self.Xq is not None:
            return float(np.sum((np.matmul(Wq, self.Xq) - self.T).astype(np.float64) ** 2))
        return float(np.sum(np.matmul(Wq, self.G) * Wq, dtype=np.float64)
                     - 2 * np.sum(self.WM * Wq, dtype=np.float64) + self.yy)


def adaround(layer: Layer, w: np.ndarray, e: Encoding, opt: AdaRoundOptions = AdaRoundOptions(),
             held: Layer | None = None) -> np.ndarray:
    """The weights of ``layer`` (ONNX layout, like ``w``) rounded by AdaRound on encoding ``e``: values on ``e``'s
    grid, ``s * (q - z)`` in float32, which ``e.quantize`` maps back to the learned integers ``q`` exactly.

    With ``held`` (the same layer's statistics on calibration samples kept out of ``layer``), early stopping: every
    ``opt.check_every`` iterations (and at the start, i.e. nearest rounding of the float weights, and the end) the
    hard rounding ``h >= 0.5`` is scored by its output error on the held-back samples, and the best checkpoint is
    returned instead of the last one."""
    shape = tuple(w.shape)
    s_full, _, lo_full, hi_full = grid(e, shape)
    W = layer.to_matrix(np.asarray(w, np.float64)).astype(np.float32)
    S = layer.to_matrix(s_full).astype(np.float32)
    lo, hi = layer.to_matrix(lo_full).astype(np.float32), layer.to_matrix(hi_full).astype(np.float32)
    ratio = W / S
    base = np.floor(ratio)
    rest = np.clip(ratio - base, 1e-4, 1 - 1e-4)
    V = (-np.log((ZETA - GAMMA) / (rest - GAMMA) - 1.0)).astype(np.float32)  # h(V) = rest: the float weights
    prob = _Problem(layer, W, S, base, lo, hi, opt.asymmetric)
    m1 = np.zeros_like(V)
    m2 = np.zeros_like(V)
    b1, b2, eps = 0.9, 0.999, 1e-8
    warm = int(opt.iterations * opt.warm_start)
    judge = _Held(held, W, opt.asymmetric) if held is not None and held.G is not None else None
    best: tuple[float, np.ndarray] | None = None
    for it in range(opt.iterations):
        h, dh = _h(V)
        if judge is not None and it % max(opt.check_every, 1) == 0:
            best = _checkpoint(judge, best, np.clip(base + (h >= 0.5), lo, hi), S)
        _, g = prob.loss_grad_h(h, dh, need_loss=False)
        if it >= warm:
            rel = (it - warm) / max(opt.iterations - warm, 1)
            beta = opt.beta[1] + (opt.beta[0] - opt.beta[1]) * max(0.0, 1.0 - rel)
            g += np.float32(opt.reg / V.size) * _reg_grad(h, dh, beta)
        m1 = b1 * m1 + (1 - b1) * g
        m2 = b2 * m2 + (1 - b2) * g * g
        V = V - opt.lr * (m1 / (1 - b1 ** (it + 1))) / (np.sqrt(m2 / (1 - b2 ** (it + 1))) + eps)
    h, _ = _h(V)
    q = np.clip(base + (h >= 0.5), lo, hi)
    if judge is not None:
        q = _checkpoint(judge, best, q, S)[1]
    return layer.from_matrix(S.astype(np.float64) * q).astype(np.float32)


def _checkpoint(judge: _Held, best: tuple[float, np.ndarray] | None, q: np.ndarray,
                S: np.ndarray) -> tuple[float, np.ndarray]:
    """The better of ``best`` and the integers ``q`` on the held-back samples (the earlier one on a tie)."""
    loss = judge.loss(S * q)
    return (loss, q.copy()) if best is None or loss < best[0] else best


__all__ = ["AdaRoundOptions", "adaround", "grid", "regularizer"]
