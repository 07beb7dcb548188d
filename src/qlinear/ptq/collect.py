"""One streaming pass of ONNX Runtime over the calibration data, feeding observers.

The float model is run with every observed tensor exposed as an output; each batch updates the observers and is
dropped, so memory is bounded by the model and the batch, not by the data set.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx

from qlinear.calibration import Grouping, make_observer
from qlinear.calibration.observers import Observer
from qlinear.ptq.data import Dataset


def session(m: onnx.ModelProto, outputs: list[str], label: str = "model") -> Any:
    """An ONNX Runtime session of the float model exposing ``outputs``, at the full optimization level (float
    fusions change the last bits of a few values, not the ranges calibration needs; see :mod:`qlinear.ptq.session`)."""
    from qlinear.ptq.session import Session

    return Session(m, outputs, level="all", label=label)


class ChannelMean:
    """Running per-channel sum (axis 1) and count: the input means bias correction needs."""

    def __init__(self) -> None:
        self.sum: np.ndarray | None = None
        self.n = 0

    def update(self, x: np.ndarray) -> None:
        if x.ndim > 2:  # contiguous pairwise float32 sums over each plane, then float64 over planes
            s = x.reshape(x.shape[0], x.shape[1], -1).sum(-1).sum(0, dtype=np.float64)
        else:
            s = x.reshape(-1, x.shape[-1] if x.ndim > 1 else 1).sum(0, dtype=np.float64)
        self.sum = s if self.sum is None else self.sum + s
        self.n += x.size // (x.shape[1] if x.ndim > 1 else 1)

    @property
    def mean(self) -> np.ndarray:
        return self.sum / max(self.n, 1)


def calibrate_activations(m: onnx.ModelProto, ds: Dataset, start: int, stop: int, tensors: list[str],
                          method: str, *, batch_size: int, means_for: list[str] = (), percentile: float = 99.99,
                          method_for: dict[str, str] | None = None,
                          minmax_for: set[str] = frozenset(), label: str = "model", keep: dict | None = None,
                          progress: Callable[[int], None] | None = None) -> tuple[dict[str, Observer],
                                                                                 dict[str, ChannelMean]]:
    def observer(t: str) -> Observer:
        mt = "minmax" if t in minmax_for else (method_for or {}).get(t, method)
        kw = {"percentile": percentile} if mt in ("percentile", "mse", "sqnr", "entropy") else {}
        return make_observer(mt, Grouping(), **kw)

    obs = {t: observer(t) for t in tensors}
    means = {t: ChannelMean() for t in means_for}
    outs = list(dict.fromkeys(list(tensors) + list(means_for)))
    inputs = {i.name for i in m.graph.input}
    fetch = [t for t in outs if t not in inputs]
    sess = session(m, fetch, label)
    done = start
    for feed in ds.batches(start, stop, batch_size):
        n = len(next(iter(feed.values())))
        vals = dict(zip(fetch, sess.run(fetch, feed, where=f"{ds.source}, samples {done}..{done + n - 1}")))
        done += n
        vals.update({k: v for k, v in feed.items() if k in outs})
        for t in tensors:
            obs[t].update(vals[t])
        for t in means_for:
            means[t].update(vals[t])
        if progress:
            progress(n)
    if keep is not None:  # the warm session, reused by the report for the float model's intermediate tensors
        keep["session"], keep["outputs"] = sess, list(fetch)
    return obs, means
