"""``qlinear.calibrate``: one call from data to an :class:`~qlinear.encodings.Encoding`."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from qlinear.calibration.groups import Grouping
from qlinear.calibration.observers import make_observer
from qlinear.encodings.model import Encoding
from qlinear.errors import DataError


def _batches(data: Any) -> Iterable[np.ndarray]:
    if isinstance(data, np.ndarray) or np.isscalar(data):
        yield np.asarray(data)
        return
    try:
        it = iter(data)
    except TypeError:
        raise DataError(f"calibration data must be an array or an iterable of arrays, got {type(data).__name__}") from None
    n = 0
    for b in it:
        n += 1
        yield np.asarray(b)
    if n == 0:
        raise DataError("calibration data is empty (the iterable yielded no batch)")


def calibrate(data: Any, qtype: Any = "uint8", *, method: str = "minmax", policy: str = "aimet",
              symmetric: bool = False, strict: bool = False, axis: int | None = None, block_size: int = 0,
              block_axis: int | None = None, name: str = "tensor", role: str = "activation",
              lpbq_scale_bits: int | None = None, percentile: float = 99.99, bins: int | None = None,
              **policy_options: Any) -> Encoding:
    """Calibrate ``data`` (an array, or an iterable of batches streamed once) and return its encoding.

    Args:
        qtype: quantized type (``"uint8"``, ``"int8"``, ``"int4"``, ``"int16"``, ``"float8e4m3fn"``…).
        method: ``minmax``, ``moving_average``, ``percentile``, ``mse``, ``sqnr`` (AIMET tf_enhanced-like) or
            ``entropy``.
        policy: range-to-parameters rule: ``aimet``, ``onnxruntime`` or ``tflite`` (see
            :mod:`qlinear.calibration.policies`).
        symmetric, strict: symmetric grid; strict symmetric (AIMET ``N - 1`` levels).
        axis: per-channel along ``axis``; ``block_size``/``block_axis``: per-block.
        lpbq_scale_bits: with per-block symmetric int types, decompose into LPBQ (e.g. 4).
        percentile, bins: histogram options.
        policy_options: ``reduce_range``/``min_real_range`` (onnxruntime), ``narrow_range``/``mlir`` (tflite),
            ``unsigned_symmetric`` (aimet).
    """
    g = Grouping(axis=axis, block_size=block_size, block_axis=block_axis)
    kw: dict[str, Any] = {}
    if method in ("percentile", "mse", "sqnr", "entropy"):
        kw = {"percentile": percentile} | ({"bins": bins} if bins else {})
    obs = make_observer(method, g, **kw)
    for b in _batches(data):
        obs.update(b)
    return obs.compute(qtype, symmetric=symmetric, strict=strict, policy=policy, name=name, role=role,
                       lpbq_scale_bits=lpbq_scale_bits, **policy_options)
