"""Observers: streaming statistics with one protocol.

``update(array)`` folds a batch in (memory independent of the number of batches), ``merge(other)`` combines two
observers' statistics exactly (split calibration across processes: the result is bit-identical to one observer
over all the data), ``compute(qtype, ...) -> Encoding`` turns them into parameters with a policy.

==================  ====================================================================================
``MinMaxObserver``     running min and max (NaN ignored, ±inf kept: ``compute`` refuses an infinite range)
``MovingAverageMinMaxObserver``  mean of per-batch minima / maxima (ONNX Runtime ``moving_average``)
``HistogramObserver``  dyadic mergeable histogram + min/max; ``method`` = percentile, mse, sqnr, entropy
==================  ====================================================================================

The moving-average observer keeps its per-batch minima and maxima (two floats per group and batch) so that its
mean is computed as ONNX Runtime computes it (``np.nanmean`` in float32); that is the one state that grows with
the number of batches.

``update`` accepts NaN and ±inf (activations can hold them: a fully masked Softmax row is NaN), but ``compute``
refuses statistics it cannot turn into a grid: a group that saw no finite value, or a chosen range that is infinite
(min-max, moving average, MSE and SQNR over an infinity; percentile and entropy choose their range from the finite
values and are unaffected).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.calibration import histogram as H
from qlinear.calibration import search
from qlinear.calibration.groups import Grouping
from qlinear.calibration.rules import to_encoding
from qlinear.core.granularity import PerBlock, PerTensor
from qlinear.encodings.model import Encoding
from qlinear.errors import CalibrationError, DataError

_FLT_MAX = float(np.finfo(np.float32).max)
METHODS = ("minmax", "moving_average", "percentile", "mse", "sqnr", "entropy")


def _as_batch(x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise DataError(f"calibration data must be numeric, got dtype {a.dtype}")
    if a.dtype.kind != "f" or a.dtype.itemsize > 4 and a.dtype != np.float64:
        a = a.astype(np.float32)
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float32)
    if a.size == 0:
        raise DataError("empty calibration batch")
    return a


class Observer:
    """Base class: grouping, shape bookkeeping and ``compute``."""

    method = "minmax"

    def __init__(self, grouping: Grouping | None = None) -> None:
        self.grouping = grouping or Grouping()
        self.shape: tuple[int, ...] | None = None
        self.min: np.ndarray | None = None
        self.max: np.ndarray | None = None

    def _view(self, x: Any) -> np.ndarray:
        a = _as_batch(x)
        if not isinstance(self.grouping.granularity, PerTensor):
            if self.shape is None:
                self.shape = a.shape
            elif a.shape != self.shape and isinstance(self.grouping.granularity, PerBlock):
                raise DataError(f"per-block calibration needs batches of one shape, got {a.shape} after {self.shape}")
        else:
            self.shape = self.shape or a.shape
        v = self.grouping.view(a)
        if self.min is not None and v.shape[0] != self.min.shape[0]:
            raise DataError(f"batch has {v.shape[0]} groups (channels/blocks) but earlier batches had "
                            f"{self.min.shape[0]}")
        return v

    def _minmax(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore"):
            lo = np.fmin.reduce(v, axis=1).astype(np.float64)
            hi = np.fmax.reduce(v, axis=1).astype(np.float64)
        self._fold(lo, hi)
        return lo, hi

    def _fold(self, lo: np.ndarray, hi: np.ndarray) -> None:
        if self.min is None:
            self.min, self.max = lo, hi
        else:
            self.min = np.fmin(self.min, lo)
            self.max = np.fmax(self.max, hi)

    def _check_merge(self, other: "Observer") -> None:
        if type(other) is not type(self) or other.grouping != self.grouping:
            raise CalibrationError(f"cannot merge a {type(other).__name__} ({other.grouping}) into a "
                                   f"{type(self).__name__} ({self.grouping})")
        if self.min is not None and other.min is not None and self.min.shape != other.min.shape:
            raise CalibrationError(f"cannot merge observers of {self.min.shape[0]} and {other.min.shape[0]} groups")

    def _merge_minmax(self, other: "Observer") -> None:
        if other.min is None:
            return
        if self.min is None:
            self.min, self.max, self.shape = other.min.copy(), other.max.copy(), other.shape
        else:
            self.min = np.fmin(self.min, other.min)
            self.max = np.fmax(self.max, other.max)

    def range(self, bits: int = 8, *, symmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The chosen (lo, hi) per group (float64)."""
        self._need()
        return np.where(np.isnan(self.min), 0.0, self.min), np.where(np.isnan(self.max), 0.0, self.max)

    def _need(self) -> None:
        if self.min is None:
            raise CalibrationError(f"{type(self).__name__}: no data observed; call update() first")

    def _check_finite(self, lo: np.ndarray, hi: np.ndarray, name: str) -> None:
        """Refuse a group with no finite value (its range would be [0, 0]: a scale at the floor) or an infinite
        chosen range (a scale of ~1e36): either would be a silently useless encoding."""
        empty = np.isnan(self.min) | np.isnan(self.max)
        bad = empty | ~(np.isfinite(lo) & np.isfinite(hi))
        if not bad.any():
            return
        g = int(np.argmax(bad))
        where = "" if isinstance(self.grouping.granularity, PerTensor) else f" group {g} ({int(bad.sum())} of {bad.size} groups)"
        what = "saw NaN only" if empty[g] else f"has the non-finite range [{lo[g]}, {hi[g]}]"
        raise CalibrationError(f"{name}:{where} {what} ({self.method} calibration); calibrate finite data "
                               "(np.nan_to_num, or drop the samples holding inf/NaN), or method percentile or entropy, "
                               "whose ranges ignore infinities")

    def param_shape(self) -> tuple[int, ...]:
        self._need()
        return self.grouping.param_shape(self.shape)

    def compute(self, qtype: Any = "uint8", *, symmetric: bool = False, strict: bool = False,
                policy: str = "aimet", name: str = "tensor", role: str = "activation", **policy_options: Any) -> Encoding:
        """An :class:`~qlinear.encodings.Encoding` from the observed statistics (see :mod:`qlinear.calibration.rules`)."""
        from qlinear.core.types import qtype as _qt

        t = _qt(qtype)
        bits = t.bits if t.is_int else 8
        with np.errstate(over="ignore", invalid="ignore"):  # an infinite range is refused just below
            lo, hi = self.range(bits, symmetric=symmetric)
        self._check_finite(lo, hi, name)
        # a histogram search may pick a grid end past the data (the top dyadic level of float32's largest values is
        # 2^128): keep the range within float32, the scale's type
        lo, hi = np.clip(lo, -_FLT_MAX, _FLT_MAX), np.clip(hi, -_FLT_MAX, _FLT_MAX)
        shape = self.param_shape()
        return to_encoding(lo.reshape(shape), hi.reshape(shape), t, symmetric=symmetric, strict=strict, policy=policy,
                           grouping=self.grouping, name=name, role=role, **policy_options)


class MinMaxObserver(Observer):
    """Running minimum and maximum per group."""

    method = "minmax"

    def update(self, x: Any) -> "MinMaxObserver":
        self._minmax(self._view(x))
        return self

    def merge(self, other: "MinMaxObserver") -> "MinMaxObserver":
        self._check_merge(other)
        self._merge_minmax(other)
        return self


class MovingAverageMinMaxObserver(Observer):
    """ONNX Runtime's ``moving_average``: the range is the float32 ``nanmean`` of the per-batch minima and maxima."""

    method = "moving_average"

    def __init__(self, grouping: Grouping | None = None) -> None:
        super().__init__(grouping)
        self.batch_min: list[np.ndarray] = []
        self.batch_max: list[np.ndarray] = []

    def update(self, x: Any) -> "MovingAverageMinMaxObserver":
        v = self._view(x)
        with np.errstate(invalid="ignore"):
            self.batch_min.append(np.fmin.reduce(v, axis=1))
            self.batch_max.append(np.fmax.reduce(v, axis=1))
        self._minmax(v)
        return self

    def merge(self, other: "MovingAverageMinMaxObserver") -> "MovingAverageMinMaxObserver":
        self._check_merge(other)
        self._merge_minmax(other)
        self.batch_min += other.batch_min
        self.batch_max += other.batch_max
        return self

    def range(self, bits: int = 8, *, symmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
        self._need()
        lo = np.nanmean(np.stack(self.batch_min), axis=0)
        hi = np.nanmean(np.stack(self.batch_max), axis=0)
        return lo.astype(np.float64), hi.astype(np.float64)


class HistogramObserver(Observer):
    """Min/max plus a mergeable dyadic histogram (:mod:`qlinear.calibration.histogram`) per group; the range comes
    from ``method``: ``percentile`` (``percentile=99.99``), ``mse``, ``sqnr`` (AIMET tf_enhanced-like) or
    ``entropy``."""

    def __init__(self, method: str = "sqnr", grouping: Grouping | None = None, *, bins: int | None = None,
                 percentile: float = 99.99) -> None:
        super().__init__(grouping)
        if method not in ("percentile", "mse", "sqnr", "entropy"):
            raise CalibrationError(f"unknown histogram method {method!r}; expected percentile, mse, sqnr or entropy")
        if not 50.0 <= percentile <= 100.0:
            raise CalibrationError(f"percentile must be in [50, 100], got {percentile}")
        self.method = method
        self.percentile = float(percentile)
        self.half = int(bins or (64 if isinstance(self.grouping.granularity, PerBlock) else 2048)) // 1
        if self.half & (self.half - 1):
            raise CalibrationError(f"bins must be a power of two, got {self.half}")
        self.k: np.ndarray | None = None
        self.counts: np.ndarray | None = None

    def update(self, x: Any) -> "HistogramObserver":
        v = self._view(x)
        lo, hi = self._minmax(v)
        amax = np.maximum(np.abs(lo), np.abs(hi))
        if not np.isfinite(amax).all():  # ±inf present: the level comes from the finite values only
            with np.errstate(invalid="ignore"):
                amax = np.fmax.reduce(np.where(np.isfinite(v), np.abs(v), np.nan), axis=1)
        kb = H.level(np.nan_to_num(amax, nan=0.0), self.half)
        if self.counts is None:
            self.k = np.full(v.shape[0], H.K_EMPTY, np.int64)
            self.counts = np.zeros((v.shape[0], 2 * self.half), np.int64)
        k_new = np.maximum(self.k, kb)
        self.counts = H.rebin(self.counts, self.k, k_new, self.half)
        self.k = k_new
        H.add(self.counts, self.k, v, self.half)
        return self

    def merge(self, other: "HistogramObserver") -> "HistogramObserver":
        self._check_merge(other)
        if other.method != self.method or other.half != self.half:
            raise CalibrationError("cannot merge histogram observers with different methods or bin counts")
        if other.counts is None:
            return self
        if self.counts is None:
            self.counts, self.k = other.counts.copy(), other.k.copy()
        else:
            k_new = np.maximum(self.k, other.k)
            self.counts = H.rebin(self.counts, self.k, k_new, self.half) + H.rebin(other.counts, other.k, k_new,
                                                                                   self.half)
            self.k = k_new
        self._merge_minmax(other)
        return self

    def range(self, bits: int = 8, *, symmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
        self._need()
        lo, hi = np.nan_to_num(self.min, nan=0.0), np.nan_to_num(self.max, nan=0.0)  # ±inf: float64's extremes
        if self.method == "percentile":
            return search.percentile_range(self.counts, self.k, self.half, lo, hi, self.percentile,
                                           symmetric=symmetric)
        if self.method == "entropy":
            return search.entropy_range(self.counts, self.k, self.half, lo, hi, bits)
        # coarse pass over every candidate, fine pass (bins ~step/4 at 8 bits) over the best few
        a, width, w = H.compact(self.counts, self.k, self.half, target=64)
        sa, sw = H.sparse(a, w)
        coarse = (sa, width, sw)
        a2, width2, w2 = H.compact(self.counts, self.k, self.half, target=1024 if bits >= 7 else 256)
        sa2, sw2 = H.sparse(a2, w2)
        gamma = search.GAMMA_SQNR if self.method == "sqnr" else 1.0
        return search.search_range(coarse, (sa2, width2, sw2), lo, hi, bits, symmetric=symmetric, gamma=gamma)


def make_observer(method: str = "minmax", grouping: Grouping | None = None, **kw: Any) -> Observer:
    """The observer for ``method`` (one of :data:`METHODS`)."""
    if method == "minmax":
        return MinMaxObserver(grouping)
    if method == "moving_average":
        return MovingAverageMinMaxObserver(grouping)
    if method in ("percentile", "mse", "sqnr", "entropy"):
        return HistogramObserver(method, grouping, **kw)
    raise CalibrationError(f"unknown calibration method {method!r}; expected one of {', '.join(METHODS)}")
