"""Softmax, logistic and tanh on int8, as TFLite's optimized (x86) and generic kernels compute them.

* logistic / tanh (``LUTPopulate<int8_t>``): for every input code ``q``: ``x = s_in*(q - zp_in)`` (float32),
  ``y = 1/(1 + expf(-x))`` or ``tanhf(x)``, ``out = round_half_away(y * (1/s_out)) + zp_out`` (float32), clamp;
  ``expf``/``tanhf`` are modelled as correctly rounded (``float(exp(double))``);
* softmax (``PopulateSoftmaxLookupTable``, optimized x86 path): ``table[255 - v] = expf(-s_in*beta * v)`` with a
  float32 product; per row ``sum`` accumulated in float32 in order, ``inv = 1/(sum * s_out)``,
  ``out = round_half_away(table[max - q] * inv) + zp_out``.

The fixed output parameters TFLite requires (softmax/logistic ``1/256, -128``; tanh ``1/128, 0``) are the defaults.
"""

from __future__ import annotations

import numpy as np

from qlinear.kernels.requant import round_half_away


def _lut(fn, s_in: float, zp_in: int, s_out: float, zp_out: int, qmin: int, qmax: int) -> np.ndarray:  # noqa: ANN001
    q = np.arange(qmin, qmax + 1, dtype=np.int64)
    x = np.float32(s_in) * (q - zp_in).astype(np.float32)
    y = fn(x.astype(np.float64)).astype(np.float32)
    inv = np.float32(1.0) / np.float32(s_out)
    return np.clip(round_half_away(y * inv) + zp_out, qmin, qmax).astype(np.int64)


def logistic(x: np.ndarray, *, s_in: float, zp_in: int, s_out: float = 1 / 256, zp_out: int = -128,
             qmin: int = -128, qmax: int = 127) -> np.ndarray:
    def sig(v: np.ndarray) -> np.ndarray:
        e = np.exp(-v).astype(np.float32)  # expf
        return (np.float32(1.0) / (np.float32(1.0) + e)).astype(np.float64)

    lut = _lut(sig, s_in, zp_in, s_out, zp_out, qmin, qmax)
    return lut[np.asarray(x, np.int64) - qmin]


def tanh(x: np.ndarray, *, s_in: float, zp_in: int, s_out: float = 1 / 128, zp_out: int = 0, qmin: int = -128,
         qmax: int = 127) -> np.ndarray:
    lut = _lut(np.tanh, s_in, zp_in, s_out, zp_out, qmin, qmax)
    return lut[np.asarray(x, np.int64) - qmin]


def softmax(x: np.ndarray, *, s_in: float, beta: float = 1.0, s_out: float = 1 / 256, zp_out: int = -128,
            axis: int = -1) -> np.ndarray:
    x = np.moveaxis(np.asarray(x, np.int64), axis, -1)
    scale = np.float32(-np.float32(s_in) * np.float32(beta))
    v = np.arange(256, dtype=np.int64)
    table = np.exp((scale * v.astype(np.float32)).astype(np.float64)).astype(np.float32)  # table[v] = exp(-s*v)
    mx = x.max(-1, keepdims=True)
    t = table[mx - x]
    s = np.zeros(t.shape[:-1], np.float32)
    for j in range(t.shape[-1]):  # sequential float32 sum, as the kernel adds (loop over the row length only)
        s = (s + t[..., j]).astype(np.float32)
    inv = (np.float32(1.0) / (s * np.float32(s_out))).astype(np.float32)
    out = round_half_away((t * inv[..., None]).astype(np.float32)) + zp_out
    return np.moveaxis(np.clip(out, -128, 127).astype(np.int64), -1, axis)
