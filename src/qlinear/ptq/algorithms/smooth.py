"""Activation smoothing for transformer MatMuls (SmoothQuant): the statistics side.

The rewrite is the ``onnx_ir`` pass :class:`qlinear.graph.passes.smooth.Smooth` (see its module for the method);
here ``max|X_j|`` of every smoothable activation is measured in one ONNX Runtime pass over the calibration samples
(:func:`channel_absmax`) and handed to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.smooth import ALPHA, Smooth
from qlinear.graph.passes.smooth import smoothable as smoothable_ir

SESSION_LEVEL = "disable"  # ONNX Runtime optimization level of the statistics session


def smoothable(m: onnx.ModelProto) -> dict[str, list[str]]:
    """Normalization outputs feeding MatMuls with a constant 2-D weight -> the names of those MatMuls
    (:func:`qlinear.graph.passes.smooth.smoothable`)."""
    return {x: [n.name for n in mms] for x, mms in smoothable_ir(to_ir(m).graph).items()}


def channel_absmax(m: onnx.ModelProto, tensors: list[str], ds: Any, n: int, batch_size: int,
                   label: str) -> dict[str, np.ndarray]:
    """Per-channel (last axis) ``max|x|`` of ``tensors`` over the first ``n`` samples of ``ds`` (ONNX Runtime, graph
    optimizations off: the session only reads normalization outputs, and ORT's fusions, whose setup grows faster
    than the graph at level ``all``, leave these values bit-identical on the models measured, see
    ``benchmarks/bench_scaling.py``)."""
    from qlinear.ptq.stats.collect import session

    s = session(m, tensors, label=label, level=SESSION_LEVEL)
    acc: dict[str, np.ndarray] = {}
    ds.check_stacking(s.run_all, batch_size)
    for batch in ds.batches(0, n, batch_size):
        for t, x in zip(tensors, s.run(tensors, batch, where=f"{ds.source} (smoothing)")):
            a = np.abs(x.reshape(-1, x.shape[-1])).max(0)
            acc[t] = a if t not in acc else np.maximum(acc[t], a)
    return acc


def smooth_model(model: ir.Model, ds: Any, n: int, batch_size: int, *, alpha: float = ALPHA,
                 label: str = "model", proto: onnx.ModelProto | None = None) -> int:
    """Smooth every smoothable MatMul input of ``model``; returns how many activations were smoothed. ``proto``:
    the ``ModelProto`` of ``model`` as it is, if the caller has it (for the statistics session; else it is made
    here, once, and only when there is something to smooth)."""
    targets = list(smoothable_ir(model.graph))
    if not targets:
        return 0
    amax = channel_absmax(proto if proto is not None else to_proto(model), targets, ds, n, batch_size, label)
    p = Smooth(amax, alpha=alpha)
    p(model)
    return p.smoothed


def smooth(m: onnx.ModelProto, ds: Any, n: int, batch_size: int, *, alpha: float = ALPHA,
           label: str = "model") -> int:
    """:func:`smooth_model` on a ``ModelProto``, rewritten in place."""
    model = to_ir(m)
    k = smooth_model(model, ds, n, batch_size, alpha=alpha, label=label, proto=m)
    if k:
        m.CopyFrom(to_proto(model))
    return k
