"""Weight-only quantization (``activation_type: "float"``): the MatMul/Gemm weights of a model become blocked (or
per-channel, or LPBQ) integers, activations stay float — W4A16 / W8A16 for LLM decoders.

Steps, the full-integer pipeline's own where they are the same (peak memory: the largest weight plus, with
sequential GPTQ, one group of linears' weights, Hessians and boundary activations; with one-pass GPTQ, ONNX Runtime's
session of the float model and one ``K x K`` Hessian per distinct linear input):

1. the model is read and checked by :func:`qlinear.graph.load.load_checked` without its external data (weights read
   one at a time by :mod:`.tensors`); :func:`.plan.find_linears` finds the weights;
2. ``minmax`` / ``mse``: round to nearest on each block's grid (:mod:`qlinear.ptq.algorithms.grids`; only the scales
   are kept, the integers are redone when written); ``gptq``: the Hessians of the linears' inputs are
   :class:`~qlinear.ptq.stats.Gram` matrices taken group by group on the model quantized so far (:mod:`.sequential`,
   ``gptq_sequential``, the default), or of the one statistics pass of the float model (:mod:`qlinear.ptq.stats`),
   then GPTQ per weight (:mod:`qlinear.ptq.algorithms.gptq`), whose integers are kept (4-bit ones packed two to a
   byte, an eighth of the float weights);
3. the result is a :class:`~qlinear.ptq.QuantizedModel` (the float graph, the weights' encodings, and the weights
   as :class:`StreamedWeights`: their integer sources); its ``save`` writes ``model.qdq.onnx`` (or
   ``model.matmulnbits.onnx``) built by :mod:`.writer` with the graph passes ``InsertQDQ`` and ``LowerMatMulNBits``,
   with external data when the input had it or the tensors pass :func:`qlinear.graph.save.needs_external`, the
   AIMET encodings of the weights (LPBQ for ``lpbq``), and with data the report of
   :func:`qlinear.ptq.report.evaluate.evaluate` (outputs against the float model on held-out samples, perplexity for
   token logits; per-weight SQNR against round to nearest; sizes; coverage).

Grids: symmetric weights use the full-range grid of ONNX Runtime's MatMulNBits quantizer on target ``ort`` and
AIMET's symmetric grid (zero offset) on target ``qnn`` and for ``lpbq``; see :mod:`.grids`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx

from qlinear.calibration.policies import lpbq as lpbq_decompose
from qlinear.encodings import Encoding, EncodingSet
from qlinear.errors import ConfigError, GraphError
from qlinear.graph.ir import to_proto
from qlinear.graph.load import load_checked, model_dir
from qlinear.graph.ops import WEIGHT_BEARING
from qlinear.graph.save import needs_external
from qlinear.ptq.algorithms.awq import (
    Scaled,
    apply_awq,
    awq_inputs,
    awq_note,
    fold,
    rtn_quantizer,
    scaled_gram,
    scaled_weights,
    search_group,
)
from qlinear.ptq.algorithms.gptq import gptq
from qlinear.ptq.algorithms.grids import (
    BlockQuant,
    activation_aware_grid,
    padded,
    quantize_blocks,
    quantize_rtn,
)
from qlinear.ptq.config import WEIGHT_ONLY_DATA_METHODS, QuantizeConfig
from qlinear.ptq.result import QuantizedModel
from qlinear.ptq.settle import check_excludes
from qlinear.ptq.stats import Gram
from qlinear.ptq.stats.distributed import active
from qlinear.ptq.stats.stream import accumulate_model
from qlinear.ptq.weightonly.kept import KeptStore
from qlinear.ptq.weightonly.kept import kept as keep
from qlinear.ptq.weightonly.plan import Linear, find_linears, lm_heads
from qlinear.ptq.weightonly.sequential import quantize_sequential
from qlinear.ptq.weightonly.sequential_ray import quantize_sequential_ray
from qlinear.ptq.weightonly.tensors import Tensors
from qlinear.ptq.weightonly.writer import WeightResult, build, write

Progress = Callable[[str, int], Callable[[int], None]]

#: round to nearest streams an external weight in slabs of about this many bytes of float32 rows (:func:`row_slabs`)
SLAB_BYTES = 16 << 20
SQNR_ROWS = 1024  #: :func:`weight_sqnr` sums its energies in blocks of this many rows
RTN_METHODS = ("minmax", "mse")  #: the data-free methods: round to nearest on the grid, or on searched scales


def grid_for(cfg: QuantizeConfig) -> str:
    if not cfg.weight_symmetric:
        return "asymmetric"
    return "symmetric" if cfg.weights == "lpbq" or cfg.target == "qnn" else "full"


@dataclass
class StreamedWeights:
    """The quantized weights of a weight-only run (:attr:`qlinear.ptq.QuantizedModel.streamed`): the float graph
    (external data not loaded), its tensors and the weights' results, streamed to the file one tensor at a time by
    :meth:`save_onnx` (the Q/DQ or MatMulNBits model is never whole in memory)."""

    graph: onnx.ModelProto
    tensors: Tensors
    results: list[WeightResult]
    label: str
    source: Any
    skipped: dict[str, str]
    coverage: dict[str, Any]

    def encodings(self) -> EncodingSet:
        """The encodings of every quantized weight."""
        from qlinear import __version__

        return EncodingSet(tuple(r.encoding for r in self.results),
                           producer={"package": "qlinear", "version": __version__}, version="2.0.0")

    def save_onnx(self, path: Path, output_format: str, external: bool | None) -> list[str]:
        """Write the quantized model to ``path`` and ``path.data`` with external data (by default when the input
        had external data or the tensors pass :func:`qlinear.graph.save.needs_external`)."""
        if external is None:
            total = sum(self.tensors.nbytes(t.name) for t in self.graph.graph.initializer)
            external = self.tensors.external or needs_external(total)
        return write(self.build(output_format), path, external=external)

    def build(self, output_format: str) -> Any:
        """The quantized model as an ``onnx_ir`` model whose tensors are computed when it is serialized."""
        return build(self.graph, self.tensors, self.results, output_format)

    def model_bytes(self, output_format: str) -> bytes:
        """The serialized quantized model without external data (small models)."""
        try:
            return to_proto(self.build(output_format)).SerializeToString()
        except ValueError as e:
            raise GraphError(f"{self.label}: the quantized model is over 2 GB ({e}); save it to a file path (written "
                             "with external data)") from None

    def weight_stats(self) -> list[dict[str, Any]]:
        """Per quantized weight: type, grid, method, SQNR of the chosen integers and of round to nearest (dB)."""
        return [{"weight": r.name, "dtype": r.dtype,
                 "grid": "per-channel" if r.per_channel else ("lpbq" if r.lpbq else f"per-block {r.block}"),
                 "method": r.method, "sqnr_db": r.sqnr_db, "rtn_sqnr_db": r.rtn_sqnr_db,
                 **({"lm_head": r.role} if r.role else {})} for r in self.results]

    def sizes(self, model_path: Path) -> dict[str, int]:
        """Initializer bytes of the float model and of the quantized model written to ``model_path``."""
        q = onnx.load(str(model_path), load_external_data=False)
        written = Tensors(q, model_path.parent, str(model_path))
        return {"float_bytes": sum(self.tensors.nbytes(n) for n in self.tensors.by_name),
                "quantized_bytes": sum(written.nbytes(n) for n in written.by_name)}


def _as_nk(w: np.ndarray, lin: Linear) -> np.ndarray:
    return np.ascontiguousarray(w.T if lin.k_first else w, np.float32)


def _encoding(g: _Grid, bq: BlockQuant) -> Encoding:
    """The AIMET encoding of the weight in its initializer's layout."""
    lin = g.lin
    off = 2 ** (g.bits - 1) if g.unsigned else 0
    z = None if bq.zero_point is None else bq.zero_point.astype(np.int64) + off
    if z is None and off:
        z = np.full(bq.scale.shape, off, np.int64)
    if g.per_channel:
        return Encoding(lin.weight, g.dtype, scale=bq.scale[:, 0].astype(np.float64),
                        zero_point=None if z is None else z[:, 0], axis=lin.channel_axis, role="param")
    if g.lpbq:
        pc = g.pc_scale.astype(np.float64)
        shape = (1, -1) if lin.k_first else (-1, 1)
        ints = g.int_scale.T if lin.k_first else g.int_scale
        return Encoding(lin.weight, g.dtype, scale=pc.reshape(shape), int_scale=ints, axis=lin.block_axis,
                        block_size=g.block, role="param", decompressed_bits=8)
    s = bq.scale.T if lin.k_first else bq.scale
    zz = None if z is None else (z.T if lin.k_first else z)
    return Encoding(lin.weight, g.dtype, scale=s.astype(np.float64), zero_point=zz, axis=lin.block_axis,
                    block_size=g.block, role="param")


def quantize_weights(model: Any, data: Any, cfg: QuantizeConfig, *, progress: Progress | None = None,
                     preprocess: Any = None, notes: list[str] | None = None) -> QuantizedModel:
    """Weight-only quantization of ``model`` (path or ModelProto) with ``cfg`` (``activation_type: "float"``);
    ``notes``: the run's notes so far (the settled configuration's, :func:`qlinear.ptq.settle.settle`)."""
    t_all = time.perf_counter()
    notes = list(notes or [])
    given: list[onnx.ModelProto] = []
    m, label = load_checked(model, notes, load_external=False, given=given)
    base = model_dir(model)
    tensors = Tensors(m, base, label)
    notes += check_excludes(cfg, m, label)
    linears, skipped = find_linears(m, exclude_nodes=cfg.exclude_nodes, exclude_op_types=cfg.exclude_op_types)
    by_weight = group_by_weight(linears, skipped, label)
    heads = lm_head_plan(m, by_weight, skipped, cfg, notes, label)
    ds = _dataset(m, data, cfg, preprocess, notes)
    cfg = default_method(cfg, ds, notes)
    _check_upgrade(given, m, tensors, ds, label, notes)
    timings: dict[str, float] = {}
    shared = _other_readers(m, by_weight)
    ref = m  # the float model the report compares against: the input as loaded (AWQ rescales m's weights and norms)
    if "awq" in (cfg.weight_method or "") and ds is not None:
        ref = onnx.ModelProto()
        ref.CopyFrom(m)
    if sequential(cfg, ds, label, notes):
        results = _sequential_gptq(m, tensors, by_weight, ds, cfg, shared, heads, label, progress, timings, notes)
    else:
        hess = _hessians(m, base, by_weight, ds, cfg, label, progress, timings, notes)
        if "awq" in (cfg.weight_method or ""):
            hess, awq_notes = apply_awq(m, tensors.array, by_weight, hess, _awq_quantizer(cfg), skip=set(shared))
            tensors.by_name = {t.name: t for t in m.graph.initializer}  # the inserted Mul's 1/s too
            notes += awq_notes
        t0 = time.perf_counter()
        adv = progress("quantizing weights", len(by_weight)) if progress else None
        store = KeptStore()
        results = [_quantize_weight(name, lins, tensors, cfg, hess, shared, notes, adv,
                                    role=heads.get(name, ""), store=store)
                   for name, lins in by_weight.items()]
        timings["quantize"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_all
    cov = coverage(m, set(by_weight), skipped)
    notes.append(coverage_note(cov))
    sw = StreamedWeights(m, tensors, results, label, model, skipped, cov)
    return QuantizedModel(None, ref, ref, sw.encodings(), cfg, None, ds, timings, notes, encoded_model=m,
                          streamed=sw)


#: the default ``weight_method`` of per-block weight-only runs without data / with data: the best data-free and data
#: methods of ``benchmarks/bench_transformers.py`` on SmolLM2 (README, SmolLM2 tables)
DEFAULT_NO_DATA = "mse"
DEFAULT_DATA = "aag+gptq"
#: the largest block the no-data default searches (measured on SmolLM2: better than round to nearest at block 32 on
#: both texts, much worse at block 128, where the default stays ``minmax``)
NO_DATA_MAX_BLOCK = 32


def default_method(cfg: QuantizeConfig, ds: Any, notes: list[str]) -> QuantizeConfig:
    """``cfg`` with ``weight_method`` settled when not given, for per-block weights: :data:`DEFAULT_NO_DATA` without
    data (blocks of at most :data:`NO_DATA_MAX_BLOCK`), :data:`DEFAULT_DATA` with it (a printed note names the
    method); larger blocks without data, per-channel and LPBQ weights keep ``minmax`` (round to nearest)."""
    if cfg.weight_method is not None or cfg.weights != "per-block":
        return cfg
    if ds is None and int(cfg.block_size) > NO_DATA_MAX_BLOCK:
        return cfg
    if ds is None:
        notes.append(f"weight_method {DEFAULT_NO_DATA} (the default without data: each block's scale searched by "
                     "the weight error around the full range; --weight-method minmax for plain round to nearest)")
        return cfg.settled(weight_method=DEFAULT_NO_DATA)
    notes.append(f"weight_method {DEFAULT_DATA} (the default with data: GPTQ on activation-aware grids; "
                 "--weight-method minmax for round to nearest, mse without using the data)")
    return cfg.settled(weight_method=DEFAULT_DATA)


def lm_head_plan(m: onnx.ModelProto, by_weight: dict[str, list[Linear]], skipped: dict[str, str],
                 cfg: QuantizeConfig, notes: list[str], label: str) -> dict[str, str]:
    """The lm_head weights (:func:`.plan.lm_heads`) quantized int8 per-channel, with the reason (``lm_head_type``
    ``int8`` with weights of 4 bits or less: a printed note); ``float`` moves them from ``by_weight`` to
    ``skipped``; ``int4``, or 8-bit weights, leaves them to follow the weights."""
    heads = lm_heads(m, by_weight)
    if not heads or cfg.lm_head_type == "int4" or (cfg.lm_head_type == "int8" and weight_bits(cfg.weight_type) >= 8):
        return {}
    names = ", ".join(f"{w} ({why})" for w, why in heads.items())
    if cfg.lm_head_type == "float":
        for w in heads:
            for lin in by_weight.pop(w):
                skipped[lin.node] = "lm_head_type float"
        notes.append(f"lm_head left float (lm_head_type float): {names}")
        if not by_weight:
            raise ConfigError(f"lm_head_type: float leaves no weight of {label} to quantize; use int8 or int4")
        return {}
    notes.append(f"lm_head quantized int8 per-channel (lm_head_type int8, the default with {cfg.weight_type} "
                 f"weights: it keeps the logits close to float; int4 follows the weights, float leaves it): {names}")
    return heads


def weight_sqnr(w: np.ndarray, wq: np.ndarray) -> float:
    """``10 log10(sum w^2 / sum (w - wq)^2)`` in dB (inf when exact), by blocks of rows (no float64 copy of a
    large weight)."""
    acc = [0.0, 0.0]
    _sqnr_add(acc, w, wq)
    return _db(acc)


def _sqnr_add(acc: list[float], w: np.ndarray, wq: np.ndarray) -> None:
    """Add the signal and noise energies of ``w`` and ``wq`` to ``acc``, in blocks of 1024 rows (a weight
    streamed in slabs of a multiple of 1024 rows sums in the same order as whole)."""
    for i in range(0, len(w), SQNR_ROWS):
        a, d = w[i:i + SQNR_ROWS].astype(np.float32), w[i:i + SQNR_ROWS] - wq[i:i + SQNR_ROWS]
        acc[0] += float(np.dot(a.reshape(-1).astype(np.float64), a.reshape(-1)))
        acc[1] += float(np.dot(d.reshape(-1).astype(np.float64), d.reshape(-1)))


def _db(acc: list[float]) -> float:
    sig, noise = acc
    return float("inf") if noise <= 0 else float(10 * np.log10(max(sig, 1e-300) / noise))


def row_slabs(tensors: Tensors, name: str, lin: Linear) -> list[tuple[int, int]]:
    """The ``[start, stop)`` row slabs of ``W[N, K]`` a weight is streamed in: about :data:`SLAB_BYTES` of float32
    each, a multiple of 1024 rows; one slab for an inline weight (already in memory)."""
    if not tensors.is_external(name):
        return [(0, lin.n)]
    rows = max(1, SLAB_BYTES // (4 * lin.k * SQNR_ROWS)) * SQNR_ROWS
    return [(i, min(lin.n, i + rows)) for i in range(0, lin.n, rows)]


def weight_bits(weight_type: str) -> int:
    return int(weight_type.lstrip("u").removeprefix("int"))


def group_by_weight(linears: list[Linear], skipped: dict[str, str], label: str) -> dict[str, list[Linear]]:
    """The linears by weight (a weight read in two orientations is skipped for the second); refuses a model with
    none."""
    by_weight: dict[str, list[Linear]] = {}
    for lin in linears:
        same = by_weight.setdefault(lin.weight, [])
        if same and same[0].k_first != lin.k_first:
            skipped[lin.node] = f"weight {lin.weight} is used in another orientation by {same[0].node}"
            continue
        same.append(lin)
    if not by_weight:
        raise GraphError(f"{label}: no MatMul/Gemm with a constant 2-D float weight to quantize"
                         + (f" (skipped: {', '.join(f'{k}: {v}' for k, v in list(skipped.items())[:3])})"
                            if skipped else ""))
    return by_weight


def _dataset(m: onnx.ModelProto, data: Any, cfg: QuantizeConfig, preprocess: Any, notes: list[str]) -> Any:
    """The data checked against the model (None without data)."""
    from qlinear.ptq.data import load_dataset, model_inputs

    if data is None:
        return None
    ds = load_dataset(data, model_inputs(m), preprocess=preprocess, batch_axes=cfg.batch_axes)
    ds.validate(min(len(ds), cfg.calibration_samples + cfg.evaluation_samples))
    notes += ds.notes
    return ds


def _hessians(m: onnx.ModelProto, base: Path | None, by_weight: dict[str, list[Linear]], ds: Any,
              cfg: QuantizeConfig, label: str, progress: Progress | None, timings: dict[str, float],
              notes: list[str]) -> dict[str, tuple[np.ndarray, int]]:
    """GPTQ's Hessians of the linears' inputs (one ONNX Runtime pass); none for round to nearest."""
    if (cfg.weight_method or "minmax") not in WEIGHT_ONLY_DATA_METHODS:
        return {}
    if ds is None:
        raise ConfigError(f"weight_method {cfg.weight_method} needs calibration data (--data); round to nearest "
                          "(minmax, mse) needs none")
    n_cal = min(cfg.calibration_samples, len(ds))
    t0 = time.perf_counter()
    adv = progress("collecting Hessians", n_cal) if progress else None
    hess = _gram_matrices(m, base, [ls[0].input for ls in by_weight.values()], ds, n_cal, cfg.batch_size, label,
                          adv, workers=cfg.workers, ray_address=cfg.ray_address)
    timings["calibration"] = time.perf_counter() - t0
    notes.append(f"{cfg.weight_method} on {n_cal} calibration samples ({len(hess)} distinct linear inputs), damp "
                 f"{cfg.gptq_damp}, act_order {cfg.gptq_act_order}; the integers it chose are in the written model "
                 "only: model.encodings holds their scales, and applied to the original model it gives round to "
                 "nearest on those scales")
    return hess


def sequential(cfg: QuantizeConfig, ds: Any, label: str, notes: list[str]) -> bool:
    """Whether the run takes its statistics group by group (:mod:`.sequential`): any GPTQ variant (``gptq``,
    ``aag+gptq``, ``awq+gptq``, ``awq+aag+gptq``) with ``gptq_sequential`` (the default), on the model quantized so
    far, and the other data methods (``awq``, ``aag``, ``awq+aag``), on the float model (``float_pass``); with
    data."""
    method = cfg.weight_method or "minmax"
    if ds is None or method not in WEIGHT_ONLY_DATA_METHODS:
        return False
    return not method.endswith("gptq") or cfg.gptq_sequential


def _sequential_gptq(m: onnx.ModelProto, tensors: Tensors, by_weight: dict[str, list[Linear]], ds: Any,
                     cfg: QuantizeConfig, shared: dict[str, set[str]], heads: dict[str, str], label: str,
                     progress: Progress | None, timings: dict[str, float], notes: list[str]) -> list[WeightResult]:
    """The weights quantized by :func:`.sequential.quantize_sequential`, in ``by_weight``'s order; with AWQ
    (``awq+gptq``, ``awq+aag+gptq``, ``awq``, ``awq+aag``) each group's scales searched on its Hessians there
    (:class:`_SequentialAwq`). Methods without GPTQ take the float model's statistics (``float_pass``)."""
    n_cal = min(cfg.calibration_samples, len(ds))
    t0 = time.perf_counter()
    method = cfg.weight_method or ""
    float_pass = not method.endswith("gptq")
    adv = progress("statistics and weights" if float_pass else "sequential GPTQ", len(by_weight)) \
        if progress else None
    awq = _SequentialAwq(m, tensors, by_weight, cfg, set(shared)) if "awq" in method else None
    jobs = _SequentialJobs(by_weight, tensors, cfg, shared, notes, heads, awq, float_pass)
    batches, prepare = list(ds.batches(0, n_cal, cfg.batch_size)), None if awq is None else awq.prepare
    kw = dict(label=label, progress=adv, prepare=prepare, float_pass=float_pass)
    if active(cfg.workers, cfg.ray_address):
        done = quantize_sequential_ray(m, tensors, by_weight, batches, jobs.here, workers=cfg.workers,
                                       ray_address=cfg.ray_address, jobs=jobs, **kw)
        notes.append(f"{label}: sequential pass on Ray ({cfg.ray_address or f'{cfg.workers} workers'}): each "
                     "group's Hessians merged from the actors' shares of the batches in batch order, each linear "
                     "quantized by a Ray task on an actor")
    else:
        done = quantize_sequential(m, tensors, by_weight, batches, jobs.here, **kw)
    timings["calibration"] = timings["quantize"] = time.perf_counter() - t0
    notes.append(_sequential_note(cfg, n_cal, len(by_weight), awq is not None, float_pass))
    if awq is not None:
        notes.append(awq.finish(float_pass))
    tensors.inline_replaced()
    return [done[name] for name in by_weight]


class _SequentialJobs:
    """Each weight of the sequential pass: :meth:`here` in this process, or (:class:`.sequential_ray.Jobs`) its
    :func:`run_job` as a Ray task, :meth:`done` with its output; the dequantized weight for the pass (unscaled
    after AWQ) unless ``float_pass``."""

    def __init__(self, by_weight: dict[str, list[Linear]], tensors: Tensors, cfg: QuantizeConfig,
                 shared: dict[str, set[str]], notes: list[str], heads: dict[str, str], awq: _SequentialAwq | None,
                 float_pass: bool) -> None:
        self.by_weight, self.tensors, self.cfg, self.shared, self.notes = by_weight, tensors, cfg, shared, notes
        self.heads, self.awq, self.float_pass = heads, awq, float_pass
        self.store = KeptStore()
        self.pending: dict[str, WeightJob] = {}

    def job(self, name: str, hess: dict[str, tuple[np.ndarray, int]]) -> tuple[Callable, tuple] | None:
        lins = self.by_weight[name]
        j = _weight_job(name, lins, self.tensors, self.cfg, self.shared, self.notes, self.heads.get(name, ""),
                        not self.float_pass)
        self.pending[name] = j
        return None if j.streamed else (run_job, (j, self.tensors.array(name), hess.get(lins[0].input, (None, 0))[0]))

    def local(self, name: str, hess: dict[str, tuple[np.ndarray, int]]) -> tuple[WeightResult, np.ndarray | None]:
        return self.done(name, None)

    def done(self, name: str, out: tuple | None) -> tuple[WeightResult, np.ndarray | None]:
        deq: dict[str, np.ndarray] | None = None if self.float_pass else {}
        r = _job_result(self.pending.pop(name), out, self.tensors, deq, self.store)
        if deq is None:
            return r, None
        return r, deq[name] if self.awq is None else self.awq.unscaled(name, deq[name])

    def here(self, name: str, hess: dict[str, tuple[np.ndarray, int]]) -> tuple[WeightResult, np.ndarray | None]:
        spec = self.job(name, hess)
        return self.local(name, hess) if spec is None else self.done(name, spec[0](*spec[1]))


def _sequential_note(cfg: QuantizeConfig, n_cal: int, n: int, awq: bool, float_pass: bool) -> str:
    if float_pass:
        return (f"{cfg.weight_method} on {n_cal} calibration samples: each group of linears' {'AWQ statistics and ' if awq else ''}"
                f"Hessians from the float model, one group at a time ({n} weights)")
    return (f"{cfg.weight_method} sequential on {n_cal} calibration samples: each group of linears' "
            f"{'AWQ statistics and ' if awq else ''}Hessians on the outputs of the linears before it already "
            f"quantized ({n} weights), damp {cfg.gptq_damp}, act_order {cfg.gptq_act_order}")


class _SequentialAwq:
    """AWQ inside the sequential pass: each group's scales searched on the group's Hessians (taken on the quantized
    prefix, or the float model's with ``float_pass``), its weights scaled (:meth:`Tensors.replace`: a temporary
    file, not the graph) and its Hessians scaled before GPTQ; the float graph the pass runs stays unscaled, so it
    gets ``Q(W diag(s)) diag(s)^-1`` (:meth:`unscaled`); the ``1/s`` are folded into ``m`` after the pass
    (:meth:`finish`), when no piece is left to run."""

    def __init__(self, m: onnx.ModelProto, tensors: Tensors, by_weight: dict[str, list[Linear]],
                 cfg: QuantizeConfig, skip: set[str]) -> None:
        self.m, self.tensors, self.by_weight = m, tensors, by_weight
        self.inputs = awq_inputs(by_weight, skip)
        self.quantizer = _awq_quantizer(cfg)
        self.found: list[Scaled] = []
        self.scale_of: dict[str, np.ndarray] = {}

    def prepare(self, weights: list[str], hess: dict[str, tuple[np.ndarray, int]]
                ) -> dict[str, tuple[np.ndarray, int]]:
        out = dict(hess)
        here = set(weights)
        for x, names in self.inputs.items():
            if x not in hess or not set(names) <= here:
                continue
            sc, ws = search_group(self.tensors.array, self.by_weight, x, names, hess[x], self.quantizer)
            self.found.append(sc)
            if sc.alpha == 0:
                continue
            for nm, a in scaled_weights(self.by_weight, sc, ws):
                self.tensors.replace(nm, a)
            out[x] = scaled_gram(hess[x], sc.s)
            self.scale_of.update({nm: sc.s for nm in names})
        return out

    def unscaled(self, name: str, deq: np.ndarray) -> np.ndarray:
        """The dequantized weight as the unscaled float graph reads it: ``Q(W diag(s)) diag(s)^-1``."""
        s = self.scale_of.get(name)
        if s is None:
            return deq
        inv = (1.0 / s.astype(np.float64)).astype(np.float32)
        k_first = self.by_weight[name][0].k_first
        return (deq.astype(np.float32) * (inv[:, None] if k_first else inv[None, :])).astype(deq.dtype)

    def finish(self, in_input_order: bool = False) -> str:
        """Fold every ``1/s`` into ``m`` (a norm or an inserted ``Mul``), in the pass's order or the order of the
        shared inputs in the plan (``in_input_order``: the one-pass :func:`apply_awq`'s); the run's AWQ note."""
        where: dict[str, int] = {}
        if in_input_order:
            rank = {x: i for i, x in enumerate(self.inputs)}
            self.found.sort(key=lambda sc: rank[sc.x])
        for sc in self.found:
            if sc.alpha > 0:
                fold(self.m, sc, self.tensors.array, where)
        self.tensors.by_name = {t.name: t for t in self.m.graph.initializer}  # the inserted Mul's 1/s too
        return awq_note([sc.alpha for sc in self.found], where)


def _gram_matrices(m: onnx.ModelProto, base: Path | None, inputs: list[str], ds: Any, n: int, batch_size: int,
                   label: str, progress: Callable[[int], None] | None, *, workers: int = 1,
                   ray_address: str | None = None) -> dict[str, tuple[np.ndarray, int]]:
    """``{input: (X^T X, tokens)}`` of the linears' inputs over samples ``[0, n)``: GPTQ's Hessians, from the one
    statistics pass (linears that share an input share one matrix; on Ray actors with ``workers > 1`` or a
    ``ray_address``, byte-identical); ONNX Runtime's memory arena off (the fetched activations of one batch are
    returned after each run)."""
    names = list(dict.fromkeys(inputs))
    grams = {t: Gram() for t in names}
    accumulate_model(m, ds, 0, n, batch_size, {t: [g] for t, g in grams.items()}, progress=progress,
                     session_kw={"level": "basic", "label": label, "external_dir": str(base) if base else None,
                                 "arena": False}, workers=workers, ray_address=ray_address)
    return {t: (g.matrix, g.rows) for t, g in grams.items() if g.matrix is not None}


def _other_readers(m: onnx.ModelProto, by_weight: dict[str, list[Linear]]) -> dict[str, set[str]]:
    """Weight -> op types of the nodes other than its linears that read it (a tied embedding's Gather)."""
    linear_nodes = {lin.node for ls in by_weight.values() for lin in ls} | \
        {lin.transpose for ls in by_weight.values() for lin in ls if lin.transpose}
    shared: dict[str, set[str]] = {}
    for n in m.graph.node:
        for x in n.input:
            if x in by_weight and (n.name or n.output[0]) not in linear_nodes:
                shared.setdefault(x, set()).add(n.op_type)
    return shared


def _quantize_weight(name: str, lins: list[Linear], tensors: Tensors, cfg: QuantizeConfig,
                     hess: dict[str, tuple[np.ndarray, int]], shared: dict[str, set[str]], notes: list[str],
                     adv: Callable[[int], None] | None, *, role: str = "",
                     dequantized: dict[str, np.ndarray] | None = None, store: KeptStore | None = None) -> WeightResult:
    """One weight's result: its encoding now; its integers GPTQ's (kept, int8) or round to nearest redone from the
    weight when written (only the scales are kept: memory holds one weight at a time). ``role``: why an lm_head
    is quantized 8-bit per-channel (:func:`lm_head_plan`), empty for the other weights. ``dequantized``: receives
    the dequantized weight in the initializer's layout and type (sequential GPTQ runs the model on it); ``store``:
    where GPTQ's integers are kept until written (:mod:`.kept`; in memory without)."""
    job = _weight_job(name, lins, tensors, cfg, shared, notes, role, dequantized is not None)
    out = None if job.streamed else run_job(job, tensors.array(name), hess.get(lins[0].input, (None, 0))[0])
    r = _job_result(job, out, tensors, dequantized, store)
    if adv:
        adv(1)
    return r


@dataclass
class WeightJob:
    """How one weight is quantized (:func:`_weight_job`), picklable: a weight quantized whole in memory (GPTQ, a
    grid search, LPBQ) is computed by :func:`run_job`, in this process or as a Ray task (sequential GPTQ on Ray,
    :mod:`.sequential_ray`); a round-to-nearest one is ``streamed`` here, slab by slab."""

    name: str
    lins: list[Linear]
    g: _Grid
    grid: str
    method: str
    cfg: QuantizeConfig | None
    kept: bool
    want_dq: bool
    streamed: bool
    role: str


def _weight_job(name: str, lins: list[Linear], tensors: Tensors, cfg: QuantizeConfig, shared: dict[str, set[str]],
                notes: list[str], role: str, want_dq: bool) -> WeightJob:
    lin, grid = lins[0], grid_for(cfg)
    method = (cfg.weight_method or "minmax").removeprefix("awq+").replace("awq", "minmax")  # AWQ: weights scaled
    wtype = ("uint8" if cfg.weight_type.startswith("u") else "int8") if role else cfg.weight_type
    lpbq, per_channel = cfg.weights == "lpbq" and not role, bool(role) or cfg.weights == "per-channel"
    wdt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensors.by_name[name].data_type))
    if wdt == np.float16 and lpbq:
        raise ConfigError(f"{name}: LPBQ of float16 weights is not supported (the effective scale "
                          "int_scale * float scale is float32); convert the model to float32 or use per-block")
    g = _Grid(lin, wtype, weight_bits(wtype), lin.k if per_channel else int(cfg.block_size), per_channel, lpbq, wdt)
    if method.endswith("gptq") and name in shared:
        notes.append(f"{name}: also read by {', '.join(sorted(shared[name]))} (a tied embedding): GPTQ's error "
                     "compensation would shift the lookup too, so this weight is rounded to nearest")
    kept = method.endswith("gptq") and name not in shared
    if not kept:
        method = method.removesuffix("gptq").rstrip("+") or "minmax"
    streamed = not kept and not g.lpbq and method in RTN_METHODS  # one slab of rows at a time
    return WeightJob(name, lins, g, grid, method, cfg if kept else None, kept, want_dq, streamed, role)


def run_job(job: WeightJob, weight: np.ndarray, h: np.ndarray | None) -> tuple:
    """A weight quantized whole in memory (``weight`` as stored, ``h`` its Hessian): ``(scale, zero_point, stored
    integers when kept, dequantized weight in the initializer's layout and type when asked, SQNR, round to
    nearest's SQNR, LPBQ integer scales, LPBQ per-channel scales)``. Pure: the same bytes in any process."""
    g, lin = job.g, job.g.lin
    w = _as_nk(weight, lin)
    bq = _quantize_one(w, g, job.grid, job.method, job.cfg, h)
    stored = _stored(bq.q, g) if job.kept else None
    dq = bq.dequantize()
    sqnr = weight_sqnr(w, dq)
    deq = np.ascontiguousarray(dq.T if lin.k_first else dq).astype(g.weight_dtype, copy=False) if job.want_dq \
        else None
    del dq
    rtn = sqnr if job.method == "minmax" else weight_sqnr(
        w, _quantize_one(w, replace(g, int_scale=None, pc_scale=None), job.grid, "minmax", None, None).dequantize())
    return bq.scale, bq.zero_point, stored, deq, sqnr, rtn, g.int_scale, g.pc_scale


def _job_result(job: WeightJob, out: tuple | None, tensors: Tensors, dequantized: dict[str, np.ndarray] | None,
                store: KeptStore | None) -> WeightResult:
    """The weight's result from :func:`run_job`'s ``out`` (``None``: rounded to nearest here, slab by slab): GPTQ's
    integers kept (in ``store``), others redone from the scales when written."""
    g, name = job.g, job.name
    if out is None:
        bq, sqnr, rtn = _rtn_streamed(tensors, name, g, job.grid, job.method, dequantized)
    else:
        scale, zero_point, stored, deq, sqnr, rtn, g.int_scale, g.pc_scale = out
        bq = BlockQuant(np.zeros((0, g.lin.k), np.int8), scale, zero_point, g.block)
        if dequantized is not None and deq is not None:
            dequantized[name] = deq
    integers = keep(stored, g.bits, store) if job.kept else _requantize(tensors, name, g, bq.scale, bq.zero_point)
    has_zp = (g.unsigned if g.lpbq else job.grid != "symmetric")
    return WeightResult(job.lins, g.dtype, g.block, g.per_channel, _encoding(g, bq), integers,
                        weight_dtype=g.weight_dtype, lpbq=g.lpbq, has_zero_point=has_zp, method=job.method,
                        sqnr_db=sqnr, rtn_sqnr_db=rtn, role=job.role)


@dataclass
class _Grid:
    """One weight's quantization: its linear, type, block, granularity, float type; LPBQ's integer and
    per-channel scales once computed."""

    lin: Linear
    dtype: str
    bits: int
    block: int
    per_channel: bool
    lpbq: bool
    weight_dtype: np.dtype
    int_scale: np.ndarray | None = None
    pc_scale: np.ndarray | None = None

    @property
    def unsigned(self) -> bool:
        return self.dtype.startswith("u")

    @property
    def scale_dtype(self) -> np.dtype:
        return np.dtype(np.float16) if self.weight_dtype == np.float16 else np.dtype(np.float32)


def _stored(q: np.ndarray, g: _Grid) -> np.ndarray:
    """Integers ``[N, K]`` in the initializer's layout and the stored type's range (unsigned types shifted)."""
    off = 2 ** (g.bits - 1) if g.unsigned else 0
    q = q.astype(np.int16) + off if off else q
    return np.ascontiguousarray(q.T) if g.lin.k_first else q


def _requantize(tensors: Tensors, name: str, g: _Grid, scale: np.ndarray,
                zero_point: np.ndarray | None) -> Callable[[], np.ndarray]:
    """Round to nearest of the weight on its known grid, when written (the integers of :func:`quantize_rtn`), one
    slab of rows at a time (:func:`row_slabs`) into the stored integers."""
    def f() -> np.ndarray:
        lin, out = g.lin, None
        slabs = row_slabs(tensors, name, lin)
        for r0, r1 in slabs:
            w = tensors.nk_rows(name, lin.k_first, r0, r1)
            s = scale[r0:r1]
            z = np.zeros(s.shape, np.int64) if zero_point is None else zero_point[r0:r1].astype(np.int64)
            q = _stored(quantize_blocks(padded(w, g.block), s, z, g.bits).reshape(r1 - r0, -1)[:, :lin.k], g)
            if len(slabs) == 1:
                return q
            if out is None:
                out = np.empty((lin.k, lin.n) if lin.k_first else (lin.n, lin.k), q.dtype)
            if lin.k_first:
                out[:, r0:r1] = q
            else:
                out[r0:r1] = q
        return out
    return f


def _rtn_streamed(tensors: Tensors, name: str, g: _Grid, grid: str, method: str,
                  dequantized: dict[str, np.ndarray] | None = None) -> tuple[BlockQuant, float, float]:
    """Round to nearest (``minmax`` or ``mse``) of a weight read one slab of rows at a time (:func:`row_slabs`):
    its scales and zero points (no integers: they are redone when written), the SQNR of the result and of
    ``minmax``; equal to quantizing the weight whole (every block is its own). ``dequantized`` receives the
    dequantized weight in the initializer's layout and type, filled slab by slab (sequential GPTQ's lm_head: no
    whole-weight temporaries)."""
    scales, zps, acc, acc_rtn = [], [], [0.0, 0.0], [0.0, 0.0]
    lin, out = g.lin, None
    if dequantized is not None:
        out = np.empty((lin.k, lin.n) if lin.k_first else (lin.n, lin.k), g.weight_dtype)
    for r0, r1 in row_slabs(tensors, name, g.lin):
        w = tensors.nk_rows(name, g.lin.k_first, r0, r1)
        bq = _quantize_one(w, g, grid, method, None, None)
        dq = bq.dequantize()
        _sqnr_add(acc, w, dq)
        if out is not None:
            (out.T if lin.k_first else out)[r0:r1] = dq
        del dq
        if method != "minmax":
            _sqnr_add(acc_rtn, w, _quantize_one(w, g, grid, "minmax", None, None).dequantize())
        scales.append(bq.scale)
        zps.append(bq.zero_point)
        del w, bq
    z = None
    if any(x is not None for x in zps):
        z = np.concatenate([np.zeros(s.shape, np.int8) if x is None else x for s, x in zip(scales, zps)])
    sqnr = _db(acc)
    bq = BlockQuant(np.zeros((0, g.lin.k), np.int8), np.concatenate(scales), z, g.block)
    if out is not None:
        dequantized[name] = out
    return bq, sqnr, sqnr if method == "minmax" else _db(acc_rtn)


def coverage(m: onnx.ModelProto, quantized: set[str], skipped: dict[str, str]) -> dict[str, Any]:
    """The weights weight-only quantization covers: ``quantized`` (MatMul/Gemm weights), ``total`` weights and
    ``left_float`` ``{kind: count}`` (other operators' weights, skipped MatMul/Gemm by reason)."""
    inits = {t.name for t in m.graph.initializer}
    other: dict[str, set[str]] = {}
    for n in m.graph.node:
        if n.op_type in WEIGHT_BEARING and n.op_type not in ("MatMul", "Gemm") and len(n.input) > 1 \
                and n.input[1] in inits and n.input[1] not in quantized:
            other.setdefault(n.op_type, set()).add(n.input[1])
    left = {f"{op} weight(s) (weight-only covers MatMul/Gemm)": len(v) for op, v in sorted(other.items())}
    for why in skipped.values():
        key = f"MatMul/Gemm ({why})"
        left[key] = left.get(key, 0) + 1
    return {"quantized": len(quantized), "total": len(quantized) + sum(left.values()), "left_float": left}


def coverage_note(cov: dict[str, Any]) -> str:
    """``weight-only: quantized N of M weights; left float: ...`` from :func:`coverage`."""
    left = [f"{v} {k}" for k, v in list(cov["left_float"].items())[:8]]
    return f"weight-only: quantized {cov['quantized']} of {cov['total']} weights" + (
        "; left float: " + ", ".join(left) if left else "")


def _check_upgrade(given: list[onnx.ModelProto], m: onnx.ModelProto, tensors: Tensors, ds: Any, label: str,
                   notes: list[str]) -> None:
    """When :func:`~qlinear.graph.load.load_checked` upgraded the opset of the model as ``given`` (``[model]``, else ``[]``): ``m``
    computes what it does on the first samples (models without external data, with data given; else a note says
    the upgrade was not checked)."""
    from qlinear.graph.passes.normalize import check_upgrade

    if not given:
        return
    if ds is None or len(ds) == 0 or tensors.external:
        notes.append("the opset upgrade was not checked against the original model ("
                     + ("the model has external data)" if tensors.external else "no data given)"))
        return
    notes.append(check_upgrade(given[0], m, [ds.sample(i) for i in range(min(4, len(ds)))], label))


def _quantize_one(w: np.ndarray, g: _Grid, grid: str, method: str, cfg: QuantizeConfig | None,
                  h: np.ndarray | None) -> BlockQuant:
    sd = g.scale_dtype
    if method.endswith("gptq") and h is not None:
        fixed = None
        if g.lpbq:
            rtn = quantize_rtn(w, g.bits, g.block, grid, scale_dtype=sd)
            s, _ = _lpbq(g, rtn.scale)
            fixed = (s, np.zeros(s.shape, np.int64))
        elif method == "aag+gptq":  # GPTQ on the activation-aware grids (static groups)
            a = activation_aware_grid(w, h, g.bits, g.block, grid, scale_dtype=sd)
            fixed = (a.scale, np.zeros(a.scale.shape, np.int64) if a.zero_point is None else a.zero_point)
        return gptq(w, h, g.bits, g.block, grid, damp=cfg.gptq_damp, act_order=cfg.gptq_act_order, fixed=fixed,
                    scale_dtype=sd)
    if method == "aag" and h is not None:
        return activation_aware_grid(w, h, g.bits, g.block, grid, scale_dtype=sd)
    bq = quantize_rtn(w, g.bits, g.block, grid, method=method if method in RTN_METHODS else "minmax", scale_dtype=sd)
    if g.lpbq:
        s, _ = _lpbq(g, bq.scale)
        wb = padded(w, g.block)
        q = quantize_blocks(wb, s, np.zeros(s.shape, np.int64), g.bits).reshape(w.shape[0], -1)[:, :w.shape[1]]
        bq = BlockQuant(np.ascontiguousarray(q), s, None, g.block)
    return bq


def _awq_quantizer(cfg: QuantizeConfig) -> Callable[[np.ndarray], np.ndarray]:
    """AWQ's search quantizer: round to nearest on the run's grid (per channel: one block of K; LPBQ: its blocks,
    float scales before the LPBQ decomposition)."""
    bits = int(cfg.weight_type.lstrip("u").removeprefix("int"))
    per_block = rtn_quantizer(bits, int(cfg.block_size), grid_for(cfg))
    return (lambda w: rtn_quantizer(bits, w.shape[1], grid_for(cfg))(w)) if cfg.weights == "per-channel" else per_block


def _lpbq(g: _Grid, block_scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LPBQ of ``[N, nb]`` block scales (spec §1.2, 4-bit integer scales): the effective float32 scales, recorded
    on ``g`` (int scales and per-channel float scale)."""
    if g.int_scale is None:
        pc, ints = lpbq_decompose(block_scale, 1, scale_bits=4)
        g.int_scale, g.pc_scale = ints.astype(np.int64), pc.reshape(-1).astype(np.float32)
    eff = (g.int_scale.astype(np.float32) * g.pc_scale[:, None]).astype(np.float32)
    return eff, g.int_scale


__all__ = ["StreamedWeights", "grid_for", "quantize_weights"]
