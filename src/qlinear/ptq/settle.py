"""Settle a run's configuration before any data is read: :func:`settle` applies the target's rules
(:mod:`qlinear.ptq.targets`) and the rules per operator to a :class:`~qlinear.ptq.config.QuantizeConfig`.

A default the user did not set is resolved silently (``lpbq`` weights are 4-bit, TFLite activations int8, QNN+LPBQ
activations uint16). A rule that changes an option the user *requested* (``QuantizeConfig.requested``) is either a
:class:`~qlinear.errors.ConfigError` naming the option and what to change, or a note that the CLI prints and the
report repeats. Never silent.

Rules:

* ``lpbq``: 4-bit blocks with 4-bit integer block scales (AIMET's W4 LPBQ): int4 weights, symmetric.
* ``tflite``: int8 activations (or int16 16x8, zero point 0), int8 symmetric per-channel or per-tensor weights
  (``per-block`` becomes per-channel, with a note; ``lpbq`` and other weight types are refused), the ``tflite``
  policy; no float8, no weight-only; static input shapes and operators the ``.tflite`` export writes.
* ``qnn``: unsigned activations, symmetric weights, the ``aimet`` policy; ``lpbq`` defaults to uint16 activations.
* per operator (needs the model; ``placement`` ``auto`` is resolved): ONNX Runtime runs a DequantizeLinear -> Conv
  -> QuantizeLinear group with 8-bit weights and activations as ``QLinearConv``, and a MatMul whose output stays
  float (``matmul`` placement) as ``MatMulIntegerToFloat``; both take per-tensor or per-channel weight scales only:
  such blocked 8-bit weights are quantized per channel (:func:`per_channel_instead`), with a note.
"""

from __future__ import annotations

from typing import Any

from qlinear.core.granularity import LPBQ, PerBlock
from qlinear.core.types import QType, int_type
from qlinear.errors import ConfigError
from qlinear.graph import ops
from qlinear.graph.storage import two_bit_note
from qlinear.ptq import targets
from qlinear.ptq.config import QuantizeConfig

CONV_OPS = ("Conv", "ConvTranspose")
INT4, INT8, UINT8 = int_type(4, True), int_type(8, True), int_type(8, False)


def settle(cfg: QuantizeConfig, model: Any = None) -> tuple[QuantizeConfig, list[str]]:
    """``(cfg_used, notes)``: ``cfg`` with the target's and the operators' rules applied (module docstring).
    ``model`` (a ``ModelProto``, optional) lets the per-operator rules count what they change."""
    if not isinstance(cfg, QuantizeConfig):
        raise ConfigError(f"config: expected a QuantizeConfig, got {type(cfg).__name__}")
    notes: list[str] = []
    _budget(cfg)
    cfg = _lpbq(cfg)
    if cfg.target == "tflite":
        cfg = _tflite(cfg, notes)
    elif cfg.target == "qnn":
        cfg = _qnn(cfg, notes)
    if model is not None and cfg.target == "tflite":
        _tflite_model(model, cfg)
    if model is not None and cfg.target == "qnn":
        cfg = _qnn_transformer(cfg, model, notes)
    if model is not None and cfg.output_kinds:
        outs = [o.name for o in model.graph.output]
        unknown = [k for k in cfg.output_kinds if k not in outs]
        if unknown:
            raise ConfigError(f"output_kinds: {unknown[0]!r} is not a graph output; the model's outputs are "
                              f"{', '.join(map(repr, outs))}")
    if cfg.target == "ort" and not cfg.weight_only and cfg.activation_qtype.is_int \
            and cfg.activation_qtype.bits == 16:
        notes.append(f"activation_type {cfg.activation_type} on target ort: ONNX Runtime's CPU session has no 16-bit "
                     "kernels and runs these layers in float between their Q/DQ pairs (slower than the float model); "
                     "16-bit activations pay off on a runtime that computes them (target qnn: QNN's HTP)")
    if cfg.weight_qtype.bits == 2:
        notes.append(two_bit_note(f"weight_type {cfg.weight_type}", cfg.weight_type))
    if model is not None and not cfg.weight_only:
        cfg = cfg.settled(placement=placement_for(cfg, model))
        ws = _weights(model)
        fused = _bias_fused(cfg, model)
        convs = [w for op, w in ws if per_channel_instead(cfg, op, w in fused)]
        if convs:
            kinds = sorted({op for op, w in ws if per_channel_instead(cfg, op, w in fused)})
            notes.append(f"weights {cfg.weights}: {len(convs)} {'/'.join(kinds)} weight(s) quantized per-channel "
                         f"instead (ONNX Runtime runs 8-bit {'/'.join(kinds)} with 8-bit activations as "
                         "QLinearConv/MatMulInteger, which take no blocked scales)")
    return cfg, notes


def check_excludes(cfg: QuantizeConfig, m: Any, label: str) -> list[str]:
    """``exclude_nodes`` must name nodes of ``m`` (a misspelt name would exclude nothing, silently): a
    :class:`ConfigError` naming the first unknown one and the closest names; so must an ``exclude_op_types`` entry
    that is no ONNX operator type either; a real operator type no node has is a note (a config kept for several
    models)."""
    import difflib

    import onnx

    from qlinear.graph.model import all_nodes

    nodes = list(all_nodes(m.graph))
    names, ops = {n.name for n in nodes}, {n.op_type for n in nodes}
    missing = [x for x in cfg.exclude_nodes if x not in names]
    if missing:
        near = difflib.get_close_matches(missing[0], sorted(x for x in names if x), n=3)
        raise ConfigError(f"exclude_nodes: {label} has no node named {missing[0]!r}"
                          + (f" (close: {', '.join(map(repr, near))})" if near else "")
                          + "; give node names as the model file has them (exclude_op_types takes operator types)")
    absent = [t for t in cfg.exclude_op_types if t not in ops]
    unknown = [t for t in absent if not onnx.defs.has(t)]
    if unknown:   # a misspelt type ("Matmul") would exclude nothing, silently
        near = difflib.get_close_matches(unknown[0], sorted(ops | {s.name for s in onnx.defs.get_all_schemas()}), n=3)
        raise ConfigError(f"exclude_op_types: {unknown[0]!r} is no ONNX operator type and no node of {label} has it"
                          + (f" (close: {', '.join(map(repr, near))})" if near else "")
                          + "; give operator types as ONNX spells them (exclude_nodes takes node names)")
    return [f"exclude_op_types: {label} has no {', '.join(absent)} node"] if absent else []


def _budget(cfg: QuantizeConfig) -> None:
    """``size_budget`` / ``average_bits`` move int8 weights to int4 on targets that run int4 weights."""
    if cfg.size_budget is None and cfg.average_bits is None:
        return
    what = "size_budget" if cfg.size_budget is not None else "average_bits"
    if cfg.weight_only:
        raise ConfigError(f"{what}: mixed int4/int8 precision applies to W8A8-style runs; not available with "
                          "activation_type float (weight-only): set weight_type int4 or int8 instead")
    if cfg.target == "tflite":
        raise ConfigError(f"{what}: int4 weights are not available with target tflite; use target ort or qnn")
    if cfg.weight_type != "int8" or cfg.weights == "lpbq":
        raise ConfigError(f"{what}: picks int4 or int8 per layer from int8 weights; leave weight_type int8 "
                          f"(got {cfg.weight_type}) and weights per-channel, per-tensor or per-block")


def per_channel_instead(cfg: QuantizeConfig, op: str, bias_fused: bool = False) -> bool:
    """Whether a weight of operator ``op`` is quantized per channel although ``cfg`` asks for blocks (module
    docstring: 8-bit blocked weights with 8-bit activations on Conv, and on MatMul/Gemm with ``matmul`` placement,
    where ONNX Runtime fuses them into MatMulIntegerToFloat; so on a MatMul fused with the Add of its bias,
    ``bias_fused``: target qnn, ``qlinear.graph.plan.matmul_bias``, its output stays float too)."""
    if not isinstance(cfg.weight_granularity, PerBlock) or not _eight_bit(cfg.weight_qtype) \
            or not _eight_bit(cfg.activation_qtype):
        return False
    return op in CONV_OPS or (op in ("MatMul", "Gemm") and (cfg.placement == "matmul" or bias_fused))


def placement_for(cfg: QuantizeConfig, m: Any) -> str:
    """``cfg.placement`` with ``auto`` resolved: ``matmul`` for transformer graphs on target ort, else ``all``."""
    if cfg.placement != "auto":
        return cfg.placement
    from qlinear.graph.plan import is_transformer

    return "matmul" if cfg.target == "ort" and is_transformer(m) else "all"


def _asked(cfg: QuantizeConfig, name: str) -> bool:
    return name in cfg.requested


def _eight_bit(t: QType) -> bool:
    return t.is_int and t.bits == 8


def _lpbq(cfg: QuantizeConfig) -> QuantizeConfig:
    if not isinstance(cfg.weight_granularity, LPBQ):
        return cfg
    if cfg.weight_qtype is not INT4:
        if _asked(cfg, "weight_type"):
            raise ConfigError(f"weight_type: {cfg.weight_type} with weights lpbq; LPBQ is 4-bit blocks with 4-bit "
                              "block scales: use weight_type int4 (--weight-type int4), or weights per-block for "
                              f"{cfg.weight_type} blocks")
        cfg = cfg.settled(weight_type=INT4.name)
    return cfg


def _tflite(cfg: QuantizeConfig, notes: list[str]) -> QuantizeConfig:
    if isinstance(cfg.weight_granularity, LPBQ):
        raise ConfigError("weights: lpbq (int4 blocks) is not in the TFLite int8 table (no block quantization); use "
                          "per-channel or per-tensor with target tflite, or target ort/qnn for blocks")
    weights = cfg.weights
    if isinstance(cfg.weight_granularity, PerBlock):  # TFLite has no blocks: per-channel, the finest grid it has
        notes.append("target tflite: weights per-channel (asked per-block; the TFLite int8 table has no block "
                     "quantization)")
        weights = "per-channel"
    if cfg.weight_qtype is not INT8 and _asked(cfg, "weight_type"):
        raise ConfigError(f"weight_type: {cfg.weight_type} is not available with target tflite (int8 weights); "
                          "drop --weight-type or use target ort/qnn")
    if not cfg.weight_symmetric:
        raise ConfigError("weight_symmetric: false is not available with target tflite (symmetric int8 weights, "
                          "zero point 0); drop it or use target ort")
    at = cfg.activation_type
    if not (cfg.activation_qtype.is_int and cfg.activation_qtype.bits in (8, 16)):
        raise ConfigError(f"activation_type: {at} is not available with target tflite (int8, or int16 for 16x8); "
                          "choose int8 or int16")
    wide = cfg.activation_qtype.bits == 16
    new_at = int_type(cfg.activation_qtype.bits, True).name
    if new_at != at and _asked(cfg, "activation_type"):
        notes.append(f"target tflite: activations {new_at} (asked {at}; TFLite's "
                     f"{'16x8' if wide else 'int8'} table is signed)")
    if _asked(cfg, "activation_symmetric") and cfg.activation_symmetric != wide:
        notes.append(f"target tflite: {new_at} activations {'symmetric' if wide else 'asymmetric'} (asked "
                     f"activation_symmetric {str(cfg.activation_symmetric).lower()})")
    if _asked(cfg, "policy") and cfg.policy != "tflite":
        notes.append(f"target tflite: policy tflite (asked {cfg.policy}; the converter's nudged ranges)")
    eq = cfg.do_equalize
    if eq and _asked(cfg, "equalize"):
        notes.append("target tflite: cross-layer equalization only across ReLU (TFLite fuses ReLU6 and has no "
                     "per-channel clip)")
    return cfg.settled(activation_type=new_at, weight_type=INT8.name, activation_symmetric=wide, policy="tflite",
                       weights=weights)


def _if_hint(model: Any) -> str:
    """How to inline the first ``If`` the graph inputs decide ("" when none is)."""
    from qlinear.graph.passes.normalize import if_way_out

    for n in model.graph.node:
        hint = if_way_out(model.graph, n) if n.op_type == "If" else ""
        if hint:
            return f"; If {n.name or n.output[0]!r}: {hint.removeprefix('; ').replace(', quantized', '')}"
    return ""


def _recurrent_refusals(model: Any) -> None:
    """An LSTM/GRU the ``.tflite`` cannot unroll (:func:`qlinear.tflite.recurrent.refusal`), refused before work."""
    from onnx import numpy_helper

    from qlinear.tflite.recurrent import refusal

    nodes = [n for n in model.graph.node if n.op_type in ("LSTM", "GRU")]
    if not nodes:
        return
    read = {x for n in nodes for x in n.input}
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in read}
    for n in nodes:
        why = refusal(n, consts)
        if why:
            raise ConfigError(f"target: tflite unrolls an {n.op_type} as a float island, but node "
                              f"{n.name or n.output[0]} has {why}; use target ort or qnn")


def _conv_ranks(model: Any) -> None:
    """The ``.tflite`` export writes 1-D and 2-D Conv and 2-D ConvTranspose only: a Conv3d (RivaGAN's, over a
    one-frame video [N, C, 1, H, W]) is refused here, before calibration, naming the node and its weight."""
    ranks = {t.name: len(t.dims) for t in model.graph.initializer}
    ranks.update({n.output[0]: len(a.t.dims) for n in model.graph.node if n.op_type == "Constant"
                  for a in n.attribute if a.name == "value"})
    for n in model.graph.node:
        allowed = (3, 4) if n.op_type == "Conv" else (4,) if n.op_type == "ConvTranspose" else ()
        rank = ranks.get(n.input[1]) if allowed and len(n.input) > 1 else None
        if rank is not None and rank not in allowed:
            raise ConfigError(f"target: tflite writes {'1-D and ' if n.op_type == 'Conv' else ''}2-D {n.op_type} "
                              f"only, but node {n.name or n.output[0]} has a {rank - 2}-D kernel (weight "
                              f"{n.input[1]!r} is {rank}-D); use target ort or qnn")


def _tflite_model(model: Any, cfg: QuantizeConfig) -> None:
    """What the ``.tflite`` export needs of the float model: static input shapes (but the batch; ``input_shapes``
    fixes them) and operators it writes: in the integer set (:data:`qlinear.tflite.SUPPORTED`, BatchNormalization
    folds away) or as float islands (``qlinear.graph.ops.TFLITE_ISLANDS``), which ``full_integer`` refuses."""
    from qlinear.tflite import SUPPORTED

    inits = {t.name for t in model.graph.initializer}
    for v in model.graph.input:
        dims = v.type.tensor_type.shape.dim
        if v.name not in inits and any(not d.HasField("dim_value") or d.dim_value <= 0 for d in list(dims)[1:]):
            shown = ",".join(str(d.dim_value) if d.dim_value > 0 else (d.dim_param or "?") for d in dims)
            raise ConfigError(f"target: tflite needs static input shapes, input {v.name!r} has a dynamic dimension "
                              f"after the batch ([{shown}]); fix it with --input-shape {v.name}=D0,D1,... (config "
                              "input_shapes), e.g. the shape of your samples, or use target ort")
    integer = set(SUPPORTED) | {"BatchNormalization"}
    bad = sorted({n.op_type for n in model.graph.node} - integer - set(ops.TFLITE_ISLANDS))
    if bad:
        shapes = sorted(set(bad) & set(ops.SHAPE_COMPUTATIONS))   # they fold once the shapes are fixed
        floats = sorted(set(ops.TFLITE_ISLANDS) - set(SUPPORTED))
        raise ConfigError(f"target: tflite cannot express operator(s) {', '.join(bad)} (integer operators: "
                          f"{', '.join(SUPPORTED)}; in float islands also: {', '.join(floats)})"
                          + (f"; {', '.join(shapes)} of static shapes fold to constants: fix the input shapes with "
                             "--input-shape NAME=D0,D1,..." if shapes else "") + _if_hint(model)
                          + "; or use target ort or qnn")
    _recurrent_refusals(model)
    _conv_ranks(model)
    if cfg.full_integer:
        consts, readers = targets.constants_of(model)
        wide = cfg.activation_qtype.bits == 16  # 16x8: constant operands stay float islands
        for n in model.graph.node:
            const_operand = ops.tflite_writer_of(n.op_type) == "binary" and any(
                i in inits and (wide or targets.island_constant(n, i, consts, readers)) for i in n.input)
            if n.op_type not in integer | set(ops.TFLITE_MOVED) or const_operand:
                what = "has a constant operand" if const_operand else \
                    "is not among the operators qlinear's TFLite export writes in integers"
                raise ConfigError(f"full_integer: node {n.name or n.output[0]} ({n.op_type}) {what} and would "
                                  "run as a float island (DEQUANTIZE -> float -> QUANTIZE); drop --full-integer to "
                                  "allow float islands, or use target ort")
    if cfg.activation_type in ("int16", "uint16") and any(n.op_type == "HardSwish" for n in model.graph.node):
        raise ConfigError("activation_type: 16-bit (16x8) with target tflite, but LiteRT's HARD_SWISH has int8 kernels "
                          "only; use int8 activations for this model")
    if cfg.exclude_nodes or cfg.exclude_op_types:
        raise ConfigError("exclude_nodes / exclude_op_types: a full-integer .tflite has no float layers; drop them "
                          "or use target ort or qnn")


def _qnn(cfg: QuantizeConfig, notes: list[str]) -> QuantizeConfig:
    if not cfg.weight_symmetric:
        raise ConfigError("weight_symmetric: false is not available with target qnn (AIMET's HTP configs use "
                          "symmetric weights); drop it or use target ort")
    at = cfg.activation_qtype
    if at.is_int and at.signed:
        new = int_type(at.bits, False)
        if _asked(cfg, "activation_type"):
            notes.append(f"target qnn: activations {new} (asked {at}; AIMET's HTP configs quantize activations "
                         "unsigned)")
        at = new
    if isinstance(cfg.weight_granularity, LPBQ) and at is UINT8 and not _asked(cfg, "activation_type"):
        at = int_type(16, False)  # AIMET's HTP LPBQ configs: W4A16
    if _asked(cfg, "policy") and cfg.policy != "aimet":
        notes.append(f"target qnn: policy aimet (asked {cfg.policy})")
    return cfg.settled(activation_type=cfg.activation_type if at is cfg.activation_qtype else at.name, policy="aimet")


def _qnn_transformer(cfg: QuantizeConfig, model: Any, notes: list[str]) -> QuantizeConfig:
    """Target qnn, a transformer graph, 8-bit activations not asked for: 16-bit activations (W8A16, as Qualcomm runs
    transformers on the HTP, which computes 16-bit activations natively), with a note; asked for, they stay."""
    from qlinear.graph.plan import is_transformer

    if cfg.weight_only or _asked(cfg, "activation_type") or cfg.activation_qtype is not UINT8 \
            or not is_transformer(model):
        return cfg
    notes.append("target qnn, a transformer graph: activations uint16 (W8A16, as transformers run on QNN's HTP; at "
                 "8 bits the attention and normalization outputs lose most of their signal: MiniLM-L3 agreed with "
                 "float on 0.688 of its nearest neighbours, 1.000 at 16 bits); --activation-type uint8 keeps 8 bits")
    return cfg.settled(activation_type="uint16")


def _bias_fused(cfg: QuantizeConfig, model: Any) -> set[str]:
    """The MatMul weights whose layer takes its bias Add on ``cfg``'s target (``MATMUL_BIAS_TARGETS``): blocked
    8-bit ones with 8-bit activations would reach ONNX Runtime as MatMulIntegerToFloat."""
    from qlinear.graph.plan import MATMUL_BIAS_TARGETS, matmul_bias_weights

    if cfg.target not in MATMUL_BIAS_TARGETS or per_channel_instead(cfg, "MatMul") \
            or not per_channel_instead(cfg, "MatMul", True):
        return set()
    return matmul_bias_weights(model)


def _weights(model: Any) -> list[tuple[str, str]]:
    """``(op_type, weight name)`` of every node whose input 1 is an initializer."""
    inits = {t.name for t in model.graph.initializer}
    return [(n.op_type, n.input[1]) for n in model.graph.node if len(n.input) > 1 and n.input[1] in inits]


__all__ = ["check_excludes", "per_channel_instead", "placement_for", "settle"]
