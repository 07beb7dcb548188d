"""Weight-only quantization (``activation_type: "float"``): the MatMul/Gemm weights of a model become blocked (or
per-channel, or LPBQ) integers, activations stay float — W4A16 / W8A16 for LLM decoders.

Steps, the full-integer pipeline's own where they are the same (peak memory: the largest weight plus, with GPTQ,
ONNX Runtime's session of the float model and one ``K x K`` Hessian per distinct linear input):

1. the model is read and checked by :func:`qlinear.graph.load.load_checked` without its external data (weights read
   one at a time by :mod:`.tensors`); :func:`.plan.find_linears` finds the weights;
2. ``minmax`` / ``mse``: round to nearest on each block's grid (:mod:`qlinear.ptq.algorithms.grids`; only the scales
   are kept, the integers are redone when written); ``gptq``: the Hessians of the linears' inputs are
   :class:`~qlinear.ptq.stats.Gram` accumulators of the one statistics pass (:mod:`qlinear.ptq.stats`), then GPTQ
   per weight (:mod:`qlinear.ptq.algorithms.gptq`), whose integers are kept (int8 storage, a quarter of the float
   weights);
3. the result is a :class:`~qlinear.ptq.QuantizedModel` (:class:`WeightOnlyModel`: the float graph, the weights'
   encodings and integer sources); its ``save`` (the full-integer one) writes ``model.qdq.onnx`` (or
   ``model.matmulnbits.onnx``) built by :mod:`.writer` with the graph passes ``InsertQDQ`` and ``LowerMatMulNBits``,
   with external data when the input had it or the tensors pass :func:`qlinear.graph.save.needs_external`, the
   AIMET encodings of the weights (LPBQ for ``lpbq``), and with data a report comparing the outputs with the float
   model on held-out samples (cosine, SQNR, top-1 agreement for classifiers).

Grids: symmetric weights use the full-range grid of ONNX Runtime's MatMulNBits quantizer on target ``ort`` and
AIMET's symmetric grid (zero offset) on target ``qnn`` and for ``lpbq``; see :mod:`.grids`.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np
import onnx

from qlinear.calibration.policies import lpbq as lpbq_decompose
from qlinear.encodings import Encoding, EncodingSet
from qlinear.errors import ConfigError, GraphError, OutputError, UnsupportedError
from qlinear.graph.ir import to_proto
from qlinear.graph.load import load_checked, model_dir
from qlinear.graph.ops import WEIGHT_BEARING
from qlinear.graph.save import needs_external
from qlinear.ptq.algorithms.awq import apply_awq, rtn_quantizer
from qlinear.ptq.algorithms.gptq import gptq
from qlinear.ptq.algorithms.grids import (
    BlockQuant,
    activation_aware_grid,
    padded,
    quantize_blocks,
    quantize_rtn,
)
from qlinear.ptq.config import WEIGHT_ONLY_DATA_METHODS, QuantizeConfig
from qlinear.ptq.result import QuantizedModel, check_samples, is_binary, is_file, path_of
from qlinear.ptq.session import Session
from qlinear.ptq.stats import Gram, accumulate
from qlinear.ptq.stats.stream import fetched
from qlinear.ptq.weightonly.plan import Linear, find_linears
from qlinear.ptq.weightonly.tensors import Tensors
from qlinear.ptq.weightonly.writer import WeightResult, build, write

Progress = Callable[[str, int], Callable[[int], None]]


def grid_for(cfg: QuantizeConfig) -> str:
    if not cfg.weight_symmetric:
        return "asymmetric"
    return "symmetric" if cfg.weights == "lpbq" or cfg.target == "qnn" else "full"


class WeightOnlyModel(QuantizedModel):
    """The :class:`~qlinear.ptq.QuantizedModel` of a weight-only run: the float graph (external data not loaded),
    its tensors and the quantized weights' results, streamed to the file one tensor at a time by :meth:`save_onnx`
    (the Q/DQ or MatMulNBits model is never whole in memory). ``save_tflite`` is refused: activations stay float."""

    def __init__(self, graph: onnx.ModelProto, tensors: Tensors, results: list[WeightResult],
                 config: QuantizeConfig, label: str, source: Any, dataset: Any = None,
                 timings: dict[str, float] | None = None, notes: list[str] | None = None, *,
                 skipped: dict[str, str] | None = None) -> None:
        self.graph, self.tensors, self.results = graph, tensors, results
        self.config, self.label, self.source, self.dataset = config, label, source, dataset
        self.timings = {} if timings is None else timings
        self.notes = [] if notes is None else notes
        self.skipped = {} if skipped is None else skipped
        self.decisions: list[dict] = []
        self.integer_check = None
        self._report = None

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return (f"WeightOnlyModel({self.label}: {len(self.results)} weights, {self.config.weight_type} "
                f"{self.config.weights}, {self.config.output_format})")

    @property
    def encodings(self) -> EncodingSet:
        """The encodings of every quantized weight."""
        from qlinear import __version__

        return EncodingSet(tuple(r.encoding for r in self.results),
                           producer={"package": "qlinear", "version": __version__}, version="2.0.0")

    @property
    def rewritten(self) -> bool:
        return False  # weight-only changes no float parameter: the encodings apply to the input model

    @property
    def model_file(self) -> str:
        return "model.matmulnbits.onnx" if self.config.output_format == "matmulnbits" else "model.qdq.onnx"

    def save_onnx(self, path: str | Path | BinaryIO, *, output_format: str | None = None,
                  external: bool | None = None) -> list[str]:
        """Write the quantized model to ``path`` (a file path, or a binary file object: then without external
        data, and no file name is returned) and ``path.data`` with external data (by default when the input had external data or the tensors pass
        :func:`qlinear.graph.save.needs_external`); ``output_format`` ``qdq`` or ``matmulnbits`` (default: the
        config's). Returns the file names written."""
        if is_file(path):
            if not is_binary(path):
                raise OutputError(f"save_onnx: {type(path).__name__} is a text file object; open the file in binary "
                                  "mode ('wb') or pass a path")
            if external:
                raise OutputError("save_onnx: external data needs a file path (the .data file is written beside "
                                  "it), not a file object")
            path.write(self.model_bytes(output_format))
            return []
        p = path_of(path, "save_onnx")
        if external is None:
            total = sum(self.tensors.nbytes(t.name) for t in self.graph.graph.initializer)
            external = self.tensors.external or needs_external(total)
        return write(self.build(output_format), p, external=external)

    def build(self, output_format: str | None = None) -> Any:
        """The quantized model as an ``onnx_ir`` model whose tensors are computed when it is serialized."""
        return build(self.graph, self.tensors, self.results, output_format or self.config.output_format)

    def model_bytes(self, output_format: str | None = None) -> bytes:
        """The serialized quantized model without external data (small models)."""
        try:
            return to_proto(self.build(output_format)).SerializeToString()
        except ValueError as e:
            raise GraphError(f"{self.label}: the quantized model is over 2 GB ({e}); save it to a file path (written "
                             "with external data)") from None

    write_onnx = save_onnx  #: the former name of :meth:`save_onnx`

    def save_tflite(self, path: str | Path, *, float_io: bool = True) -> None:
        raise UnsupportedError("save_tflite: a weight-only model (activation_type float) keeps float activations "
                               "and a full-integer .tflite needs them quantized; quantize with activation_type "
                               "int8 and target tflite, or save the ONNX model (save_onnx)")

    @property
    def model(self) -> onnx.ModelProto:
        """The quantized model in memory (small models; large ones: :meth:`save_onnx`)."""
        return onnx.load_from_string(self.model_bytes())

    @property
    def fitted(self) -> bool:
        return self.config.w_method in WEIGHT_ONLY_DATA_METHODS  # round to nearest never sees the data

    def report(self, *, samples: int | None = None, progress: Callable[[int], None] | None = None,
               model_path: Path | None = None):  # noqa: ANN201
        """Output agreement with the float model on the held-out samples (cosine, SQNR, top-1 agreement)."""
        check_samples(samples)
        if self._report is None:
            if self.dataset is None:
                raise ConfigError("report: no data was given; pass --data (or --no-report)")
            if model_path is None:
                with tempfile.TemporaryDirectory() as d:
                    p = Path(d) / self.model_file
                    self.save_onnx(p)
                    self._report = _evaluate(self, p, samples, progress)
            else:
                self._report = _evaluate(self, model_path, samples, progress)
        return self._report

    def reportable(self, report: bool) -> bool:
        return report and self.dataset is not None and bool(self.config.evaluation_samples)


def _evaluate(wm: WeightOnlyModel, path: Path, samples: int | None, progress: Any) -> Any:
    from qlinear.ptq.evaluate import Report
    from qlinear.ptq.session import Session

    start, stop = wm.held_out()
    if samples:
        stop = min(stop, start + samples)
    t0 = time.perf_counter()
    fl = Session(wm.graph, level="all", label=wm.label,
                 external_dir=str(wm.tensors.base) if wm.tensors.base else None)
    qm = onnx.load(str(path), load_external_data=False)
    qs = Session(qm, level="all", label=f"the quantized {wm.label}", external_dir=str(path.parent))
    names = [o.name for o in wm.graph.graph.output]
    acc = {n: _Agreement() for n in names}
    labels = None if wm.dataset.labels is None else np.asarray(wm.dataset.labels)
    at = start
    for batch in wm.dataset.batches(start, stop, wm.config.batch_size):
        fo = fl.run(names, batch, where=f"{wm.dataset.source} (evaluation)")
        qo = qs.run(names, batch, where=f"{wm.dataset.source} (evaluation)")
        k = len(fo[0])
        lab = None if labels is None else labels[at:at + k]
        for n, a, b in zip(names, fo, qo):
            acc[n].add(a, b, lab)
        at += k
        if progress:
            progress(k)
    outputs = {n: a.result() for n, a in acc.items()}
    return Report(samples=stop - start, tensors=[], outputs=outputs, ranking=[],
                  timings={"evaluation": time.perf_counter() - t0}, engine="onnxruntime")


class _Agreement:
    """Output agreement accumulated batch by batch (an LLM's logits are too large to keep): per-sample cosine,
    output SQNR, and top-1 agreement/accuracy for classifier outputs ``[N, classes]``."""

    def __init__(self) -> None:
        self.cos: list[np.ndarray] = []
        self.sig = self.noise = 0.0
        self.n = self.agree = self.hit_f = self.hit_q = 0
        self.classifier = True
        self.labelled = False

    def add(self, a: np.ndarray, b: np.ndarray, labels: np.ndarray | None) -> None:
        af = a.reshape(len(a), -1).astype(np.float64)
        bf = b.reshape(len(b), -1).astype(np.float64)
        self.cos.append(np.sum(af * bf, 1) / np.maximum(np.linalg.norm(af, axis=1) * np.linalg.norm(bf, axis=1),
                                                        1e-30))
        self.sig += float(np.sum(af ** 2))
        self.noise += float(np.sum((af - bf) ** 2))
        self.classifier = self.classifier and a.ndim == 2 and a.shape[1] > 1
        if self.classifier:
            fa, qa = a.argmax(1), b.argmax(1)
            self.agree += int(np.sum(fa == qa))
            if labels is not None:
                self.labelled = True
                self.hit_f += int(np.sum(fa == labels))
                self.hit_q += int(np.sum(qa == labels))
        self.n += len(a)

    def result(self) -> dict[str, float]:
        c = np.concatenate(self.cos) if self.cos else np.zeros(1)
        r: dict[str, float] = {}
        if self.classifier and self.n:
            r["top1_agreement"] = self.agree / self.n
            if self.labelled:
                r["float_top1"], r["quantized_top1"] = self.hit_f / self.n, self.hit_q / self.n
        r["cosine_mean"], r["cosine_min"] = float(c.mean()), float(c.min())
        r["sqnr_db"] = float("inf") if self.noise <= 0 else float(10 * np.log10(max(self.sig, 1e-300) / self.noise))
        return r


def _as_nk(w: np.ndarray, lin: Linear) -> np.ndarray:
    return np.ascontiguousarray(w.T if lin.k_first else w, np.float32)


def _encoding(g: _Grid, bq: BlockQuant) -> Encoding:
    """The AIMET encoding of the weight in its initializer's layout."""
    lin = g.lin
    off = 2 ** (g.bits - 1) if g.unsigned else 0
    z = None if bq.zero_point is None else bq.zero_point.astype(np.int64) + off
    if z is None and off:
        z = np.full(bq.scale.shape, off, np.int64)
    if g.per_channel:
        return Encoding(lin.weight, g.dtype, scale=bq.scale[:, 0].astype(np.float64),
                        zero_point=None if z is None else z[:, 0], axis=lin.channel_axis, role="param")
    if g.lpbq:
        pc = g.pc_scale.astype(np.float64)
        shape = (1, -1) if lin.k_first else (-1, 1)
        ints = g.int_scale.T if lin.k_first else g.int_scale
        return Encoding(lin.weight, g.dtype, scale=pc.reshape(shape), int_scale=ints, axis=lin.block_axis,
                        block_size=g.block, role="param", decompressed_bits=8)
    s = bq.scale.T if lin.k_first else bq.scale
    zz = None if z is None else (z.T if lin.k_first else z)
    return Encoding(lin.weight, g.dtype, scale=s.astype(np.float64), zero_point=zz, axis=lin.block_axis,
                    block_size=g.block, role="param")


def quantize_weights(model: Any, data: Any, cfg: QuantizeConfig, *, progress: Progress | None = None,
                     preprocess: Any = None, notes: list[str] | None = None) -> WeightOnlyModel:
    """Weight-only quantization of ``model`` (path or ModelProto) with ``cfg`` (``activation_type: "float"``);
    ``notes``: the run's notes so far (the settled configuration's, :func:`qlinear.ptq.settle.settle`)."""
    t_all = time.perf_counter()
    notes = list(notes or [])
    given: list[onnx.ModelProto] = []
    m, label = load_checked(model, notes, load_external=False, given=given)
    base = model_dir(model)
    tensors = Tensors(m, base, label)
    linears, skipped = find_linears(m, exclude_nodes=cfg.exclude_nodes, exclude_op_types=cfg.exclude_op_types)
    by_weight = group_by_weight(linears, skipped, label)
    ds = _dataset(m, data, cfg, preprocess, notes)
    _check_upgrade(given, m, tensors, ds, label, notes)
    timings: dict[str, float] = {}
    hess = _hessians(m, base, by_weight, ds, cfg, label, progress, timings, notes)
    shared = _other_readers(m, by_weight)
    if "awq" in (cfg.weight_method or ""):
        hess, awq_notes = apply_awq(m, tensors.array, by_weight, hess, _awq_quantizer(cfg), skip=set(shared))
        tensors.by_name = {t.name: t for t in m.graph.initializer}  # the inserted Mul's 1/s too
        notes += awq_notes
    t0 = time.perf_counter()
    adv = progress("quantizing weights", len(by_weight)) if progress else None
    results = [_quantize_weight(name, lins, tensors, cfg, hess, shared, notes, adv)
               for name, lins in by_weight.items()]
    timings["quantize"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_all
    notes.append(coverage_note(m, set(by_weight), skipped))
    return WeightOnlyModel(m, tensors, results, cfg, label, model, ds, timings, notes, skipped=skipped)


def group_by_weight(linears: list[Linear], skipped: dict[str, str], label: str) -> dict[str, list[Linear]]:
    """The linears by weight (a weight read in two orientations is skipped for the second); refuses a model with
    none."""
    by_weight: dict[str, list[Linear]] = {}
    for lin in linears:
        same = by_weight.setdefault(lin.weight, [])
        if same and same[0].k_first != lin.k_first:
            skipped[lin.node] = f"weight {lin.weight} is used in another orientation by {same[0].node}"
            continue
        same.append(lin)
    if not by_weight:
        raise GraphError(f"{label}: no MatMul/Gemm with a constant 2-D float weight to quantize"
                         + (f" (skipped: {', '.join(f'{k}: {v}' for k, v in list(skipped.items())[:3])})"
                            if skipped else ""))
    return by_weight


def _dataset(m: onnx.ModelProto, data: Any, cfg: QuantizeConfig, preprocess: Any, notes: list[str]) -> Any:
    """The data checked against the model (None without data)."""
    from qlinear.ptq.data import load_dataset, model_inputs

    if data is None:
        return None
    ds = load_dataset(data, model_inputs(m), preprocess=preprocess, batch_axes=cfg.batch_axes)
    ds.validate(min(len(ds), cfg.calibration_samples + cfg.evaluation_samples))
    notes += ds.notes
    return ds


def _hessians(m: onnx.ModelProto, base: Path | None, by_weight: dict[str, list[Linear]], ds: Any,
              cfg: QuantizeConfig, label: str, progress: Progress | None, timings: dict[str, float],
              notes: list[str]) -> dict[str, tuple[np.ndarray, int]]:
    """GPTQ's Hessians of the linears' inputs (one ONNX Runtime pass); none for round to nearest."""
    if (cfg.weight_method or "minmax") not in WEIGHT_ONLY_DATA_METHODS:
        return {}
    if ds is None:
        raise ConfigError(f"weight_method {cfg.weight_method} needs calibration data (--data); round to nearest "
                          "(minmax, mse) needs none")
    n_cal = min(cfg.calibration_samples, len(ds))
    t0 = time.perf_counter()
    adv = progress("collecting Hessians", n_cal) if progress else None
    hess = _gram_matrices(m, base, [ls[0].input for ls in by_weight.values()], ds, n_cal, cfg.batch_size, label,
                          adv)
    timings["calibration"] = time.perf_counter() - t0
    notes.append(f"{cfg.weight_method} on {n_cal} calibration samples ({len(hess)} distinct linear inputs), damp "
                 f"{cfg.gptq_damp}, act_order {cfg.gptq_act_order}")
    return hess


def _gram_matrices(m: onnx.ModelProto, base: Path | None, inputs: list[str], ds: Any, n: int, batch_size: int,
                   label: str, progress: Callable[[int], None] | None) -> dict[str, tuple[np.ndarray, int]]:
    """``{input: (X^T X, tokens)}`` of the linears' inputs over samples ``[0, n)``: GPTQ's Hessians, from the one
    statistics pass (linears that share an input share one matrix); ONNX Runtime's memory arena off (the fetched
    activations of one batch are returned after each run)."""
    names = list(dict.fromkeys(inputs))
    graph_inputs = [i.name for i in m.graph.input]
    sess = Session(m, fetched(graph_inputs, names), level="basic", label=label,
                   external_dir=str(base) if base else None, arena=False)
    grams = {t: Gram() for t in names}
    accumulate(sess, ds, 0, n, batch_size, {t: [g] for t, g in grams.items()}, inputs=graph_inputs,
               progress=progress)
    return {t: (g.matrix, g.rows) for t, g in grams.items() if g.matrix is not None}


def _other_readers(m: onnx.ModelProto, by_weight: dict[str, list[Linear]]) -> dict[str, set[str]]:
    """Weight -> op types of the nodes other than its linears that read it (a tied embedding's Gather)."""
    linear_nodes = {lin.node for ls in by_weight.values() for lin in ls} | \
        {lin.transpose for ls in by_weight.values() for lin in ls if lin.transpose}
    shared: dict[str, set[str]] = {}
    for n in m.graph.node:
        for x in n.input:
            if x in by_weight and (n.name or n.output[0]) not in linear_nodes:
                shared.setdefault(x, set()).add(n.op_type)
    return shared


def _quantize_weight(name: str, lins: list[Linear], tensors: Tensors, cfg: QuantizeConfig,
                     hess: dict[str, tuple[np.ndarray, int]], shared: dict[str, set[str]], notes: list[str],
                     adv: Callable[[int], None] | None) -> WeightResult:
    """One weight's result: its encoding now; its integers GPTQ's (kept, int8) or round to nearest redone from the
    weight when written (only the scales are kept: memory holds one weight at a time)."""
    lin, grid = lins[0], grid_for(cfg)
    method = (cfg.weight_method or "minmax").removeprefix("awq+").replace("awq", "minmax")  # AWQ: weights scaled
    bits = int(cfg.weight_type.lstrip("u").removeprefix("int"))
    wdt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensors.by_name[name].data_type))
    if wdt == np.float16 and cfg.weights == "lpbq":
        raise ConfigError(f"{name}: LPBQ of float16 weights is not supported (the effective scale "
                          "int_scale * float scale is float32); convert the model to float32 or use per-block")
    per_channel = cfg.weights == "per-channel"
    g = _Grid(lin, cfg.weight_type, bits, lin.k if per_channel else int(cfg.block_size), per_channel,
              cfg.weights == "lpbq", wdt)
    if method.endswith("gptq") and name in shared:
        notes.append(f"{name}: also read by {', '.join(sorted(shared[name]))} (a tied embedding): GPTQ's error "
                     "compensation would shift the lookup too, so this weight is rounded to nearest")
    w = _as_nk(tensors.array(name), lin)
    h = hess.get(lin.input, (None, 0))[0]
    if method.endswith("gptq") and name not in shared:
        bq = _quantize_one(w, g, grid, method, cfg, h)
        kept = _stored(bq.q, g)
        integers = (lambda: kept)      # GPTQ's integers are the result: kept
    else:  # round to nearest: the integers are redone from the scales when the weight is written
        bq = _quantize_one(w, g, grid, method.removesuffix("gptq").rstrip("+") or "minmax", None, h)
        integers = _requantize(tensors, name, g, bq.scale, bq.zero_point)
    del w
    if adv:
        adv(1)
    has_zp = (g.unsigned if g.lpbq else grid != "symmetric")
    return WeightResult(lins, cfg.weight_type, g.block, per_channel, _encoding(g, bq), integers, weight_dtype=wdt,
                        lpbq=g.lpbq, has_zero_point=has_zp)


@dataclass
class _Grid:
    """One weight's quantization: its linear, type, block, granularity, float type; LPBQ's integer and
    per-channel scales once computed."""

    lin: Linear
    dtype: str
    bits: int
    block: int
    per_channel: bool
    lpbq: bool
    weight_dtype: np.dtype
    int_scale: np.ndarray | None = None
    pc_scale: np.ndarray | None = None

    @property
    def unsigned(self) -> bool:
        return self.dtype.startswith("u")

    @property
    def scale_dtype(self) -> np.dtype:
        return np.dtype(np.float16) if self.weight_dtype == np.float16 else np.dtype(np.float32)


def _stored(q: np.ndarray, g: _Grid) -> np.ndarray:
    """Integers ``[N, K]`` in the initializer's layout and the stored type's range (unsigned types shifted)."""
    off = 2 ** (g.bits - 1) if g.unsigned else 0
    q = q.astype(np.int16) + off if off else q
    return np.ascontiguousarray(q.T) if g.lin.k_first else q


def _requantize(tensors: Tensors, name: str, g: _Grid, scale: np.ndarray,
                zero_point: np.ndarray | None) -> Callable[[], np.ndarray]:
    """Round to nearest of the weight on its known grid, when written (the integers of :func:`quantize_rtn`)."""
    def f() -> np.ndarray:
        w = _as_nk(tensors.array(name), g.lin)
        z = np.zeros(scale.shape, np.int64) if zero_point is None else zero_point.astype(np.int64)
        q = quantize_blocks(padded(w, g.block), scale, z, g.bits).reshape(w.shape[0], -1)[:, :w.shape[1]]
        return _stored(q, g)
    return f


def coverage_note(m: onnx.ModelProto, quantized: set[str], skipped: dict[str, str]) -> str:
    """``quantized N of M weights; left float: ...``: the weights weight-only quantization covers (MatMul/Gemm) and
    the kinds it leaves in float (other operators' weights, skipped MatMul/Gemm with the reason)."""
    inits = {t.name for t in m.graph.initializer}
    other: dict[str, set[str]] = {}
    for n in m.graph.node:
        if n.op_type in WEIGHT_BEARING and n.op_type not in ("MatMul", "Gemm") and len(n.input) > 1 \
                and n.input[1] in inits and n.input[1] not in quantized:
            other.setdefault(n.op_type, set()).add(n.input[1])
    reasons: dict[str, int] = {}
    for why in skipped.values():
        reasons[why] = reasons.get(why, 0) + 1
    left = [f"{len(v)} {op} weight(s) (weight-only covers MatMul/Gemm)" for op, v in sorted(other.items())]
    left += [f"{v} MatMul/Gemm ({k})" for k, v in list(reasons.items())[:4]]
    total = len(quantized) + sum(len(v) for v in other.values()) + len(skipped)
    return f"weight-only: quantized {len(quantized)} of {total} weights" + (
        "; left float: " + ", ".join(left) if left else "")


def _check_upgrade(given: list[onnx.ModelProto], m: onnx.ModelProto, tensors: Tensors, ds: Any, label: str,
                   notes: list[str]) -> None:
    """When :func:`~qlinear.graph.load.load_checked` upgraded the opset of the model as ``given`` (``[model]``, else ``[]``): ``m``
    computes what it does on the first samples (models without external data, with data given; else a note says
    the upgrade was not checked)."""
    from qlinear.graph.passes.normalize import check_upgrade

    if not given:
        return
    if ds is None or len(ds) == 0 or tensors.external:
        notes.append("the opset upgrade was not checked against the original model ("
                     + ("the model has external data)" if tensors.external else "no data given)"))
        return
    notes.append(check_upgrade(given[0], m, [ds.sample(i) for i in range(min(4, len(ds)))], label))


def _quantize_one(w: np.ndarray, g: _Grid, grid: str, method: str, cfg: QuantizeConfig | None,
                  h: np.ndarray | None) -> BlockQuant:
    sd = g.scale_dtype
    if method.endswith("gptq") and h is not None:
        fixed = None
        if g.lpbq:
            rtn = quantize_rtn(w, g.bits, g.block, grid, scale_dtype=sd)
            s, _ = _lpbq(g, rtn.scale)
            fixed = (s, np.zeros(s.shape, np.int64))
        elif method == "aag+gptq":  # GPTQ on the activation-aware grids (static groups)
            a = activation_aware_grid(w, h, g.bits, g.block, grid, scale_dtype=sd)
            fixed = (a.scale, np.zeros(a.scale.shape, np.int64) if a.zero_point is None else a.zero_point)
        return gptq(w, h, g.bits, g.block, grid, damp=cfg.gptq_damp, act_order=cfg.gptq_act_order, fixed=fixed,
                    scale_dtype=sd)
    if method == "aag" and h is not None:
        return activation_aware_grid(w, h, g.bits, g.block, grid, scale_dtype=sd)
    bq = quantize_rtn(w, g.bits, g.block, grid, method="mse" if method == "mse" else "minmax", scale_dtype=sd)
    if g.lpbq:
        s, _ = _lpbq(g, bq.scale)
        wb = padded(w, g.block)
        q = quantize_blocks(wb, s, np.zeros(s.shape, np.int64), g.bits).reshape(w.shape[0], -1)[:, :w.shape[1]]
        bq = BlockQuant(np.ascontiguousarray(q), s, None, g.block)
    return bq


def _awq_quantizer(cfg: QuantizeConfig) -> Callable[[np.ndarray], np.ndarray]:
    """AWQ's search quantizer: round to nearest on the run's grid (per channel: one block of K; LPBQ: its blocks,
    float scales before the LPBQ decomposition)."""
    bits = int(cfg.weight_type.lstrip("u").removeprefix("int"))
    per_block = rtn_quantizer(bits, int(cfg.block_size), grid_for(cfg))
    return (lambda w: rtn_quantizer(bits, w.shape[1], grid_for(cfg))(w)) if cfg.weights == "per-channel" else per_block


def _lpbq(g: _Grid, block_scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LPBQ of ``[N, nb]`` block scales (spec §1.2, 4-bit integer scales): the effective float32 scales, recorded
    on ``g`` (int scales and per-channel float scale)."""
    if g.int_scale is None:
        pc, ints = lpbq_decompose(block_scale, 1, scale_bits=4)
        g.int_scale, g.pc_scale = ints.astype(np.int64), pc.reshape(-1).astype(np.float32)
    eff = (g.int_scale.astype(np.float32) * g.pc_scale[:, None]).astype(np.float32)
    return eff, g.int_scale


__all__ = ["WeightOnlyModel", "grid_for", "quantize_weights"]
