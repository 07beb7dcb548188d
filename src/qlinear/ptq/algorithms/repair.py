"""Automatic precision repair: raise the precision of the tensors that hurt the output most until an accuracy
target holds on the calibration samples.

The target is ``METRIC>=VALUE`` with ``METRIC`` one of :data:`METRICS` (the output metrics of the report:
top-1 agreement with the float model, mean or minimum cosine similarity, output SQNR in dB); it must hold for every
output. The candidates are the quantized weights and activations, ranked by their own quantization SQNR (the noise
each adds where it is quantized, lowest first). Each candidate moves one rung up its ladder (weights
``int2/int4 -> int8 -> int16``, activations ``8 -> 16`` bits; ``float`` when the rule ``allow_float`` lets a tensor
leave quantization, ONNX Runtime's target only, where an activation goes from 8 bits to float directly: that
runtime's CPU session has no 16-bit kernels and runs a 16-bit activation's layers in float between Q/DQ pairs). The search raises the first ``1, 2, 4, ...`` candidates of the
ranking, measuring the real quantized model each time, then bisects to the smallest prefix that meets the target.
Every decision is recorded with the metric the model had after it.

Decisions are made on calibration samples only: the last ``repair_samples`` (at most half) of them, which
calibration, SeqMSE and AdaRound then do not fit on (a model fitted on a sample looks better on it than it is); the
report measures the result on the held-out samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from qlinear.core.types import int_type, qtype
from qlinear.encodings import EncodingSet
from qlinear.graph.model import GraphIndex, tensor_outputs
from qlinear.graph.plan import FLOAT_INPUT_WEIGHT_TARGETS
from qlinear.ptq.algorithms.bias import correct_biases
from qlinear.ptq.config import DATA_WEIGHT_METHODS
from qlinear.ptq.encode import apply_encodings, int32_biases, weight_encoding
from qlinear.ptq.report import evaluate
from qlinear.ptq.report.evaluate import MIXED_RATIO, concat_parts, kind_metrics, output_metrics, part_ratio
from qlinear.ptq.report.metrics import AGREEMENT_METRICS, METRICS, Target, agreement_bound, samples_for
from qlinear.ptq.stats.session import Session


@dataclass(frozen=True)
class Candidate:
    tensor: str
    role: str          # "weight" or "activation"
    current: str       # its type now
    raised: str        # the next rung
    sqnr_db: float     # its own quantization SQNR (the ranking key)


@dataclass
class Outcome:
    """The result of :func:`repair`."""

    met: bool
    value: float                              # the metric of the model returned
    before: float                             # the metric before any change
    raised: dict[str, str] = field(default_factory=dict)   # tensor -> new type
    decisions: list[dict] = field(default_factory=list)    # {tensor, change, metric}
    evaluations: int = 0


def ladder(role: str, current: str, *, allow_float: bool) -> str | None:
    """The next rung of a tensor's precision (module docstring), or None at the top."""
    t = qtype(current, arg=f"{role} type")
    if not t.is_int or t.bits >= 16:  # float8 and the like, or 16 bits: only float is above
        return "float" if allow_float else None
    if role == "activation" and allow_float:  # ONNX Runtime's CPU session runs a 16-bit activation's layers in
        return "float"                        # float between Q/DQ pairs: float is exact and faster
    return int_type(8 if role == "weight" and t.bits < 8 else 16, t.signed).name


def repair(target: Target, candidates: list[Candidate], measure: Callable[[dict[str, str]], dict],
           *, progress: Callable[[int], None] | None = None) -> Outcome:
    """The smallest prefix of ``candidates`` (ranked) whose raise meets ``target`` (module docstring).

    ``measure(raised)`` builds the quantized model with the tensors of ``raised`` (tensor -> type) raised and
    returns its output metrics on the repair samples.
    """
    cache: dict[int, float] = {}

    def value(k: int) -> float:
        if k not in cache:
            cache[k] = target.value_of(measure({c.tensor: c.raised for c in candidates[:k]}))
            if progress:
                progress(1)
        return cache[k]

    before = value(0)
    if before >= target.value or not candidates:
        return Outcome(before >= target.value, before, before, evaluations=len(cache))
    lo, hi = 0, None  # value(lo) misses the target; value(hi) meets it
    k = 1
    while hi is None:
        k = min(k, len(candidates))
        if value(k) >= target.value:
            hi = k
        elif k == len(candidates):
            break
        else:
            lo = k
            k *= 2
    if hi is None:  # even everything raised one rung misses: return that, flagged
        k = len(candidates)
        return Outcome(False, value(k), before, {c.tensor: c.raised for c in candidates},
                       _decisions(candidates, k, cache), len(cache))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if value(mid) >= target.value:
            hi = mid
        else:
            lo = mid
    return Outcome(True, value(hi), before, {c.tensor: c.raised for c in candidates[:hi]},
                   _decisions(candidates, hi, cache), len(cache))


def _decisions(candidates: list[Candidate], k: int, cache: dict[int, float]) -> list[dict]:
    out = []
    for i, c in enumerate(candidates[:k]):
        after = min((j for j in cache if j >= i + 1 and j <= k), default=k)
        out.append({"tensor": c.tensor, "change": f"{c.role} {c.current} -> {c.raised}",
                    "reason": f"own quantization SQNR {c.sqnr_db:.1f} dB (rank {i + 1})",
                    "metric": cache.get(after)})
    return out


# --------------------------------------------------------------------------------------------- in the pipeline
def _sqnr(x: np.ndarray, xq: np.ndarray) -> float:
    x = np.asarray(x, np.float64)
    noise = float(np.sum((x - np.asarray(xq, np.float64)) ** 2))
    sig = float(np.sum(x ** 2))
    if noise == 0.0:
        return float("inf")
    return 10 * np.log10(max(sig, 1e-300) / noise)


@dataclass
class RepairInputs:
    """What precision repair inside :func:`qlinear.quantize` works on."""

    encodings: Any                 # EncodingSet of the run, before the int32 biases
    model: onnx.ModelProto         # the float model the encodings apply to (folded, equalized, biases corrected)
    reference: onnx.ModelProto     # the float model as loaded (its weights before any rounding)
    plan: Any                      # qlinear.graph.plan.Plan
    observers: dict                # activation name -> observer (recomputes an activation at a new type)
    means: dict                    # input means for bias correction
    tcfg: Any                      # per-tensor configs (qlinear.ptq.pipeline.TensorConfigs)
    dataset: Any                   # qlinear.ptq.data.Dataset
    samples: tuple[int, int]       # (start, stop): the calibration samples nothing was fitted on
    keep: dict                     # the calibration pass's float session and the outputs it fetched, if kept;
    #                                "concat_parts": the graph outputs' Concat parts, once _measure found them
    label: str = "model"


def run_repair(inp: RepairInputs, *, progress: Callable[[str, int], Callable[[int], None]] | None = None,
               notes: list[str] | None = None) -> tuple[Any, onnx.ModelProto, list[dict]]:
    """Precision repair inside :func:`qlinear.quantize` (module docstring), judged on the calibration samples
    ``inp.samples = (start, stop)`` that nothing was fitted on: returns the encodings (before the int32 biases), the
    float model they apply to, and the decisions."""
    cfg = inp.tcfg.cfg
    target = Target.parse(cfg.accuracy_target)
    outputs = tensor_outputs(inp.model)
    fsess = inp.keep.get("session")
    if fsess is None:
        fsess = Session(inp.reference, outputs, level="all", label=f"the float {inp.label}")
    batches = list(inp.dataset.batches(inp.samples[0], inp.samples[1], cfg.batch_size))
    float_out = {o: [fsess.run([o], b)[0] for b in batches] for o in outputs}  # per batch: shapes may differ
    builder = _Builder(inp)
    cands = builder.weight_candidates(cfg.target == "ort")
    cands += _activation_candidates(inp, builder.encs, fsess, batches[:1], cfg.target == "ort")
    cands.sort(key=lambda c: c.sqnr_db)

    def measure(raised: dict[str, str]) -> dict:
        return _measure(inp, builder.build(raised), batches, float_out)

    adv = progress("precision repair", 2 * max(1, int(np.ceil(np.log2(len(cands) + 1)))) + 1) if progress else None
    res = repair(target, cands, measure, progress=adv)
    es2, m2 = builder.build(res.raised)
    if notes is not None:
        notes += _notes(target, res, inp.samples, len(cands))
        if builder.floated:
            notes.append(f"{len(builder.floated)} weight(s) ({', '.join(builder.floated[:3])}"
                         f"{' ...' if len(builder.floated) > 3 else ''}) keep their float values: the activations "
                         "the repair left float are all their layers read, so ONNX Runtime computes those layers in "
                         "float (the repair judged them so)")
        per_sample = target.metric != "top1_agreement" or all(x.ndim == 2 for v in float_out.values() for x in v)
        notes += _few_samples_note(target, res.value, inp.samples[1] - inp.samples[0], per_sample,
                                   cfg.repair_samples)
    return es2, m2, res.decisions


class _Builder:
    """The encodings and float model of the run with some tensors raised (weights restored to float first)."""

    def __init__(self, inp: RepairInputs) -> None:
        self.inp = inp
        self.encs = {e.name: e for e in inp.encodings}
        self.g_ref = GraphIndex.build(inp.reference, infer_shapes=False)
        self.g_m = GraphIndex.build(inp.model, infer_shapes=False)
        self.specs = {s.name: s for s in inp.plan.weights}
        self.inheritors = inp.plan.followers()
        self.floated: list[str] = []   # the last build's float-input weights (:meth:`_float_inputs`)

    def weight_candidates(self, allow_float: bool) -> list[Candidate]:
        """Weights, ranked by their deployed values against the float ones."""
        cands = []
        for name in self.specs:
            e = self.encs.get(name)
            if e is None or not e.qtype.is_int:
                continue
            nxt = ladder("weight", e.dtype, allow_float=allow_float)
            if nxt is None:
                continue
            w = self.g_ref.array(name).astype(np.float32)
            cands.append(Candidate(name, "weight", e.dtype, nxt, _sqnr(w, e.fake_quantize(self.g_m.array(name)))))
        return cands

    def build(self, raised: dict[str, str]) -> tuple[Any, onnx.ModelProto]:
        inp = self.inp
        m2 = onnx.ModelProto()
        m2.CopyFrom(inp.model)
        inits = {t.name: t for t in m2.graph.initializer}
        e2 = dict(self.encs)
        restored = []
        floated = self._float_inputs(raised)
        for t in floated:   # target ort: a layer left reading only float activations computes in float
            self._raise_weight(t, "float", inits, e2)
        for t, new in raised.items():
            if t in floated:
                continue
            if t in self.specs:
                self._raise_weight(t, new, inits, e2)
                if new != "float":
                    restored.append(t)
            else:
                for name in [t] + self.inheritors.get(t, []):
                    if new == "float":
                        e2.pop(name, None)
                    else:
                        c = inp.tcfg.activation(t)
                        e2[name] = inp.observers[t].compute(new, symmetric=c.activation_symmetric, policy=c.policy,
                                                            name=t).replace(name=name)
        if restored and inp.tcfg.cfg.bias_correction:
            keep_only = {self.specs[t].bias for t in restored if self.specs[t].bias}
            others = {b.name for b in inp.plan.biases} - keep_only
            correct_biases(m2, inp.plan, {t: e2[t] for t in restored}, inp.means, skip=others)
        return EncodingSet(tuple(e2.values()), producer=inp.encodings.producer, version=inp.encodings.version), m2

    def _float_inputs(self, raised: dict[str, str]) -> list[str]:
        """Target ort without a size budget: the weights whose every layer reads an activation that is float once
        ``raised`` applies (:meth:`~qlinear.graph.plan.Plan.float_input_weights`); they keep their float values, as
        the plan's own (:data:`~qlinear.graph.plan.FLOAT_INPUT_WEIGHT_TARGETS`). Recorded in ``self.floated``."""
        cfg = self.inp.tcfg.cfg
        self.floated = []
        if cfg.target not in FLOAT_INPUT_WEIGHT_TARGETS or cfg.size_budget is not None or cfg.average_bits is not None:
            return []
        quantized = {n for n, e in self.encs.items() if e.role == "activation" and e.scale is not None}
        quantized -= {x for t, new in raised.items() if new == "float" for x in [t] + self.inheritors.get(t, [])}
        self.floated = [w for w in self.inp.plan.float_input_weights(quantized) if w in self.encs]
        return self.floated

    def _raise_weight(self, t: str, new: str, inits: dict[str, onnx.TensorProto], e2: dict[str, Any]) -> None:
        """The float weight (not its 4-bit grid) and its bias back in ``inits``, and its encoding at ``new``."""
        spec = self.specs[t]
        inits[t].CopyFrom(self.g_ref.initializers[t])
        if spec.bias:
            inits[spec.bias].CopyFrom(self.g_ref.initializers[spec.bias])
        if new == "float":
            e2.pop(t, None)
            return
        c = self.inp.tcfg.weight(t)
        c = c.replace(weight_type=new, weight_method="minmax" if c.w_method in DATA_WEIGHT_METHODS
                      else c.weight_method)
        e2[t] = weight_encoding(t, self.g_ref.array(t), spec, c)


def _activation_candidates(inp: RepairInputs, encs: dict[str, Any], fsess: Any, stat: list[dict],
                           allow_float: bool) -> list[Candidate]:
    """Activations, ranked by their own quantization on the first batch of samples (``stat``)."""
    acts = [t for t in inp.plan.activations if t in encs and encs[t].qtype.is_int]
    have = set(inp.keep.get("outputs", [])) if inp.keep.get("session") is not None else set()
    fetch = [t for t in acts if t in have]
    vals = dict(zip(fetch, fsess.run(fetch, stat[0]))) if fetch and stat else {}
    vals.update({k: v for k, v in (stat[0] if stat else {}).items() if k in acts})
    cands = []
    for t in acts:
        if t not in vals:
            continue
        nxt = ladder("activation", encs[t].dtype, allow_float=allow_float)
        if nxt is not None:
            x = np.asarray(vals[t], np.float32)
            cands.append(Candidate(t, "activation", encs[t].dtype, nxt, _sqnr(x, encs[t].fake_quantize(x))))
    return cands


def _measure(inp: RepairInputs, built: tuple[Any, onnx.ModelProto], batches: list[dict],
             float_out: dict[str, list[np.ndarray]]) -> dict:
    """Output metrics of the quantized model ``built`` on the repair samples."""
    es2, m2 = built
    q = apply_encodings(int32_biases(es2, m2, inp.plan), m2)
    sess = Session(q, level="basic", label=f"the quantized {inp.label}", disable_qdq_fusion=True)
    outputs = list(float_out)
    got = {o: [sess.run([o], b)[0] for b in batches] for o in outputs}
    res = {o: output_metrics(float_out[o], got[o], None, o, "repair samples") for o in outputs}
    if "concat_parts" not in inp.keep:  # once per run (shape inference of the reference)
        inp.keep["concat_parts"] = concat_parts(inp.reference, outputs)
    for o, parts in inp.keep["concat_parts"].items():  # a mixed output: judged by its worst part
        if part_ratio(float_out[o], parts) > MIXED_RATIO:
            k = kind_metrics("mixed", float_out[o], got[o], [len(x) for x in got[o]], None, o, "repair samples",
                             parts=parts)
            res[o]["sqnr_db_worst_part"] = k["sqnr_db_worst_part"]
    return res


def _notes(target: Target, res: Outcome, samples: tuple[int, int], n_cands: int) -> list[str]:
    head = (f"precision repair ({target}, judged on calibration samples {samples[0]}..{samples[1] - 1}, which "
            f"nothing was fitted on): "
            f"{target.metric} {res.before:.4f} -> {res.value:.4f}")
    out = []
    if not res.raised:
        out.append(f"{head}; the target holds without changes")
    else:
        what = ", ".join(f"{d['tensor']} ({d['change'].split(' ', 1)[1]})" for d in res.decisions[:6])
        more = f" and {len(res.decisions) - 6} more" if len(res.decisions) > 6 else ""
        out.append(f"{head} by raising {len(res.decisions)} of {n_cands} tensors: {what}{more} "
                   f"({res.evaluations} evaluations)")
    if not res.met:
        out.append(f"WARNING: accuracy target {target} not met even with every candidate raised one step "
                   f"(best {res.value:.4f}); leave more in float (overrides) or relax the target")
    return out


def _few_samples_note(target: Target, value: float, n: int, per_sample: bool, repair_samples: int) -> list[str]:
    """An agreement target judged on too few samples to promise it on new ones: the rate that ``value`` on ``n``
    samples bounds at 95 % (:func:`~qlinear.ptq.report.metrics.agreement_bound`), and how many held-back samples would
    bound the target (``POOR_AGREEMENT`` for a target of 1). ppocr-v4-rec with 16 calibration lines: ctc_agreement 1.0
    on the 8 held back, 0.906 on 192 held-out lines; with 64 (32 judge) 0.953, with 100 (50 judge) 0.984."""
    if target.metric not in AGREEMENT_METRICS or not per_sample or n <= 0:
        return []
    rate = target.value if target.value < 1 else evaluate.POOR_AGREEMENT
    k = int(round(value * n))
    bound = agreement_bound(k, n)
    if bound >= rate or rate <= 0:
        return []
    need = samples_for(rate)
    more = f" with repair_samples {need} in --config" if repair_samples < need else ""
    return [f"the repair's {k} of {n} judged samples agreeing bound the agreement on new samples only above "
            f"{bound:.2f} (95 % one-sided); {need} agreeing held-back samples bound it above {rate:g}: "
            f"--calibration-samples {2 * need}{more} (the last half, at most repair_samples, judge the repair)"]


__all__ = ["Candidate", "METRICS", "Outcome", "RepairInputs", "Target", "ladder", "repair", "run_repair"]
