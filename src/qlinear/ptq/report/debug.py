"""``qlinear debug``: where does a quantized model go wrong? Two comparisons, tensor by tensor, in graph order.

**Float against quantized** (:func:`compare_models`): a float model ``FLOAT`` and a Q/DQ model ``QUANT`` made from it
(by qlinear or another tool, e.g. ONNX Runtime's ``quantize_static``) run side by side on the same samples (ONNX
Runtime, every matched tensor fetched as an extra output, a batch at a time). A float tensor ``T`` of ``FLOAT``
corresponds in ``QUANT`` to the output of the same node (matched by node name and output index, else by tensor name)
and, when that output is quantized, to the ``DequantizeLinear`` after its ``QuantizeLinear`` (the value its
consumers see); a weight ``W`` to the ``DequantizeLinear`` output the matched node reads in its place. For each
tensor: ``sqnr_db = 10 log10(sum T^2 / sum (T - T')^2)`` over all samples (``T'`` its value in ``QUANT``: the error
carried from every earlier layer plus its own), ``local_db`` the SQNR of its own quantization alone (the
dequantized value against ``QUANT``'s value before its ``QuantizeLinear``), and ``drop_db``, how much worse it is
than its inputs (the lowest SQNR of the nearest matched activations and the weights the node reads, capped at the
SQNR a min-max grid of the tensor's bit width would give its values, :meth:`_Acc.grid_db`, or :func:`ideal_db` when
it is not quantized; a graph input's drop is against that cap alone, a weight's against the median SQNR of the
model's weights of its bit width; an int32 bias has none), and ``excess_db``, its own quantization noise against the noise a min-max grid of its bit width
would add to the same values (about 0 dB or less for any calibration). The **first jump** is the first tensor in
graph order whose drop passes ``jump_db`` (15 dB) or whose excess passes ``excess_db`` (12 dB): a tensor whose quantization parameters are wrong shows there (a
scale ten times too large: ~20 dB of excess, and a drop of 15-25 dB where the error carried in is still small; deep
in a network, where the carried error dominates, the excess still shows it).

**Integer kernels against a runtime** (:func:`compare_runtime`): the integers :func:`qlinear.kernels.run_integer`
computes for every quantized tensor against the ones a runtime computes (a ``.tflite`` by LiteRT's interpreter with
``experimental_preserve_all_tensors``, reference kernels; ``litert_xnnpack``: its default resolver, whose XNNPACK
delegate keeps its tensors, so only the outputs are compared; or ``ort_fused``: ONNX Runtime's default session of the
Q/DQ model, whose fused kernels keep their internal tensors, so only the outputs are compared), the first tensor that
differs bit for bit, its operator, the largest difference in integer steps and, when another formula of the kernel
registry (:data:`qlinear.kernels.PROFILES`) reproduces the runtime there, what that formula changes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from qlinear.errors import ConfigError, DataError, QlinearError
from qlinear.graph import ops
from qlinear.graph.integer_clamps import float_clamps, has_integer_clamps
from qlinear.graph.model import load_model, tensor_outputs
from qlinear.graph.ops import CONSTANT_CLAMPS
from qlinear.graph.qdq import ACTIVATIONS, QdqGraph, clip_bounds
from qlinear.graph.satisfied_clamps import grid_ends
from qlinear.kernels.profiles import PROFILES
from qlinear.kernels.run import IntegerModel
from qlinear.kernels.steps import Env
from qlinear.ptq.data import load_dataset, model_inputs
from qlinear.ptq.stats.session import Session

JUMP_DB = 15.0       #: default drop (dB) against the inputs that marks a jump
EXCESS_DB = 12.0     #: default excess (dB) over a min-max grid that marks a jump (a scale 10x too large: ~20 dB)
_CONST = ("weight", "bias")


@dataclass
class TensorDiff:
    """One matched tensor of :func:`compare_models`."""

    tensor: str              # its name in the float model
    role: str                # "activation", "weight", "bias" (an int32 one) or "input"
    node: str                # the node that computes (activation) or reads (weight) it
    op: str
    quant_tensor: str        # the tensor of the quantized model it is compared with
    quantized: bool          # whether a QuantizeLinear/DequantizeLinear stands between
    sqnr_db: float
    local_db: float | None = None
    drop_db: float | None = None
    excess_db: float | None = None   # own quantization noise against a min-max grid of its bits (:meth:`_Acc.excess_db`)
    jump: bool = False


@dataclass
class ModelDiff:
    """The result of :func:`compare_models`: tensors in graph order, the first jump (or None)."""

    samples: int
    jump_db: float
    excess_db: float
    tensors: list[TensorDiff] = field(default_factory=list)
    first_jump: str | None = None
    unmatched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # how FLOAT was rewritten to match QUANT (:func:`as_rewritten`)

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "jump_db": self.jump_db, "excess_db": self.excess_db,
                "first_jump": self.first_jump,
                "tensors": [asdict(t) for t in self.tensors], "unmatched": self.unmatched, "notes": self.notes}


def ideal_db(bits: int) -> float:
    """The SQNR of a full-scale sine on a uniform ``bits``-bit grid, ``6.02 bits + 1.76`` dB: the reference a tensor
    whose inputs are exact is measured against (a well-calibrated 8-bit tensor loses a few dB to it; a float type,
    ``bits`` 0, counts as 8 bits)."""
    return 6.02 * (bits or 8) + 1.76


def sqnr_db(sig: float, noise: float) -> float:
    if noise <= 0:
        return math.inf
    if sig <= 0:
        return -math.inf
    return float(10 * np.log10(sig / noise))


@dataclass
class _Match:
    tensor: str
    role: str
    node: str
    op: str
    post: str                 # the quantized model's tensor consumers see
    pre: str | None = None    # its value before the QuantizeLinear (None: none, or a constant)
    bits: int = 8             # bit width of its quantization (8 when not quantized)
    quantized: bool = False   # whether a QuantizeLinear/DequantizeLinear stands between
    fused: bool = False       # the quantizer's input is computed by another operator (a Relu/Clip fused away)
    clip: tuple[float, float] | None = None  # then: the fused clamp, applied to ``pre`` to compare like with like
    saturate: tuple[Any, Any] | None = None  # the grid's ends where the clamps after it hide its saturation


def _producers(m: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in m.graph.node for o in n.output if o}


def _consumers(m: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    out: dict[str, list[onnx.NodeProto]] = {}
    for n in m.graph.node:
        for i in n.input:
            if i:
                out.setdefault(i, []).append(n)
    return out


def _dequantized(t: str, cons: dict[str, list[onnx.NodeProto]], types: dict[str, int]) -> tuple[str | None, int]:
    """The output of ``DequantizeLinear(QuantizeLinear(t))`` in the quantized model, if ``t`` is quantized, and the
    bit width of that quantization (8 when not quantized)."""
    for q in cons.get(t, []):
        if q.op_type == "QuantizeLinear" and q.input[0] == t:
            for dq in cons.get(q.output[0], []):
                if dq.op_type == "DequantizeLinear":
                    return dq.output[0], _bits(q, types)
    return None, 8


def _bits(q: onnx.NodeProto, types: dict[str, int]) -> int:
    """The bit width of a QuantizeLinear's (or DequantizeLinear's) integer type (its zero point's type, else
    ``output_dtype``, else uint8), 0 for a float type (float8, float4)."""
    et = types.get(q.input[2], 0) if len(q.input) > 2 and q.input[2] else 0
    if not et:
        et = next((a.i for a in q.attribute if a.name == "output_dtype"), 0)
    if not et:
        return 8
    ints = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4, onnx.TensorProto.INT8: 8, onnx.TensorProto.UINT8: 8,
            onnx.TensorProto.INT16: 16, onnx.TensorProto.UINT16: 16, onnx.TensorProto.INT32: 32}
    return ints.get(et, {22: 2, 23: 2}.get(et, 0))  # 22/23: int2/uint2 (opset 25)


def match_tensors(fm: onnx.ModelProto, qm: onnx.ModelProto) -> tuple[list[_Match], list[str]]:
    """The float model's tensors (graph inputs, node outputs, weights) matched to the quantized model's, in graph
    order (module docstring); and the float node outputs that have no counterpart."""
    qnodes = {n.name: n for n in qm.graph.node if n.name}
    qprod, qcons = _producers(qm), _consumers(qm)
    qnames = set(qprod) | {v.name for v in qm.graph.input}
    types = {t.name: t.data_type for t in qm.graph.initializer}
    finits = {t.name for t in fm.graph.initializer}
    ftensors = {o for n in fm.graph.node for o in n.output}
    fconsts = {t.name: onnx.numpy_helper.to_array(t) for t in fm.graph.initializer if t.name in
               {i for n in fm.graph.node if n.op_type in ACTIVATIONS for i in n.input[1:]}}
    fconsts.update({n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in fm.graph.node
                    if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    out: list[_Match] = []
    seen: set[str] = set()
    for v in fm.graph.input:
        if v.name in finits or v.name not in qnames:
            continue
        dq, bits = _dequantized(v.name, qcons, types)
        out.append(_Match(v.name, "input", "", "", dq or v.name, v.name if dq else None, bits, bool(dq)))
        seen.add(v.name)
    unmatched = []
    for n in fm.graph.node:
        qn = qnodes.get(n.name) if n.name else None
        if qn is not None and qn.op_type != n.op_type:
            qn = None
        for k, t in enumerate(n.input):
            if t in finits and t not in seen and qn is not None and k < len(qn.input):
                u = qn.input[k]
                p = qprod.get(u)
                if p is not None and p.op_type == "DequantizeLinear":
                    role = "bias" if types.get(p.input[0]) == onnx.TensorProto.INT32 else "weight"
                    out.append(_Match(t, role, n.name, n.op_type, u, None, _bits(p, types), True))
                    seen.add(t)
        for k, t in enumerate(n.output):
            if not t or t in seen:
                continue
            mt = _activation(t, n.op_type, qn.output[k] if qn is not None and k < len(qn.output) else None,
                             ftensors, qnames, qprod, qcons, types)
            if mt is None:
                unmatched.append(t)
                continue
            mt.node, mt.op = n.name or t, n.op_type
            if mt.fused:  # the value before quantization lacks the fused clamp: apply it, or do without
                mt.clip = clip_bounds(n, fconsts) if n.op_type in ACTIVATIONS else None
                mt.pre = mt.pre if mt.clip is not None else None
            out.append(mt)
            seen.add(t)
    return out, unmatched


def _hidden_saturation(fm: onnx.ModelProto, qm: onnx.ModelProto, matches: list[_Match]) -> None:
    """Set ``saturate`` on the quantized activations that only ``Max``/``Min`` against constants read in ``fm``,
    element by element (a bound per channel) where those bounds lie within the activation's grid: a ``Max`` at or
    above the grid's bottom hides its saturation there (a ReLU6 of cross-layer equalization: the layer takes the
    clamp's grid, which starts at 0), a ``Min`` at or below its top hides the top's. The float value is then
    compared cut where the grid cuts it; otherwise the values the clamps remove anyway counted as that tensor's error
    (EfficientNet-Lite0 per-tensor: a "first jump" at the first Conv, 4.7 dB)."""
    finits = {t.name: t for t in fm.graph.initializer}
    readers = _consumers(fm)
    qinits = {t.name: t for t in qm.graph.initializer}
    qprod = _producers(qm)
    for mt in matches:
        ends = grid_ends(qprod.get(mt.post), qinits) if mt.role == "activation" and mt.quantized else None
        if ends is None:
            continue
        lo, hi = np.float32(-np.inf), np.float32(np.inf)   # per element (a bound per channel) where hidden
        for op, c in _clamps_after(mt.tensor, readers, finits):
            if op == "Max":
                lo = np.maximum(lo, np.where(c >= ends[0], np.float32(ends[0]), -np.inf).astype(np.float32))
            else:
                hi = np.minimum(hi, np.where(c <= ends[1], np.float32(ends[1]), np.inf).astype(np.float32))
        if np.any(np.isfinite(lo)) or np.any(np.isfinite(hi)):
            mt.saturate = (lo, hi)


def _clamps_after(t: str, readers: dict[str, list[onnx.NodeProto]],
                  finits: dict[str, onnx.TensorProto]) -> list[tuple[str, np.ndarray]]:
    """The chain of ``Max``/``Min`` against a constant that alone reads ``t`` (each the only reader of the one
    before): ``(operator, constant)`` in order."""
    out: list[tuple[str, np.ndarray]] = []
    while len(readers.get(t, [])) == 1:
        n = readers[t][0]
        c = [onnx.numpy_helper.to_array(finits[x]) for x in n.input if x in finits and x != t]
        if n.op_type not in CONSTANT_CLAMPS or len(n.input) != 2 or len(c) != 1 or not c[0].size:
            break
        out.append((n.op_type, c[0]))
        t = n.output[0]
    return out


def _activation(t: str, op: str, u: str | None, ftensors: set[str], qnames: set[str], qprod: dict[str, onnx.NodeProto],
                qcons: dict[str, list[onnx.NodeProto]], types: dict[str, int]) -> _Match | None:
    """The quantized model's counterpart of the float tensor ``t``: the tensor of the same name (when that is the
    ``DequantizeLinear`` output of a ``QuantizeLinear``, the latter's input is its value before quantization), else
    ``u``, the output of the node of the same name, unless ``u`` names another float tensor (the quantizer removed
    the nodes between, e.g. a Relu fused into the quantization: ``t`` is not observable there). The value before
    quantization is only kept when the same operator computes it (not when the quantizer fused a Relu into it)."""
    if t in qnames:
        p = qprod.get(t)
        q = qprod.get(p.input[0]) if p is not None and p.op_type == "DequantizeLinear" else None
        if q is not None and q.op_type == "QuantizeLinear":
            src = qprod.get(q.input[0])
            return _Match(t, "activation", "", "", t, q.input[0], _bits(q, types), True,
                          fused=not (src is None or src.op_type == op))
        pre = t
    elif u is not None and u not in ftensors:
        pre = u
    else:
        return None
    dq, bits = _dequantized(pre, qcons, types)
    src = qprod.get(pre)
    return _Match(t, "activation", "", "", dq or pre, pre if dq else None, bits, bool(dq),
                  fused=bool(dq) and not (src is None or src.op_type == op))


class _Acc:
    """Sums of squares of one tensor over batches: signal, total error, own quantization error."""

    def __init__(self) -> None:
        self.sig = self.noise = self.lsig = self.lnoise = 0.0
        self.lo, self.hi, self.count = math.inf, -math.inf, 0

    def grid_db(self, bits: int) -> float:
        """The SQNR a min-max grid of ``bits`` gives these values (``sum x^2 / (count s^2 / 12)``): the best a
        quantizer of that width can be expected to do on them (:func:`ideal_db` when not known)."""
        if not bits or not self.count or not self.hi > self.lo or self.lsig <= 0:
            return ideal_db(bits)
        s = (self.hi - self.lo) / (2 ** bits - 1)
        return float(10 * np.log10(self.lsig / (self.count * s * s / 12)))

    def excess_db(self, bits: int) -> float | None:
        """The own quantization noise against the noise of a min-max grid of ``bits`` over the values seen
        (``s^2 / 12`` per value, ``s = (max - min) / (2^bits - 1)``): about 0 dB or less for any calibration (a
        clipping method trades the same noise for a finer grid), +20 dB for a scale ten times too large."""
        if not bits or not self.count or not self.hi > self.lo or self.lnoise <= 0:
            return None
        s = (self.hi - self.lo) / (2 ** bits - 1)
        return float(10 * np.log10(self.lnoise / (self.count * s * s / 12)))

    def add(self, f: np.ndarray, q: np.ndarray, pre: np.ndarray | None) -> None:
        f64 = np.asarray(f, np.float64)
        q64 = np.asarray(q, np.float64)
        if f64.shape != q64.shape:
            if f64.size != q64.size:
                raise DataError(f"tensor shapes differ between the models: float {f64.shape}, quantized {q64.shape}")
            q64 = q64.reshape(f64.shape)  # the same values in another layout: a scalar written as [1] (TFLite)
            pre = None if pre is None else np.reshape(pre, f64.shape)
        self.sig += float(np.sum(f64 * f64))
        self.noise += float(np.sum((f64 - q64) ** 2))
        if pre is not None:
            p64 = np.asarray(pre, np.float64)
            self.lsig += float(np.sum(p64 * p64))
            self.lnoise += float(np.sum((p64 - q64) ** 2))
            if p64.size:
                self.lo, self.hi = min(self.lo, float(p64.min())), max(self.hi, float(p64.max()))
                self.count += p64.size


def as_rewritten(fm: onnx.ModelProto, qm: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``fm`` with the exact float rewrites a qlinear run makes before quantizing, where ``qm`` shows them: weights
    stored as ``Constant`` nodes made initializers (and an opset below 13 upgraded,
    :func:`~qlinear.graph.passes.normalize.normalize`), ``Conv -> BatchNormalization`` folded when ``qm`` has
    fewer BatchNormalization nodes, ``Conv -> Mul/Add/Sub(constant)`` when it has fewer of those, and cross-layer
    equalization when ``qm``'s weights show it (:func:`_equalized_as`). The original
    model as shipped can then be compared with qlinear's output (its folded weights and renamed Conv outputs were compared with the unfolded ones, 0.5 dB "first jumps" on weights);
    ``model.float.onnx`` of a run is already rewritten and passes unchanged. Returns the model and what was done."""
    from qlinear.graph.ir import to_ir, to_proto
    from qlinear.graph.passes.fold_batchnorm import FoldBatchNorm
    from qlinear.graph.passes.fold_conv_affine import OPS as AFFINE_OPS
    from qlinear.graph.passes.fold_conv_affine import FoldConvAffine
    from qlinear.graph.passes.normalize import normalize

    def count(m: onnx.ModelProto, op: str) -> int:
        return sum(n.op_type == op for n in m.graph.node)

    notes: list[str] = []
    if count(fm, "Constant") > count(qm, "Constant"):
        fm, _ = normalize(fm, "FLOAT")
        notes.append("FLOAT: Constant-node weights read as initializers, as the quantized model holds them")
    if count(fm, "BatchNormalization") > count(qm, "BatchNormalization"):
        model = to_ir(fm)
        fold = FoldBatchNorm()
        if fold(model).modified:
            fm = to_proto(model)
            notes.append(f"FLOAT: {fold.folded} BatchNormalization nodes folded into their Conv, as the quantized "
                         "model has them (compare with the run's model.float.onnx to skip this)")
    if sum(count(fm, op) for op in AFFINE_OPS) > sum(count(qm, op) for op in AFFINE_OPS):
        model = to_ir(fm)
        affine = FoldConvAffine()
        if affine(model).modified:
            fm = to_proto(model)
            notes.append(f"FLOAT: {affine.folded} Mul/Add/Sub of a per-channel constant folded into the Conv before "
                         "them, as the quantized model has them (compare with the run's model.float.onnx to skip "
                         "this)")
    return _equalized_as(fm, qm, notes), notes


def _equalized_as(fm: onnx.ModelProto, qm: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    """``fm`` with qlinear's cross-layer equalization (:class:`qlinear.graph.passes.equalize.Equalize`: data-free,
    the same scales as the run's) when ``qm``'s dequantized weights are closer to the equalized weights than to
    ``fm``'s (a per-tensor run rescales the channels: the model as given would be compared with other values). Both
    variants are tried: with the clip bounds made per-channel Max/Min, and across ReLU only (target tflite)."""
    from qlinear.graph.ir import to_ir, to_proto
    from qlinear.graph.passes.equalize import Equalize

    if not any(n.op_type == "Conv" for n in fm.graph.node):   # it equalizes Conv pairs only
        return fm
    dq = _dequantized_weights(qm)
    best, err, pairs = fm, _weight_error(fm, dq), 0
    if not err > 0.05:   # within quantization error already
        return fm
    for clips in (True, False):
        model = to_ir(fm)
        eq = Equalize(clips=clips)
        if eq(model).modified and eq.pairs:
            cand = to_proto(model)
            e = _weight_error(cand, dq)
            if e < 0.5 * err:
                best, err, pairs = cand, e, eq.pairs
    if pairs:
        notes.append(f"FLOAT: cross-layer equalization of {pairs} layer pairs redone, as the quantized model's "
                     "weights show it (data-free: the run's scales)")
    return best


def _dequantized_weights(qm: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The weights of ``qm``'s Conv/Gemm/MatMul that a DequantizeLinear of a constant gives, by their float name."""
    from qlinear.graph.bridge import extract

    try:
        es = extract(qm, use_metadata=False)
    except QlinearError:
        return {}
    inits = {t.name: t for t in qm.graph.initializer}
    out = {}
    for n in qm.graph.node:
        e = es.get(n.output[0]) if n.op_type == "DequantizeLinear" and n.input[0] in inits else None
        if e is not None and e.int_scale is None:
            out[n.output[0]] = e.dequantize(onnx.numpy_helper.to_array(inits[n.input[0]]))
    return out


def _weight_error(fm: onnx.ModelProto, dq: dict[str, np.ndarray]) -> float:
    """Mean relative difference between ``fm``'s weights and the dequantized ones of the same name."""
    errs = []
    for t in fm.graph.initializer:
        if t.name in dq:
            w = onnx.numpy_helper.to_array(t).astype(np.float64)
            d = np.asarray(dq[t.name], np.float64)
            if w.shape == d.shape and np.any(w):
                errs.append(float(np.linalg.norm(w - d) / np.linalg.norm(w)))
    return float(np.mean(errs)) if errs else math.inf


def _fixed_as_quantized(fm: onnx.ModelProto, qm: onnx.ModelProto, data: Any, samples: int,
                        batch_axes: dict[str, int] | None, notes: list[str]) -> onnx.ModelProto:
    """``fm`` with the inputs ``qm`` no longer takes (a run's ``fix_inputs``) fixed to their value in the data, the
    same in its first ``samples`` (:mod:`qlinear.graph.passes.fix_inputs`): the ``If`` they decide is inlined as in
    the quantized model, whose tensors then match. A value that varies is left alone, with a note."""
    from qlinear.graph.passes.fix_inputs import fix_input_values

    gone = set(model_inputs(fm)) - set(model_inputs(qm))
    if not gone:
        return fm
    ds = load_dataset(data, model_inputs(fm), batch_axes=batch_axes)
    first = ds.sample(0)
    same = {k for k in gone if all(np.array_equal(ds.sample(i)[k], first[k]) for i in range(1, min(samples, len(ds))))}
    if same != gone:
        notes.append(f"FLOAT: input(s) {', '.join(sorted(gone - same))} vary in the data and are not inputs of the "
                     "quantized model: fed to the float model as they are")
    if not same:
        return fm
    values = {k: first[k] for k in sorted(same)}
    fm, fixed = fix_input_values(fm, values, "FLOAT")
    shown = ", ".join(f"{k}={v.reshape(-1)[0].item() if v.size == 1 else f'[{v.dtype} {list(v.shape)}]'}"
                      for k, v in values.items())
    notes.append(f"FLOAT: inputs fixed to the data's values, {shown}, as the quantized model does not take them")
    notes += [f"FLOAT: {n}" for n in fixed[1:]]   # the If nodes inlined
    return fm


def _check_order(fm: onnx.ModelProto, qm: onnx.ModelProto) -> None:
    """Refuse the two models given the other way round: the first holds Q/DQ nodes, the second none."""
    def qdq(m: onnx.ModelProto) -> int:
        return sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in m.graph.node)

    if qdq(fm) and not qdq(qm):
        raise ConfigError(f"the first model holds {qdq(fm)} QuantizeLinear/DequantizeLinear nodes and the second "
                          "none: give the float model first, then the quantized one (qlinear debug FLOAT.onnx "
                          "QUANT.onnx)")


def _with_float_clamps(qm: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``qm`` with its clamps on the integers (:mod:`qlinear.graph.integer_clamps`) written back between a
    DequantizeLinear and a QuantizeLinear (a copy; the same values), so that their tensors are compared; and a
    note."""
    if not has_integer_clamps(qm):
        return qm, []
    out = onnx.ModelProto()
    out.CopyFrom(qm)
    back = float_clamps(out)
    return out, [f"{len(back)} Max/Min clamp(s) the quantized model computes on the integers ({', '.join(back[:3])}"
                 f"{' ...' if len(back) > 3 else ''}) compared as DequantizeLinear -> clamp -> QuantizeLinear (the "
                 "same values)"] if back else []


def compare_models(float_model: Any, quant_model: Any, data: Any, *, samples: int = 16, batch_size: int = 8,
                   jump_db: float = JUMP_DB, excess_db: float = EXCESS_DB,
                   batch_axes: dict[str, int] | None = None) -> ModelDiff:
    """Run ``float_model`` and ``quant_model`` side by side on the first ``samples`` of ``data`` and compare every
    matched tensor (module docstring)."""
    if samples < 1:
        raise ConfigError(f"samples: expected a positive number of samples, got {samples}")
    fm, qm = load_model(float_model), load_model(quant_model)
    _check_order(fm, qm)
    qm, clamps = _with_float_clamps(qm)
    fm, notes = as_rewritten(fm, qm)
    notes += clamps
    fm = _fixed_as_quantized(fm, qm, data, samples, batch_axes, notes)
    matches, unmatched = match_tensors(fm, qm)
    _hidden_saturation(fm, qm, matches)
    if not any(mt.role != "input" for mt in matches):
        raise DataError("the float and the quantized model share no tensor: is the quantized model made from this "
                        "float model (for a qlinear run, its model.float.onnx)?")
    ds = load_dataset(data, model_inputs(fm), batch_axes=batch_axes)
    n = min(samples, len(ds))
    if n < 1:
        raise DataError(f"{ds.source}: no samples")
    finits = {t.name: onnx.numpy_helper.to_array(t) for t in fm.graph.initializer}
    f_fetch = [mt.tensor for mt in matches if mt.role not in _CONST]
    q_fetch = list(dict.fromkeys([mt.post for mt in matches] + [mt.pre for mt in matches if mt.pre]))
    fs = Session(fm, f_fetch, level="basic", label="the float model")
    qs = Session(qm, q_fetch, level="basic", label="the quantized model", disable_qdq_fusion=True)
    acc = {mt.tensor: _Acc() for mt in matches}
    done, incomparable = 0, {}
    # a batch axis only nominally dynamic, or fixed in one model (--input-shape): one sample per call
    ds.check_stacking(lambda feed: (fs.run_all(feed), qs.run_all(feed)), batch_size)
    for feed in ds.batches(0, n, batch_size):
        where = f"{ds.source}, samples {done}..{done + ds.batch_len(feed) - 1}"
        fv = dict(zip(f_fetch, fs.run(f_fetch, feed, where=where)))
        qv = dict(zip(q_fetch, qs.run(q_fetch, feed, where=where)))
        for mt in matches:
            if (mt.role in _CONST and done) or mt.tensor in incomparable:
                continue  # constants: once
            f = finits[mt.tensor] if mt.role in _CONST else fv[mt.tensor]
            if not isinstance(f, np.ndarray) or not isinstance(qv[mt.post], np.ndarray):
                incomparable[mt.tensor] = "not a tensor"  # a sequence or a map (a ZipMap's): not compared
                continue
            if f.size != qv[mt.post].size:
                incomparable[mt.tensor] = "shapes differ"  # another number of values: not compared
                continue
            try:
                pre = qv[mt.pre] if mt.pre else None
                if pre is not None and mt.clip is not None:
                    pre = np.clip(pre, np.float32(mt.clip[0]), np.float32(mt.clip[1]))
                if mt.saturate is not None:   # what the grid's ends cut, the clamps after it cut too
                    f = np.clip(f, *mt.saturate)
                    pre = None if pre is None else np.clip(pre, *mt.saturate)
                acc[mt.tensor].add(f, qv[mt.post], pre)
            except DataError as e:
                raise DataError(f"{mt.tensor} (quantized model: {mt.post}): {e}") from None
        done += ds.batch_len(feed)
    if incomparable:
        matches = [mt for mt in matches if mt.tensor not in incomparable]
        unmatched = unmatched + [f"{t} ({why})" for t, why in sorted(incomparable.items())]
    res = _diff(fm, matches, acc, done, (jump_db, excess_db), unmatched)
    res.notes = notes
    return res


def _diff(fm: onnx.ModelProto, matches: list[_Match], acc: dict[str, _Acc], n: int, limits: tuple[float, float],
          unmatched: list[str]) -> ModelDiff:
    jump_db, excess_db = limits
    res = ModelDiff(n, jump_db, excess_db, unmatched=unmatched)
    db = {mt.tensor: sqnr_db(acc[mt.tensor].sig, acc[mt.tensor].noise) for mt in matches}
    prod = _producers(fm)
    inits = {t.name for t in fm.graph.initializer}
    weights = {mt.tensor: mt.role == "weight" for mt in matches}
    typical = {b: float(np.median([db[mt.tensor] for mt in matches if mt.role == "weight" and mt.bits == b]))
               for b in {mt.bits for mt in matches if mt.role == "weight"}}
    memo: dict[str, float] = {}

    quantized = {mt.tensor: mt.quantized for mt in matches}

    def level(t: str, depth: int = 0) -> float:
        """The SQNR a tensor reaches a node with: its own when it is quantized (or a weight, or a graph input), else
        its nearest matched inputs', and no more than its own when matched (a float operator adds no quantization
        noise: an SQNR above its inputs' comes from its signal, e.g. -3.4e38 added by an attention mask)."""
        if t in db and (quantized[t] or t not in prod):
            return db[t]
        if t in memo:
            return memo[t]
        p = prod.get(t)
        ins = [i for i in (p.input if p is not None else []) if i and (i not in inits or weights.get(i))]
        memo[t] = min((level(i, depth + 1) for i in ins), default=math.inf) if depth < 200 else math.inf
        memo[t] = min(memo[t], db.get(t, math.inf))
        return memo[t]

    for mt in matches:
        a = acc[mt.tensor]
        td = TensorDiff(mt.tensor, mt.role, mt.node, mt.op, mt.post, mt.quantized,
                        db[mt.tensor], sqnr_db(a.lsig, a.lnoise) if mt.pre else None)
        if mt.role == "activation":
            p = prod[mt.tensor]
            ref = min((level(i) for i in p.input if i and (i not in inits or weights.get(i))), default=math.inf)
            td.drop_db = min(ref, a.grid_db(mt.bits) if mt.pre else ideal_db(mt.bits)) - td.sqnr_db
        elif mt.role == "input":
            td.drop_db = (a.grid_db(mt.bits) if mt.pre else ideal_db(mt.bits)) - td.sqnr_db
        elif mt.role == "weight":
            td.drop_db = typical[mt.bits] - td.sqnr_db
        if math.isinf(td.sqnr_db) and td.sqnr_db > 0:
            td.drop_db = None  # equal to float (a tensor left float on an exact path): nothing dropped
        if mt.pre:
            td.excess_db = a.excess_db(mt.bits)
        if ((td.drop_db is not None and td.drop_db > jump_db) or (td.excess_db is not None and td.excess_db > excess_db))\
                and res.first_jump is None:
            td.jump = True
            res.first_jump = mt.tensor
        res.tensors.append(td)
    return res


# --------------------------------------------------------------------------------------------- integer vs runtime
#: runtimes :func:`compare_runtime` reads, and the run_integer profile that models each
RUNTIMES = {"litert": "litert_ref", "litert_xnnpack": "litert_xnnpack", "ort_fused": "ort_fused"}
#: what each runtime lets :func:`compare_runtime` read when it keeps its internal tensors
OUTPUTS_ONLY = {"litert_xnnpack": "litert_xnnpack: the XNNPACK delegate keeps the tensors of the subgraph it runs",
                "ort_fused": "ort_fused: ONNX Runtime's fused kernels keep their internal tensors (fetching one as an "
                             "output would change the fusion)"}
#: what each formula of :mod:`qlinear.kernels.requant` and :class:`qlinear.kernels.Profile` computes
FORMULAS = {"fixed_double": "int32 fixed-point multiplier, rounding twice (TFLite's MultiplyByQuantizedMultiplier)",
            "fixed_single": "int32 fixed-point multiplier, rounding once", "ruy_x86": "ruy's x86 fixed-point path",
            "f64_round_away": "acc * M in float64, rounded half away from zero",
            "f32_rne": "acc * M in float32, rounded half to even",
            "onednn": "oneDNN: zero point added in float before rounding", "away": "rounded half away from zero",
            "even": "rounded half to even", "tflite": "round_half_away(x / scale) in float32",
            "onnx": "ONNX QuantizeLinear (true division, ties to even)", "xnnpack": "XNNPACK's formula",
            "mlas": "MLAS's AVX2 formula", "float": "in float (not fused)"}
#: the profile fields (:class:`qlinear.kernels.Profile`) each kernel family reads
FAMILY_FIELDS = {"linear": ("fc", "clamp"), "conv": ("conv", "clamp"), "binary": ("elementwise", "add", "clamp"),
                 "pool": ("elementwise", "mean", "clamp"), "mean": ("mean", "clamp"), "concat": ("elementwise",),
                 "clamp": ("elementwise", "clamp"), "activation": ("elementwise",), "move": (),
                 "quantize": ("quantize",)}


@dataclass
class IntDiff:
    """One integer tensor of :func:`compare_runtime`."""

    tensor: str           # the integer tensor (a QuantizeLinear output of the Q/DQ model)
    float_name: str       # the float tensor it stands for (the tensor's name in a .tflite)
    node: str
    op: str
    dtype: str
    size: int
    differing: int
    max_diff: int         # largest |difference| in integer steps
    formula: str = ""     # what another formula of the kernel registry changes, when it reproduces the runtime
    rounding: bool = False  # 1 step apart where both compute in float32 (``formula`` says why): not a difference
    propagated: bool = False  # differs because an input differs by float rounding (or from it), not by its formula
    #: values that differ when run_integer computes this tensor from the runtime's own values of its inputs (every
    #: runtime tensor it reads, a LiteRT reference run's): what the operator itself makes; None: not measured
    own_differing: int | None = None


@dataclass
class RuntimeDiff:
    """The result of :func:`compare_runtime`."""

    runtime: str
    mode: str
    samples: int
    tensors: list[IntDiff] = field(default_factory=list)
    first_difference: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "mode": self.mode, "samples": self.samples,
                "first_difference": self.first_difference, "tensors": [asdict(t) for t in self.tensors],
                "notes": self.notes}


def integer_trace(im: IntegerModel, feed: dict[str, np.ndarray]) -> Env:
    """Every value of one :class:`~qlinear.kernels.IntegerModel` run (``env.ints``: the integer tensors)."""
    env = Env(im.qg, {k: np.asarray(v) for k, v in feed.items()})
    for step in im.steps:
        step(env)
    return env


def _graph_order(qg: QdqGraph) -> list[tuple[str, str, str]]:
    """``(integer tensor, node, op)`` of every computed integer tensor, in graph order: a QuantizeLinear output,
    named by the operator that a runtime fuses into it (or ``QuantizeLinear``)."""
    by_out = {op.output.name: op for op in qg.ops.values() if op.output is not None}
    out = []
    for n in qg.model.graph.node:
        if n.op_type != "QuantizeLinear" or n.output[0] not in qg.values:
            continue
        t = n.output[0]
        op = by_out.get(t)
        out.append((t, op.name, op.op) if op is not None else (t, n.name or t, "QuantizeLinear"))
    return out


def _int_diff(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    d = np.abs(np.asarray(a, np.int64) - np.asarray(b, np.int64))
    return int(np.count_nonzero(d)), int(d.max()) if d.size else 0


def compare_runtime(quant_model: Any, data: Any, *, runtime: str = "litert", tflite: Any = None, samples: int = 16,
                    mode: str | None = None, batch_axes: dict[str, int] | None = None) -> RuntimeDiff:
    """qlinear's integer kernels (``run_integer`` in ``mode``, default the runtime's profile, :data:`RUNTIMES`)
    against ``runtime`` on the first ``samples`` of ``data``, integer tensor by integer tensor (module docstring)."""
    if runtime not in RUNTIMES:
        raise ConfigError(f"runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
    if samples < 1:
        raise ConfigError(f"samples: expected a positive number of samples, got {samples}")
    qm = load_model(quant_model)
    mode = mode or RUNTIMES[runtime]
    im = IntegerModel(qm, mode)
    if runtime.startswith("litert") and tflite is None:
        raise ConfigError(f"runtime {runtime}: give the .tflite exported from the Q/DQ model")
    ds = load_dataset(data, model_inputs(qm), batch_axes=batch_axes)
    n = min(samples, len(ds))
    res = RuntimeDiff(runtime, mode, 0)
    if runtime in OUTPUTS_ONLY:
        res.notes.append(f"{OUTPUTS_ONLY[runtime]}, so only the graph outputs are compared")
    diffs: dict[str, IntDiff] = {}
    where: dict[str, tuple] = {}
    sess = None if runtime.startswith("litert") else \
        Session(qm, level="all", label="the quantized model (ONNX Runtime's default session)")
    if sess is not None:
        ds.check_stacking(sess.run_all, n)   # a batch axis only nominally dynamic: one sample per call
    for feed in ds.batches(0, n, n):  # samples of several shapes (a sequence length) run batch by batch
        res.samples += ds.batch_len(feed)
        got = _litert_tensors(tflite, im.qg, feed, reference=runtime == "litert") if sess is None else \
            _as_ints(_ort_outputs(sess, qm, feed), im.qg)
        _compare_batch(im, feed, runtime, got, diffs, where)
    if not res.samples:
        raise DataError(f"{ds.source}: no samples")
    res.tensors = list(diffs.values())
    name_differences(res, im, lambda d: _formula(qm, where[d.tensor][0], im, d.tensor, where[d.tensor][1], d.op))
    if runtime == "litert":  # every tensor is readable: say which the .tflite does not have
        missing = [t for t, _, _ in _graph_order(im.qg) if t not in got]
        if missing:
            res.notes.append(f"not in the .tflite (fused or renamed): {', '.join(missing)}")
    return res


def forced_trace(im: IntegerModel, feed: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> dict[str, int]:
    """Integer tensor -> values that differ from the runtime's ``got`` when run_integer computes it from the runtime's
    own values of its inputs: a run in which every integer tensor the runtime has replaces run_integer's as soon as
    it is computed. A tensor that differs in the free run but not here carries an earlier difference."""
    env = Env(im.qg, {k: np.asarray(v) for k, v in feed.items()})
    own: dict[str, int] = {}
    for step in im.steps:
        before = set(env.ints)
        step(env)
        for t in [t for t in env.ints if t not in before and t in got]:
            a = env.ints[t]
            b = _onnx_layout(got[t], a.shape)
            if a.shape == b.shape:
                own[t] = _int_diff(a, b)[0]
                env.ints[t] = b.astype(a.dtype)
    return own


def _compare_batch(im: IntegerModel, feed: dict[str, np.ndarray], runtime: str,
                   got: dict[str, np.ndarray], diffs: dict[str, IntDiff], where: dict[str, tuple]) -> None:
    """One batch of :func:`compare_runtime`: ``got`` (the runtime's integer tensors) against ``run_integer``, each
    tensor's differences added to ``diffs`` (graph order), the batch and runtime values where a tensor first differs
    to ``where``; with every tensor of the runtime (LiteRT's reference run), each one's own differences too
    (:func:`forced_trace`)."""
    env = integer_trace(im, feed)
    own = forced_trace(im, feed, got) if runtime == "litert" else {}
    for t, node, op in _graph_order(im.qg) + _output_ints(im.qg):
        if t not in got or t not in env.ints:
            continue
        a = env.ints[t]
        b = _onnx_layout(got[t], a.shape)
        if a.shape != b.shape:
            raise DataError(f"tensor {t}: run_integer gives shape {a.shape}, {runtime} {b.shape}")
        k, mx = _int_diff(a, b)
        v = im.qg.values[t]
        d = diffs.setdefault(t, IntDiff(t, v.float_name, node, op, v.params.dtype.name, 0, 0, 0))
        if d.size and d.node != node:  # a tensor already compared under another entry (an output of the graph)
            continue
        d.size, d.differing, d.max_diff = d.size + int(a.size), d.differing + k, max(d.max_diff, mx)
        if t in own:
            d.own_differing = (d.own_differing or 0) + own[t]
        if k and t not in where:
            where[t] = (feed, b)


FLOAT_ROUNDING = ("the runtime fuses {bits}-bit integers only, so this {op} runs in float32 between its "
                  "DequantizeLinear and QuantizeLinear: a value 1 step apart sits on a rounding boundary that float32 "
                  "summation order decides, not a formula difference")


def name_differences(res: RuntimeDiff, im: IntegerModel, formula: Callable[[IntDiff], str]) -> None:
    """Say what each differing tensor of ``res`` (graph order) is: float rounding where both compute the value in
    float32 and it is at most 1 step apart (an operator of a width the runtime does not fuse, or one run_integer runs
    in float; a QuantizeLinear of a float operator's output); carried where computed from the runtime's own inputs it
    equals the runtime's (``own_differing`` 0, measured on a LiteRT reference run), or, where that is not measured,
    an input already differs by float rounding (or carries it); else a difference, the first one
    ``res.first_difference``, with ``formula(d)``."""
    unfused = _unfused(im)
    floats = {op.output.name for op in im.qg.ops.values()   # no integer kernel, or not one for this node
              if op.output is not None and getattr(op, "_step", None) is None and op.output.name not in unfused}
    reads = {op.output.name: [v.name for v in op.inputs if v is not None and v.const is None]
             for op in im.qg.ops.values() if op.output is not None}
    differ = {d.tensor: d for d in res.tensors if d.differing}
    for d in res.tensors:
        before = next((x for x in reads.get(d.tensor, []) if x in differ and differ[x] is not d), None)
        if d.differing and d.max_diff <= 1 and d.tensor in unfused:
            d.formula, d.rounding = FLOAT_ROUNDING.format(op=unfused[d.tensor], bits=im.profile.fused_bits), True
        elif d.differing and d.max_diff <= 1 and (d.op == "QuantizeLinear" or d.tensor in floats):
            d.formula, d.rounding = FLOAT_INPUT_ROUNDING, True
        elif d.differing and d.own_differing == 0:
            d.propagated = True
            d.formula = ("computed from the runtime's own values of its inputs it equals the runtime's: the "
                         f"difference is carried from {before or 'before it'}, not made by this operator")
        elif d.differing and d.own_differing is None and before is not None and \
                (differ[before].rounding or differ[before].propagated):   # not measured: by its input
            d.propagated = True
            why = "float rounding" if differ[before].rounding else "from float rounding before it"
            d.formula = f"its input {before} differs already ({why}): carried here, not made by this operator"
        elif d.differing and res.first_difference is None:
            res.first_difference = d.tensor
            d.formula = formula(d)


FLOAT_INPUT_ROUNDING = ("both compute this value in float32 before quantizing it (an operator run in float: the "
                        "runtime's float kernel, the ONNX reference's NumPy): a value 1 step apart sits on a "
                        "rounding boundary that their last bits decide, not a formula difference")


def _unfused(im: IntegerModel) -> dict[str, str]:
    """Integer tensor -> op type, of the operators with a kernel that the profile runs in float (a width the
    runtime does not fuse, ``Profile.fused_bits``)."""
    if not im.profile.fused_bits:
        return {}
    return {op.output.name: op.op for op in im.qg.ops.values()
            if op.output is not None and ops.kernel_of(op.op) and getattr(op, "_step", None) is None}


def _output_ints(qg: QdqGraph) -> list[tuple[str, str, str]]:
    """``(integer tensor, node, op)`` of the integer tensors the graph outputs dequantize."""
    out = []
    for o in qg.model.graph.output:
        src = qg.dq.get(o.name)
        if src is not None:
            out.append((src, o.name, "DequantizeLinear"))
    return out


def _litert_tensors(tflite: Any, qg: QdqGraph, feed: dict[str, np.ndarray], *,
                    reference: bool = True) -> dict[str, np.ndarray]:
    """The integer tensors of the ``.tflite`` after one run by LiteRT, by the Q/DQ model's integer tensor each stands
    for (matched by the float name the exporter gives it), NCHW: every tensor under the reference kernels
    (``experimental_preserve_all_tensors``), the outputs under the default resolver (XNNPACK delegate)."""
    from qlinear.tflite.export import input_layout
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ModuleNotFoundError:
        raise ConfigError("runtime litert: the ai-edge-litert package is not installed (pip install ai-edge-litert)") \
            from None
    raw = tflite if isinstance(tflite, (bytes, bytearray)) else open(tflite, "rb").read()  # noqa: SIM115
    it = Interpreter(model_content=bytes(raw), num_threads=1, experimental_preserve_all_tensors=reference,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF if reference else OpResolverType.AUTO)
    nhwc = {k for k, v in input_layout(qg.model).items() if v == "NHWC"}   # the others as they are
    xs = {d["name"]: np.asarray(feed[d["name"]]) for d in it.get_input_details()}
    xs = {k: x.transpose(0, 2, 3, 1) if k in nhwc else x for k, x in xs.items()}
    for d in it.get_input_details():
        it.resize_tensor_input(d["index"], list(xs[d["name"]].shape))
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], xs[d["name"]].astype(d["dtype"]))
    it.invoke()

    if not reference:
        return _as_ints({d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}, qg)
    by_float = {v.float_name: v.name for v in qg.values.values() if v.const is None}
    out = {}
    for d in it.get_tensor_details():
        t = by_float.get(d["name"])
        if t is not None and np.dtype(d["dtype"]).kind in "iu":
            out[t] = it.get_tensor(d["index"])
    return out


def _onnx_layout(y: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor read from the ``.tflite`` in the Q/DQ model's layout: a 4-D image tensor is stored NHWC, a 4-D
    tensor the export keeps in ONNX order (a recurrent layer's ``Y``, a float island's) as it is."""
    if y.ndim == 4 and y.transpose(0, 3, 1, 2).shape == tuple(shape):
        return y.transpose(0, 3, 1, 2)
    return y


def _ort_outputs(sess: Session, qm: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph outputs of ``sess``, ONNX Runtime's default session of ``qm`` (its fused int8 kernels)."""
    outs = tensor_outputs(qm)
    return dict(zip(outs, sess.run(outs, feed)))


def _as_ints(got: dict[str, np.ndarray], qg: QdqGraph) -> dict[str, np.ndarray]:
    """Dequantized graph outputs back as the integer tensors they dequantize: ``round(y / scale) + zero point`` is
    exact for a dequantized integer (per-tensor integer types; integer outputs as they are)."""
    res = {}
    for o, y in got.items():
        src = qg.dq.get(o)
        v = qg.values.get(src) if src else None
        if v is None or not v.params.per_tensor or not v.params.dtype.is_int:
            continue
        y = np.asarray(y)
        q = y if y.dtype.kind in "iu" else np.round(np.asarray(y, np.float64) / np.float64(np.float32(v.params.s))) \
            + v.params.z
        res[src] = np.asarray(q).astype(np.int64)
    return res


def _formula(qm: onnx.ModelProto, feed: dict[str, np.ndarray], im: IntegerModel, t: str, want: np.ndarray,
             op: str) -> str:
    """What another formula of the kernel registry changes at ``t``, when one reproduces the runtime there."""
    family = "quantize" if op == "QuantizeLinear" else ("conv" if op in ("Conv", "ConvTranspose")
                                                         else (ops.kernel_of(op) or ""))
    fields = FAMILY_FIELDS.get(family, ())
    base = PROFILES[im.mode] if im.mode in PROFILES else None
    for name, prof in PROFILES.items():
        if name == im.mode or base is None:
            continue
        changed = [f for f in fields if getattr(prof, f) != getattr(base, f)]
        if not changed:
            continue
        try:
            got = integer_trace(IntegerModel(qm, name), feed).ints.get(t)
        except (QlinearError, ValueError, FloatingPointError):
            continue
        if got is not None and got.shape == want.shape and np.array_equal(got.astype(np.int64), want):
            what = "; ".join(f"{f} {_desc(getattr(prof, f))} instead of {_desc(getattr(base, f))}" for f in changed)
            return f"the runtime computes {op} as profile {name!r} does: {what}"
    return ""


def _desc(mode: str) -> str:
    return f"{mode} ({FORMULAS[mode]})" if mode in FORMULAS else (mode or "(default)")


def to_json(result: ModelDiff | RuntimeDiff) -> str:
    """A result as strict JSON (infinite SQNRs, an exactly reproduced tensor's, become null)."""
    import json

    def fin(v: Any) -> Any:
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: fin(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fin(x) for x in v]
        return v

    return json.dumps(fin(result.to_dict()), indent=2, allow_nan=False)
