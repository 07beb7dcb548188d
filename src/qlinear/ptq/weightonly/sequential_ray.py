"""Sequential GPTQ (:mod:`.sequential`) on Ray actors (``workers > 1`` or ``ray_address``; the ``qlinear[ray]``
extra): the calibration batches are shared out (batch ``i`` to actor ``i mod N``); each actor holds the staged float
graph over its batches (:class:`qlinear.ptq.stats.staged.Staged`, its own ONNX Runtime sessions, the weights read
from the same external data path) and runs each piece on them with the dequantized weights the driver sends. For
each group the actors return one :class:`~qlinear.ptq.stats.Gram` state per batch of the group's inputs; the driver
merges them **in batch order** (merging one batch's state is the arithmetic of updating with that batch), so the
Hessians, and every file written from them, are byte-identical to the single-process pass for any number of
workers. The driver searches each group's AWQ scales, then the group's linears are quantized as Ray tasks on the
actors (``jobs``: each linear's GPTQ or grid search, round robin over the actors, which sit idle between two
pieces; a pure function of the weight and its Hessian, so the same bytes as in the driver), and the driver sends
the dequantized weights on.

Ray is imported lazily (only when the run asks for it).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import onnx

from qlinear.ptq.stats import Gram
from qlinear.ptq.stats.distributed import connect, get
from qlinear.ptq.stats.session import release_heap
from qlinear.ptq.stats.staged import staged_order
from qlinear.ptq.weightonly.plan import Linear
from qlinear.ptq.weightonly.sequential import SPILL_BYTES, Prepare, Quantize, linear_groups, run_piece, staged
from qlinear.ptq.weightonly.tensors import Tensors


class Share:
    """One worker's share of the sequential pass: the staged float graph over its batches (global indices
    ``index``) and the dequantized weights received so far."""

    def __init__(self, model: bytes, base: str | None, label: str, by_weight: dict[str, list[Linear]],
                 batches: list[dict[str, np.ndarray]], index: list[int], spill_bytes: int,
                 float_pass: bool = False) -> None:
        m = onnx.ModelProto()
        m.ParseFromString(model)
        self.tmp = tempfile.TemporaryDirectory(prefix="qlinear-gptq-")
        self.tensors = Tensors(m, Path(base) if base else None, label)
        self.by_weight, self.index = by_weight, index
        self.st = staged(m, batches, label, self.tmp.name, spill_bytes, float_pass)
        self.groups = linear_groups(self.st.nodes, by_weight, set(self.tensors.by_name))
        self.dequantized: dict[str, np.ndarray] = {}
        run_piece(self.st, self.tensors, self.dequantized, self.groups[0].cut)

    def grams(self, j: int) -> list[tuple[int, dict[str, Gram]]]:
        """``(batch index, {input: Gram of that batch})`` for the inputs of group ``j``, for each batch here."""
        xs = list(dict.fromkeys(self.by_weight[n][0].input for n in self.groups[j].weights))
        out = []
        for b, i in enumerate(self.index):
            states = {}
            for x in xs:
                g = Gram()
                g.update(self.st.tensor(x)[b])
                states[x] = g
            out.append((i, states))
        return out

    def advance(self, j: int, dequantized: dict[str, np.ndarray]) -> None:
        """Run the piece after group ``j`` with its weights ``dequantized``."""
        self.dequantized.update(dequantized)
        end = self.groups[j + 1].cut if j + 1 < len(self.groups) else len(self.st.nodes)
        run_piece(self.st, self.tensors, self.dequantized, end)
        release_heap(collect=False)
        if end == len(self.st.nodes):
            self.close()

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` here: one linear's quantization job (the driver's ``jobs``)."""
        return fn(*args)

    def close(self) -> None:
        self.st.cache.clear()
        self.tmp.cleanup()


def quantize_sequential_ray(m: onnx.ModelProto, tensors: Tensors, by_weight: dict[str, list[Linear]],
                            batches: list[dict[str, np.ndarray]], quantize: Quantize, *, workers: int,
                            ray_address: str | None = None, label: str = "model",
                            progress: Callable[[int], None] | None = None, spill_bytes: int = SPILL_BYTES,
                            prepare: Prepare | None = None, float_pass: bool = False,
                            jobs: Jobs | None = None) -> dict[str, Any]:
    """:func:`.sequential.quantize_sequential` with the pass on ``workers`` Ray actors, and each linear's job on one
    of them (``jobs``; without, ``quantize`` runs in the driver): module docstring."""
    import ray

    connect(workers, ray_address)
    n = max(1, min(workers, len(batches)))
    model_ref = ray.put(m.SerializeToString())
    base = str(tensors.base) if tensors.base else None
    n_blas = blas_threads()
    cls = ray.remote(num_cpus=1)(Share).options(runtime_env={"env_vars": {
        v: n_blas for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}})
    actors = [cls.remote(model_ref, base, label, by_weight, batches[a::n], list(range(len(batches)))[a::n],
                         spill_bytes, float_pass) for a in range(n)]
    batches.clear()
    try:
        groups = linear_groups(staged_order(m.graph), by_weight, set(tensors.by_name))
        results: dict[str, Any] = {}
        for j, g in enumerate(groups):
            hess = _merged(get([a.grams.remote(j) for a in actors]))
            if prepare is not None:
                hess = prepare(g.weights, hess)
            deq = {}
            for name, (r, d) in _group_results(g.weights, hess, quantize, jobs, actors):
                results[name] = r
                if d is not None:
                    deq[name] = d
                if progress:
                    progress(1)
            del hess
            ref = ray.put(deq)
            get([a.advance.remote(j, ref) for a in actors])
            del deq, ref
        return results
    finally:
        for a in actors:
            ray.kill(a)


def blas_threads() -> str:
    """The driver's BLAS thread count (its ``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS`` or ``OMP_NUM_THREADS``,
    else the CPUs it may use), given to the actors: a matrix-vector product splits its sums over the threads, so
    the jobs' results equal the driver's only with the same count (Ray sets 1 for a one-CPU actor)."""
    for var in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "")
        if v.isdigit() and int(v) > 0:
            return v
    return str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class Jobs(Protocol):
    """The driver's side of the per-linear Ray jobs: ``job(name, hessians)``: ``(fn, args)`` of a picklable
    function to run on an actor, or ``None`` to quantize ``name`` in the driver (``local``); ``done(name, out)``: the
    weight's ``(result, dequantized weight or None)`` from ``fn``'s return value."""

    def job(self, name: str, hess: dict[str, tuple[np.ndarray, int]]) -> tuple[Callable[..., Any], tuple] | None: ...

    def local(self, name: str, hess: dict[str, tuple[np.ndarray, int]]) -> tuple[Any, np.ndarray | None]: ...

    def done(self, name: str, out: Any) -> tuple[Any, np.ndarray | None]: ...


def _group_results(weights: list[str], hess: dict[str, tuple[np.ndarray, int]], quantize: Quantize,
                   jobs: Jobs | None, actors: list[Any]) -> Iterator[tuple[str, tuple[Any, np.ndarray | None]]]:
    """``(weight, (result, dequantized))`` of a group in its order: the jobs submitted first (round robin over the
    actors; each large array put in Ray's object store once), then collected in order."""
    import ray

    if jobs is None:
        for name in weights:
            yield name, quantize(name, hess)
        return
    specs = {name: jobs.job(name, hess) for name in weights}
    refs, put, at = {}, {}, 0
    for name, spec in specs.items():
        if spec is None:
            continue
        fn, args = spec
        sent = []
        for a in args:
            if isinstance(a, np.ndarray) and a.nbytes > 1 << 16:
                if id(a) not in put:
                    put[id(a)] = ray.put(a)
                a = put[id(a)]
            sent.append(a)
        refs[name] = actors[at % len(actors)].run.remote(fn, *sent)
        at += 1
    for name in weights:
        yield name, (jobs.local(name, hess) if specs[name] is None else jobs.done(name, get([refs[name]])[0]))


def _merged(shares: list[list[tuple[int, dict[str, Gram]]]]) -> dict[str, tuple[np.ndarray, int]]:
    """The actors' per-batch Gram states merged in batch order: ``{input: (X^T X, rows)}``."""
    total: dict[str, Gram] = {}
    for _, states in sorted((s for share in shares for s in share), key=lambda s: s[0]):
        for x, g in states.items():
            total.setdefault(x, Gram()).merge(g)
    return {x: (g.matrix, g.rows) for x, g in total.items() if g.matrix is not None}


__all__ = ["Jobs", "Share", "blas_threads", "quantize_sequential_ray"]
