"""From calibrated statistics to encodings: the configuration in effect per tensor (:class:`TensorConfigs`), weight
encodings, the int32 biases, and the Q/DQ model (:func:`apply_encodings`). Shared by the pipeline
(:mod:`qlinear.ptq.pipeline`) and precision repair (:mod:`qlinear.ptq.algorithms.repair`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from qlinear import calibration as C
from qlinear.core.granularity import LPBQ, PerAxis, PerBlock, PerTensor
from qlinear.core.types import int_type, qtype
from qlinear.encodings import Encoding, EncodingSet
from qlinear.graph import apply
from qlinear.graph.model import Initializers
from qlinear.graph.plan import Plan, WeightSpec, resolve_inherit
from qlinear.ptq.config import ACTIVATION_TYPES, DATA_WEIGHT_METHODS, METHODS, WEIGHT_TYPES, QuantizeConfig
from qlinear.ptq.overrides import apply_to_plan
from qlinear.ptq.settle import per_channel_instead


class TensorConfigs:
    """The configuration in effect for each tensor: the run's, changed by the matching ``overrides`` rules
    (:mod:`qlinear.ptq.overrides`); tensors the rules leave in float are taken out of ``plan``."""

    def __init__(self, cfg: QuantizeConfig, m: onnx.ModelProto, plan: Plan,
                 implicit_methods: dict[str, str] | None = None, notes: list[str] | None = None) -> None:
        self.cfg = cfg
        self.resolved = apply_to_plan(cfg.overrides, m, plan, weight_types=WEIGHT_TYPES,
                                      activation_types=ACTIVATION_TYPES, weight_methods=METHODS + DATA_WEIGHT_METHODS,
                                      activation_methods=METHODS, notes=notes)
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
                q = qtype(t, arg="overrides type")
                if c.target == "qnn" and q.is_int and q.signed:  # AIMET's HTP configs: unsigned activations
                    t = int_type(q.bits, False).name
                c = c.replace(activation_type=t, activation_method=r.method or c.activation_method)
            self._cache[key] = c
        return self._cache[key]


#: targets whose Conv weight blocks span the whole kernel, AIMET's layout (:func:`kernel_wide_blocks`)
KERNEL_BLOCK_TARGETS = ("qnn",)


def weight_encoding(name: str, w: np.ndarray, spec: WeightSpec, cfg: QuantizeConfig) -> Encoding:
    kw: dict[str, Any] = {}
    g = cfg.weight_granularity
    if per_channel_instead(cfg, spec.op, spec.op == "MatMul" and bool(spec.bias)):  # QLinearConv takes no blocks
        g = PerAxis(None)
    if isinstance(g, PerBlock) and cfg.target in KERNEL_BLOCK_TARGETS and spec.op == "Conv" and w.ndim > 2 \
            and spec.block_axis == 1 and spec.channel_axis == 0 and int(np.prod(w.shape[2:])) > 1:
        return kernel_wide_blocks(name, w, g, cfg)
    if isinstance(g, PerBlock) and spec.block_axis is not None:
        # a block longer than the axis is one block: store its real length
        kw.update(block_size=min(g.block_size, int(w.shape[spec.block_axis])), block_axis=spec.block_axis)
        if isinstance(g, LPBQ):  # spec §1.2: integer block scales under a per-channel float scale
            kw["lpbq_scale_bits"] = g.scale_bits
    elif isinstance(g, (PerAxis, PerBlock)):  # per-channel, or blocks on a weight without a block axis
        kw["axis"] = spec.channel_axis
    method = "minmax" if cfg.w_method in DATA_WEIGHT_METHODS else cfg.w_method
    return C.calibrate(w, cfg.weight_type, method=method, policy=cfg.policy, symmetric=cfg.weight_symmetric,
                       name=name, role="param", percentile=cfg.percentile, **kw)


def kernel_wide_blocks(name: str, w: np.ndarray, g: PerBlock, cfg: QuantizeConfig) -> Encoding:
    """The blocked encoding of Conv weight ``w`` [O, I, kh, kw] with each block spanning ``block_size`` input
    channels over the whole kernel, as AIMET blocks Conv weights (its scales ``(O, I/B, 1, 1)``; ONNX's blocked
    DequantizeLinear takes them repeated over the kernel, :func:`qlinear.graph.apply`): QNN takes AIMET's layout, and
    AIMET 2.42 refuses per-position blocks (its sim for per-block, both its readers for LPBQ). In [O, I*kh*kw] such a
    block is ``block_size * kh * kw`` consecutive values: calibrated there, then given the 4-D shape."""
    o, i, k = w.shape[0], w.shape[1], int(np.prod(w.shape[2:]))
    b = min(g.block_size, i)
    kw: dict[str, Any] = {"lpbq_scale_bits": g.scale_bits} if isinstance(g, LPBQ) else {}
    method = "minmax" if cfg.w_method in DATA_WEIGHT_METHODS else cfg.w_method
    e = C.calibrate(w.reshape(o, i * k), cfg.weight_type, method=method, policy=cfg.policy,
                    symmetric=cfg.weight_symmetric, name=name, role="param", percentile=cfg.percentile,
                    block_size=b * k, block_axis=1, **kw)
    grid = (o, -1) + (1,) * (w.ndim - 2)
    shaped = {f: getattr(e, f).reshape(grid) for f in ("scale", "zero_point", "int_scale") if getattr(e, f) is not None}
    return e.replace(block_size=b, **shaped)


def build_encodings(m: onnx.ModelProto, plan: Plan, obs: dict, tcfg: TensorConfigs) -> list[Encoding]:
    """Activation and weight encodings (the int32 biases come later, :func:`int32_biases`, once the target's rules
    have set the activation encodings). Data-driven weight methods start from min-max ranges."""
    g = Initializers(m)  # the weights only: no index of the nodes
    out: dict[str, Encoding] = {}
    # activations: tied groups share merged statistics; a member that takes another tensor's parameters (a
    # Reshape's output) keeps them, and widens the group's range by its source's (before, a Concat of reshaped
    # parts took its first part's range and clipped the others: silero-vad's state at 1 dB)
    for group in plan.tied:
        members = [t for t in group if t in obs]
        if not members:
            continue
        base = obs[members[0]]
        for t in members[1:]:
            base.merge(obs[t])
        for t in members[1:]:
            obs[t] = base
        for src in dict.fromkeys(resolve_inherit(plan, t) for t in group if t not in obs):
            if src in obs and obs[src] is not base:
                base.merge(obs[src])
    for t in plan.activations:
        c = tcfg.activation(t)
        out[t] = obs[t].compute(c.activation_type, symmetric=c.activation_symmetric, policy=c.policy, name=t)
    if tcfg.cfg.target in TABLE_TARGETS:
        out.update(table_encodings(m, tcfg.cfg))
    for t, src in plan.inherit.items():
        s = resolve_inherit(plan, src)
        if s in out:
            out[t] = out[s].replace(name=t)
    weights: dict[str, Encoding] = {}
    for spec in plan.weights:
        weights[spec.name] = weight_encoding(spec.name, g.array(spec.name), spec, tcfg.weight(spec.name))
    return list(weights.values()) + list(out.values())


#: targets whose embedding tables are stored quantized (:func:`table_encodings`): ONNX Runtime gathers the integers;
#: AIMET's HTP configs quantize a table a Gather reads per tensor as an input (its output keeps that grid)
TABLE_TARGETS = ("ort", "qnn")


def lookup_tables(m: onnx.ModelProto, cfg: QuantizeConfig) -> dict[str, list[onnx.NodeProto]]:
    """The embedding tables of ``m``: float initializers of two or more dimensions that only ``Gather`` nodes read,
    as their data (input 0), by integer indices, each with those nodes (none excluded by ``exclude_nodes`` /
    ``exclude_op_types``)."""
    inits = {t.name: t for t in m.graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            if x in inits:
                readers.setdefault(x, []).append(n if (n.op_type == "Gather" and i == 0) else None)
    out = {}
    for name, rs in readers.items():
        t = inits[name]
        if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 2 and all(r is not None for r in rs) and \
                not any((r.name or "") in cfg.exclude_nodes or "Gather" in cfg.exclude_op_types for r in rs) and \
                all(r.input[1] not in inits or inits[r.input[1]].data_type != t.data_type for r in rs):
            out[name] = rs
    return out


def table_encodings(m: onnx.ModelProto, cfg: QuantizeConfig) -> dict[str, Encoding]:
    """Targets ort and qnn: each embedding table (:func:`lookup_tables`) quantized per-tensor with the activation
    type over its whole range (every row, seen in calibration or not), and the output of every ``Gather`` reading it
    given the same parameters. ONNX Runtime runs ``DequantizeLinear -> Gather -> QuantizeLinear`` of equal
    parameters as one Gather of the integers, and the gathered values are already on that grid, so the output's
    quantizer adds no error: the table is stored in 8 bits (LAC's 58,224 x 128 table: 29.8 MB as float), as ONNX
    Runtime's ``quantize_static`` stores it. AIMET's HTP configs (aimet-onnx 2.42) quantize the table the same way,
    an input quantizer at the activation bit width, for QNN, which runs the lookup on the integers."""
    from onnx import numpy_helper

    inits = {t.name: t for t in m.graph.initializer}
    out: dict[str, Encoding] = {}
    for name, readers in lookup_tables(m, cfg).items():
        o = C.make_observer("minmax")
        o.update(numpy_helper.to_array(inits[name]).astype(np.float32))
        e = o.compute(cfg.activation_type, symmetric=cfg.activation_symmetric, policy=cfg.policy, name=name)
        out[name] = e.replace(role="param")
        for r in readers:
            out[r.output[0]] = e.replace(name=r.output[0])
    return out


def int32_biases(es: EncodingSet, m: onnx.ModelProto, plan: Plan, notes: list[str] | None = None) -> EncodingSet:
    """Weight scales raised where an int32 bias or accumulator could overflow (:mod:`qlinear.calibration.bias`),
    then the int32 bias encodings at ``input_scale * weight_scale`` (per output channel)."""
    from qlinear.calibration.bias import fit_accumulator

    g = Initializers(m)  # the weights only: no index of the nodes
    encs = {e.name: e for e in es}
    raised: dict[str, int] = {}
    for spec in plan.weights:
        we = encs.get(spec.name)
        ie = encs.get(spec.input) or encs.get(resolve_inherit(plan, spec.input))
        if we is None or ie is None or not we.qtype.is_int or not ie.qtype.is_int or not isinstance(ie.grain, PerTensor):
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
            we = encs[spec.name]  # a per-tensor weight has a per-tensor bias (TFLite/XNNPACK require it)
            ws = we.scale if isinstance(we.grain, PerTensor) else we.channel_scale(spec.channel_axis, rank)
            s = C.bias_scale(ie.scale, ws)
            encs[spec.bias] = Encoding(spec.bias, "int32", scale=s, axis=0 if s.ndim else None, role="param")
    if raised and notes is not None:
        notes.append(f"raised the weight scale of {sum(raised.values())} channel(s) in {len(raised)} layer(s) so "
                     "their int32 bias and accumulator cannot overflow (TFLite's rule, |bias_q| <= 2^30): "
                     + ", ".join(f"{k} ({v})" for k, v in list(raised.items())[:5])
                     + (" ..." if len(raised) > 5 else ""))
    return es.with_encodings(encs.values())


def apply_encodings(es: EncodingSet, m: onnx.ModelProto) -> onnx.ModelProto:
    """The Q/DQ model of ``m`` under ``es``."""
    return apply(es, m)


__all__ = ["TensorConfigs", "apply_encodings", "build_encodings", "int32_biases", "weight_encoding"]
