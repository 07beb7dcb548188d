"""``qlinear.quantize(model, data, config) -> QuantizedModel``: post-training quantization of an ONNX model.

1. check the inputs before any work: the config, the model (``onnx.checker``, opset 7..25; normalized by
   :mod:`qlinear.graph.passes.normalize`: opset below 13 upgraded, Constant weights made initializers), the data
   against the model's inputs (:meth:`~qlinear.ptq.data.Dataset.validate`);
2. fold BatchNorm into Conv; optional cross-layer equalization (:mod:`qlinear.ptq.equalize`);
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

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx

from qlinear import calibration as C
from qlinear.encodings import Encoding, EncodingSet
from qlinear.errors import CalibrationError, ConfigError, GraphError
from qlinear.graph.fold import fold_batchnorm
from qlinear.graph.model import GraphIndex, check_model, load_model, opset
from qlinear.graph.passes.normalize import check_upgrade, normalize
from qlinear.graph.plan import Plan, WeightSpec, make_plan, resolve_inherit
from qlinear.ptq import targets
from qlinear.ptq.config import DATA_WEIGHT_METHODS, QuantizeConfig
from qlinear.ptq.data import Dataset, ImagePreprocess, load_dataset, model_inputs

Progress = Callable[[str, int], Callable[[int], None]]


@dataclass
class QuantizedModel:
    """Result of :func:`quantize`: the Q/DQ model, its encodings, and what is needed to evaluate it.

    ``float_model`` is the model as given; ``reference_model`` the float model qlinear calibrated (BatchNorm folded,
    equalized), what the report compares against; ``encoded_model`` that model with the changes quantization made to
    its float parameters (bias correction, weights moved onto their AdaRound/SeqMSE grid, layers restored by
    precision repair): the float model the encodings apply to, ``apply(encodings, encoded_model) == model``.
    ``decisions`` lists the precision repair's changes (:mod:`qlinear.ptq.repair`).
    """

    model: onnx.ModelProto
    float_model: onnx.ModelProto
    reference_model: onnx.ModelProto
    encodings: EncodingSet
    config: QuantizeConfig
    plan: Plan
    dataset: Dataset
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    integer_check: Any = None  #: :class:`qlinear.graph.IntegerCheck` of ``model``
    encoded_model: onnx.ModelProto | None = None
    decisions: list[dict] = field(default_factory=list)
    _report: Any = None
    _float_session: Any = field(default=None, repr=False)  # calibration's ORT session (float model, every tensor)

    def __post_init__(self) -> None:
        if self.encoded_model is None:
            self.encoded_model = self.reference_model

    @property
    def rewritten(self) -> bool:
        """Whether the float model the encodings apply to differs from the input (BatchNorm folded, equalized, bias
        corrected, weights moved onto their grid)."""
        return self.encoded_model.graph.SerializeToString() != self.float_model.graph.SerializeToString()

    def save_onnx(self, path: str | Path) -> None:
        from qlinear.graph.save import save_model

        save_model(self.model, path)

    def save_encodings(self, path: str | Path, version: str | None = None) -> None:
        from qlinear.encodings import save

        save(self.encodings, path, version=version or "2.0.0", drop_float=True)

    def save_tflite(self, path: str | Path, *, float_io: bool = True) -> None:
        """Write the full-integer ``.tflite`` of the model (target ``tflite``; :func:`qlinear.tflite.export`): NHWC
        float input and output (``float_io=False``: the integers), every parameter the Q/DQ model's own."""
        from qlinear._atomic import write_bytes
        from qlinear.tflite.export import export

        write_bytes(path, export(self.model, float_io=float_io))

    def held_out(self) -> tuple[int, int]:
        """``(start, stop)`` of the samples the report evaluates: the ones after the calibration samples, or the
        calibration samples themselves when none are left (the report then says so)."""
        n = len(self.dataset)
        start = min(self.config.calibration_samples, n)
        stop = min(n, start + self.config.evaluation_samples)
        if stop <= start:
            return 0, min(n, self.config.evaluation_samples or n)
        return start, stop

    def report(self, *, samples: int | None = None, progress: Callable[[int], None] | None = None):  # noqa: ANN201
        """Accuracy report on the held-out samples (computed once): per-tensor SQNR, sensitivity ranking, output
        agreement; see :mod:`qlinear.ptq.evaluate`."""
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, (int, np.integer))
                                    or samples < 1):
            raise ConfigError(f"samples: expected a positive integer (how many held-out samples to evaluate), got "
                              f"{samples!r}")
        if self._report is None:
            from qlinear.ptq.evaluate import evaluate

            self._report = evaluate(self, samples=samples, progress=progress)
        return self._report

    def save(self, outdir: str | Path | Any, *, encodings_version: str = "2.0.0", report: bool = True,
             progress: Callable[[int], None] | None = None) -> list[str]:
        """Write the run's outputs into ``outdir`` as one transaction (all new files or the old ones untouched):
        ``model.qdq.onnx``, ``model.encodings``, ``model.float.onnx`` (when BatchNorm folding or equalization changed
        the float model: the encodings name its tensors), ``model.tflite`` for target ``tflite``, and with ``report``
        ``report.json`` and ``report.html``.
        Returns the file names written."""
        from qlinear.encodings import VERSIONS
        from qlinear.outdir import OutputFolder

        if encodings_version not in VERSIONS:
            raise ConfigError(f"encodings version {encodings_version!r}: expected one of {', '.join(VERSIONS)}")
        folder = outdir if isinstance(outdir, OutputFolder) else OutputFolder(outdir)
        folder.check()
        rep = self.report(progress=progress) if report else None
        with folder.transaction() as stage:
            self.save_encodings(stage / "model.encodings", version=encodings_version)
            self.save_onnx(stage / "model.qdq.onnx")
            if self.rewritten:
                from qlinear.graph.save import save_model

                save_model(self.encoded_model, stage / "model.float.onnx")
            if self.config.target == "tflite":
                self.save_tflite(stage / "model.tflite")
            if rep is not None:
                from qlinear._atomic import write_text
                from qlinear.ptq.report import to_html, to_json

                write_text(stage / "report.json", to_json(self, rep))
                write_text(stage / "report.html", to_html(self, rep))
            written = sorted(p.name for p in stage.iterdir())
        return written


def load_checked(model: Any, notes: list[str] | None = None) -> tuple[onnx.ModelProto, str]:
    """The model and a label naming it, after :func:`~qlinear.graph.model.check_model` and the opset check (7..25),
    normalized (:func:`qlinear.graph.passes.normalize.normalize`: opset below 13 upgraded, Constant weights made
    initializers...); what normalizing changed is appended to ``notes``."""
    label = str(model) if isinstance(model, (str, Path)) else "model"
    m = load_model(model)
    ops = opset(m)
    if ops and not 7 <= ops <= 25:  # before onnx.checker, whose complaints about an old opset would not say this
        raise GraphError(f"{label}: opset {ops} is outside the supported range 7..25; re-export the model at "
                         "opset 13 or newer")
    check_model(m, label)
    m, changed = normalize(m, label, copy=False)
    if notes is not None:
        notes += changed
    return m, label


def check_normalized(given: onnx.ModelProto, m: onnx.ModelProto, ds: Dataset, n_cal: int, label: str,
                     notes: list[str], count: int = 4) -> None:
    """When normalizing upgraded the opset of the model as ``given``: the upgraded ``m`` computes what it does on the
    first ``count`` calibration samples (:func:`~qlinear.graph.passes.normalize.check_upgrade`)."""
    if opset(given) >= 13 or n_cal < 1:
        return
    notes.append(check_upgrade(given, m, [ds.sample(i) for i in range(min(count, n_cal))], label))


def quantize(model: Any, data: Any, config: QuantizeConfig | dict | None = None, *,
             preprocess: ImagePreprocess | None = None, progress: Progress | None = None) -> QuantizedModel:
    """Calibrate ``model`` on ``data`` and return the quantized model.

    Args:
        model: float ONNX model (path or ``ModelProto``), opset 7..25 (below 13 upgraded).
        data: see :func:`qlinear.ptq.data.load_dataset` (``.npz``, folders, a dict of arrays, a Dataset); may be
            ``None`` for weight-only round to nearest (``activation_type: "float"``).
        config: :class:`QuantizeConfig` or a dict of its fields (unknown keys are errors).
        progress: ``progress(task, total) -> advance(n)`` hook (the CLI draws rich progress bars with it).
    """
    t_all = time.perf_counter()
    if config is not None and not isinstance(config, (QuantizeConfig, dict)):
        raise ConfigError(f"config: expected a QuantizeConfig or a dict of its options, got {type(config).__name__}")
    cfg = config if isinstance(config, QuantizeConfig) else QuantizeConfig.from_dict(config or {})
    cfg = targets.adjust_config(cfg)
    if cfg.weight_only:  # activations stay float: weights only, streamed (qlinear.ptq.weightonly)
        from qlinear.ptq.weightonly import quantize_weights

        return quantize_weights(model, data, cfg, progress=progress, preprocess=preprocess)
    if data is None:
        raise ConfigError("data: calibration data is required (activation ranges come from it); only weight-only "
                          "quantization (activation_type float) with minmax or mse weights runs without data")
    norm_notes: list[str] = []
    m, label = load_checked(model, norm_notes)
    float_model = load_model(model if norm_notes else m)  # as given (a copy)
    ds = load_dataset(data, model_inputs(m), preprocess=preprocess)
    n_cal = min(cfg.calibration_samples, len(ds))
    ds.validate(min(len(ds), cfg.calibration_samples + cfg.evaluation_samples))
    check_normalized(float_model, m, ds, n_cal, label, norm_notes)
    notes: list[str] = norm_notes + list(ds.notes)
    if n_cal < cfg.calibration_samples:
        notes.append(f"only {len(ds)} samples: calibrating on {n_cal}")
    n_fit = n_cal  # with an accuracy target, the last calibration samples judge the repair and are not fitted on
    if cfg.accuracy_target:
        if n_cal < 2:
            raise ConfigError(f"accuracy_target: needs at least 2 calibration samples, the data has {n_cal}")
        n_fit = n_cal - min(cfg.repair_samples, n_cal // 2)
    n_bn = fold_batchnorm(m)
    if n_bn:
        notes.append(f"folded {n_bn} BatchNormalization nodes into Conv")
    timings: dict[str, float] = {}
    if cfg.do_equalize:
        from qlinear.ptq.equalize import equalize

        t0 = time.perf_counter()
        pairs = equalize(m)
        timings["equalize"] = time.perf_counter() - t0
        notes.append(f"cross-layer equalization of {pairs} layer pairs")
    placement = placement_for(cfg, m)
    if placement == "matmul":
        notes.append("transformer placement: quantizers on MatMul/Gemm inputs only (LayerNorm, Softmax, Gelu and "
                     "residual adds stay float)")
    if cfg.smoothing or (cfg.smoothing is None and placement == "matmul"
                         and qtype_bits(cfg.activation_type) <= 8):
        from qlinear.ptq.smooth import smooth

        t0 = time.perf_counter()
        k = smooth(m, ds, n_fit, cfg.batch_size, label=label)
        timings["smoothing"] = time.perf_counter() - t0
        if k:
            notes.append(f"smoothed {k} MatMul inputs (activation outliers moved into the weights, SmoothQuant "
                         "alpha 0.5)")
    reference = onnx.ModelProto()  # the float model after exact rewrites (BN folding, CLE, smoothing): SQNR reference
    reference.CopyFrom(m)
    plan = make_plan(m, exclude_nodes=cfg.exclude_nodes, exclude_op_types=cfg.exclude_op_types,
                     quantize_outputs=cfg.quantize_outputs, placement=placement)
    implicit: dict[str, str] = {}
    if placement == "matmul" and cfg.activation_method is None:
        from qlinear.graph.plan import activation_fn_output

        gi = GraphIndex.build(m, infer_shapes=False)
        implicit = {t: "mse" for t in plan.activations if activation_fn_output(gi, t)}
        if implicit:
            notes.append(f"MSE ranges for the {len(implicit)} Gelu/SiLU outputs feeding MatMuls (heavy-tailed), "
                         "min-max elsewhere")
    tcfg = TensorConfigs(cfg, m, plan, implicit)
    t0 = time.perf_counter()
    means_for = [b.input for b in plan.biases] if cfg.bias_correction else []
    adv = progress("calibrating", n_fit) if progress else None
    keep: dict[str, Any] = {}
    obs, means = _collect(m, ds, n_fit, list(plan.activations), cfg, means_for, adv, label, keep, tcfg)
    timings["calibration"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    encs = _encodings(m, plan, obs, tcfg)
    es = EncodingSet(tuple(encs), producer={"package": "qlinear", "version": _version()}, version="2.0.0")
    es = targets.finalize(es, m, plan, cfg)
    timings["quantize"] = time.perf_counter() - t0
    done: set[str] = set()
    methods = {s.name: tcfg.weight(s.name).w_method for s in plan.weights}
    if any(v in DATA_WEIGHT_METHODS for v in methods.values()):
        from qlinear.ptq.refine import refine_weights

        t1 = time.perf_counter()
        r = refine_weights(es, m, plan, ds, n_fit, cfg, methods, label=label, progress=progress, notes=notes)
        es, done = r.encodings, r.biases
        timings["refine"] = time.perf_counter() - t1
    t0 = time.perf_counter()
    if cfg.bias_correction:  # the layers the data-driven methods corrected already are skipped
        from qlinear.ptq.bias import correct_biases

        correct_biases(m, plan, {e.name: e for e in es.params}, means, skip=done)
    decisions: list[dict] = []
    if cfg.accuracy_target:
        from qlinear.ptq.repair import RepairInputs, run_repair

        t1 = time.perf_counter()
        es, m, decisions = run_repair(RepairInputs(es, m, reference, plan, obs, means, tcfg, ds, (n_fit, n_cal), keep,
                                                   label), progress=progress, notes=notes)
        timings["repair"] = time.perf_counter() - t1
    es = int32_biases(es, m, plan, notes)
    qm = _apply(es, m)
    _check_loads(qm, label)
    from qlinear.graph.check import check_integer

    ic = check_integer(qm)
    if not ic.ok:
        notes.append(f"WARNING: {ic}")
    timings["quantize"] += time.perf_counter() - t0 - timings.get("repair", 0.0)
    timings["total"] = time.perf_counter() - t_all
    out = QuantizedModel(qm, float_model, reference, es, cfg, plan, ds, timings, notes, ic, m, decisions)
    out._float_session = keep.get("session"), keep.get("outputs", [])
    return out


def placement_for(cfg: QuantizeConfig, m: onnx.ModelProto) -> str:
    """``cfg.placement`` with ``auto`` resolved: ``matmul`` for transformer graphs on target ort, else ``all``."""
    if cfg.placement != "auto":
        return cfg.placement
    from qlinear.graph.plan import is_transformer

    return "matmul" if cfg.target == "ort" and is_transformer(m) else "all"


def qtype_bits(name: str) -> int:
    from qlinear.core.types import qtype

    return int(qtype(name).bits)


def _version() -> str:
    import qlinear

    return qlinear.__version__


class TensorConfigs:
    """The configuration in effect for each tensor: the run's, changed by the matching ``overrides`` rules
    (:mod:`qlinear.ptq.overrides`); tensors the rules leave in float are taken out of ``plan``."""

    def __init__(self, cfg: QuantizeConfig, m: onnx.ModelProto, plan: Plan,
                 implicit_methods: dict[str, str] | None = None) -> None:
        from qlinear.ptq.config import ACTIVATION_TYPES, METHODS, WEIGHT_TYPES
        from qlinear.ptq.overrides import apply_to_plan

        self.cfg = cfg
        self.resolved = apply_to_plan(cfg.overrides, m, plan, weight_types=WEIGHT_TYPES,
                                      activation_types=ACTIVATION_TYPES, weight_methods=METHODS + DATA_WEIGHT_METHODS,
                                      activation_methods=METHODS)
        self._cache: dict[tuple[str, str], QuantizeConfig] = {}
        #: activation methods qlinear chooses per tensor when neither the config nor an override sets one
        self.implicit = dict(implicit_methods or {})

    def weight(self, name: str) -> QuantizeConfig:
        return self._get(name, "weight")

    def activation(self, name: str) -> QuantizeConfig:
        return self._get(name, "activation")

    def _get(self, name: str, role: str) -> QuantizeConfig:
        r = self.resolved.get(name)
        if r is None:
            if role == "activation" and name in self.implicit:
                key = (name, role)
                if key not in self._cache:
                    self._cache[key] = self.cfg.replace(activation_method=self.implicit[name])
                return self._cache[key]
            return self.cfg
        key = (name, role)
        if key not in self._cache:
            c = self.cfg
            if role == "weight":
                c = c.replace(weight_type=r.type or c.weight_type, weights=r.granularity or c.weights,
                              block_size=r.block_size or c.block_size, weight_method=r.method or c.weight_method)
            else:
                t = r.type or c.activation_type
                if c.target == "qnn" and t.startswith("int"):  # AIMET's HTP configs: unsigned activations
                    t = "u" + t
                c = c.replace(activation_type=t, activation_method=r.method or c.activation_method)
            self._cache[key] = c
        return self._cache[key]


def _collect(m, ds, n_cal, tensors, cfg, means_for, adv, label, keep=None, tcfg=None):  # noqa: ANN001, ANN202
    from qlinear.ptq.collect import calibrate_activations

    # graph outputs keep their full range (min-max): clipping logits changes the argmax, whatever the method
    outputs = {o.name for o in m.graph.output}
    method_for = {t: tcfg.activation(t).a_method for t in tensors} \
        if tcfg is not None and (tcfg.resolved or tcfg.implicit) else {}
    obs, means = calibrate_activations(m, ds, 0, n_cal, tensors, cfg.a_method, method_for=method_for,
                                       batch_size=cfg.batch_size,
                                       means_for=means_for, percentile=cfg.percentile, progress=adv,
                                       minmax_for=outputs, label=label, keep=keep)
    for t, o in obs.items():
        if o.min is None:
            continue
        if not (np.isfinite(o.min).all() and np.isfinite(o.max).all()):
            what = "NaN only" if np.isnan(o.min).all() else "infinite values"
            raise CalibrationError(f"{label}: tensor {t!r} holds {what} on the calibration data (an overflow in the "
                                   "float model?); exclude its node (exclude_nodes) or check the data")
    return obs, means


def _weight_encoding(name: str, w: np.ndarray, spec: WeightSpec, cfg: QuantizeConfig) -> Encoding:
    kw: dict[str, Any] = {}
    if cfg.weights == "per-channel":
        kw["axis"] = spec.channel_axis
    elif cfg.weights in ("per-block", "lpbq"):
        if spec.block_axis is None:
            kw["axis"] = spec.channel_axis
        else:  # a block longer than the axis is one block: store its real length
            kw.update(block_size=min(cfg.block_size, int(w.shape[spec.block_axis])), block_axis=spec.block_axis)
            if cfg.weights == "lpbq":  # spec §1.2: 4-bit integer block scales under a per-channel float scale
                kw["lpbq_scale_bits"] = 4
    method = "minmax" if cfg.w_method in DATA_WEIGHT_METHODS else cfg.w_method
    return C.calibrate(w, cfg.weight_type, method=method, policy=cfg.policy, symmetric=cfg.weight_symmetric,
                       name=name, role="param", percentile=cfg.percentile, **kw)


def _encodings(m: onnx.ModelProto, plan: Plan, obs: dict, tcfg: "TensorConfigs") -> list[Encoding]:
    """Activation and weight encodings (the int32 biases come later, :func:`int32_biases`, once the target's rules
    have set the activation encodings). Data-driven weight methods start from min-max ranges."""
    g = GraphIndex.build(m, infer_shapes=False)
    out: dict[str, Encoding] = {}
    # activations: tied groups share merged statistics
    for group in plan.tied:
        members = [t for t in group if t in obs]
        if len(members) > 1:
            base = obs[members[0]]
            for t in members[1:]:
                base.merge(obs[t])
            for t in members[1:]:
                obs[t] = base
    for t in plan.activations:
        c = tcfg.activation(t)
        out[t] = obs[t].compute(c.activation_type, symmetric=c.activation_symmetric, policy=c.policy, name=t)
    for t, src in plan.inherit.items():
        s = resolve_inherit(plan, src)
        if s in out:
            out[t] = out[s].replace(name=t)
    weights: dict[str, Encoding] = {}
    for spec in plan.weights:
        weights[spec.name] = _weight_encoding(spec.name, g.array(spec.name), spec, tcfg.weight(spec.name))
    return list(weights.values()) + list(out.values())


def int32_biases(es: EncodingSet, m: onnx.ModelProto, plan: Plan, notes: list[str] | None = None) -> EncodingSet:
    """Weight scales raised where an int32 bias or accumulator could overflow (:mod:`qlinear.calibration.bias`),
    then the int32 bias encodings at ``input_scale * weight_scale`` (per output channel)."""
    from qlinear.calibration.bias import fit_accumulator

    g = GraphIndex.build(m, infer_shapes=False)
    encs = {e.name: e for e in es}
    raised: dict[str, int] = {}
    for spec in plan.weights:
        we = encs.get(spec.name)
        ie = encs.get(spec.input) or encs.get(resolve_inherit(plan, spec.input))
        if we is None or ie is None or not we.qtype.is_int or not ie.qtype.is_int or ie.granularity != "per_tensor":
            continue
        w = g.array(spec.name)
        rank = w.ndim
        z = int(np.asarray(ie.zero_point_or_zeros).reshape(-1)[0])
        # 16x8: the runtimes accumulate in int64 (TFLite); only the int32 bias must fit
        x_range = (int(ie.qtype.qmin) - z, int(ie.qtype.qmax) - z) if ie.qtype.bits <= 8 else None
        bias = g.array(spec.bias) if spec.bias else None
        s_x = float(np.asarray(ie.scale).reshape(-1)[0])
        we2, ratio = fit_accumulator(we, w, bias, s_x, x_range, spec.channel_axis)
        if np.any(ratio > 1):
            encs[spec.name] = we2
            raised[spec.name] = int(np.sum(ratio > 1))
        if spec.bias:
            s = C.bias_scale(ie.scale, encs[spec.name].channel_scale(spec.channel_axis, rank))
            encs[spec.bias] = Encoding(spec.bias, "int32", scale=s, axis=0 if s.ndim else None, role="param")
    if raised and notes is not None:
        notes.append(f"raised the weight scale of {sum(raised.values())} channel(s) in {len(raised)} layer(s) so "
                     "their int32 bias and accumulator cannot overflow (TFLite's rule, |bias_q| <= 2^30): "
                     + ", ".join(f"{k} ({v})" for k, v in list(raised.items())[:5])
                     + (" ..." if len(raised) > 5 else ""))
    return es.with_encodings(encs.values())


def _apply(es: EncodingSet, m: onnx.ModelProto) -> onnx.ModelProto:
    from qlinear.graph import apply

    return apply(es, m)


def _check_loads(qm: onnx.ModelProto, label: str) -> None:
    """The written model must load in ONNX Runtime at its default optimization level (what users run), not only at
    the basic level the report evaluates at."""
    from qlinear.ptq.session import Session

    try:
        Session(qm, level="all", label=f"the quantized {label}")
    except GraphError as e:
        raise GraphError(f"{e}; the Q/DQ model is valid ONNX but this ONNX Runtime build cannot run it: choose "
                         "another activation/weight type for this target") from None


__all__ = ["QuantizeConfig", "QuantizedModel", "load_checked", "quantize"]
