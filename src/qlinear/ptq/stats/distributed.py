"""The statistics pass spread over Ray actors (``workers > 1`` or ``ray_address``; the ``qlinear[ray]`` extra).

Each actor holds its own ONNX Runtime session of the float model (the model travels once through Ray's object
store; external data is read from the same folder path on every node). The driver reads the data, cuts it into the
batches the single-process pass uses (:class:`~qlinear.ptq.stats.batching.FetchBatches`: the shards, fixed
whatever the number of workers; when their size depends on the bytes the first call fetched, the first batch's actor
reports them before the rest is cut) and sends batch ``i`` to actor ``i mod N``. The actor updates fresh copies of
the accumulators with that one batch and returns them; the driver merges the returned states into its accumulators **in batch
order** with their ``merge``. For every accumulator here, merging the state of one batch is the same arithmetic as
updating with that batch (min/max, dyadic histogram counts in int64, float64 channel sums, the float32 Gram sum
``M += x^T x``), so the statistics, and every file written from them, are byte-identical to the single-process
pass for any number of workers; N only decides who computes which batch.

Ray is imported lazily: ``workers = 1`` without an address never imports it.
"""

from __future__ import annotations

import copy
import socket
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import onnx

from qlinear.errors import ConfigError, QlinearError
from qlinear.ptq.stats.batching import FetchBatches

CONNECT_TIMEOUT = 5.0  # seconds for the head node to accept a connection
_IN_FLIGHT = 2  # batches queued per actor (the next one is ready while one runs)


def active(workers: int, address: str | None) -> bool:
    """Whether the pass runs on Ray: more than one worker, or a cluster address."""
    return workers > 1 or bool(address)


def connect(workers: int, address: str | None) -> None:
    """Join the Ray cluster at ``address``, or start a local instance with ``workers`` CPUs (kept for the process;
    reused when Ray is already initialized). Called before any work, so a bad address fails first."""
    if not active(workers, address):
        return
    try:
        import ray
    except ImportError:
        raise ConfigError(f"workers: {workers}{' with ray_address' if address else ''} needs Ray; install it with "
                          "pip install 'qlinear[ray]', or use workers 1") from None
    if ray.is_initialized():
        return
    if address:
        _reachable(address)
    try:
        if address:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        else:
            ray.init(num_cpus=workers, logging_level="ERROR", log_to_driver=False, include_dashboard=False)
    except Exception as e:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError from ray.init
        text = " ".join(str(e).split())[:300]
        raise ConfigError(f"ray_address: cannot join a Ray cluster at {address or 'a local instance'} ({text}); "
                          "start one with ray start --head and pass the address it prints") from None


def _reachable(address: str) -> None:
    """Refuse a head node that does not answer within a few seconds (``ray.init`` itself retries for minutes)."""
    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit():  # auto / local / ray://HOST (default port): left to ray.init
        return
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        raise ConfigError(f"ray_address: no Ray head node answers at {address} ({e.strerror or e}); start one with "
                          "ray start --head and pass the address it prints") from None


def _worker_class() -> Any:
    import ray

    @ray.remote(num_cpus=1)
    class StatsWorker:
        """One ONNX Runtime session of the float model and empty accumulators; returns one batch's states."""

        def __init__(self, model: bytes, fetch: list[str], session_kw: dict, templates: dict) -> None:
            from qlinear.ptq.stats.session import Session

            m = onnx.ModelProto()
            m.ParseFromString(model)
            self.sess = Session(m, fetch, **session_kw)
            self.fetch = fetch
            self.templates = templates

        def run(self, feed: dict, where: str) -> tuple[dict, int]:
            out = self.sess.run(self.fetch, feed, where=where)
            vals = dict(zip(self.fetch, out))
            vals.update({k: v for k, v in feed.items() if k in self.templates})
            accs = copy.deepcopy(self.templates)
            for t, acc in accs.items():
                for a in acc:
                    a.update(vals[t])
            return accs, sum(int(v.nbytes) for v in out)

    return StatsWorker


def _get(ref: Any) -> Any:
    """``ray.get`` with a qlinear error raised in an actor re-raised as itself (one line, not Ray's traceback)."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, QlinearError):
            raise cause from None
        raise
    except ray.exceptions.RayActorError as e:
        raise QlinearError(f"a Ray statistics worker died ({' '.join(str(e).split())[:200]})") from None


def accumulate_ray(m: onnx.ModelProto, fetch: Sequence[str], session_kw: dict, ds: Any, start: int, stop: int,
                   cuts: FetchBatches, accumulators: Mapping[str, Sequence[Any]], *, workers: int,
                   progress: Callable[[int], None] | None = None) -> None:
    """:func:`qlinear.ptq.stats.accumulate` on ``workers`` Ray actors: the same batches (``cuts``), each reduced by
    an actor and merged here in batch order (the accumulators need ``merge``)."""
    import ray

    templates = {t: [copy.deepcopy(a) for a in accs] for t, accs in accumulators.items()}
    model_ref = ray.put(m.SerializeToString())
    cls = _worker_class()
    actors = [cls.remote(model_ref, list(fetch), dict(session_kw), templates) for _ in range(max(1, workers))]
    pending: deque = deque()
    done = start

    def fold() -> None:
        n, ref = pending.popleft()
        states, nbytes = _get(ref)
        cuts.record(nbytes, n)
        for t, accs in accumulators.items():
            for a, s in zip(accs, states[t]):
                a.merge(s)
        if progress:
            progress(n)

    try:
        for i, feed in enumerate(cuts.batches(ds, start, stop)):
            n = ds.batch_len(feed)
            where = f"{ds.source}, samples {done}..{done + n - 1}"
            pending.append((n, actors[i % len(actors)].run.remote(feed, where)))
            done += n
            if i == 0 or len(pending) >= _IN_FLIGHT * len(actors):  # the first: its bytes size the next batches
                fold()
        while pending:
            fold()
    finally:
        for a in actors:
            ray.kill(a)


get = _get  #: ``ray.get`` with qlinear errors raised in an actor re-raised as themselves

__all__ = ["accumulate_ray", "active", "connect", "get"]
