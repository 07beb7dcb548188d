"""Activation calibration: the observers (ranges) and channel means of the W8A8 pipeline, filled by the one
statistics pass (:func:`qlinear.ptq.stats.accumulate`) over the float model.

The float model is run with every observed tensor exposed as an output; each batch updates the observers and is
dropped, so memory is bounded by the model and the batch, not by the data set; batches hold fewer than
``batch_size`` samples where one sample's tensors are large (:mod:`qlinear.ptq.stats.batching`).
"""

from __future__ import annotations

from typing import Any, Callable

import onnx

from qlinear.calibration import Grouping, make_observer
from qlinear.calibration.observers import Observer
from qlinear.ptq.data import Dataset
from qlinear.ptq.stats import Accumulator, ChannelMean
from qlinear.ptq.stats.batching import FetchBatches
from qlinear.ptq.stats.stream import accumulate_model


def session(m: onnx.ModelProto, outputs: list[str], label: str = "model", level: str = "all") -> Any:
    """An ONNX Runtime session of the float model exposing ``outputs``, by default at the full optimization level
    (float fusions change the last bits of a few values, not the ranges calibration needs; see
    :mod:`qlinear.ptq.stats.session`)."""
    from qlinear.ptq.stats.session import Session

    return Session(m, outputs, level=level, label=label)


def calibrate_activations(m: onnx.ModelProto, ds: Dataset, start: int, stop: int, tensors: list[str],
                          method: str, *, batch_size: int, means_for: list[str] = (), percentile: float = 99.99,
                          method_for: dict[str, str] | None = None,
                          minmax_for: set[str] = frozenset(), label: str = "model", keep: dict | None = None,
                          progress: Callable[[int], None] | None = None, workers: int = 1,
                          ray_address: str | None = None) -> tuple[dict[str, Observer], dict[str, ChannelMean]]:
    """Observers of ``tensors`` (``method``, or ``method_for[t]``; min-max for ``minmax_for``) and the channel means
    of ``means_for`` on samples ``[start, stop)`` (on Ray actors with ``workers > 1`` or a ``ray_address``)."""
    def observer(t: str) -> Observer:
        mt = "minmax" if t in minmax_for else (method_for or {}).get(t, method)
        kw = {"percentile": percentile} if mt in ("percentile", "mse", "sqnr", "entropy") else {}
        return make_observer(mt, Grouping(), **kw)

    obs = {t: observer(t) for t in tensors}
    means = {t: ChannelMean() for t in means_for}
    accs: dict[str, list[Accumulator]] = {t: [o] for t, o in obs.items()}
    cuts = FetchBatches(batch_size)  # every watched tensor of a batch is fetched at once: batches sized by their bytes
    for t, a in means.items():
        accs.setdefault(t, []).append(a)
    sess, fetch = accumulate_model(m, ds, start, stop, batch_size, accs, session_kw={"level": "all", "label": label},
                                   workers=workers, ray_address=ray_address, keep_session=keep is not None,
                                   progress=progress, cuts=cuts)
    if keep is not None:  # the warm session, reused by the report for the float model's intermediate tensors
        keep["session"], keep["outputs"], keep["batch"] = sess, list(fetch), cuts.size()
    return obs, means


__all__ = ["ChannelMean", "calibrate_activations", "session"]
