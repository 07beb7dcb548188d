"""Target profiles.

* ``ort`` — Q/DQ for ONNX Runtime: the configuration as given (uint8 activations, int8 weights by default).
* ``qnn`` — what AIMET's HTP configs produce for Qualcomm QNN: unsigned activations (``force_activation_as``),
  symmetric signed weights, int32 bias, AIMET rules; the encodings are written as 2.0.0. With ``lpbq`` weights the
  activations default to uint16 (AIMET's W4A16 LPBQ configuration).
* ``tflite`` — the TFLite int8 operator table (spec ``tflite-int8-spec.md``): int8 activations with the
  converter's nudged zero point, int8 symmetric weights in [-127, 127] (per-channel, zero point 0), int32 bias at
  ``s_in*s_w``, fixed output parameters (Softmax/Logistic ``1/256, -128``, Tanh ``1/128, 0``), same-scale operators
  (pooling, Concat, Reshape… take their input's parameters). :func:`check_tflite` reports every violation of a
  Q/DQ model or encodings file against that table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from qlinear.core.granularity import PerBlock, PerTensor
from qlinear.encodings import Encoding, EncodingSet
from qlinear.graph import ops
from qlinear.graph.model import GraphIndex, load_model
from qlinear.ptq.config import QuantizeConfig

#: the int8 fixed output parameters (scale, zero point) by op type (operator registry, qlinear.graph.ops)
FIXED_TFLITE = ops.FIXED_TFLITE
#: the 16-bit (16x8) fixed output parameters (``GetFixedOutputRange`` with bit width 16)
FIXED_TFLITE16 = ops.FIXED_TFLITE16
SAME_SCALE_TFLITE = ops.SAME_SCALE_TFLITE


def finalize(es: EncodingSet, m: onnx.ModelProto, plan: Any, cfg: QuantizeConfig,
             notes: list[str] | None = None) -> EncodingSet:
    """Target tflite: the fixed output parameters, the same-scale rule and the constant operands' encodings;
    ``notes`` gets one for each fixed output whose calibrated values the fixed grid cannot resolve
    (:func:`fixed_grid_note`)."""
    if cfg.target != "tflite":
        return es
    encs = {e.name: e for e in es}
    wide = cfg.activation_qtype.bits == 16
    fixed = FIXED_TFLITE16 if wide else FIXED_TFLITE
    for n in m.graph.node:
        if n.op_type in fixed and n.output[0] in encs:
            s, z = fixed[n.op_type]
            note = fixed_grid_note(n, encs[n.output[0]], s, wide)
            if note and notes is not None:
                notes.append(note)
            encs[n.output[0]] = Encoding(n.output[0], cfg.activation_type, scale=s, zero_point=z)
    tied = {g[-1] for g in getattr(plan, "tied", [])}   # a Concat's output: the merged range of its parts
    for n in m.graph.node:  # same-scale operators: output takes the input's parameters
        if n.op_type in SAME_SCALE_TFLITE and n.output[0] in encs and n.input and n.input[0] in encs \
                and n.output[0] not in tied:
            encs[n.output[0]] = encs[n.input[0]].replace(name=n.output[0])
    if not wide:
        encs.update(constant_operands(m, encs))
    return es.with_encodings(encs.values())  # the int32 biases follow (pipeline.int32_biases)


#: fewer steps of its fixed grid than this between a fixed output's calibrated minimum and maximum: a note
FEW_STEPS = 16


def fixed_grid_note(n: onnx.NodeProto, calibrated: Encoding, step: float, wide: bool) -> str | None:
    """A note when the calibrated range of ``n``'s output (``calibrated``: its min-max encoding before TFLite's fixed
    parameters replace it) spans fewer than ``FEW_STEPS`` steps of the fixed grid (``step``): TFLite's rule, not a
    calibration choice, rounds those values together (openwakeword's hey-mycroft: a Sigmoid whose calibration
    outputs stay below 1e-3 came out 0 on every sample at 1/256)."""
    sc, zp = np.asarray(calibrated.scale).reshape(-1), np.asarray(calibrated.zero_point_or_zeros).reshape(-1)
    if sc.size != 1 or not calibrated.qtype.is_int:
        return None
    lo = (calibrated.qtype.qmin - float(zp[0])) * float(sc[0])
    hi = (calibrated.qtype.qmax - float(zp[0])) * float(sc[0])
    steps = (hi - lo) / step
    if steps >= FEW_STEPS:
        return None
    fix = "target ort (a calibrated output grid)" if wide else \
        "--activation-type int16 (16x8: a fixed grid of 1/32768) or target ort (a calibrated output grid)"
    return (f"target tflite: {n.op_type} {n.name or n.output[0]!r} takes TFLite's fixed output grid (step {step:g}), "
            f"but its calibration outputs span [{lo:.3g}, {hi:.3g}], {steps:.3g} step(s) of it: they round to "
            f"{max(1, round(steps) + 1)} value(s) at most (TFLite's integer rule, not a calibration choice); {fix} "
            "keep them apart")


def constant_operands(m: onnx.ModelProto, encs: dict[str, Encoding]) -> dict[str, Encoding]:
    """Int8 encodings for the float constant operands of the quantized elementwise operators (Add, Sub, Mul: the
    registry's ``constant_operand`` role), as the TFLite converter quantizes them: symmetric per-tensor,
    ``scale = max|c| / 127``, zero point 0 (``QuantizeWeight`` on a per-layer input). Without one the operator
    would run as a float island (:func:`island_constant` says which constants stay float)."""
    inits, readers = constants_of(m)
    out: dict[str, Encoding] = {}
    for n in m.graph.node:
        if n.op_type not in ops.CONSTANT_OPERAND_OPS or not n.output or n.output[0] not in encs:
            continue
        others = [x for x in n.input if x and x not in inits]
        if len(others) != 1 or others[0] not in encs:
            continue
        for c in n.input:
            if c in inits and c not in encs and not island_constant(n, c, inits, readers):
                peak = float(np.max(np.abs(onnx.numpy_helper.to_array(inits[c]))))
                out[c] = Encoding(c, "int8", scale=np.float64(np.float32(peak / 127.0)), zero_point=0, role="param")
    return out


def constants_of(m: onnx.ModelProto) -> tuple[dict[str, onnx.TensorProto], dict[str, list[onnx.NodeProto]]]:
    """The initializers of ``m`` by name, and the nodes reading each tensor."""
    inits = {t.name: t for t in m.graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in m.graph.node:
        for x in set(n.input):
            readers.setdefault(x, []).append(n)
    return inits, readers


def island_constant(n: onnx.NodeProto, c: str, inits: dict[str, onnx.TensorProto],
                    readers: dict[str, list[onnx.NodeProto]]) -> bool:
    """The constant operand ``c`` of ``n`` keeps ``n`` a float island in the TFLite export: a reader of ``c`` is not
    an Add/Sub/Mul with one data input, or ``c`` is not float, or is all zeros."""
    t = inits[c]
    if t.data_type != onnx.TensorProto.FLOAT or any(
            r.op_type not in ops.CONSTANT_OPERAND_OPS or sum(x not in inits for x in r.input if x) != 1
            for r in readers.get(c, [n])):
        return True
    v = onnx.numpy_helper.to_array(t)
    return v.size == 0 or not np.all(np.isfinite(v)) or not np.any(v)


@dataclass
class Violation:
    tensor: str
    rule: str

    def __str__(self) -> str:
        return f"{self.tensor}: {self.rule}"


def check_tflite(model: Any, encodings: EncodingSet | None = None) -> list[Violation]:
    """Every violation of the TFLite int8 table by a Q/DQ model (or by ``encodings`` placed on ``model``)."""
    from qlinear.graph import extract

    m = load_model(model)
    es = encodings if encodings is not None else extract(m)
    g = GraphIndex.build(m, infer_shapes=False)
    out: list[Violation] = []
    enc = {e.name: e for e in es}
    # names in a Q/DQ model: map DQ outputs back to the float tensor names
    for e in es:
        t = e.qtype
        if e.role == "param" and t.name not in ("int8", "int32"):
            out.append(Violation(e.name, f"weights must be int8 (bias int32), got {t.name}"))
        if e.role == "param" and t.name == "int8":
            if np.any(e.zero_point_or_zeros != 0):
                out.append(Violation(e.name, "weights must be symmetric (zero point 0)"))
        if e.role == "activation" and t.name not in ("int8", "int16"):
            out.append(Violation(e.name, f"activations must be int8 (or int16), got {t.name}"))
        if e.role == "activation" and not isinstance(e.grain, PerTensor):
            out.append(Violation(e.name, "activations must be per-tensor"))
        if e.role == "activation" and t.name == "int16" and np.any(e.zero_point_or_zeros != 0):
            out.append(Violation(e.name, "int16 activations must have zero point 0"))
        if isinstance(e.grain, PerBlock):  # LPBQ too
            out.append(Violation(e.name, "block quantization is not in the TFLite int8 table"))
    for n in m.graph.node:
        o = n.output[0] if n.output else ""
        src = _float_name(g, o)
        if n.op_type in FIXED_TFLITE:
            e = enc.get(src)
            s, z = (FIXED_TFLITE16 if e is not None and e.dtype == "int16" else FIXED_TFLITE).get(
                n.op_type, FIXED_TFLITE[n.op_type])
            if e is not None and (not np.isclose(float(np.asarray(e.scale).reshape(-1)[0]), s, rtol=1e-6)
                                  or int(np.asarray(e.zero_point_or_zeros).reshape(-1)[0]) != z):
                out.append(Violation(src, f"{n.op_type} output must be scale {s}, zero point {z}"))
        if n.op_type in SAME_SCALE_TFLITE and n.input and not _parts_differ(n, g, enc):
            a, b = enc.get(_float_name(g, n.input[0])), enc.get(src)
            if a is not None and b is not None and (not np.array_equal(a.scale, b.scale)
                                                    or not np.array_equal(a.zero_point_or_zeros,
                                                                          b.zero_point_or_zeros)):
                out.append(Violation(src, f"{n.op_type} output must have its input's scale and zero point"))
        if n.op_type in ("Conv", "Gemm", "MatMul") and len(n.input) > 2 and n.input[2]:
            bn = _float_name(g, n.input[2])
            be, we, ie = enc.get(bn), enc.get(_float_name(g, n.input[1])), enc.get(_float_name(g, n.input[0]))
            if be is not None and we is not None and ie is not None:
                want = np.asarray(ie.scale, np.float64) * np.asarray(we.scale, np.float64)
                if not np.allclose(np.asarray(be.scale).reshape(-1), np.broadcast_to(want, np.shape(be.scale)).reshape(-1),
                                   rtol=1e-6):
                    out.append(Violation(bn, "bias scale must be input_scale * weight_scale"))
    return out


def _parts_differ(n: onnx.NodeProto, g: GraphIndex, enc: dict[str, Encoding]) -> bool:
    """A Concat whose inputs have different parameters: the .tflite runs it as a float island into its output's
    (the merged range of its parts), not as an integer CONCATENATION."""
    if n.op_type != "Concat":
        return False
    es = [enc.get(_float_name(g, x)) for x in n.input if x]
    es = [e for e in es if e is not None]
    return any(not np.array_equal(e.scale, es[0].scale) or not np.array_equal(e.zero_point_or_zeros,
                                                                              es[0].zero_point_or_zeros)
               for e in es[1:])


def _float_name(g: GraphIndex, name: str) -> str:
    """The float tensor a Q/DQ output stands for (``T_dequantized`` -> ``T``)."""
    p = g.producer.get(name)
    if p is not None and p.op_type == "DequantizeLinear":
        x = p.input[0]
        q = g.producer.get(x)
        if q is not None and q.op_type == "QuantizeLinear":
            return q.input[0]
        return name
    return name
