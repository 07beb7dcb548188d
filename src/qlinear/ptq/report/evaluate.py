"""Accuracy of a quantized model against its float model on held-out samples.

* **output agreement** on every held-out sample, by the kind of each graph output (:func:`output_kind`, from its float
  values): ``classifier`` (``[N, classes]`` logits or softmax rows: top-1 agreement, top-1 accuracy when labels are
  known, cosine, SQNR), ``sequence`` (softmax or log-softmax rows ``[N, positions, classes]``, or positions first: a
  CTC recognizer or a tagger: top-1 agreement per position, the fraction of samples whose every position agrees, the
  headline, and of those a CTC decoder reads as the same text), ``probability`` (values in [0, 1], a few per sample:
  agreement of the decisions at 0.5 and SQNR), ``map`` (more values in [0, 1] from a Sigmoid, a text or segmentation
  map: the IoU of the decisions at 0.5, the headline, their agreement and SQNR), ``regression`` (a few non-negative
  values per sample, not all in [0, 1], such as a MOS: SQNR, the headline, and the largest and mean absolute error in
  the output's units), ``embedding`` (unit-norm rows or an
  embedding/hidden-state name: cosine, SQNR), ``state`` (a recurrent state: SQNR, cosine), ``generic`` (cosine,
  SQNR), ``mixed`` (an output computed by a Concat whose parts' ranges differ by more than 16x, such as boxes next to
  scores: SQNR per Concat input, :func:`concat_parts`; else channels of very different ranges along the last axis:
  SQNR per run of similar range, :func:`range_parts`; judged by the worst part), ``integer`` (exact match) and
  ``passthrough`` (an integer output no quantizer reaches: skipped, with a note). The metric of its kind is the
  output's headline (``Report.headlines``). Metrics are accumulated batch by batch, so samples of different shapes
  (a dynamic sequence length) are compared sample by sample and aggregated;
* **per-tensor SQNR** of each activation's own quantization, ``10 log10(sum x^2 / sum (x - DQ(Q(x)))^2)`` with ``x``
  the float model's tensor and its encoding, on the first ``stat_samples`` held-out samples (of a large tensor, on a
  strided sample of :data:`STAT_VALUES` values per sample: an OCR detector's 480 x 480 maps give millions per sample,
  whose sums took most of the report's time). It is local (no error carried from earlier layers) and costs one pass
  of the float model (batches sized by the fetched bytes, :mod:`qlinear.ptq.stats.batching`), which calibration
  already has warm; the tensors
  are ranked by it (lowest first) and the effect of each on the output is what :mod:`qlinear.ptq.algorithms.repair` measures;
* **histograms** of the worst tensors, from a strided sample of the float values of those samples, over a span that
  covers both the data and the chosen range.

The float model runs at ONNX Runtime's full optimization level. The quantized model's outputs come from ONNX Runtime's
default execution, the fused int8 kernels users deploy, where those are exact on the CPU and the target is ``ort``
(:func:`output_engine`; ``run_integer(mode="ort_fused")`` reproduces them bit for bit); elsewhere from the Q/DQ model
as ONNX defines it (full optimization level with the Q/DQ fusions disabled, ``session.disable_quant_qdq``: every
QuantizeLinear/DequantizeLinear runs as the operator, float operators in between). ``Report.engine`` says which.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from qlinear.core.types import qtype
from qlinear.errors import DataError
from qlinear.graph.model import tensor_outputs, without_weights
from qlinear.graph.ops import EMBEDDING_PRODUCERS, LAYOUT_PASSTHROUGH, QUANTIZE_OPS, RECURRENT
from qlinear.graph.plan import resolve_inherit
from qlinear.ptq.mixed import MIXED_RATIO, REMEDY, mixed, part_slices
from qlinear.ptq.report.metrics import agreement_bound, samples_for
from qlinear.ptq.report.passes import Basis, Passes, stat_encodings
from qlinear.ptq.report.plots import OutputPlot, output_plots

SLICE = 2 ** 20  # values converted to float64 at a time by Agreement.add_sample
ROUND_BYTES = 2 ** 31  # float outputs of token data kept on disk between the float and the quantized pass


@dataclass
class TensorStat:
    name: str
    dtype: str
    scale: float
    zero_point: int
    lo: float
    hi: float
    sqnr_db: float


@dataclass
class Report:
    samples: int
    tensors: list[TensorStat]
    outputs: dict[str, dict[str, float]]
    ranking: list[str]
    histograms: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    stat_samples: int = 0
    engine: str = "onnx"   #: how the quantized model's outputs were computed (:func:`output_engine`)
    kinds: dict[str, str] = field(default_factory=dict)  #: output -> kind (:func:`output_kind`)
    headlines: dict[str, str | None] = field(default_factory=dict)  #: output -> the metric of its kind (None: skipped)
    sensitivity: list[dict[str, Any]] = field(default_factory=list)  #: :mod:`qlinear.ptq.report.sensitivity`, when asked
    mixed: list[dict[str, Any]] = field(default_factory=list)  #: Concats of mixed ranges (:func:`mixed_concats`)
    weights: list[dict[str, Any]] = field(default_factory=list)  #: weight-only: per-weight SQNR vs round to nearest
    sizes: dict[str, int] = field(default_factory=dict)  #: weight-only: initializer bytes before / after
    coverage: dict[str, Any] = field(default_factory=dict)  #: weight-only: weights quantized / left float by kind
    plots: dict[str, dict[str, Any]] = field(default_factory=dict)  #: output -> :mod:`qlinear.ptq.report.plots` data
    deployed: dict[str, Any] = field(default_factory=dict)  #: the written artifact's own accuracy (report.json)

    def to_dict(self) -> dict[str, Any]:
        outs = {o: ({"kind": self.kinds[o], "headline": self.headlines.get(o), **r} if o in self.kinds else r)
                for o, r in self.outputs.items()}
        if self.weights:  # weight-only: no activation statistics, so no empty sections for them
            return {"samples": self.samples, "engine": self.engine, "outputs": outs, "weights": self.weights,
                    "sizes": self.sizes, "coverage": self.coverage, "timings": self.timings,
                    "deployed": self.deployed, "output_plots": self.plots}
        return {"samples": self.samples, "stat_samples": self.stat_samples, "engine": self.engine,
                "outputs": outs, "ranking": self.ranking, "tensors": [t.__dict__ for t in self.tensors],
                "timings": self.timings, "histograms": self.histograms, "mixed_ranges": self.mixed,
                "deployed": self.deployed, "output_plots": self.plots}


def _sqnr(sig: float, noise: float) -> float:
    if noise <= 0:
        return float("inf")
    if sig <= 0:
        return float("-inf")
    return float(10 * np.log10(sig / noise))


def int8_kernels_exact() -> bool:
    """Whether ONNX Runtime's int8 GEMM/conv kernels accumulate exactly on this CPU: x86 with VNNI (``vpdpbusd``),
    or a non-x86 CPU. On x86 without VNNI its u8s8 kernel adds pairs of products in saturating int16
    (``vpmaddubsw``), which changes results (README, "ORT fused int8 kernels")."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return True
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def output_engine(qm: Any) -> str:
    """How the report computes the quantized model's outputs: ``ort-int8`` (ONNX Runtime at its default
    optimization level, the fused int8 kernels users deploy, when they are exact on this CPU and the target is
    ``ort``), else ``onnx`` (every QuantizeLinear/DequantizeLinear as ONNX defines it, float operators in between)."""
    act = {e.qtype for e in qm.encodings.activations if e.scale is not None}
    if qm.config.target == "ort" and act and all(t.is_int and t.bits == 8 for t in act) and int8_kernels_exact():
        return "ort-int8"
    return "onnx"


def _range(e: Any) -> tuple[float, float]:
    s = float(np.asarray(e.scale).reshape(-1)[0])
    if e.qtype.is_int:
        z = float(np.asarray(e.zero_point_or_zeros).reshape(-1)[0])
        return (e.qtype.qmin - z) * s, (e.qtype.qmax - z) * s
    return -float(e.qtype.qmax) * s, float(e.qtype.qmax) * s


def evaluate(qm: Any, *, samples: int | None = None, progress: Callable[[int], None] | None = None,
             worst_histograms: int = 4, stat_samples: int = 16, model_path: Any = None) -> Report:
    """The report of ``qm`` on its held-out samples (``samples``: at most that many); a weight-only result is
    evaluated from its file ``model_path`` (:func:`evaluate_weight_only`)."""
    if qm.config.weight_only:
        return evaluate_weight_only(qm, model_path, samples=samples, progress=progress)
    ds = qm.dataset
    start, stop = qm.held_out()
    if samples is not None:
        stop = min(len(ds), start + samples)
    n = stop - start
    if n <= 0:
        raise DataError(f"{ds.source}: no samples to evaluate")
    ref = qm.reference_model  # float model after exact rewrites (BN folding, CLE): same outputs, same tensors
    outputs = tensor_outputs(ref)
    _untensored_note(qm, ref)
    engine = output_engine(qm)
    out_f, out_q, counts, encs, seen, n_stat = _passes(qm, engine, outputs, (start, stop), stat_samples, progress)
    stats = []
    for e in encs:
        lo, hi = _range(e)
        stats.append(TensorStat(e.name, e.dtype, float(np.asarray(e.scale).reshape(-1)[0]),
                                int(np.asarray(e.zero_point_or_zeros).reshape(-1)[0]) if e.qtype.is_int else 0,
                                lo, hi, _sqnr(seen[e.name].sig, seen[e.name].noise)))
    ranking = [s.name for s in sorted(stats, key=lambda s: s.sqnr_db)]
    labels = None if ds.labels is None else ds.labels[start:stop]
    untouched, producers = untouched_outputs(qm.model), output_producers(ref)
    cparts = concat_parts(ref, outputs)
    res, kinds, heads = {}, {}, {}
    for o in outputs:
        asked = qm.config.output_kinds.get(o)   # the user's reading of the output, else inferred
        kinds[o] = asked or output_kind(o, out_f[o], counts, passthrough=o in untouched, producer=producers.get(o, ""))
        parts = cparts.get(o)
        if not asked and kinds[o] in ("generic", "mixed") and parts is not None and \
                part_ratio(out_f[o], parts) > MIXED_RATIO:
            kinds[o] = "mixed"
        else:
            parts = None
        res[o] = kind_metrics(kinds[o], out_f[o], out_q[o], counts, labels, o, ds.source, parts=parts)
        heads[o] = HEADLINE[kinds[o]]
        note = _kind_note(o, kinds[o], res[o], getattr(qm.config, "accuracy_target", None), qm.config)
        if note and note not in qm.notes:
            qm.notes.append(note)
    note = _departure_note(kinds, res, getattr(qm.config, "accuracy_target", None), qm.config)
    if note and note not in qm.notes:
        qm.notes.append(note)
    by_name = {s.name: s for s in stats}
    hists = {}
    for name in ranking[:worst_histograms]:
        h = seen[name].histogram(by_name[name])
        if h is not None:
            hists[name] = h
    mixed = mixed_concats(qm, stats, res, cparts, seen)
    return Report(n, stats, res, ranking, hists, stat_samples=n_stat, engine=engine, kinds=kinds, headlines=heads,
                  mixed=mixed, plots=output_plots(out_f, out_q, counts, start, kinds))


def _untensored_note(qm: Any, ref: onnx.ModelProto) -> None:
    """Name the outputs the report leaves out: not tensors (a ``ZipMap``'s sequence of maps)."""
    kept = set(tensor_outputs(ref))
    left = [f"{o.name} ({o.type.WhichOneof('value').removesuffix('_type')})" for o in ref.graph.output
            if o.name not in kept]
    note = (f"output(s) not scored: {', '.join(left)}: the report compares tensor outputs; such an output is "
            "computed from the scored ones or from float operators it keeps") if left else ""
    if note and note not in qm.notes:
        qm.notes.append(note)


def _passes(qm: Any, engine: str, outputs: list[str], span: tuple[int, int], stat_samples: int,
            progress: Callable[[int], None] | None) -> tuple:
    """The report's three passes over ``span`` (:class:`~qlinear.ptq.report.passes.Passes`): the ones quantizing
    started for this span (``report_ahead``), the others started now (``progress`` per batch of the quantized
    model's pass). Returns the float and the quantized outputs, the samples per batch, the statistics' encodings,
    their results and sample count."""
    p = getattr(qm, "_ahead", None)
    qm._ahead = None
    if p is None or p.span != span or p.outputs != outputs or p.n_stat != min(span[1] - span[0], stat_samples):
        if p is not None:
            p.cancel()
        p = Passes(qm.dataset, span, qm.config.batch_size, outputs, stat_samples)
    b = Basis.of(qm)
    same = unquantized_session(qm)  # nothing quantized: one session computes the float and the "quantized" outputs
    if p.stats_job is None:
        p.start_stats(b, stat_encodings(b))
    if p.float_job is None:
        p.start_float(b.reference, same)
    if same is not None and p.quant_job is None:
        p.mirror()  # the written model is the float model: its outputs are not computed twice
    if p.quant_job is None and not p.mirrored:
        p.start_quant(quant_session(qm, engine), progress)
    elif progress:
        progress(span[1] - span[0])
    out_f, out_q, counts, seen = p.results()
    return out_f, out_q, counts, p.encs, seen, p.n_stat


def quant_session(qm: Any, engine: str) -> Callable[[], Any]:
    """How the report gets the quantized model's session (``session`` of
    :func:`~qlinear.ptq.report.passes.model_outputs`): the load check's when ``engine`` runs it, else a new one."""
    from qlinear.ptq.stats.session import Session

    return loaded_session(qm, engine) or (lambda: Session(qm.model, (), level="all", label="the quantized model",
                                                          disable_qdq_fusion=engine != "ort-int8"))


def concat_parts(ref: Any, outputs: list[str]) -> dict[str, tuple[int, list[tuple[str, int, int]]]]:
    """Graph outputs computed by a Concat (:func:`qlinear.ptq.mixed.part_slices`): axis and parts."""
    prod = {o: n for n in ref.graph.node for o in n.output}
    if not any(prod.get(o) is not None and prod[o].op_type in ("Concat", "Identity") for o in outputs):
        return {}
    try:
        inf = onnx.shape_inference.infer_shapes(without_weights(ref))  # weights not serialized: 0.34 s -> ms
    except Exception:  # noqa: BLE001 - shapes are a convenience here: no shapes, no parts
        return {}
    shapes = {}
    for v in list(inf.graph.value_info) + list(inf.graph.output) + list(inf.graph.input):
        if v.type.tensor_type.HasField("shape"):
            shapes[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                   for d in v.type.tensor_type.shape.dim)
    out = {}
    for o in outputs:
        p = part_slices(ref, o, shapes)
        if p is not None and len(p[1]) > 1:
            out[o] = p
    return out


def part_ratio(xs: list[np.ndarray], parts: tuple[int, list[tuple[str, int, int]]]) -> float:
    """How many times the widest part's largest ``|x|`` is the narrowest's (inf when a part is all zeros)."""
    axis, sl = parts
    r = []
    for _, a, b in sl:
        vals = [np.abs(np.take(x, range(a, b), axis=axis)).max() for x in xs if x.size and x.ndim > axis]
        r.append(float(max(vals)) if vals else 0.0)
    if not r or max(r) == 0:
        return 1.0
    return float("inf") if min(r) == 0 else max(r) / min(r)


def mixed_concats(qm: Any, stats: list[TensorStat], res: dict[str, dict[str, float]],
                  cparts: dict[str, tuple[int, list[tuple[str, int, int]]]],
                  seen: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every Concat whose parts' ranges differ by more than ``MIXED_RATIO`` (:mod:`qlinear.ptq.mixed`), with each
    part's SQNR: of the graph output's slice where the Concat computes an output, else on the output's grid where
    the output is quantized (``output_grid``: what the nodes reading it see; estimated on the part's values the
    statistics pass ``seen`` kept for its histogram), else of the part's own quantization; ``tied``: the target made
    the parts share one scale (then the ``remedy`` applies)."""
    plan = getattr(qm, "plan", None)
    if plan is None:
        return []
    tied = {t for grp in plan.tied for t in grp}
    by_name = {s.name: s.sqnr_db for s in stats}
    outs = {o.name for o in qm.reference_model.graph.output}
    rows = []
    for c in mixed(plan):
        reach = [o for o in outs if resolve_inherit(plan, o) == c.output or o == c.output]
        o = next((o for o in reach if o in res and o in cparts), None)
        keys = {t: f"sqnr_db[{a}:{b}]" for t, a, b in cparts[o][1]} if o else {}
        got = res[o] if o else {}
        grid = c.output in by_name and c.output not in tied and not o
        parts = []
        for t, r in zip(c.inputs, c.ranges):
            v = got.get(keys.get(t, "")) if o else _on_grid(qm, plan, t, c.output, seen) if grid else None
            if v is None and not o:   # (a part the statistics did not keep: its own quantization's)
                v = by_name.get(resolve_inherit(plan, t))
            parts.append({"tensor": t, "range": r, "sqnr_db": v})
        rows.append({"concat": c.node, "output": c.output, "graph_outputs": sorted(reach), "ratio": c.ratio(),
                     "tied": c.output in tied, "output_grid": grid, "parts": parts,
                     "remedy": REMEDY if c.output in tied else None})
    return rows


def _on_grid(qm: Any, plan: Any, part: str, output: str, seen: dict[str, Any] | None) -> float | None:
    """The SQNR of ``part``'s float values (the statistics pass's histogram sample of them) quantized on the
    encoding of the Concat ``output``; None when the sample is missing."""
    s = (seen or {}).get(resolve_inherit(plan, part))
    if s is None or output not in qm.encodings:
        return None
    x = s.hist.values().astype(np.float64)
    if not x.size:
        return None
    d = x - qm.encodings[output].fake_quantize(x.astype(np.float32)).astype(np.float64)
    return _sqnr(float(np.dot(x, x)), float(np.dot(d, d)))


#: an output whose mean cosine with float on the held-out samples is below this departs from float (a note says so)
POOR_COSINE = 0.9
#: a regression output (a few scores per sample, :func:`output_kind`) departs from float below this SQNR (dB)
POOR_SQNR = 15.0
#: a classifier departs from float when its top class agrees on fewer held-out samples than this
POOR_AGREEMENT = 0.95


def _remedy(cfg: Any, target: str, them: str, *, all16: bool = True) -> str:
    """The options that raise the precision of what changes ``them``, as the deployment target allows: precision
    repair toward the accuracy ``target`` (ort, qnn; and, with ``all16``, 16-bit activations everywhere, or 8-bit
    weights when they are 4 bits or fewer: mtcnn's box output at 0.9 dB with int4 weights), or 16-bit
    activations for the whole model (tflite's 16x8 mode: no per-tensor choice, so no repair); none left when tflite
    activations are already 16-bit."""
    if getattr(cfg, "target", "ort") != "tflite":
        narrow = qtype(getattr(cfg, "weight_type", "int8")).bits <= 4   # the weights are the likelier cause
        wide = qtype(getattr(cfg, "activation_type", "uint8")).bits >= 16  # (or not a 16-bit grid's to fix)
        return (f"; --accuracy-target {target} raises the precision of the tensors that change {them}"
                + (f" (judged on held-back calibration samples), {_eight_bit_weights(cfg)} keeps every weight at 8 "
                   "bits" if narrow else " (judged on held-back calibration samples), --activation-type uint16 keeps every "
                   "activation at 16 bits" if all16 and not wide else ", judged on held-back calibration samples"))
    if qtype(getattr(cfg, "activation_type", "int8")).bits >= 16:
        return ("; with target tflite every activation is already 16-bit; precision repair (--accuracy-target "
                f"{target}) needs target ort or qnn")
    return ("; --activation-type int16 keeps every activation at 16 bits (TFLite's 16x8 mode); precision repair of "
            f"single tensors (--accuracy-target {target}) needs target ort or qnn")


def _eight_bit_weights(cfg: Any) -> str:
    """The options that put every weight at 8 bits: ``--weight-type int8``, which LPBQ refuses (4-bit blocks only,
    ``settle``): with it, per-channel weights at the activation type LPBQ chose (uint16 on qnn)."""
    if getattr(cfg, "weights", None) != "lpbq":
        return "--weight-type int8"
    return f"--weights per-channel --weight-type int8 --activation-type {cfg.activation_type}"


def _departure_note(kinds: dict[str, str], res: dict[str, dict], target: str | None, cfg: Any = None) -> str | None:
    """One note naming the outputs (other than sequences, which have their own, and passthroughs) whose mean cosine
    with float is below ``POOR_COSINE`` (a regression output, which has no cosine: SQNR below ``POOR_SQNR``; a
    classifier: top-1 agreement below ``POOR_AGREEMENT``, ppocr-cls with LPBQ weights at 0.906 had no note; a mixed
    output, whose wide part sets its cosine: its worst part's SQNR below ``POOR_SQNR``, nudenet-320n's scores with
    LPBQ weights at 4.9 dB had no note), with the options that repair them; none when a target was asked for."""
    poor = [(o, r) for o, r in res.items() if kinds.get(o) not in ("passthrough", "sequence")
            and (r.get("cosine_mean", 1.0) < POOR_COSINE
                 or (kinds.get(o) == "regression" and r.get("sqnr_db", float("inf")) < POOR_SQNR)
                 or (kinds.get(o) == "mixed" and r.get("sqnr_db_worst_part", float("inf")) < POOR_SQNR)
                 or (kinds.get(o) == "classifier" and r.get("top1_agreement", 1.0) < POOR_AGREEMENT))]
    if target or not poor:
        return None
    named = ", ".join(f"{o!r} (" + ", ".join(([f"top-1 agreement {r['top1_agreement']:.3f}"]
                                              if "top1_agreement" in r else [])
                                             + ([f"cosine {r['cosine_mean']:.2f}"] if "cosine_mean" in r else [])
                                             + ([f"SQNR {r['sqnr_db']:.1f} dB"] if "sqnr_db" in r else [])
                                             + ([f"worst part {r['sqnr_db_worst_part']:.1f} dB"]
                                                if "sqnr_db_worst_part" in r else [])) + ")"
                      for o, r in poor[:4])
    return (f"{len(poor)} output(s) depart from float on the held-out samples: {named}"
            + (" ..." if len(poor) > 4 else "") + _remedy(cfg, "sqnr_db>=15", "them"))


def _kind_note(o: str, kind: str, r: dict[str, float], target: str | None, cfg: Any = None) -> str | None:
    """What the report says of output ``o`` beside its metrics: a passthrough left out; a sequence whose decoded
    text changes on held-out samples, with the option that repairs it (when no target was asked for)."""
    if kind == "passthrough":
        return (f"output {o!r} is an integer output that no quantizer reaches (it passes inputs or shapes through): "
                "left out of the report's metrics")
    if kind == "classifier" and r.get("top1_ties"):
        return ties_note(o, r["top1_ties"], "quantized model", cfg)
    if kind == "sequence" and not target and r.get("ctc_agreement", 1.0) < 0.99:
        return (f"output {o!r} (softmax rows [N, positions, classes]) departs from float on held-out samples: "
                f"every position's top class agrees on {r['sequence_agreement']:.3f} of them, and read as CTC text "
                f"(repeats merged, blank dropped) {r['ctc_agreement']:.3f} give the same text" + _remedy(cfg, "ctc_agreement>=1.0 (or sequence_agreement>=1.0 "
                                                            "for a tagger)", "it", all16=False)
                + _judge_hint(cfg))
    return None


def ties_note(o: str, ties: float, what: str, cfg: Any = None) -> str:
    """Output ``o``'s top class is a tie in the ``what``'s output on a fraction ``ties`` of the held-out samples: its
    grid is too coarse near the top (a Softmax in 8 bits: steps of 1/256) to order them, and its top-1 agreement
    counts ArgMax's first pick, which float may order otherwise; with the option that orders them (the output's own
    bits are not enough where its input is tied already: a Softmax of 8-bit logits)."""
    tflite = getattr(cfg, "target", "ort") == "tflite"
    how = ("--activation-type int16 (16x8) orders them" if tflite else
           "16-bit activations order them (--activation-type uint16, or overrides giving this output and the "
           f'tensors it is computed from 16 bits, e.g. {{"name": "{o}", "type": "uint16"}} and the same for the '
           "logits before a Softmax)")
    return (f"output {o!r}: the {what}'s top value is shared by two or more classes on {ties:.3f} of the held-out "
            "samples (its output grid is too coarse near the top to order them); ArgMax takes the first of them, "
            f"so top-1 agreement there counts a pick, not a decision; {how}")


def _judge_hint(cfg: Any) -> str:
    """With target ort or qnn and too few calibration samples held back to judge an agreement target: how many it
    takes (:func:`~qlinear.ptq.report.metrics.samples_for` ``POOR_AGREEMENT``); ppocr-v4-rec's repair with 16 lines
    met ctc_agreement 1.0 on its 8 and gave 0.906 on 192 held-out lines, with 64 lines 0.953."""
    if cfg is None or getattr(cfg, "target", "ort") == "tflite":
        return ""
    n_cal, held = getattr(cfg, "calibration_samples", 0), getattr(cfg, "repair_samples", 0)
    judged, need = min(held, n_cal // 2), samples_for(POOR_AGREEMENT)
    if judged >= need:
        return ""
    return (f"; {n_cal} calibration samples hold {judged} back, and all {judged} agreeing bound the agreement on new "
            f"samples only above {agreement_bound(judged, judged):.2f} (95 % one-sided): --calibration-samples "
            f"{max(n_cal, 2 * need)}"
            + (f" with repair_samples {need} in --config" if held < need else "") + f" bound it above {POOR_AGREEMENT}")


def unquantized_session(qm: Any) -> Callable[[], Any] | None:
    """When the plan quantized nothing (``qm.unquantized``: ``qm.model`` is the float model without Q/DQ): the load
    check's session of it (ONNX Runtime's default level, the float model's level; no Q/DQ to fuse or not), as the
    ``session`` of every pass of the report, taken once; None otherwise."""
    if not getattr(qm, "unquantized", False):
        return None
    kept, qm._quant_session = getattr(qm, "_quant_session", None), None
    if kept is None or kept[0] is not qm.model or kept[1] is None:
        return None
    return lambda: kept[1]


def loaded_session(qm: Any, engine: str) -> Callable[[], Any] | None:
    """The session the pipeline's load check built of ``qm.model`` (ONNX Runtime's default level, as the ``ort-int8``
    engine runs it: the same options, so the same outputs), as the ``session`` of
    :func:`~qlinear.ptq.report.passes.model_outputs`, taken once (its memory goes with the report's run); None when
    the engine runs another one or none was kept."""
    kept, qm._quant_session = getattr(qm, "_quant_session", None), None
    if engine != "ort-int8" or kept is None or kept[0] is not qm.model or kept[1] is None:
        return None
    kept[1].label = "the quantized model"
    return lambda: kept[1]


def output_metrics(a: np.ndarray | list[np.ndarray], b: np.ndarray | list[np.ndarray], labels: list[int] | None,
                   name: str, source: str) -> dict[str, float]:
    """Agreement of a quantized output ``b`` with the float output ``a`` (and accuracy against ``labels``); ``a``
    and ``b`` may be lists of per-batch outputs, samples first, of different shapes (then the metrics of the output's
    kind, :func:`kind_metrics`: slovorez's tagger, whose note names ``sequence_agreement``, had only cosine and SQNR
    and its accuracy target was refused)."""
    if isinstance(a, list):
        shapes = {x.shape[1:] for x in a} | {x.shape[1:] for x in b}
        if len(shapes) > 1:   # judged by their kind sample by sample (a tagger's sequences of several lengths)
            counts = [len(x) for x in a]
            return kind_metrics(output_kind(name, a, counts), a, b, counts, labels, name, source)
        a, b = np.concatenate(a), np.concatenate(b)
    r: dict[str, float] = {}
    if a.shape == b.shape and sequence_axis(a, len(a)) == 0:
        r.update(sequence_agreement([a], [b], [len(a)]))
    if a.ndim == 2 and a.shape[1] > 1:
        fa, qa = a.argmax(1), b.argmax(1)
        r["top1_agreement"] = float(np.mean(fa == qa))
        if labels is not None:
            lab = np.asarray(labels)
            if len(lab) != len(fa):
                raise DataError(f"{source}: {len(lab)} labels for {len(fa)} evaluated samples of output {name!r}")
            if lab.size and lab.max() >= a.shape[1]:
                raise DataError(f"{source}: label {int(lab.max())} is outside the {a.shape[1]} classes of output "
                                f"{name!r}; labels must be 0-based class indices of that output")
            r["float_top1"] = float(np.mean(fa == lab))
            r["quantized_top1"] = float(np.mean(qa == lab))
    af = a.reshape(len(a), -1).astype(np.float64)
    bf = b.reshape(len(b), -1).astype(np.float64)
    cos = row_cosines(af, bf)
    r["cosine_mean"] = float(np.mean(cos))
    r["cosine_min"] = float(np.min(cos))
    r["sqnr_db"] = _sqnr(float(np.sum(af ** 2)), float(np.sum((af - bf) ** 2)))
    return r


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cosine of each row of ``a`` [N, values] with ``b``'s; 1 where both rows are zero (the same values: a
    sigmoid's 0.0, a ReLU map off everywhere), 0 where one only is."""
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    cos = np.sum(a * b, 1) / np.maximum(na * nb, 1e-30)
    return np.where((na == 0) & (nb == 0), 1.0, cos)


# --------------------------------------------------------------------------------------------- metrics by output kind
#: the metric that judges each kind of output (None: not judged)
HEADLINE: dict[str, str | None] = {"classifier": "top1_agreement", "sequence": "sequence_agreement",
                                   "probability": "decision_agreement", "map": "decision_iou",
                                   "embedding": "cosine_mean", "state": "sqnr_db", "generic": "sqnr_db",
                                   "mixed": "sqnr_db_worst_part", "regression": "sqnr_db",
                                   "integer": "exact_match", "token_logits": "perplexity_quantized",
                                   "passthrough": None}
EMBEDDING_HINTS = ("embed", "hidden", "pool", "feature", "encod", "vector", "represent")
#: a recurrent state carried to the next call (``stateN``, ``h_out``, ``hn``, ``present.0.key``), by name
#: (not TensorFlow's ``StatefulPartitionedCall:0``, the name of every output tf2onnx converts from a SavedModel)
STATE_NAME = re.compile(r"state(?!ful)|present|^(h|c)(_?out|_?n|_?t)$|(^|[._/])(h|c)n($|[._/])", re.IGNORECASE)
#: operators that make an embedding (pooling, normalization), seen through data movement from a graph output
EMBEDDING_OPS = EMBEDDING_PRODUCERS
_MOVES = LAYOUT_PASSTHROUGH
FEW = 4  #: at most this many values per sample, all in [0, 1]: a probability / score output
UNIT_TOL = 1e-6  #: how far outside [0, 1] a probability's float32 rounding may go


def untouched_outputs(m: Any) -> set[str]:
    """Integer graph outputs of the quantized model ``m`` that no QuantizeLinear/DequantizeLinear precedes: the
    quantization cannot change them (an input or a shape passed through)."""
    from onnx import TensorProto

    prod = {o: nd for nd in m.graph.node for o in nd.output}
    ints = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32,
            TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL}
    out = set()
    for o in m.graph.output:
        if o.type.tensor_type.elem_type not in ints:
            continue
        todo, seen, touched = [o.name], set(), False
        while todo and not touched:
            t = todo.pop()
            if t in seen or t not in prod:
                continue
            seen.add(t)
            nd = prod[t]
            touched = nd.op_type in QUANTIZE_OPS
            todo.extend(i for i in nd.input if i)
        if not touched:
            out.add(o.name)
    return out


def output_producers(m: Any) -> dict[str, str]:
    """The operator that computes each graph output of ``m``, seen through data movement (Reshape, Flatten, a
    one-input Concat, ...)."""
    prod = {o: nd for nd in m.graph.node for o in nd.output}
    inits = {t.name for t in m.graph.initializer}
    out = {}
    for o in m.graph.output:
        t, op = o.name, ""
        for _ in range(16):
            nd = prod.get(t)
            if nd is None:
                break
            op = nd.op_type
            data = [i for i in nd.input if i and i not in inits]
            if op not in _MOVES or not data or (op == "Concat" and len(data) != 1):
                break
            t = data[0]
        out[o.name] = op
    return out


def _rows(x: np.ndarray, b: int) -> np.ndarray:
    """``x`` as ``[samples, values]``: the first axis of size ``b`` (the batch) moved to the front, or one row."""
    for ax, d in enumerate(x.shape):
        if d == b:
            return np.moveaxis(x, ax, 0).reshape(b, -1)
    return x.reshape(1, -1)


def _classes(xs: list[np.ndarray], counts: list[int]) -> int:
    """The number of classes if every batch is ``[b, classes]`` (other axes of size 1), else 0."""
    c = set()
    for x, b in zip(xs, counts):
        if x.ndim < 2 or x.shape[0] != b:
            return 0
        big = [d for d in x.shape[1:] if d != 1]
        if len(big) != 1:
            return 0
        c.add(big[0])
    return c.pop() if len(c) == 1 and min(c) > 1 else 0


def output_kind(name: str, xs: list[np.ndarray], counts: list[int], *, passthrough: bool = False,
                producer: str = "") -> str:
    """The kind of a graph output from the float model's values ``xs`` (one array per batch of ``counts``
    samples) and the operator that computes it (:func:`output_producers`): ``passthrough`` / ``integer`` (integer
    dtype), ``classifier`` (softmax rows, or ``[N, classes]`` logits: negative somewhere, not unit-norm, not named
    like an embedding and not computed by a pooling or normalization, ``EMBEDDING_OPS``), ``sequence`` (softmax or log-softmax rows ``[N,
    positions, classes]`` or ``[positions, N, classes]``, :func:`sequence_axis`), ``state`` (a recurrent state
    computed by a GRU/LSTM/RNN or named like one, :data:`STATE_NAME`: SQNR and cosine, never top-1 or parts),
    ``probability`` (values in [0, 1], at most ``FEW`` per sample), ``regression`` (``[N, values]``, at most ``FEW``
    values per sample, none negative and not all in [0, 1]: scores a model regresses, such as a speech quality MOS;
    logits of a classifier with that few classes are negative somewhere), ``map`` (more values in [0, 1] from a
    Sigmoid: a detector's or segmenter's probability map), ``embedding`` (unit-norm rows, an embedding-like name or
    operator) or ``generic``."""
    if not xs or xs[0].dtype.kind in "biu":
        return "passthrough" if passthrough or not xs else "integer"
    if not all(x.size for x in xs):
        return "generic"
    if producer in RECURRENT or (STATE_NAME.search(name) and not any(h in name.lower() for h in EMBEDDING_HINTS)):
        return "state"
    lo, hi = min(float(x.min()) for x in xs), max(float(x.max()) for x in xs)
    classes = _classes(xs, counts)
    rows = [_rows(x, b).astype(np.float64) for x, b in zip(xs, counts)]
    unit = lo >= -UNIT_TOL and hi <= 1 + UNIT_TOL   # a float32 sigmoid reaches 1.0000001
    if unit and classes and all(np.allclose(r.sum(1), 1.0, atol=1e-3) for r in rows):
        return "classifier"
    if all(sequence_axis(x, b) is not None for x, b in zip(xs, counts)):
        return "sequence"
    if unit and max(r.shape[1] for r in rows) <= FEW:
        return "probability"
    if (classes and classes <= FEW or all(x.size == n for x, n in zip(xs, counts))) and lo >= 0:
        return "regression"   # a few scores per sample, or one (PLCMOS's scalar MOS)
    if unit and producer == "Sigmoid":
        return "map"
    hint = any(h in name.lower() for h in EMBEDDING_HINTS) or producer in EMBEDDING_OPS
    normed = all(np.allclose(np.linalg.norm(r, axis=1), 1.0, atol=1e-3) for r in rows) and \
        min(r.shape[1] for r in rows) > 1
    if classes and not hint and not normed and lo < 0:   # logits: negative somewhere (not a Hz or score row)
        return "classifier"
    if hint or normed:
        return "embedding"
    return "mixed" if len(range_parts(xs)) > 1 else "generic"


def range_parts(xs: list[np.ndarray], *, ratio: float = 100.0, max_channels: int = 128) -> list[tuple[int, int]]:
    """Channel runs ``[a, b)`` along the last axis of an output whose channels span very different ranges (boxes in
    pixels next to scores in [0, 1]): consecutive channels within a factor of 10 of the run's first form a part.
    One part (``[(0, C)]``) unless the largest channel range is ``ratio`` times the smallest."""
    c = xs[0].shape[-1] if xs[0].ndim >= 2 else 0
    if not 2 <= c <= max_channels or any(x.ndim < 2 or x.shape[-1] != c for x in xs):
        return [(0, c)]
    r = np.max([np.abs(x.reshape(-1, c)).max(0) for x in xs], axis=0).astype(np.float64)
    if not np.all(r > 0) or r.max() < ratio * r.min():
        return [(0, c)]
    lg, parts, a = np.log10(r), [], 0
    for i in range(1, c):
        if abs(lg[i] - lg[a]) >= 1:
            parts.append((a, i))
            a = i
    return parts + [(a, c)]


def kind_metrics(kind: str, fa: list[np.ndarray], qa: list[np.ndarray], counts: list[int],
                 labels: list[int] | None, name: str, source: str,
                 parts: tuple[int, list[tuple[str, int, int]]] | None = None) -> dict[str, float]:
    """The metrics of an output of ``kind`` (:func:`output_kind`) over batches: float outputs ``fa``, quantized
    ``qa``, ``counts`` samples per batch (samples may differ in shape from batch to batch). ``parts`` (a ``mixed``
    output computed by a Concat: its axis and each input's slice) replaces the channel runs of :func:`range_parts`:
    one SQNR per Concat input, ``sqnr_db[start:stop]`` (its slice along the concat axis)."""
    if kind == "passthrough":
        return {}
    if kind == "integer":
        eq = sum(int(np.sum(a == b)) if a.shape == b.shape else 0 for a, b in zip(fa, qa))
        return {"exact_match": eq / max(1, sum(a.size for a in fa))}
    r: dict[str, float] = {}
    if kind == "classifier":
        r.update(_top1(fa, qa, counts, labels, name, source))
    if kind == "sequence":
        r.update(sequence_agreement(fa, qa, counts))
    if kind in ("probability", "map"):
        same = sum(int(np.sum((a >= 0.5) == (b >= 0.5))) for a, b in zip(fa, qa))
        r["decision_agreement"] = same / max(1, sum(a.size for a in fa))
    if kind == "map":
        both = sum(int(np.sum((a >= 0.5) & (b >= 0.5))) for a, b in zip(fa, qa))
        either = sum(int(np.sum((a >= 0.5) | (b >= 0.5))) for a, b in zip(fa, qa))
        r["decision_iou"] = both / either if either else 1.0
    rows_f = [_rows(a, n).astype(np.float64) for a, n in zip(fa, counts)]
    rows_q = [_rows(b, n).astype(np.float64) for b, n in zip(qa, counts)]
    if kind == "regression":   # in the output's own units (MOS points, years...)
        err = np.concatenate([np.abs(a - b).reshape(-1) for a, b in zip(rows_f, rows_q)])
        r["max_abs_error"], r["mean_abs_error"] = float(err.max()), float(err.mean())
    if kind not in ("probability", "regression") and min(x.shape[1] for x in rows_f) > 1:
        cos = np.concatenate([row_cosines(a, b) for a, b in zip(rows_f, rows_q)])
        r["cosine_mean"], r["cosine_min"] = float(np.mean(cos)), float(np.min(cos))
    r["sqnr_db"] = _sqnr(sum(float(np.sum(a ** 2)) for a in rows_f),
                         sum(float(np.sum((a - b) ** 2)) for a, b in zip(rows_f, rows_q)))
    if kind == "mixed":
        axis, sl = parts if parts is not None else (-1, [("", a, b) for a, b in range_parts(fa)])
        worst = float("inf")
        for _, lo, hi in sl:
            pf = [np.take(a, range(lo, hi), axis=axis).astype(np.float64) for a in fa]
            pq = [np.take(b, range(lo, hi), axis=axis).astype(np.float64) for b in qa]
            v = _sqnr(sum(float(np.sum(a ** 2)) for a in pf), sum(float(np.sum((a - b) ** 2)) for a, b in zip(pf, pq)))
            r[f"sqnr_db[{lo}:{hi}]"] = v
            worst = min(worst, v)
        r["sqnr_db_worst_part"] = worst
    return r


def sequence_axis(x: np.ndarray, b: int) -> int | None:
    """The batch axis (0, or 1 for a sequence-first ``[positions, b, classes]`` CTC output) of ``x``, a batch of
    ``b`` samples, when ``x`` is a distribution over its last axis at more than one position: softmax rows (each
    summing to 1) or log-softmax rows (their exponentials summing to 1); else None."""
    if x.ndim != 3 or x.shape[-1] < 2 or not x.size:
        return None
    axis = 0 if x.shape[0] == b else 1 if x.shape[1] == b else None
    if axis is None or x.shape[1 - axis] < 2:
        return None
    r = x.reshape(-1, x.shape[-1])
    lo, hi = float(r.min()), float(r.max())
    if lo >= 0 and np.allclose(r.sum(1, dtype=np.float64), 1.0, atol=1e-3):
        return axis
    if hi <= 1e-6 and np.allclose(np.exp(r.astype(np.float64)).sum(1), 1.0, atol=1e-3):
        return axis
    return None


def sequence_agreement(fa: list[np.ndarray], qa: list[np.ndarray], counts: list[int]) -> dict[str, float]:
    """Agreement of the top classes of :func:`sequence_axis` outputs: ``top1_agreement`` of the positions,
    ``sequence_agreement`` of the samples (every position agrees) and ``ctc_agreement`` of the samples as a CTC
    decoder reads them (repeats merged, then the blank dropped, taken to be the float output's most frequent top
    class): the same text where the paths differ only in where a character's run ends."""
    def paths(xs: list[np.ndarray]) -> list[np.ndarray]:   # the batch axis: first, else second (positions first)
        return [np.moveaxis(x.argmax(-1), 0 if f.shape[0] == n else 1, 0).reshape(n, -1)
                for x, f, n in zip(xs, fa, counts)]

    ff, qq = paths(fa), paths(qa)
    same = [f == q for f, q in zip(ff, qq)]
    blank = int(np.bincount(np.concatenate([f.reshape(-1) for f in ff])).argmax())

    def text(row: np.ndarray) -> tuple[int, ...]:
        keep = np.r_[True, row[1:] != row[:-1]] & (row != blank)
        return tuple(row[keep].tolist())

    ctc = sum(text(f) == text(q) for fb, qb in zip(ff, qq) for f, q in zip(fb, qb))
    n = max(1, sum(len(s) for s in same))
    return {"top1_agreement": sum(int(s.sum()) for s in same) / max(1, sum(s.size for s in same)),
            "sequence_agreement": sum(int(s.all(1).sum()) for s in same) / n, "ctc_agreement": ctc / n}


def _top1(fa: list[np.ndarray], qa: list[np.ndarray], counts: list[int], labels: list[int] | None, name: str,
          source: str) -> dict[str, float]:
    ff = np.concatenate([a.reshape(n, -1).argmax(1) for a, n in zip(fa, counts)])
    qq = np.concatenate([b.reshape(n, -1).argmax(1) for b, n in zip(qa, counts)])
    r = {"top1_agreement": float(np.mean(ff == qq))}
    tied = np.concatenate([np.sum(b2 == b2.max(1, keepdims=True), 1) > 1
                           for b2 in (b.reshape(n, -1) for b, n in zip(qa, counts))])
    if tied.any():   # the quantized top value shared by several classes: ArgMax takes the first
        r["top1_ties"] = float(np.mean(tied))
    if labels is not None:
        classes = fa[0].size // counts[0]
        lab = np.asarray(labels)
        if len(lab) != len(ff):
            raise DataError(f"{source}: {len(lab)} labels for {len(ff)} evaluated samples of output {name!r}")
        if lab.size and lab.max() >= classes:
            raise DataError(f"{source}: label {int(lab.max())} is outside the {classes} classes of output "
                            f"{name!r}; labels must be 0-based class indices of that output")
        r["float_top1"] = float(np.mean(ff == lab))
        r["quantized_top1"] = float(np.mean(qq == lab))
    return r


# --------------------------------------------------------------------------------------------------- weight-only
def evaluate_weight_only(qm: Any, model_path: Any, *, samples: int | None = None,
                         progress: Callable[[int], None] | None = None) -> Report:
    """The report of a weight-only result (its weights :class:`qlinear.ptq.weightonly.StreamedWeights`) written
    to ``model_path``: its outputs against the float model's on the held-out samples, accumulated batch by batch (an
    LLM's logits are too large to keep): ``token_logits`` (``[B, S, vocab]`` over an integer token input ``[B, S]``:
    perplexity of both models on the next token, next-token agreement, cosine, SQNR), ``classifier`` (top-1
    agreement and accuracy with labels) or ``generic`` (cosine, SQNR); and the weights' own statistics."""
    import time

    import onnx

    from qlinear.ptq.stats.session import Session

    ds = qm.dataset
    start, stop = qm.held_out()
    if samples:
        stop = min(stop, start + samples)
    if stop <= start:
        raise DataError(f"{ds.source}: no samples to evaluate")
    t0 = time.perf_counter()
    sw = qm.streamed
    base = sw.tensors.base
    names = tensor_outputs(sw.graph)
    tokens = token_input(sw.graph)
    acc = {n: Agreement() for n in names}
    plots = {n: OutputPlot() for n in names}
    labels = None if ds.labels is None else np.asarray(ds.labels)

    def sessions(**kw: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
        return (lambda: Session(qm.reference_model, level="all", label=sw.label,
                                external_dir=str(base) if base else None, **kw),
                lambda: Session(onnx.load(str(model_path), load_external_data=False), level="all",
                                label=f"the quantized {sw.label}", external_dir=str(model_path.parent), **kw))

    if tokens:
        _token_passes(qm, sessions(mem_pattern=False), names, (start, stop), acc, plots, progress)
    else:
        fl, qs = (make() for make in sessions())
        at = start
        for batch in ds.batches(start, stop, qm.config.batch_size):
            where = f"{ds.source}, samples {at}..{at + ds.batch_len(batch) - 1}"
            fo, qo = fl.run(names, batch, where=where), qs.run(names, batch, where=where)
            k = len(fo[0])
            for n, a, b in zip(names, fo, qo):
                acc[n].add(a, b, None if labels is None else labels[at:at + k], None)
                plots[n].add(a, b, at, k)
            at += k
            if progress:
                progress(k)
    outputs = {n: a.result() for n, a in acc.items()}
    kinds = {n: a.kind for n, a in acc.items()}
    _refine_kinds(qm.reference_model, acc, outputs, kinds)
    return Report(samples=stop - start, tensors=[], outputs=outputs, ranking=[],
                  timings={"evaluation": time.perf_counter() - t0}, engine="onnxruntime", kinds=kinds,
                  headlines={n: HEADLINE[k] for n, k in kinds.items()}, weights=sw.weight_stats(),
                  sizes=sw.sizes(model_path), coverage=dict(sw.coverage),
                  plots={n: r for n, r in ((n, p.result()) for n, p in plots.items()) if r is not None})


def _refine_kinds(m: Any, acc: dict[str, "Agreement"], outputs: dict[str, dict], kinds: dict[str, str]) -> None:
    """An output :class:`Agreement` took for a classifier (any ``[N, values]``) or a generic one judged by
    :func:`output_kind` instead, as the Q/DQ report judges it: MiniLM's int64 passthroughs and its pooled embedding
    were given top-1 agreement, deepcut's word-end probability [N, 1] a cosine per value (0 where both are 0.0)
    instead of the decision agreement. A cosine of one value per sample (its sign) is left out, as there."""
    prods = output_producers(m)
    for n, a in acc.items():
        if a.width == 1:
            outputs[n] = {x: v for x, v in outputs[n].items() if x not in ("cosine_mean", "cosine_min")}
        if kinds[n] not in ("classifier", "generic") or a.first is None:
            continue
        k = output_kind(n, [a.first], [len(a.first)], producer=prods.get(n, ""))
        if k == kinds[n]:
            continue
        if k in ("integer", "passthrough"):
            kinds[n], outputs[n] = "passthrough", {}
            continue
        outputs[n] = {x: v for x, v in outputs[n].items() if x not in ("top1_agreement", "float_top1",
                                                                         "quantized_top1")}
        if k in ("probability", "map"):
            outputs[n]["decision_agreement"] = a.decided / max(1, a.values)
        kinds[n] = k if HEADLINE.get(k) in outputs[n] else "generic"


def _token_passes(qm: Any, sessions: tuple[Callable[[], Any], Callable[[], Any]], names: list[str],
                  span: tuple[int, int], acc: dict[str, "Agreement"], plots: dict[str, OutputPlot],
                  progress: Callable[[int], None] | None) -> None:
    """The weight-only evaluation of a model over token ids, in bounded memory: ONNX Runtime runs one sample at a
    time; the float model runs first over up to :data:`ROUND_BYTES` of outputs, kept in a temporary file, and is
    dropped before the quantized model runs over the same samples (one session alive at a time, one sample's
    outputs of each model in memory). The metrics accumulate per batch of ``batch_size`` samples as before
    (:meth:`Agreement.add_sample`, :meth:`OutputPlot.add_part`). The sessions come from ``sessions`` (ONNX
    Runtime's memory pattern off: no block for a whole run kept beside the arena). The heap freed by each step
    (GPTQ's temporaries, what building a session read, one sample's outputs, the float session) goes back to the
    system before the next (:func:`qlinear.ptq.stats.session.release_heap`)."""
    import tempfile

    from qlinear.ptq.stats.session import release_heap

    release_heap()
    ds = qm.dataset
    tokens = token_input(qm.streamed.graph)
    labels = None if ds.labels is None else np.asarray(ds.labels)
    spans, at = [], span[0]
    for batch in ds.batches(span[0], span[1], qm.config.batch_size):
        spans.append((at, ds.batch_len(batch)))
        at += spans[-1][1]

    def one(i: int) -> dict[str, np.ndarray]:
        return next(iter(ds.batches(i, i + 1, 1)))

    first = 0
    while first < len(spans):
        with tempfile.TemporaryFile(prefix="qlinear-eval-") as f:
            fl, kept, last = sessions[0](), [], first
            release_heap(collect=False)  # what building the session read and freed, before its runs
            while last < len(spans) and (last == first or f.tell() < ROUND_BYTES):
                for i in range(spans[last][0], sum(spans[last])):
                    outs = fl.run(names, one(i), where=f"{ds.source}, sample {i}")
                    for o in outs:
                        kept.append((f.tell(), o.shape, o.dtype))
                        f.write(np.ascontiguousarray(o).data)
                    del outs, o
                    release_heap(collect=False)
                last += 1
            del fl
            f.flush()
            release_heap()  # the float session's weights and arena, before the quantized session is built
            qs, it = sessions[1](), iter(kept)
            release_heap(collect=False)
            for at, k in spans[first:last]:
                for part, i in enumerate(range(at, at + k)):
                    feed = one(i)
                    outs = qs.run(names, feed, where=f"{ds.source}, sample {i}")
                    for n, b in zip(names, outs):
                        off, shape, dtype = next(it)
                        f.seek(off)
                        a = np.fromfile(f, dtype, int(np.prod(shape))).reshape(shape)
                        acc[n].add_sample(a, b, None if labels is None else labels[i:i + 1], feed.get(tokens))
                        plots[n].add_part(a, b, i, part, k)
                        del a, b
                    del outs
                    release_heap(collect=False)
                    if progress:
                        progress(1)
            del qs
        first = last


def token_input(m: Any) -> str:
    """The model input holding token ids: an integer input of rank 2 named like ``input_ids`` (or the only
    integer input of rank 2); ``""`` when there is none."""
    from onnx import TensorProto

    ints = [i for i in m.graph.input if i.type.tensor_type.elem_type in (TensorProto.INT64, TensorProto.INT32)
            and len(i.type.tensor_type.shape.dim) == 2]
    named = [i.name for i in ints if "ids" in i.name.lower()]
    return named[0] if named else (ints[0].name if len(ints) == 1 else "")


class Agreement:
    """The agreement of a quantized output with the float one, accumulated batch by batch: per-sample cosine,
    SQNR, top-1 agreement (classifier ``[N, classes]``, accuracy with labels) and for token logits ``[N, S, V]``
    with token ids ``[N, S]`` the perplexity of both models on the next token and their next-token agreement."""

    def __init__(self) -> None:
        self.cos: list[np.ndarray] = []
        self.sig = self.noise = 0.0
        self.n = self.agree = self.hit_f = self.hit_q = 0
        self.classifier, self.labelled, self.tokens = True, False, True
        self.first: np.ndarray | None = None   # the first float batch: what kind of output this is
        self.decided = self.values = 0           # values on the same side of 0.5 (a probability's decision)
        self.width = 0                           # values per sample (the smallest seen)
        self.nll_f = self.nll_q = 0.0
        self.predicted = self.next_agree = 0

    @property
    def kind(self) -> str:
        if self.tokens and self.predicted:
            return "token_logits"
        return "classifier" if self.classifier and self.n else "generic"

    def add(self, a: np.ndarray, b: np.ndarray, labels: np.ndarray | None, ids: np.ndarray | None) -> None:
        af = a.reshape(len(a), -1).astype(np.float64)
        bf = b.reshape(len(b), -1).astype(np.float64)
        self.cos.append(row_cosines(af, bf))
        self.sig += float(np.sum(af ** 2))
        self.noise += float(np.sum((af - bf) ** 2))
        self.decided += int(np.sum((af >= 0.5) == (bf >= 0.5)))
        self.values += af.size
        self.width = min(self.width or af.shape[1], af.shape[1])
        self._decisions(a, b, labels, ids)

    def add_sample(self, a: np.ndarray, b: np.ndarray, labels: np.ndarray | None, ids: np.ndarray | None) -> None:
        """:meth:`add` of one sample (batch axis first, size 1) without a float64 copy of it: the sums over slices
        of :data:`SLICE` values (equal to :meth:`add`'s up to their rounding; the token metrics are the same)."""
        af, bf = a.reshape(-1), b.reshape(-1)
        dot = ff = qq = noise = 0.0
        for lo in range(0, af.size, SLICE):
            x, y = af[lo:lo + SLICE].astype(np.float64), bf[lo:lo + SLICE].astype(np.float64)
            dot, ff, qq = dot + float(np.sum(x * y)), ff + float(np.sum(x * x)), qq + float(np.sum(y * y))
            y -= x
            noise += float(np.sum(y * y))
        self.cos.append(np.array([dot / max(np.sqrt(ff) * np.sqrt(qq), 1e-30) if ff or qq else 1.0]))
        self.sig += ff
        self.noise += noise
        self._decisions(a, b, labels, ids)

    def _decisions(self, a: np.ndarray, b: np.ndarray, labels: np.ndarray | None, ids: np.ndarray | None) -> None:
        """Top-1 (classifier) and next-token (token logits) metrics of one batch."""
        if self.first is None and a.ndim <= 2:   # a classifier candidate only: token logits are not kept
            self.first = a
        self.classifier = self.classifier and a.ndim == 2 and a.shape[1] > 1
        if self.classifier:
            fa, qa = a.argmax(1), b.argmax(1)
            self.agree += int(np.sum(fa == qa))
            if labels is not None:
                self.labelled = True
                self.hit_f += int(np.sum(fa == labels))
                self.hit_q += int(np.sum(qa == labels))
        self.tokens = self.tokens and ids is not None and a.ndim == 3 and a.shape[:2] == ids.shape \
            and a.shape[1] > 1 and int(ids.max()) < a.shape[2] and int(ids.min()) >= 0
        if self.tokens:
            for i in range(len(a)):  # one sample at a time: [S, vocab] in float32
                nf, nq = _next_token_nll(a[i], ids[i]), _next_token_nll(b[i], ids[i])
                self.nll_f += nf
                self.nll_q += nq
                self.next_agree += int(np.sum(a[i, :-1].argmax(-1) == b[i, :-1].argmax(-1)))
                self.predicted += ids.shape[1] - 1
        self.n += len(a)

    def result(self) -> dict[str, float]:
        c = np.concatenate(self.cos) if self.cos else np.zeros(1)
        r: dict[str, float] = {}
        if self.kind == "token_logits":
            r["perplexity_float"] = float(np.exp(self.nll_f / self.predicted))
            r["perplexity_quantized"] = float(np.exp(self.nll_q / self.predicted))
            r["next_token_agreement"] = self.next_agree / self.predicted
        if self.kind == "classifier":
            r["top1_agreement"] = self.agree / self.n
            if self.labelled:
                r["float_top1"], r["quantized_top1"] = self.hit_f / self.n, self.hit_q / self.n
        r["cosine_mean"], r["cosine_min"] = float(c.mean()), float(c.min())
        r["sqnr_db"] = _sqnr(self.sig, self.noise)
        return r


def _next_token_nll(logits: np.ndarray, ids: np.ndarray, rows: int = 64) -> float:
    """The summed negative log-likelihood of ``ids[1:]`` under ``logits[:-1]`` (``[S, vocab]``); the log-sum-exp
    of ``rows`` positions at a time (each row's is the same whatever the rows, so is the sum)."""
    n = len(logits) - 1
    lse = np.empty(max(n, 0))
    for lo in range(0, n, rows):
        x = logits[lo:min(lo + rows, n)].astype(np.float32)
        m = x.max(-1, keepdims=True)
        lse[lo:lo + len(x)] = np.log(np.exp(x - m).sum(-1, dtype=np.float64)) + m[:, 0].astype(np.float64)
    picked = logits[np.arange(n), ids[1:n + 1]].astype(np.float32).astype(np.float64)
    return float(np.sum(lse - picked))
