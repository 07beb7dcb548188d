"""``qlinear.quantize(model, data, config) -> QuantizedModel``: post-training quantization of an ONNX model.

1. check the inputs before any work: the config, the model (``onnx.checker``, opset 7..25; normalized by
   :mod:`qlinear.graph.passes.normalize`: opset below 13 upgraded, Constant weights made initializers), the data
   against the model's inputs (:meth:`~qlinear.ptq.data.Dataset.validate`);
2. the exact float rewrites run as ``onnx_ir`` passes on one :class:`onnx_ir.Model` (:mod:`qlinear.graph.passes`):
   fold BatchNorm into Conv, optional cross-layer equalization, smoothing of transformer MatMul inputs (its
   statistics from one ONNX Runtime pass, :mod:`qlinear.ptq.algorithms.smooth`); the model is a proto again only after them;
3. plan the quantizers (:mod:`qlinear.graph.plan`);
4. one streaming ONNX Runtime pass over the calibration samples feeds the activation observers (and the input means
   bias correction needs); weights are calibrated directly;
5. bias correction, int32 bias at ``input_scale * weight_scale``, target rules (:mod:`qlinear.ptq.targets`);
6. the Q/DQ model is :func:`qlinear.graph.apply` of the resulting :class:`~qlinear.encodings.EncodingSet`; it
   must load in ONNX Runtime at its default optimization level.

:meth:`QuantizedModel.save` writes every output of a run into a folder as one transaction
(:class:`qlinear.outdir.OutputFolder`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx

from qlinear.encodings import EncodingSet
from qlinear.errors import CalibrationError, ConfigError, GraphError
from qlinear.graph.float_weights import float_layer_weights
from qlinear.graph.integer_clamps import integer_clamps
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.load import load_checked
from qlinear.graph.model import load_model, opset, tensor_outputs
from qlinear.graph.ops import WEIGHTED
from qlinear.graph.passes.drop_identity import DropIdentity
from qlinear.graph.passes.equalize import Equalize
from qlinear.graph.passes.fix_inputs import fix_input_values, input_values
from qlinear.graph.passes.fold_batchnorm import FoldBatchNorm
from qlinear.graph.passes.fold_conv_affine import FoldConvAffine
from qlinear.graph.passes.normalize import check_upgrade, subgraph_notes
from qlinear.graph.passes.shapes import fix_input_shapes, fold_static_shapes
from qlinear.graph.passes.unshare_biases import UnshareBiases, unshare_note
from qlinear.graph.plan import (
    FLOAT_INPUT_WEIGHT_TARGETS,
    asked_float_weight_note,
    float_input_note,
    float_weight_note,
    make_plan,
    masked_note,
    no_activation_note,
    nothing_quantized_note,
)
from qlinear.graph.satisfied_clamps import drop_satisfied_clamps
from qlinear.ptq import targets
from qlinear.ptq.algorithms.smooth import smooth_model
from qlinear.ptq.config import DATA_WEIGHT_METHODS, QuantizeConfig
from qlinear.ptq.data import Dataset, ImagePreprocess, load_dataset, model_inputs
from qlinear.ptq.encode import (
    TABLE_TARGETS,
    TensorConfigs,
    apply_encodings,
    build_encodings,
    int32_biases,
    lookup_tables,
)
from qlinear.ptq.logs import float_log_cones
from qlinear.ptq.mixed import bounded_parts, fill_ranges, keep_parts
from qlinear.ptq.norms import wide_statistics
from qlinear.ptq.report.evaluate import output_engine, quant_session
from qlinear.ptq.report.passes import Basis, Passes, stat_encodings
from qlinear.ptq.result import QuantizedModel, held_out_span
from qlinear.ptq.settle import CONV_OPS, check_excludes, placement_for, settle
from qlinear.ptq.stats.distributed import connect as connect_ray
from qlinear.ptq.weightonly import quantize_weights

Progress = Callable[[str, int], Callable[[int], None]]


def fixed_model(m: onnx.ModelProto, cfg: QuantizeConfig, label: str, notes: list[str], *,
                in_place: bool = True) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``m`` (normalized) with the inputs ``cfg.fix_inputs`` names made constants and the dimensions
    ``cfg.input_shapes`` gives fixed, what they decide folded (:mod:`qlinear.graph.passes.fix_inputs`,
    :mod:`qlinear.graph.passes.shapes`), and the fixed inputs' values; ``notes`` gets theirs, its notes about
    subgraphs brought up to date. Target tflite folds what static shapes decide in any case (a ``.tflite`` is
    static: a ``Shape`` of a static tensor, and the ``If`` on it, as the TFLite converter folds them).
    ``in_place=False``: ``m`` itself is left as it is (a copy is rewritten, only when something is to be fixed)."""
    tflite = cfg.target == "tflite" and not cfg.input_shapes
    if not cfg.fix_inputs and not cfg.input_shapes and not tflite:
        return m, {}
    if not in_place:
        m = load_model(m)
    before = subgraph_notes(m)
    values = input_values(m, cfg.fix_inputs, label)
    m, by_value = fix_input_values(m, values, label)
    m, by_shape = fix_input_shapes(m, cfg.input_shapes, label)
    if tflite:
        inlined: list[str] = []
        n_fold = fold_static_shapes(m, inlined)
        by_shape = ([f"target tflite: {n_fold} shape computation node(s) of static tensors folded to constants"]
                    if n_fold else []) + inlined
    if not by_value and not by_shape:
        return m, values
    notes[:] = [n for n in notes if n not in before] + by_value + by_shape + subgraph_notes(m)
    return m, values


def _declared_like(given: onnx.ModelProto, m: onnx.ModelProto) -> onnx.ModelProto:
    """``given`` with its graph inputs declared as ``m`` declares them (a copy, its outputs' and intermediate shapes
    cleared), when ``--input-shape`` replaced a stale static size in ``m``; else ``given`` itself."""
    shapes = {v.name: v.type.tensor_type.shape for v in m.graph.input}
    if all(v.name not in shapes or v.type.tensor_type.shape == shapes[v.name] for v in given.graph.input):
        return given
    out = onnx.ModelProto()
    out.CopyFrom(given)
    for v in out.graph.input:
        if v.name in shapes:
            v.type.tensor_type.shape.CopyFrom(shapes[v.name])
    for o in out.graph.output:
        o.type.tensor_type.ClearField("shape")
    del out.graph.value_info[:]
    return out


def check_normalized(given: onnx.ModelProto, m: onnx.ModelProto, ds: Dataset, n_cal: int, label: str,
                     notes: list[str], count: int = 4, fixed: dict[str, np.ndarray] | None = None,
                     session: Any = None) -> None:
    """When normalizing upgraded the opset of the model as ``given``: the upgraded ``m`` computes what it does on the
    first ``count`` calibration samples (:func:`~qlinear.graph.passes.normalize.check_upgrade`; ``given`` fed the
    ``fixed`` inputs ``m`` no longer takes; ``session``: one of ``m`` at ONNX Runtime's full level the caller holds,
    else one is built)."""
    if opset(given) >= 13 or n_cal < 1:
        return
    given = _declared_like(given, m)
    feeds = [dict(ds.sample(i), **(fixed or {})) for i in range(min(count, n_cal))]
    notes.append(check_upgrade(given, m, feeds, label,
                               upgraded_outputs=None if session is None else _outputs_of(session)))


def _outputs_of(session: Any) -> Callable[[Any, list[str]], dict[str, list]]:
    """``check_upgrade``'s ``upgraded_outputs`` from a :class:`~qlinear.ptq.stats.session.Session`."""
    def run(samples: Any, names: list[str]) -> dict[str, list]:
        res: dict[str, list] = {x: [] for x in names}
        for i, feed in enumerate(samples):
            for x, v in zip(names, session.run(names, dict(feed), where=f"calibration sample {i}")):
                res[x].append(np.asarray(v) if isinstance(v, np.ndarray) else None)
        return res
    return run


@dataclass
class _Upgrade:
    """The opset upgrade's check (:func:`check_normalized`), run once the plan is made: the model as given against
    the normalized one, or, when the plan quantizes nothing, against the model written (its load check's session:
    one ONNX Runtime session less). Its note goes where it always went, after normalizing's (``at``)."""

    given: onnx.ModelProto
    m: onnx.ModelProto
    fixed: dict[str, np.ndarray]
    at: int

    def check(self, run: _Run, upgraded: onnx.ModelProto | None = None, session: Any = None) -> None:
        notes: list[str] = []
        check_normalized(self.given, self.m if upgraded is None else upgraded, run.ds, run.n_cal, run.label, notes,
                         fixed=self.fixed, session=session)
        run.notes[self.at:self.at] = notes


def quantize(model: Any, data: Any, config: QuantizeConfig | dict | None = None, *,
             preprocess: ImagePreprocess | None = None, progress: Progress | None = None,
             report_ahead: bool = False) -> QuantizedModel:
    """Calibrate ``model`` on ``data`` and return the quantized model.

    Args:
        model: float ONNX model (path or ``ModelProto``), opset 7..25 (below 13 upgraded).
        data: see :func:`qlinear.ptq.data.load_dataset` (``.npz``, folders, a dict of arrays, a Dataset); may be
            ``None`` for weight-only round to nearest (``activation_type: "float"``).
        config: :class:`QuantizeConfig` or a dict of its fields (unknown keys are errors). The target's rules settle
            it before any data is read (:func:`qlinear.ptq.settle.settle`): a requested option they change is an
            error or a note; ``QuantizedModel.config`` is the configuration used.
        progress: ``progress(task, total) -> advance(n)`` hook (the CLI draws rich progress bars with it).
        report_ahead: the report will be asked for (the CLI writing one): its float passes start while quantizing
            (:class:`qlinear.ptq.report.passes.Passes`; the same numbers, on cores the pipeline leaves idle).
    """
    t_all = time.perf_counter()
    cfg = config_of(config)
    connect_ray(cfg.workers, cfg.ray_address)  # workers 1 without an address: nothing (Ray is not imported)
    if cfg.weight_only:  # activations stay float: weights only, streamed (qlinear.ptq.weightonly)
        cfg, notes = settle(cfg)
        return quantize_weights(model, data, cfg, progress=progress, preprocess=preprocess, notes=notes)
    if data is None:
        raise ConfigError("data: calibration data is required (activation ranges come from it); only weight-only "
                          "quantization (activation_type float) with minmax or mse weights runs without it")
    norm_notes: list[str] = []
    read: list[onnx.ModelProto] = []  # the model exactly as read, when normalizing upgraded its opset
    m, label = load_checked(model, norm_notes, read=read)
    m, fixed = fixed_model(m, cfg, label, norm_notes)  # --fix-input, --input-shape: before settling, reading data
    cfg, notes = settle(cfg, m)
    notes += check_excludes(cfg, m, label)
    float_model = read[0] if read else load_model(model if norm_notes else m)  # as given (a copy), read once
    specs = {k: dataclasses.replace(v, fixed=k in (cfg.input_shapes or {})) for k, v in model_inputs(m).items()}
    ds = load_dataset(data, specs, preprocess=preprocess, batch_axes=cfg.batch_axes, fixed=fixed)
    n_cal = min(cfg.calibration_samples, len(ds))
    ds.validate(min(len(ds), cfg.calibration_samples + cfg.evaluation_samples))
    upgrade = _Upgrade(float_model, m, fixed, len(norm_notes))  # checked once the plan is made (its note here)
    notes = norm_notes + notes + list(ds.notes)
    if n_cal < cfg.calibration_samples:
        notes.append(f"only {len(ds)} samples: calibrating on {n_cal}")
    n_fit = n_cal  # with an accuracy target, the last calibration samples judge the repair and are not fitted on
    if cfg.accuracy_target or cfg.size_budget is not None or cfg.average_bits is not None:
        if n_cal < 2:
            what = "accuracy_target" if cfg.accuracy_target else "size_budget / average_bits"
            raise ConfigError(f"{what}: needs at least 2 calibration samples, the data has {n_cal}")
        n_fit = n_cal - min(cfg.repair_samples, n_cal // 2)
    run = _Run(cfg, m, ds, label, notes, {}, progress, n_fit, n_cal)
    if cfg.size_budget is not None or cfg.average_bits is not None:  # fractions of the float model's file as given
        run.float_bytes = float_model.ByteSize()
    run.report_ahead, run.upgrade = report_ahead, upgrade
    placement = _rewrite(run)
    try:
        out = _calibrate(run, placement)
    except BaseException:
        if run.ahead is not None:
            run.ahead.cancel()
        raise
    out.float_model = float_model
    run.timings["total"] = time.perf_counter() - t_all
    return out


def config_of(config: Any) -> QuantizeConfig:
    """``config`` (a :class:`QuantizeConfig`, a dict of its options or None) as a :class:`QuantizeConfig`."""
    if config is not None and not isinstance(config, (QuantizeConfig, dict)):
        raise ConfigError(f"config: expected a QuantizeConfig or a dict of its options, got {type(config).__name__}")
    return config if isinstance(config, QuantizeConfig) else QuantizeConfig.from_dict(config or {})


@dataclass
class _Run:
    """The state one :func:`quantize` call passes between its steps."""

    cfg: QuantizeConfig
    m: onnx.ModelProto
    ds: Dataset
    label: str
    notes: list[str]
    timings: dict[str, float]
    progress: Progress | None
    n_fit: int
    n_cal: int
    model: Any = None  # the onnx_ir.Model of ``m`` after the rewrites (planned without a new proto or index)
    float_bytes: int = 0  # the float model's serialized bytes as given (the budget notes' denominator)
    ahead: Any = None  # the report's passes started early (qlinear.ptq.report.passes.Passes), with report_ahead
    report_ahead: bool = False  # the report will be asked for: its passes start once the plan quantizes something
    upgrade: Any = None  # the opset upgrade's check (_Upgrade), run after planning


def _matmul_placement_note(m: onnx.ModelProto, target: str) -> str:
    """The note of ``matmul`` placement; it names the convolutions whose inputs it leaves float (the layer computed
    in float; on target ort with its float weights, elsewhere with quantized ones) when the transformer has a
    convolutional part, e.g. an OCR recognizer's backbone."""
    inits = {t.name for t in m.graph.initializer}
    convs = sum(n.op_type in CONV_OPS and len(n.input) > 1 and n.input[1] in inits for n in m.graph.node)
    weights = "keep their float values" if target in FLOAT_INPUT_WEIGHT_TARGETS else "are quantized"
    return ("transformer placement: quantizers on MatMul/Gemm inputs only (LayerNorm, Softmax, Gelu and residual adds "
            "stay float" + (f"; so do the inputs of its {convs} convolution(s), whose weights {weights}: placement "
                            "\"all\" in --config quantizes those activations too" if convs else "") + ")")


def _rewrite(run: _Run) -> str:
    """Exact float rewrites before calibration, as ``onnx_ir`` passes on one :class:`onnx_ir.Model` (BatchNorm
    folding, equalization, smoothing; :mod:`qlinear.graph.passes`): ``run.m`` becomes the rewritten model (one proto,
    made only when a pass changed something); returns the placement."""
    cfg, notes = run.cfg, run.notes
    placement = placement_for(cfg, run.m)  # the op types it reads (Softmax, norms, MatMul) are not rewritten
    model = to_ir(run.m)
    modified = DropIdentity()(model).modified  # Identity nodes between layers: no second, equal quantizer
    if not cfg.weight_only:  # one int32 bias encoding per layer (its input_scale * weight_scale)
        unshare = UnshareBiases()
        modified = unshare(model).modified or modified
        if unshare.copied:
            notes.append(unshare_note(unshare.copied))
    fold = FoldBatchNorm()
    modified = fold(model).modified or modified
    if fold.folded:
        notes.append(f"folded {fold.folded} BatchNormalization nodes into the Conv or ConvTranspose before them")
    affine = FoldConvAffine()
    modified = affine(model).modified or modified
    if affine.folded:
        notes.append(f"folded {affine.folded} Mul/Add/Sub node(s) of a per-channel constant into the Conv before "
                     "them (its weight and bias; one quantized output instead of two)")
    if cfg.do_equalize:
        t0 = time.perf_counter()
        eq = Equalize(clips=cfg.target != "tflite")  # TFLite fuses ReLU6: no per-channel clip bounds
        modified = eq(model).modified or modified
        run.timings["equalize"] = time.perf_counter() - t0
        notes.append(f"cross-layer equalization of {eq.pairs} layer pairs"
                     + (" (across ReLU only: target tflite)" if cfg.target == "tflite" else ""))
    if placement == "matmul":
        notes.append(_matmul_placement_note(run.m, run.cfg.target))
    if cfg.smoothing or (cfg.smoothing is None and placement == "matmul"
                         and cfg.activation_qtype.bits <= 8):
        t0 = time.perf_counter()
        k = smooth_model(model, run.ds, run.n_fit, cfg.batch_size, label=run.label,
                         proto=None if modified else run.m)
        run.timings["smoothing"] = time.perf_counter() - t0
        modified = modified or bool(k)
        if k:
            notes.append(f"smoothed {k} MatMul inputs (activation outliers moved into the weights, SmoothQuant "
                         "alpha 0.5)")
    if modified:
        run.m = to_proto(model)
    run.model = model
    return placement


def _start_ahead(run: _Run, reference: onnx.ModelProto) -> Passes | None:
    """The report's float-output pass, started on the rewritten float model (None: no held-out samples)."""
    start, stop = held_out_span(len(run.ds), run.cfg)
    if stop <= start or start < run.n_cal:
        return None
    ahead = Passes(run.ds, (start, stop), run.cfg.batch_size, tensor_outputs(reference))
    ahead.start_float(reference)
    return ahead


def _ahead_stats(run: _Run, reference: onnx.ModelProto, es: EncodingSet, plan: Any, keep: dict) -> None:
    """With the report's passes started early: its statistics, once the encodings ``es`` are final."""
    if run.ahead is not None:
        b = Basis(run.ds, reference, es, plan, (keep.get("session"), keep.get("outputs", [])),
                  keep.get("batch") or run.cfg.batch_size)
        run.ahead.start_stats(b, stat_encodings(b))


def _leave_masks_float(plan: Any, masks: set[str]) -> list[str]:
    """The activations holding the infinities of a mask constant (:func:`from_infinite_constant`) left float."""
    if not masks:
        return []
    plan.leave_float(masks, "holds the infinities of a mask constant (Where(c, x, -inf)): left in float")
    return [f"{len(masks)} tensor(s) hold the infinities of a mask constant on the calibration data (no grid holds "
            f"them): left in float: {', '.join(sorted(masks)[:4])}{' ...' if len(masks) > 4 else ''}"]


def _leave_unseen_inputs_float(plan: Any, obs: dict, m: onnx.ModelProto, label: str,
                               full_integer: bool) -> list[str]:
    """The float graph inputs that were exactly 0 on every calibration sample (a recurrent state or a cache given
    as zeros) left float: a grid fitted to them would be ~1e-7 wide and round any later value to 0 (an error with
    ``full_integer``, which has no float inputs)."""
    inputs = {i.name for i in m.graph.input}
    zero = sorted(t for t in plan.activations if t in inputs and t in obs and obs[t].min is not None
                  and not np.any(obs[t].min) and not np.any(obs[t].max))
    if not zero:
        return []
    if full_integer:
        raise CalibrationError(f"{label}: graph input(s) {', '.join(zero)} are 0 on every calibration sample: no "
                               "integer grid can be fitted to them (it would round every later value to 0); give "
                               "samples with the values they take in use (e.g. states carried over a sequence), or "
                               "drop --full-integer to keep them float")
    plan.leave_float(set(zero), "0 on every calibration sample: no grid can be fitted to it")
    return [f"graph input(s) {', '.join(zero)}: 0 on every calibration sample (a state or cache given as zeros?); a "
            "grid fitted to that would round every later value to 0, so they are left float (quantizers follow "
            "where they are read). Give samples with the values they take in use (e.g. states carried over a "
            "sequence) to quantize them"]


def _implicit_methods(cfg: QuantizeConfig, model: Any, plan: Any, placement: str, notes: list[str]) -> dict[str, str]:
    """Under transformer placement with no activation method asked for: MSE ranges for the Gelu/SiLU outputs that
    feed MatMuls (heavy-tailed), with a note."""
    if placement != "matmul" or cfg.activation_method is not None:
        return {}
    from qlinear.graph.plan import activation_fn_outputs

    implicit = {t: "mse" for t in activation_fn_outputs(model, plan.activations)}
    if implicit:
        notes.append(f"MSE ranges for the {len(implicit)} Gelu/SiLU outputs feeding MatMuls (heavy-tailed), "
                     "min-max elsewhere")
    return implicit


def _weight_notes(cfg: QuantizeConfig, m: onnx.ModelProto, plan: Any) -> list[str]:
    """The weights the plan leaves float, and the embedding tables target ort stores quantized."""
    tables = lookup_tables(m, cfg) if cfg.target in TABLE_TARGETS else {}
    ends = [v.name for v in m.graph.input] + [v.name for v in m.graph.output]
    out = float_weight_note(m, plan, tables) + (no_activation_note(plan, ends) if not tables else [])
    if tables:
        out.append(f"{len(tables)} embedding table(s) stored as {cfg.activation_type} (per-tensor, over the whole "
                   f"table; each Gather's output takes the same parameters, so ONNX Runtime gathers the integers): "
                   + ", ".join(list(tables)[:4]) + (" ..." if len(tables) > 4 else ""))
    return out


def _plan(run: _Run, placement: str) -> tuple[Any, Any, TensorConfigs]:
    """The rewritten model's IR, its plan (with the notes on what it leaves float) and the per-tensor configuration
    (a size budget out of reach is refused here, before calibration)."""
    cfg, m, notes = run.cfg, run.m, run.notes
    model = to_ir(m) if run.model is None else run.model  # the ir model the rewrites left: no new index
    plan = make_plan(model, exclude_nodes=cfg.exclude_nodes, exclude_op_types=cfg.exclude_op_types,
                     quantize_outputs=cfg.quantize_outputs, placement=placement, target=cfg.target, proto=m,
                     float_stats=False if cfg.full_integer else None)
    notes += _weight_notes(cfg, m, plan) + (masked_note(plan) if placement != "matmul" else []) \
        + (float_input_note(plan) if cfg.target == "qnn" else [])   # ort: _finish's float-layer note; tflite: islands
    tcfg = TensorConfigs(cfg, m, plan, _implicit_methods(cfg, model, plan, placement, notes), notes)
    notes += asked_float_weight_note(m, plan, cfg.exclude_nodes, cfg.exclude_op_types)
    if cfg.size_budget is not None or cfg.average_bits is not None:  # refused before calibration if out of reach
        from qlinear.ptq.algorithms.budget import check_before

        check_before(m, plan, tcfg, run.label, run.float_bytes)
    return model, plan, tcfg


def _calibrate(run: _Run, placement: str) -> QuantizedModel:
    """Plan, calibrate, encode (refinement, bias correction, repair, int32 biases) and build the Q/DQ model (a plan
    that quantizes nothing: :func:`_as_float`)."""
    cfg, m, notes, timings, progress = run.cfg, run.m, run.notes, run.timings, run.progress
    model, plan, tcfg = _plan(run, placement)
    if plan.empty:
        notes.append(nothing_quantized_note(m, plan) + ("" if _searches(cfg) else _AS_FLOAT))
        if not _searches(cfg):
            return _as_float(run, plan)
    run.upgrade.check(run)
    reference = onnx.ModelProto()  # the float model after exact rewrites (BN folding, CLE, smoothing): SQNR reference
    reference.CopyFrom(m)
    if run.report_ahead:
        run.ahead = _start_ahead(run, reference)
    t0 = time.perf_counter()
    means_for = [b.input for b in plan.biases] if cfg.bias_correction else []
    adv = progress("calibrating", run.n_fit) if progress else None
    keep: dict[str, Any] = {"float_bytes": run.float_bytes}
    obs, means, masks = _collect(m, run.ds, run.n_fit, list(plan.activations), cfg, means_for, adv, run.label, keep,
                                 tcfg)
    timings["calibration"] = time.perf_counter() - t0
    notes += _leave_masks_float(plan, masks)
    notes += _leave_unseen_inputs_float(plan, obs, m, run.label, cfg.full_integer)
    if run.ds.stacks is False:
        notes.append(f"{run.label} does not run two samples in one call although its inputs' batch axis is dynamic "
                     f"({run.ds.unstacked}): one sample per call (slower); --batch-axis NAME=none says an input has no "
                     "batch axis")
    t0 = time.perf_counter()
    fill_ranges(plan, obs)
    float_log_cones(plan, list(model.graph), obs, cfg.target, tcfg.resolved, notes, cfg.full_integer)
    floated = keep_parts(plan, m, cfg.target, notes, obs, tcfg)
    encs = bounded_parts(build_encodings(m, plan, obs, tcfg), floated, plan, m, tcfg, notes, obs)
    encs = _target_rules(encs, plan, m, tcfg, notes, obs)
    es = EncodingSet(tuple(encs), producer={"package": "qlinear", "version": _version()}, version="2.0.0")
    es = targets.finalize(es, m, plan, cfg, notes)
    timings["quantize"] = time.perf_counter() - t0
    done: set[str] = set()
    methods = {s.name: tcfg.weight(s.name).w_method for s in plan.weights}
    if any(v in DATA_WEIGHT_METHODS for v in methods.values()):
        from qlinear.ptq.algorithms.refine import refine_weights

        t1 = time.perf_counter()
        r = refine_weights(es, m, plan, run.ds, run.n_fit, cfg, methods, label=run.label, progress=progress,
                           notes=notes)
        es, done = r.encodings, r.biases
        timings["refine"] = time.perf_counter() - t1
    t0 = time.perf_counter()
    if cfg.bias_correction:  # the layers the data-driven methods corrected already are skipped
        from qlinear.ptq.algorithms.bias import correct_biases

        correct_biases(m, plan, {e.name: e for e in es.params}, means, skip=done)
    decisions: list[dict] = []
    curve: list[dict] = []
    if cfg.size_budget is not None or cfg.average_bits is not None:  # with accuracy_target too: qlinear.ptq.algorithms.budget
        from qlinear.ptq.algorithms.budget import run_budget
        from qlinear.ptq.algorithms.repair import RepairInputs

        t1 = time.perf_counter()
        es, m, decisions, curve = run_budget(RepairInputs(es, m, reference, plan, obs, means, tcfg, run.ds,
                                                          (run.n_fit, run.n_cal), keep, run.label),
                                             progress=progress, notes=notes)
        timings["repair"] = time.perf_counter() - t1
    elif cfg.accuracy_target:
        from qlinear.ptq.algorithms.repair import RepairInputs, run_repair

        t1 = time.perf_counter()
        es, m, decisions = run_repair(RepairInputs(es, m, reference, plan, obs, means, tcfg, run.ds,
                                                   (run.n_fit, run.n_cal), keep, run.label),
                                      progress=progress, notes=notes)
        timings["repair"] = time.perf_counter() - t1
    es = int32_biases(es, m, plan, notes)
    _ahead_stats(run, reference, es, plan, keep)  # the encodings are final: the report's statistics can start
    qm, loaded = _finish(es, m, cfg, run.label, notes)
    timings["quantize"] += time.perf_counter() - t0 - timings.get("repair", 0.0)
    out = QuantizedModel(qm, m, reference, es, cfg, plan, run.ds, timings, notes, None, m, decisions)
    out.budget = curve  # the size-vs-metric points measured under size_budget / average_bits
    _hand_over(run, out, keep, loaded)
    out.integer_check = _integer_check(qm, notes)
    return out


#: what :func:`_as_float` adds to the note saying that nothing is quantized
_AS_FLOAT = (". Calibration was skipped: model.qdq.onnx is the float model (no QuantizeLinear/DequantizeLinear), "
             "model.encodings holds no encoding")


def _searches(cfg: QuantizeConfig) -> bool:
    """Whether the run searches precisions against a target (accuracy_target, size_budget, average_bits): those
    run their passes even when the plan quantizes nothing."""
    return bool(cfg.accuracy_target) or cfg.size_budget is not None or cfg.average_bits is not None


def _as_float(run: _Run, plan: Any) -> QuantizedModel:
    """A plan that quantizes nothing (a lone tree ensemble): no calibration and none of the passes that change
    quantized layers. The Q/DQ model is the float model with the (empty) encodings' metadata
    (:func:`~qlinear.graph.bridge.apply` without the IR round trip), loaded once in ONNX Runtime at its default level
    (the load check); that session runs every pass of the report (the float model is the quantized one,
    ``QuantizedModel.unquantized``)."""
    cfg, m = run.cfg, run.m
    t0 = time.perf_counter()
    es = EncodingSet((), producer={"package": "qlinear", "version": _version()}, version="2.0.0")
    es = targets.finalize(es, m, plan, cfg)
    qm, loaded = _finish(es, m, cfg, run.label, run.notes)
    run.timings["quantize"] = time.perf_counter() - t0
    run.upgrade.check(run, qm, loaded)  # the written model computes what the model as given does
    out = QuantizedModel(qm, m, m, es, cfg, plan, run.ds, run.timings, run.notes, None, m, unquantized=True)
    out._float_session = loaded, []
    out._quant_session = qm, loaded
    out.integer_check = _integer_check(qm, run.notes)
    return out


def _hand_over(run: _Run, out: QuantizedModel, keep: dict, loaded: Any) -> None:
    """What the report reuses: calibration's warm session and batch size, the load check's session of the quantized
    model; with the report's passes started early, the quantized model's outputs start now."""
    out._float_session = keep.get("session"), keep.get("outputs", [])
    out._batch = keep.get("batch")
    out._quant_session = out.qdq_model, loaded  # the load check's session, reused when the report runs the same one
    out._ahead = run.ahead
    if run.ahead is not None:
        run.ahead.start_quant(quant_session(out, output_engine(out)))


def _finish(es: EncodingSet, m: onnx.ModelProto, cfg: QuantizeConfig, label: str,
            notes: list[str]) -> tuple[onnx.ModelProto, Any]:
    """The Q/DQ model, checked: it loads in ONNX Runtime at its default level (the session is returned with it); for
    target tflite it keeps the TFLite rules (:func:`~qlinear.ptq.targets.check_tflite`; what the export needs of the
    graph was checked before work, :func:`qlinear.ptq.settle.settle`)."""
    qm = apply_encodings(es, m)
    if cfg.target == "ort":
        _float_layer_weights(qm, notes, budget=cfg.size_budget is not None or cfg.average_bits is not None)
        _drop_satisfied_clamps(qm, notes)
        _move_clamps(qm, notes)
    loaded = _check_loads(qm, label)
    if cfg.target == "tflite":
        bad = targets.check_tflite(qm)
        if bad:
            raise GraphError(f"{label}: the quantized model breaks the TFLite rules ({len(bad)}): "
                             + "; ".join(str(v) for v in bad[:3]) + "; please report this with the model")
    return qm, loaded


def _target_rules(encs: list[Any], plan: Any, m: onnx.ModelProto, tcfg: Any, notes: list[str],
                  obs: dict[str, Any]) -> list[Any]:
    """The target's rules on the encodings, before any weight method: on qnn the statistics of normalizations
    widened (:func:`~qlinear.ptq.norms.wide_statistics`; a full-integer .tflite has one activation type, so they
    stay 8-bit there); on ort the weights of layers reading only float activations left float
    (:func:`_float_input_weights`)."""
    if tcfg.cfg.target == "qnn":
        return wide_statistics(encs, plan, m, tcfg, notes, obs)
    return _float_input_weights(encs, plan, m, tcfg.cfg, notes)


def _float_input_weights(encs: list[Any], plan: Any, m: onnx.ModelProto, cfg: QuantizeConfig,
                         notes: list[str]) -> list[Any]:
    """Target ort without a size budget: the weights whose every layer reads a float activation keep their float
    values (:meth:`~qlinear.graph.plan.Plan.leave_float_input_weights`, before any weight method or bias correction
    sees them; ONNX Runtime computes those layers in float), with a note; their encodings are dropped from ``encs``.
    A size budget counts them quantized: they stay, and :func:`_float_layer_weights` says what that costs."""
    if cfg.target not in FLOAT_INPUT_WEIGHT_TARGETS or cfg.size_budget is not None or cfg.average_bits is not None:
        return encs
    names = plan.leave_float_input_weights({e.name for e in encs if e.role == "activation" and e.scale is not None})
    if not names:
        return encs
    gone = set(names)
    inits = {x.name: x for x in m.graph.initializer}
    weights = {n.input[1] for n in m.graph.node if n.op_type in WEIGHTED and len(n.input) > 1
               and n.input[1] in inits and len(inits[n.input[1]].dims) >= 2}
    size = {w: int(np.prod(inits[w].dims)) for w in weights | gone if w in inits}
    share = sum(size.get(w, 0) for w in gone) / max(1, sum(size.values()))
    note = (f"{len(names)} weight(s) ({', '.join(names[:3])}{' ...' if len(names) > 3 else ''}; {_percent(share)} of "
            "the weights) keep their float values: every layer reading them takes a float input (the plan leaves it "
            "float), which ONNX Runtime computes in float (it has no integer kernel for a float input), so int8 values "
            "would add their rounding error and save nothing (the file would hold them as float either way); "
            "model.encodings has no encoding for them")
    if share >= 0.5:
        note += ("; most of the weights are in such layers: in ONNX Runtime's default session the model runs at "
                 "about the float model's speed, not int8's; an overrides rule setting those activations' type to "
                 "uint8 gives int8 kernels at their precision")
    notes.append(note)
    return [e for e in encs if e.name not in gone]


def _float_layer_weights(qm: onnx.ModelProto, notes: list[str], budget: bool = False) -> None:
    """Target ort: the weights of the layers ONNX Runtime runs in float (a float input, or a Conv's float output)
    written as the float values their ``DequantizeLinear`` computes (:mod:`qlinear.graph.float_weights`), with a
    note; when they hold most of the weights, the note says the model runs at about the float model's speed. Under a
    size budget (``budget``: size_budget / average_bits, which sized the file with those weights quantized) they stay
    quantized, and the note says what that costs in ONNX Runtime."""
    fw = float_layer_weights(qm, write=not budget)
    if not fw.layers:
        return
    note = (f"{len(fw.layers)} layer(s) ({', '.join(fw.layers[:3])}{' ...' if len(fw.layers) > 3 else ''}; "
            f"{_percent(fw.share)} of the weights) run in float in ONNX Runtime (their input is float, or a Conv's "
            "output is: it has no integer kernel for them), so ")
    if budget:
        notes.append(note + "ONNX Runtime dequantizes their weights at every inference: they stay quantized in the "
                     f"file, as the size budget counted them (written as float they would add {_mb(3 * fw.elements)})")
        return
    note += ("their weights are written as float (the dequantized int8 values, the same numbers; model.encodings "
             "holds their int8 encodings): a DequantizeLinear of the weight would run at every inference and keep ONNX "
             "Runtime from its float kernels' prepacked weights; the file holds them at 4 bytes a value "
             f"({_mb(3 * fw.elements)} more than int8)")
    if fw.share >= 0.5:
        note += ("; most of the weights are in such layers: in ONNX Runtime's default session the model runs at "
                 "about the float model's speed or a little slower (its remaining Q/DQ pairs), not int8's; an "
                 "overrides rule setting those activations' type to uint8 gives int8 kernels at their precision")
    notes.append(note)


def _drop_satisfied_clamps(qm: onnx.ModelProto, notes: list[str]) -> None:
    """Target ort: the Max/Min clamps that the grid before them already satisfies dropped
    (:mod:`qlinear.graph.satisfied_clamps`: the same outputs; ONNX Runtime ran each in float), with a note."""
    gone = drop_satisfied_clamps(qm)
    if gone:
        notes.append(f"{len(gone)} Max/Min clamp(s) against a constant ({', '.join(gone[:3])}"
                     f"{' ...' if len(gone) > 3 else ''}) dropped from the Q/DQ model: the integer grid before each "
                     "already keeps its values within the bound (the same outputs; ONNX Runtime ran them in float)")


def _move_clamps(qm: onnx.ModelProto, notes: list[str]) -> None:
    """Target ort: the Max/Min clamps against a constant between a DequantizeLinear and a QuantizeLinear of the same
    8-bit grid computed on the integers (:mod:`qlinear.graph.integer_clamps`: the same outputs), with a note."""
    moved = integer_clamps(qm)
    if moved:
        notes.append(f"{len(moved)} Max/Min clamp(s) against a constant ({', '.join(moved[:3])}"
                     f"{' ...' if len(moved) > 3 else ''}) computed on the integers in the Q/DQ model: Min/Max of "
                     "the 8-bit values against the quantized bound, where ONNX Runtime dequantized, clamped in float "
                     "and quantized again (the same outputs; model.encodings keeps both tensors' parameters)")


def _mb(n: int) -> str:
    return f"{n / 1e6:.3g} MB" if n >= 1e5 else f"{n / 1e3:.3g} kB"


def _percent(x: float) -> str:
    """``x`` (a share) in whole percent, never rounded up to 100 % or down to 0 % when it is not."""
    p = round(100 * x)
    return f"{min(max(p, 1 if x > 0 else 0), 99 if x < 1 else 100)}%"


def _integer_check(qm: onnx.ModelProto, notes: list[str]) -> Any:
    from qlinear.graph.check import check_integer

    ic = check_integer(qm)
    if not ic.ok:
        notes.append(f"WARNING: {ic}")
    return ic


def _version() -> str:
    import qlinear

    return qlinear.__version__


def _collect(m, ds, n_cal, tensors, cfg, means_for, adv, label, keep=None, tcfg=None):  # noqa: ANN001, ANN202
    from qlinear.ptq.stats.collect import calibrate_activations

    # graph outputs keep their full range (min-max): clipping logits changes the argmax, whatever the method
    outputs = {o.name for o in m.graph.output}
    method_for = {t: tcfg.activation(t).a_method for t in tensors} \
        if tcfg is not None and (tcfg.resolved or tcfg.implicit) else {}
    obs, means = calibrate_activations(m, ds, 0, n_cal, tensors, cfg.a_method, method_for=method_for,
                                       batch_size=cfg.batch_size,
                                       means_for=means_for, percentile=cfg.percentile, progress=adv,
                                       minmax_for=outputs, label=label, keep=keep, workers=cfg.workers,
                                       ray_address=cfg.ray_address)
    masks, inf = set(), None
    for t, o in obs.items():
        if o.min is None or (np.isfinite(o.min).all() and np.isfinite(o.max).all()):
            continue
        nan_only = bool(np.isnan(o.min).all())
        if inf is None:   # the constants holding an infinity: one pass over the weights, only when needed
            inf = infinite_constants(m)
        if not nan_only and from_infinite_constant(m, t, inf):
            masks.add(t)
            continue
        p = next((n for n in m.graph.node if t in n.output), None)
        node = f"its {p.op_type} node {p.name!r}: exclude_nodes" if p is not None and p.name else \
            f"its {p.op_type} node (unnamed): exclude_op_types {p.op_type}" if p is not None else "exclude_nodes"
        raise CalibrationError(f"{label}: tensor {t!r} holds {'NaN only' if nan_only else 'infinite values'} on the "
                               f"calibration data (an overflow in the float model?); leave it float ({node}) or check "
                               "the data")
    return obs, means, masks


def infinite_constants(m: onnx.ModelProto) -> set[str]:
    """The float initializers of ``m`` holding an infinity."""
    from onnx import numpy_helper

    return {i.name for i in m.graph.initializer if i.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
            onnx.TensorProto.DOUBLE) and np.isinf(numpy_helper.to_array(i)).any()}


def from_infinite_constant(m: onnx.ModelProto, t: str, inf: set[str]) -> bool:
    """Whether tensor ``t`` of ``m`` is computed from a constant of ``inf`` (:func:`infinite_constants`: a mask,
    ``Where(c, x, -inf)``; its infinities are meant, not an overflow)."""
    if not inf:
        return False
    prod = {o: n for n in m.graph.node for o in n.output}
    seen, todo = set(), [t]
    while todo:
        x = todo.pop()
        if x in inf:
            return True
        if x in seen or x not in prod:
            continue
        seen.add(x)
        todo += [i for i in prod[x].input if i]
    return False


def _check_loads(qm: onnx.ModelProto, label: str) -> Any:
    """The written model must load in ONNX Runtime at its default optimization level (what users run), not only at
    the basic level the report evaluates at; returns that session."""
    from qlinear.ptq.stats.session import Session

    try:
        return Session(qm, level="all", label=f"the quantized {label}")
    except GraphError as e:
        raise GraphError(f"{e}; the Q/DQ model is valid ONNX but this ONNX Runtime build cannot run it: choose "
                         "another activation/weight type for this target") from None


__all__ = ["QuantizeConfig", "QuantizedModel", "load_checked", "quantize"]
