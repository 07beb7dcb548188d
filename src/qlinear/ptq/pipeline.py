"""``qlinear.quantize(model, data, config) -> QuantizedModel``: post-training quantization of an ONNX model.

1. load (external data too), check the opset (13..25), fold BatchNorm into Conv;
2. optional cross-layer equalization (:mod:`qlinear.ptq.equalize`);
3. plan the quantizers (:mod:`qlinear.graph.plan`);
4. one streaming ONNX Runtime pass over the calibration samples feeds the activation observers (and the input means
   bias correction needs); weights are calibrated directly;
5. bias correction, int32 bias at ``input_scale * weight_scale``, target rules (:mod:`qlinear.ptq.targets`);
6. the Q/DQ model is :func:`qlinear.encodings.apply` of the resulting :class:`~qlinear.encodings.EncodingSet`.
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
from qlinear.errors import DataError, GraphError
from qlinear.graph.fold import fold_batchnorm
from qlinear.graph.model import GraphIndex, load_model, opset
from qlinear.graph.plan import Plan, make_plan, resolve_inherit
from qlinear.ptq import targets
from qlinear.ptq.config import QuantizeConfig
from qlinear.ptq.data import Dataset, ImagePreprocess, load_dataset


@dataclass
class QuantizedModel:
    """Result of :func:`quantize`: the Q/DQ model, its encodings, and what is needed to evaluate it."""

    model: onnx.ModelProto
    float_model: onnx.ModelProto
    reference_model: onnx.ModelProto
    encodings: EncodingSet
    config: QuantizeConfig
    plan: Plan
    dataset: Dataset
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _report: Any = None

    def save_onnx(self, path: str | Path) -> None:
        from qlinear.graph.save import save_model

        save_model(self.model, path)

    def save_encodings(self, path: str | Path, version: str | None = None) -> None:
        from qlinear.encodings import save

        version = version or "2.0.0"
        save(self.encodings, path, version=version, drop_float=True)

    def report(self, *, samples: int | None = None, progress: Callable[[int], None] | None = None):  # noqa: ANN201
        """Accuracy report on the held-out samples (computed once): per-tensor SQNR, sensitivity ranking, output
        agreement; see :mod:`qlinear.ptq.evaluate`."""
        if self._report is None:
            from qlinear.ptq.evaluate import evaluate

            self._report = evaluate(self, samples=samples, progress=progress)
        return self._report


def _model_inputs(m: onnx.ModelProto) -> dict[str, tuple[Any, ...]]:
    inits = {t.name for t in m.graph.initializer}
    out = {}
    for v in m.graph.input:
        if v.name in inits:
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in v.type.tensor_type.shape.dim)
        out[v.name] = dims
    return out


def quantize(model: Any, data: Any, config: QuantizeConfig | dict | None = None, *,
             preprocess: ImagePreprocess | None = None,
             progress: Callable[[str, int, int], Callable[[int], None]] | None = None) -> QuantizedModel:
    """Calibrate ``model`` on ``data`` and return the quantized model.

    Args:
        model: float ONNX model (path or ``ModelProto``), opset 13..25.
        data: see :func:`qlinear.ptq.data.load_dataset` (``.npz``, folders, a dict of arrays, a Dataset).
        config: :class:`QuantizeConfig` or a dict of its fields (unknown keys are errors).
        progress: ``progress(task, total) -> advance(n)`` hook (the CLI draws rich progress bars with it).
    """
    t_all = time.perf_counter()
    cfg = config if isinstance(config, QuantizeConfig) else QuantizeConfig.from_dict(config or {})
    cfg = targets.adjust_config(cfg)
    m = load_model(model)
    ops = opset(m)
    if not 13 <= ops <= 25:
        raise GraphError(f"model opset {ops} is outside the supported range 13..25; convert it with "
                         "onnx.version_converter first")
    float_model = onnx.ModelProto()
    float_model.CopyFrom(m)
    notes: list[str] = []
    n_bn = fold_batchnorm(m)
    if n_bn:
        notes.append(f"folded {n_bn} BatchNormalization nodes into Conv")
    ds = load_dataset(data, _model_inputs(m), preprocess=preprocess)
    n_cal = min(cfg.calibration_samples, len(ds))
    if n_cal == 0:
        raise DataError("no calibration samples")
    if n_cal < cfg.calibration_samples:
        notes.append(f"only {len(ds)} samples: calibrating on {n_cal}")
    timings: dict[str, float] = {}
    if cfg.do_equalize:
        from qlinear.ptq.equalize import equalize

        t0 = time.perf_counter()
        pairs = equalize(m)
        timings["equalize"] = time.perf_counter() - t0
        notes.append(f"cross-layer equalization of {pairs} layer pairs")
    reference = onnx.ModelProto()  # the float model after exact rewrites (BN folding, CLE): SQNR reference
    reference.CopyFrom(m)
    plan = make_plan(m, exclude_nodes=cfg.exclude_nodes, exclude_op_types=cfg.exclude_op_types,
                     quantize_outputs=cfg.quantize_outputs)
    t0 = time.perf_counter()
    tensors = list(plan.activations)
    means_for = [b.input for b in plan.biases] if cfg.bias_correction else []
    adv = progress("calibrating", n_cal) if progress else None
    obs, means = _collect(m, ds, n_cal, tensors, cfg, means_for, adv)
    timings["calibration"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    encs = _encodings(m, plan, obs, means, cfg)
    es = EncodingSet(tuple(encs), producer={"package": "qlinear", "version": _version()}, version="2.0.0")
    es = targets.finalize(es, m, plan, cfg)
    qm = _apply(es, m)
    timings["quantize"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_all
    return QuantizedModel(qm, float_model, reference, es, cfg, plan, ds, timings, notes)


def _version() -> str:
    import qlinear

    return qlinear.__version__


def _collect(m, ds, n_cal, tensors, cfg, means_for, adv):  # noqa: ANN001, ANN202
    from qlinear.ptq.collect import calibrate_activations

    # graph outputs keep their full range (min-max): clipping logits changes the argmax, whatever the method
    outputs = {o.name for o in m.graph.output}
    return calibrate_activations(m, ds, 0, n_cal, tensors, cfg.a_method, batch_size=cfg.batch_size,
                                 means_for=means_for, percentile=cfg.percentile, progress=adv, minmax_for=outputs)


def _weight_encoding(name: str, w: np.ndarray, spec: Any, cfg: QuantizeConfig) -> Encoding:
    kw: dict[str, Any] = {}
    if cfg.weights == "per-channel":
        kw["axis"] = spec.channel_axis
    elif cfg.weights == "per-block":
        if spec.block_axis is None:
            kw["axis"] = spec.channel_axis
        else:
            kw.update(block_size=cfg.block_size, block_axis=spec.block_axis)
    symmetric = cfg.weight_symmetric
    policy = cfg.policy
    return C.calibrate(w, cfg.weight_type, method=cfg.w_method, policy=policy, symmetric=symmetric,
                       name=name, role="param", percentile=cfg.percentile, **kw)


def _encodings(m: onnx.ModelProto, plan: Plan, obs: dict, means: dict, cfg: QuantizeConfig) -> list[Encoding]:
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
        out[t] = obs[t].compute(cfg.activation_type, symmetric=cfg.activation_symmetric, policy=cfg.policy, name=t)
    for t, src in plan.inherit.items():
        s = resolve_inherit(plan, src)
        if s in out:
            out[t] = out[s].replace(name=t)
    weights: dict[str, Encoding] = {}
    for spec in plan.weights:
        w = g.array(spec.name)
        weights[spec.name] = _weight_encoding(spec.name, w, spec, cfg)
    if cfg.bias_correction:
        from qlinear.ptq.bias import correct_biases

        correct_biases(m, plan, weights, means)
        g = GraphIndex.build(m, infer_shapes=False)
    for b in plan.biases:
        we = weights.get(b.weight)
        ie = out.get(b.input) or out.get(resolve_inherit(plan, b.input))
        if we is None or ie is None or not we.qtype.is_int or ie.granularity != "per_tensor":
            continue
        ws = we.scale if we.int_scale is None else we.scale
        if we.granularity in ("per_block", "lpbq"):
            ws = np.asarray(we.effective_scale).max(axis=we.axis).reshape(-1)
        s = C.bias_scale(ie.scale, ws.reshape(-1) if ws.ndim else ws)
        out[b.name] = Encoding(b.name, "int32", scale=s, axis=0 if s.ndim else None, role="param")
    return list(weights.values()) + list(out.values())


def _apply(es: EncodingSet, m: onnx.ModelProto) -> onnx.ModelProto:
    from qlinear.encodings import apply

    return apply(es, m)


__all__ = ["QuantizeConfig", "QuantizedModel", "quantize"]
