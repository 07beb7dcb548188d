"""Mixed precision under a size budget: per-layer int4/int8 weights chosen from their sensitivity so that the model
fits ``size_budget`` (a fraction of the float size) or ``average_bits`` (bits per quantized weight element).

Size (:func:`sizes`): ``size_budget`` is a fraction of the **file**: the bytes of the written ``.qdq.onnx`` (its
serialized size: with external data, the model and its ``.data``) against the bytes of the float model as given
(its ``.onnx`` file). A quantized weight takes ``ceil(bits * elements / 8)`` bytes (int4 packed two a byte) plus its
float32 scales and its zero points at its width, as Q/DQ stores them; the rest of the file (the graph, float
weights, int32 biases with their scales and zero points, the activations' Q/DQ, the encodings metadata) is measured:
the Q/DQ models of the run with every movable weight int8 and with every one int4 are built and serialized
(:func:`calibrate`: the model gives both exactly), and the kept choice is checked on its own written bytes (more
weights go to int4 should it be over). Before calibration (:func:`check_before`) the rest is bounded below by what
the file surely holds (the float graph, the other initializers, each bias element's scale and zero point), so only
a budget surely out of reach is refused then. ``average_bits`` counts only the quantized weights' elements (no
scales).

Choice (:func:`choose`), judged on the held-back calibration samples (``repair_samples``, which nothing is fitted
on; the report's held-out samples are never used for choices):

1. sensitivity: the output SQNR of the *float* model with only that weight at int4 (one ONNX Runtime session, the
   weights fed as inputs), turned into a relative output noise ``10^(-SQNR/10)``;
2. candidates: weights go to int4 in order of least noise per byte saved (and, as a second candidate, of least
   noise) until the size fits; then the most harmful int4 weights go back to int8 while the budget still allows;
   a third is the first improved by swaps (:func:`swap`) on the summed noise;
3. each candidate is built and measured (the real quantized model) on the held-back samples; without an accuracy
   target the best metric within the budget is kept (``top1_agreement`` when the output is a classifier, else
   ``sqnr_db``; ties broken by SQNR). With an ``accuracy_target`` the smallest model within the budget that meets it
   is kept (the int4 prefix of the per-byte order, bisected), else the best one with a warning.

Every measured candidate is a point of the size-vs-metric curve in ``report.json["budget"]`` and ``report.html``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper

from qlinear.errors import ConfigError
from qlinear.graph.model import GraphIndex, tensor_outputs
from qlinear.ptq.algorithms.repair import RepairInputs, _Builder, _measure
from qlinear.ptq.config import DATA_WEIGHT_METHODS
from qlinear.ptq.encode import apply_encodings, int32_biases, weight_encoding
from qlinear.ptq.report.metrics import Target
from qlinear.ptq.stats.session import Session

LOW, HIGH = "int4", "int8"


@dataclass
class Sizes:
    """File bytes of each movable weight at int4 and int8, the rest of the file (``other``), and the float model's
    file bytes. Weights whose type the configuration fixes otherwise (an override) are not moved: ``fixed`` bytes at
    their width, ``fixed_bits`` their bits times elements."""

    low: dict[str, float]
    high: dict[str, float]
    elements: dict[str, int]
    other: float
    float_bytes: float
    fixed: float = 0.0
    fixed_bits: float = 0.0
    fixed_elements: int = 0
    scales: dict[str, int] = field(default_factory=dict)  # per movable weight: its number of scales

    def fraction(self, assign: dict[str, str]) -> float:
        """The model's size with the weights of ``assign`` (name -> ``int4``) at int4, the rest int8, as a fraction
        of the float size."""
        total = self.other + self.fixed + sum(self.low[t] if assign.get(t) == LOW else self.high[t] for t in self.high)
        return total / self.float_bytes

    def average_bits(self, assign: dict[str, str]) -> float:
        n = sum(self.elements.values()) + self.fixed_elements
        bits = sum(self.elements[t] * (4 if assign.get(t) == LOW else 8) for t in self.elements) + self.fixed_bits
        return bits / max(n, 1)


def _bytes(e: Any, bits: int, n: int) -> float:
    """What Q/DQ stores of a weight of ``n`` elements at ``bits``: the packed integers, float32 scales, zero points."""
    k = int(np.size(e.scale)) if e.scale is not None else 1
    return math.ceil(n * bits / 8) + 4 * k + math.ceil(k * bits / 8)


def sizes(m: onnx.ModelProto, encode: Callable[[str, str | None], Any], float_bytes: float = 0.0) -> Sizes:
    """The size model of ``m`` (module docstring) against ``float_bytes`` (0: ``m``'s serialized bytes), the rest of
    the file bounded below by the other initializers' bytes (:func:`calibrate` measures it); ``encode(weight,
    type)`` gives a quantized weight's encoding at ``type`` (None: as configured; its scales count), None for a
    tensor that is not a quantized weight. A weight configured as int8 can move to int4; any other stays as
    configured."""
    g = GraphIndex.build(m, infer_shapes=False)
    s = Sizes({}, {}, {}, 0.0, float(float_bytes or m.ByteSize()))
    for t in m.graph.initializer:
        a = g.array(t.name)
        nbytes = float(a.nbytes)
        e = encode(t.name, None)
        if e is None:
            s.other += nbytes
        elif e.dtype != HIGH:
            bits = e.qtype.bits
            s.fixed += _bytes(e, bits, a.size)
            s.fixed_bits += bits * a.size
            s.fixed_elements += int(a.size)
        else:
            s.elements[t.name] = int(a.size)
            s.high[t.name] = _bytes(e, 8, a.size)
            lo = encode(t.name, LOW)
            s.low[t.name] = _bytes(lo, 4, a.size)
            s.scales[t.name] = int(np.size(lo.scale)) if lo.scale is not None else 1
    s.float_bytes = max(s.float_bytes, 1.0)
    return s


def calibrate(s: Sizes, high_bytes: float, low_bytes: float | None = None) -> None:
    """Set the rest of the file from ``high_bytes``, the written size of the Q/DQ model with every weight as
    configured (none moved to int4), and with ``low_bytes`` (every movable weight int4) the int4 sizes so that the
    model gives both exactly: the metadata's packed exact scales (:func:`qlinear.graph.bridge.pack_scale`) compress
    differently at int4, spread over the weights by their number of scales."""
    s.other = high_bytes - s.fixed - sum(s.high.values())
    if low_bytes is not None and s.low:
        per_scale = (low_bytes - s.float_bytes * s.fraction({t: LOW for t in s.low})) / max(sum(s.scales.values()), 1)
        for t in s.low:
            s.low[t] += per_scale * s.scales[t]


@dataclass
class Budget:
    """``size_budget`` (fraction of the float size) or ``average_bits``."""

    kind: str      # "size_budget" or "average_bits"
    value: float

    @classmethod
    def of(cls, cfg: Any) -> "Budget | None":
        if cfg.size_budget is not None:
            return cls("size_budget", float(cfg.size_budget))
        if cfg.average_bits is not None:
            return cls("average_bits", float(cfg.average_bits))
        return None

    def measure(self, s: Sizes, assign: dict[str, str]) -> float:
        return s.fraction(assign) if self.kind == "size_budget" else s.average_bits(assign)

    def fits(self, s: Sizes, assign: dict[str, str]) -> bool:
        return self.measure(s, assign) <= self.value + 1e-12

    def check_reachable(self, s: Sizes, label: str, bound: bool = False) -> None:
        """Refuse a budget that even all-int4 weights miss, naming the smallest reachable value (``bound``: a lower
        bound of it, before calibration)."""
        every = {t: LOW for t in s.high}
        if not self.fits(s, every):
            best = self.measure(s, every)
            what = f"{best:.4f} of the float model's file" if self.kind == "size_budget" else f"{best:.2f} bits"
            what = f"at least {what}, counted before calibration" if bound and self.kind == "size_budget" else what
            raise ConfigError(f"{self.kind}: {self.value:g} is below what {label} reaches with every quantized "
                              f"weight at int4 ({what}); raise {self.kind} to at least {math.ceil(best * 1e4) / 1e4:g}")


@dataclass
class Outcome:
    assign: dict[str, str]
    metrics: dict
    curve: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def fill(order: list[str], noise: dict[str, float], fits: Callable[[dict[str, str]], bool]) -> dict[str, str]:
    """Weights of ``order`` to int4 one by one until ``fits``; then the most harmful (``noise``) back to int8 while
    it still fits."""
    assign: dict[str, str] = {}
    for t in order:
        if fits(assign):
            break
        assign[t] = LOW
    return _back_off(assign, noise, fits)


def swap(assign: dict[str, str], order: list[str], noise: dict[str, float],
         fits: Callable[[dict[str, str]], bool]) -> dict[str, str]:
    """``assign`` improved on the summed noise: an int4 weight (most harmful first) back to int8 when the int8
    weights that then go to int4 instead (in ``order``, while it does not fit) add less noise; the room the greedy
    fill leaves (one weight too big to go back) is used so."""
    for t in sorted(assign, key=lambda x: -noise[x]):
        if t not in assign:
            continue
        trial = {k: v for k, v in assign.items() if k != t}
        for u in order:
            if fits(trial):
                break
            if u != t and u not in trial:
                trial[u] = LOW
        if fits(trial):
            trial = _back_off(trial, noise, fits)
            if sum(noise[k] for k in trial) < sum(noise[k] for k in assign):
                assign = trial
    return assign


def _back_off(assign: dict[str, str], noise: dict[str, float], fits: Callable[[dict[str, str]], bool]) -> dict[str, str]:
    """The most harmful int4 weights of ``assign`` back to int8 while it still fits."""
    for t in sorted(assign, key=lambda x: -noise[x]):
        trial = {k: v for k, v in assign.items() if k != t}
        if fits(trial):
            assign = trial
    return assign


def orders(s: Sizes, noise: dict[str, float]) -> list[list[str]]:
    """Weights in order of least output noise per byte int4 saves, and of least output noise."""
    ts = list(s.high)
    per_byte = sorted(ts, key=lambda t: noise[t] / max(s.high[t] - s.low[t], 1e-9))
    return [per_byte, sorted(ts, key=lambda t: noise[t])]


def choose(budget: Budget, s: Sizes, noise: dict[str, float], measure: Callable[[dict[str, str]], dict],
           target: Target | None, metric: str,
           file_fraction: Callable[[dict[str, str]], float] | None = None) -> Outcome:
    """The assignment kept (module docstring, step 3) and every measured candidate. ``file_fraction(assign)``: the
    written size of a measured candidate (after ``measure``) over the float size; under ``size_budget`` the kept
    one must fit by it (more weights go to int4, least noise per byte first, should it be over)."""
    fits = lambda a: budget.fits(s, a)  # noqa: E731
    frac = file_fraction or s.fraction
    seen: dict[tuple, dict] = {}
    curve: list[dict] = []

    def evaluate(a: dict[str, str], how: str) -> dict:
        key = tuple(sorted(a))
        if key not in seen:
            seen[key] = measure(a)
            within = frac(a) <= budget.value + 1e-12 if budget.kind == "size_budget" else fits(a)
            curve.append({"candidate": how, "int4_weights": len(a), "size_fraction": frac(a),
                          "file_bytes": round(frac(a) * s.float_bytes), "float_bytes": round(s.float_bytes),
                          "average_bits": s.average_bits(a), "within_budget": within,
                          "metric": _value(seen[key], metric), "sqnr_db": _value(seen[key], "sqnr_db")})
        return seen[key]

    evaluate({}, "all int8")
    cands = [fill(o, noise, fits) for o in orders(s, noise)]
    cands.append(swap(cands[0], orders(s, noise)[0], noise, fits))
    for a, how in zip(cands, ("least noise per byte", "least noise", "least noise per byte, swapped")):
        evaluate(a, how)
    chosen = None
    if target is not None:
        chosen = _smallest_meeting(budget, s, orders(s, noise)[0], target, evaluate)
    if chosen is None:
        chosen = max(cands, key=lambda a: (_value(seen[tuple(sorted(a))], metric),
                                           _value(seen[tuple(sorted(a))], "sqnr_db")))
    rest = [t for t in orders(s, noise)[0] if t not in chosen]
    while budget.kind == "size_budget" and frac(chosen) > budget.value + 1e-12 and rest:
        chosen = {**chosen, rest.pop(0): LOW}  # the size model missed the written file by a few bytes
        evaluate(chosen, "one more int4 (the file was over)")
    key = tuple(sorted(chosen))
    for c in curve:
        c["chosen"] = False
    for c, k in zip(curve, seen):
        c["chosen"] = k == key
    return Outcome(chosen, seen[key], curve)


def _smallest_meeting(budget: Budget, s: Sizes, order: list[str], target: Target,
                      evaluate: Callable[[dict[str, str], str], dict]) -> dict[str, str] | None:
    """The longest int4 prefix of ``order`` that meets ``target`` among those within the budget (bisected), or
    None when even the shortest one within the budget misses it."""
    def prefix(k: int) -> dict[str, str]:
        return {t: LOW for t in order[:k]}

    lo = next(k for k in range(len(order) + 1) if budget.fits(s, prefix(k)))
    if target.value_of(evaluate(prefix(lo), f"int4 prefix {lo}")) < target.value:
        return None
    hi = len(order) + 1  # prefix(lo) meets the target; prefix(hi) is taken to miss it
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if target.value_of(evaluate(prefix(mid), f"int4 prefix {mid}")) >= target.value:
            lo = mid
        else:
            hi = mid
    return prefix(lo)


def _value(metrics: dict, metric: str) -> float:
    vals = [d[metric] for d in metrics.values() if metric in d]
    return min(vals) if vals else -math.inf


# --------------------------------------------------------------------------------------------- in the pipeline
def weight_noise(reference: onnx.ModelProto, weights: list[str], low: Callable[[str], np.ndarray],
                 batches: list[dict], label: str) -> dict[str, float]:
    """Per weight, the relative output noise ``10^(-SQNR/10)`` of the float ``reference`` with only that weight
    replaced by ``low(weight)`` (its int4 values), on ``batches``: one session, the weights fed as inputs."""
    m = onnx.ModelProto()
    m.CopyFrom(reference)
    g = GraphIndex.build(reference, infer_shapes=False)
    floats = {t: g.array(t) for t in weights}
    keep = [i for i in m.graph.initializer if i.name not in floats]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    for t, a in floats.items():
        m.graph.input.append(helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    outs = tensor_outputs(m)
    sess = Session(m, outs, level="basic", label=f"the float {label}")
    batches = [{**b, **floats} for b in batches]
    ref = [sess.run(outs, b) for b in batches]
    noise = {}
    for t in weights:
        sig = err = 0.0
        for b, r in zip(batches, ref):
            got = sess.run(outs, {**b, t: low(t).astype(floats[t].dtype)})
            for x, y in zip(r, got):
                x64 = np.asarray(x, np.float64)
                sig += float(np.sum(x64 ** 2))
                err += float(np.sum((x64 - np.asarray(y, np.float64)) ** 2))
        noise[t] = err / max(sig, 1e-300)
    return noise


def plan_sizes(inp: RepairInputs) -> tuple[Sizes, _Builder]:
    """The size model of the run (quantized weights: the plan's integer weights), against the float model's bytes
    ``inp.keep["float_bytes"]`` (the pipeline's; else the float model's serialized size)."""
    builder = _Builder(inp)

    def encode(t: str, dtype: str | None) -> Any:
        e = builder.encs.get(t)
        if t not in builder.specs or e is None or not e.qtype.is_int:
            return None
        return e if dtype is None or dtype == e.dtype else encoding_at(builder, t, dtype)

    return sizes(inp.model, encode, float(inp.keep.get("float_bytes") or 0)), builder


def qdq_bytes(inp: RepairInputs, built: tuple[Any, onnx.ModelProto]) -> int:
    """The written bytes of the Q/DQ model of ``built`` (encodings, float model), int32 biases included, as
    :func:`qlinear.quantize` writes it."""
    es2, m2 = built
    return apply_encodings(int32_biases(es2, m2, inp.plan), m2).ByteSize()


def encoding_at(builder: _Builder, t: str, dtype: str) -> Any:
    """The encoding of weight ``t`` at ``dtype`` from its float values (as precision repair computes it)."""
    return _encode(builder.inp.tcfg, t, builder.g_ref.array(t), builder.specs[t], dtype)


def _encode(tcfg: Any, t: str, w: np.ndarray, spec: Any, dtype: str) -> Any:
    c = tcfg.weight(t)
    c = c.replace(weight_type=dtype,
                  weight_method="minmax" if c.w_method in DATA_WEIGHT_METHODS else c.weight_method)
    return weight_encoding(t, w, spec, c)


def check_before(m: onnx.ModelProto, plan: Any, tcfg: Any, label: str, float_bytes: float = 0.0) -> None:
    """Before calibration: refuse a budget that even all-int4 weights miss (:meth:`Budget.check_reachable`), the rest
    of the file bounded below by what it surely holds: the float graph without its initializers, the other
    initializers, a float32 scale and int32 zero point per bias element; ``float_bytes``: the float model's file
    bytes (0: ``m``'s serialized size)."""
    budget = Budget.of(tcfg.cfg)
    if budget is None:
        return
    g = GraphIndex.build(m, infer_shapes=False)
    specs = {s.name: s for s in plan.weights}

    def encode(t: str, dtype: str | None) -> Any:
        if t not in specs or not tcfg.weight(t).weight_qtype.is_int:
            return None
        return _encode(tcfg, t, g.array(t), specs[t], dtype or tcfg.weight(t).weight_type)

    s = sizes(m, encode, float_bytes)
    s.other += m.ByteSize() - sum(t.ByteSize() for t in m.graph.initializer)
    s.other += sum(8 * g.array(p.bias).size for p in plan.weights if p.bias and encode(p.name, None) is not None)
    budget.check_reachable(s, label, bound=True)


def run_budget(inp: RepairInputs, *, progress: Callable[[str, int], Callable[[int], None]] | None = None,
               notes: list[str] | None = None) -> tuple[Any, onnx.ModelProto, list[dict], list[dict]]:
    """Mixed precision inside :func:`qlinear.quantize`: returns the encodings (before the int32 biases), the float
    model they apply to, the decisions and the size-vs-metric curve."""
    cfg = inp.tcfg.cfg
    budget = Budget.of(cfg)
    s, builder = plan_sizes(inp)
    calibrate(s, qdq_bytes(inp, builder.build({})), qdq_bytes(inp, builder.build({t: LOW for t in s.high})))
    budget.check_reachable(s, inp.label)
    outputs = tensor_outputs(inp.model)
    fsess = inp.keep.get("session") or Session(inp.reference, outputs, level="all", label=f"the float {inp.label}")
    batches = list(inp.dataset.batches(inp.samples[0], inp.samples[1], cfg.batch_size))
    float_out = {o: [fsess.run([o], b)[0] for b in batches] for o in outputs}
    low = {t: encoding_at(builder, t, LOW) for t in s.high}
    g_ref = builder.g_ref
    noise = weight_noise(inp.reference, list(s.high), lambda t: low[t].fake_quantize(g_ref.array(t)),
                         batches[:2], inp.label)
    target = Target.parse(cfg.accuracy_target) if cfg.accuracy_target else None
    classifier = any(v and v[0].ndim == 2 and v[0].shape[1] > 1 for v in float_out.values())  # has top-1
    metric = target.metric if target else ("top1_agreement" if classifier else "sqnr_db")
    adv = progress("size budget", 4) if progress else None  # all int8 and three candidates

    written: dict[tuple, int] = {}

    def measure(assign: dict[str, str]) -> dict:
        built = builder.build(assign)
        written[tuple(sorted(assign))] = qdq_bytes(inp, built)
        r = _measure(inp, built, batches, float_out)
        if adv:
            adv(1)
        return r

    res = choose(budget, s, noise, measure, target, metric, lambda a: written[tuple(sorted(a))] / s.float_bytes)
    es2, m2 = builder.build(res.assign)
    rank = {t: i + 1 for i, t in enumerate(sorted(s.high, key=lambda t: noise[t]))}
    decisions = [{"tensor": t, "change": f"weight {HIGH} -> {LOW}",
                  "reason": f"size budget: output SQNR {-10 * math.log10(max(noise[t], 1e-30)):.1f} dB with only it "
                            f"int4 (rank {rank[t]} of {len(rank)}, least sensitive first), saves "
                            f"{s.high[t] - s.low[t]:.0f} bytes", "metric": _value(res.metrics, metric)}
                 for t in sorted(res.assign, key=lambda t: rank[t])]
    if notes is not None:
        notes += _notes(budget, s, res, inp.samples, metric, target, written[tuple(sorted(res.assign))])
    return es2, m2, decisions, res.curve


def _notes(budget: Budget, s: Sizes, res: Outcome, samples: tuple[int, int], metric: str,
           target: Target | None, written: int) -> list[str]:
    v = _value(res.metrics, metric)
    out = [f"{budget.kind} {budget.value:g}: {len(res.assign)} of {len(s.high)} weights int4, the rest int8: "
           f"the Q/DQ file {written} bytes, {written / s.float_bytes:.4f} of the float model's {s.float_bytes:.0f}, "
           f"{s.average_bits(res.assign):.2f} bits per weight; "
           f"{metric} {v:.4f} on calibration samples {samples[0]}..{samples[1] - 1} (held back from fitting; "
           f"{len(res.curve)} candidates measured)"]
    if target is not None and target.value_of(res.metrics) < target.value:
        out.append(f"WARNING: accuracy target {target} not met within {budget.kind} {budget.value:g} (best "
                   f"{target.value_of(res.metrics):.4f}); raise the budget or relax the target")
    return out


__all__ = ["Budget", "Outcome", "Sizes", "calibrate", "choose", "fill", "orders", "qdq_bytes", "run_budget", "sizes",
           "weight_noise"]
