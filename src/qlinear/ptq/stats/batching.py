"""Batches for a pass that fetches a model's intermediate tensors, sized by the bytes one call returns.

A statistics pass exposes every watched tensor as an output, so one ONNX Runtime call returns all of them for the
batch at once: for an OCR detector at 480 x 480 that is about 210 MB per sample, 1.7 GB for a batch of 8. Arrays that
large are mapped fresh from the system on every call (glibc serves allocations above its mmap threshold, at most
32 MiB, with ``mmap``), so each call pays its page faults again: on that model a batch of 8 spent more time in the
kernel than computing, and peaked at 5.3 GB. :class:`FetchBatches` runs the first sample alone, measures what its
call returned, and cuts the rest into batches of as many samples (at most ``batch_size``) as keep one call under
:data:`FETCH_BYTES`. The cuts depend only on the data and the model, so a pass split over Ray actors cuts the same
batches (:mod:`qlinear.ptq.stats.distributed`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

FETCH_BYTES = 64 * 2 ** 20  #: bytes of fetched tensors one call of a statistics pass aims to stay under


class FetchBatches:
    """``ds.batches(start, stop, b)`` with ``b`` chosen by the bytes the first call fetched.

    Iterate :meth:`batches`; after running each batch, report what the call returned with :meth:`fetched` (only the
    first report decides). ``batch_size`` stays the upper bound; ``limit`` None keeps plain ``batch_size`` batches.
    """

    def __init__(self, batch_size: int, limit: int | None = FETCH_BYTES) -> None:
        self.batch_size = max(1, int(batch_size))
        self.limit = limit
        self.per_sample: float | None = None  #: bytes the first call fetched per sample

    def fetched(self, arrays: Iterable[Any], samples: int) -> None:
        """Record what one call returned for ``samples`` samples (the first call's only)."""
        if self.per_sample is None:
            self.record(sum(int(np.asarray(a).nbytes) for a in arrays), samples)

    def record(self, nbytes: int, samples: int) -> None:
        """Record that one call fetched ``nbytes`` for ``samples`` samples (the first call's only)."""
        if self.per_sample is None:
            self.per_sample = nbytes / max(1, samples)

    def size(self) -> int:
        """Samples per call after the first: ``batch_size``, or fewer when one sample's fetched bytes are large."""
        if self.limit is None or not self.per_sample:
            return self.batch_size
        return max(1, min(self.batch_size, int(self.limit // self.per_sample)))

    def batches(self, ds: Any, start: int, stop: int) -> Iterator[dict[str, np.ndarray]]:
        if self.limit is None or self.batch_size == 1 or stop - start < 2:
            yield from ds.batches(start, stop, self.batch_size)
            return
        yield from ds.batches(start, start + 1, 1)
        yield from ds.batches(start + 1, stop, self.size())


__all__ = ["FETCH_BYTES", "FetchBatches"]
