"""The one statistics pass: the float model in ONNX Runtime over samples ``[start, stop)``, batch by batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable

import onnx

from qlinear.ptq.data import Dataset
from qlinear.ptq.stats import distributed
from qlinear.ptq.stats.accumulators import Accumulator
from qlinear.ptq.stats.batching import FetchBatches
from qlinear.ptq.stats.session import Session


def fetched(inputs: Sequence[str], tensors: Sequence[str]) -> list[str]:
    """The tensors a session must expose for ``tensors`` (graph inputs come from the data)."""
    have = set(inputs)
    return [t for t in dict.fromkeys(tensors) if t not in have]


def accumulate(session: Any, ds: Dataset, start: int, stop: int, batch_size: int,
               accumulators: Mapping[str, Sequence[Accumulator]], *, inputs: Sequence[str] = (),
               progress: Callable[[int], None] | None = None, cuts: FetchBatches | None = None) -> list[str]:
    """Update every tensor's ``accumulators`` with its values on samples ``[start, stop)`` of ``ds``, one batch
    at a time (each batch dropped after its updates). ``session``: a :class:`qlinear.ptq.stats.session.Session` of the float
    model exposing the watched tensors that are not graph ``inputs`` (those are read from the data). ``cuts``: how the
    samples are batched (:class:`~qlinear.ptq.stats.batching.FetchBatches`, sized by the bytes a call fetches; None:
    batches of ``batch_size``). Returns the tensors fetched from the session."""
    fetch = fetched(inputs, list(accumulators))
    done = start
    cuts = cuts or FetchBatches(batch_size, None)
    if hasattr(ds, "check_stacking") and hasattr(session, "run_all"):
        ds.check_stacking(session.run_all, batch_size)
    for feed in cuts.batches(ds, start, stop):
        n = ds.batch_len(feed)
        out = session.run(fetch, feed, where=f"{ds.source}, samples {done}..{done + n - 1}")
        cuts.fetched(out, n)
        vals = dict(zip(fetch, out))
        done += n
        vals.update({k: v for k, v in feed.items() if k in accumulators})
        for t, accs in accumulators.items():
            for a in accs:
                a.update(vals[t])
        if progress:
            progress(getattr(feed, "samples", n))   # samples, not rows (a sample may be a batch of words)
    return fetch


def accumulate_model(m: onnx.ModelProto, ds: Dataset, start: int, stop: int, batch_size: int,
                     accumulators: Mapping[str, Sequence[Accumulator]], *, session_kw: Mapping[str, Any],
                     workers: int = 1, ray_address: str | None = None, keep_session: bool = False,
                     progress: Callable[[int], None] | None = None,
                     cuts: FetchBatches | None = None) -> tuple[Session | None, list[str]]:
    """:func:`accumulate` over a :class:`~qlinear.ptq.stats.session.Session` of ``m`` (``session_kw``: its options) built
    here, or, with ``workers > 1`` or a ``ray_address``, on Ray actors (:mod:`.distributed`; byte-identical
    statistics; ``cuts``: as :func:`accumulate`). Returns the local session (``None`` on Ray unless
    ``keep_session``) and the fetched tensors."""
    inputs = [i.name for i in m.graph.input]
    fetch = fetched(inputs, list(accumulators))
    if not distributed.active(workers, ray_address):
        sess = Session(m, fetch, **session_kw)
        return sess, accumulate(sess, ds, start, stop, batch_size, accumulators, inputs=inputs, progress=progress,
                                cuts=cuts)
    distributed.connect(workers, ray_address)
    distributed.accumulate_ray(m, fetch, dict(session_kw), ds, start, stop, cuts or FetchBatches(batch_size, None),
                               accumulators, workers=workers, progress=progress)
    return (Session(m, fetch, **session_kw) if keep_session else None), fetch


__all__ = ["accumulate", "accumulate_model", "fetched"]
