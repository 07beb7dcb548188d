"""``qlinear.calibrate``: one call from data to an :class:`~qlinear.encodings.Encoding`."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from qlinear.calibration.groups import Grouping
from qlinear.calibration.observers import make_observer
from qlinear.encodings.model import Encoding
from qlinear.errors import DataError

_FLT_MAX = float(np.finfo(np.float32).max)
_CHUNK = 1 << 20  # elements per finiteness check (a bounded temporary, whatever the batch size)


def _where(name: str, role: str, i: int) -> str:
    if role == "param":
        return f"weight {name!r} (qlinear.calibrate argument 'data')"
    return f"qlinear.calibrate({name!r}): argument 'data', batch {i}"


def _check_finite(b: np.ndarray, i: int, name: str, role: str) -> None:
    """Refuse a batch holding +inf, -inf or NaN: a min-max range would take the infinity (a scale of ~1e36) and a
    NaN-only group would calibrate to nothing (a scale of ~1e-7), both silently wrong."""
    if b.dtype.kind != "f":
        return
    fix = ("a weight holding inf/NaN cannot be quantized: fix the model or exclude its node" if role == "param" else
           "calibration needs finite values: replace them (np.nan_to_num) or drop those samples")
    flat = b.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        part = flat[start:start + _CHUNK]
        bad = ~np.isfinite(part)
        if bad.any():
            j = start + int(np.argmax(bad))
            idx = [int(k) for k in np.unravel_index(j, b.shape)] if b.ndim else []
            raise DataError(f"{_where(name, role, i)} holds a non-finite value ({flat[j]} at index {idx}); {fix}")
        if part.dtype.itemsize > 4 and part.size and float(np.max(np.abs(part))) > _FLT_MAX:
            j = start + int(np.argmax(np.abs(part)))
            idx = [int(k) for k in np.unravel_index(j, b.shape)] if b.ndim else []
            raise DataError(f"{_where(name, role, i)} holds {flat[j]} at index {idx}, beyond float32's range (the "
                            "type of every scale); scale the data down or clip it")


def _batches(data: Any, name: str, role: str) -> Iterable[np.ndarray]:
    if isinstance(data, np.ndarray) or np.isscalar(data):
        a = np.asarray(data)
        _check_finite(a, 0, name, role)
        yield a
        return
    try:
        it = iter(data)
    except TypeError:
        raise DataError(f"calibration data must be an array or an iterable of arrays, got {type(data).__name__}") from None
    n = 0
    for b in it:
        a = np.asarray(b)
        _check_finite(a, n, name, role)
        n += 1
        yield a
    if n == 0:
        raise DataError("calibration data is empty (the iterable yielded no batch)")


def calibrate(data: Any, qtype: Any = "uint8", *, method: str = "minmax", policy: str = "aimet",
              symmetric: bool = False, strict: bool = False, axis: int | None = None, block_size: int = 0,
              block_axis: int | None = None, name: str = "tensor", role: str = "activation",
              lpbq_scale_bits: int | None = None, percentile: float = 99.99, bins: int | None = None,
              **policy_options: Any) -> Encoding:
    """Calibrate ``data`` (an array, or an iterable of batches streamed once) and return its encoding.

    Every value must be finite: a batch holding +inf, -inf or NaN is refused with a :class:`DataError` (the
    observers themselves ignore NaN, as activations such as a fully masked Softmax row can hold them).

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
    for b in _batches(data, name, role):
        obs.update(b)
    return obs.compute(qtype, symmetric=symmetric, strict=strict, policy=policy, name=name, role=role,
                       lpbq_scale_bits=lpbq_scale_bits, **policy_options)
