"""The result of :func:`qlinear.quantize` in every mode: :class:`QuantizedModel` (``save``, ``save_onnx``,
``save_encodings``, ``save_tflite``, ``report()``). Full-integer runs fill it with the Q/DQ model in memory;
weight-only runs (``config.weight_only``) with the weights that :attr:`QuantizedModel.streamed` writes to the file
one tensor at a time (:class:`qlinear.ptq.weightonly.StreamedWeights`).
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO, Callable

import numpy as np
import onnx

from qlinear.encodings import EncodingSet
from qlinear.errors import ConfigError, GraphError, OutputError, UnsupportedError
from qlinear.graph.plan import Plan
from qlinear.ptq import targets
from qlinear.ptq.config import WEIGHT_ONLY_DATA_METHODS, QuantizeConfig
from qlinear.ptq.data import Dataset


@dataclass
class QuantizedModel:
    """Result of :func:`quantize`: the Q/DQ model, its encodings, and what is needed to evaluate it.

    ``float_model`` is the model as given; ``reference_model`` the float model qlinear calibrated (BatchNorm folded,
    equalized), what the report compares against; ``encoded_model`` that model with the changes quantization made to
    its float parameters (bias correction, weights moved onto their AdaRound/SeqMSE grid, layers restored by
    precision repair): the float model the encodings apply to, ``apply(encodings, encoded_model) == model``.
    ``decisions`` lists the precision repair's changes (:mod:`qlinear.ptq.algorithms.repair`).

    Weight-only runs (``config.weight_only``, activations float) hold no quantized model in memory: ``streamed``
    writes it one tensor at a time (:class:`qlinear.ptq.weightonly.StreamedWeights`); ``float_model`` (and
    ``reference_model``, what the report compares against) is the float graph as loaded, without its external data;
    ``encoded_model`` the graph the encodings apply to (with AWQ: the ``1/s`` folded into the norms, the scaled
    weights ``W diag(s)`` of a model with external data in ``streamed.tensors``, inline otherwise); ``plan`` is None,
    ``dataset`` None without data, and :attr:`model` builds the quantized model in memory on request (small
    models).
    """

    qdq_model: onnx.ModelProto | None  #: the full-integer Q/DQ model (None for weight-only: :attr:`model`)
    float_model: onnx.ModelProto
    reference_model: onnx.ModelProto
    encodings: EncodingSet
    config: QuantizeConfig
    plan: Plan | None
    dataset: Dataset | None
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    integer_check: Any = None  #: :class:`qlinear.graph.IntegerCheck` of ``model``
    encoded_model: onnx.ModelProto | None = None
    decisions: list[dict] = field(default_factory=list)
    _report: Any = None
    _float_session: Any = field(default=None, repr=False)  # calibration's ORT session (float model, every tensor)
    _quant_session: Any = field(default=None, repr=False)  # (model, the load check's ORT session of it, level all)
    _batch: int | None = field(default=None, repr=False)  # samples per ORT call calibration chose (fetched bytes)
    _ahead: Any = field(default=None, repr=False)  # the report's passes started while quantizing (report.passes.Passes)
    streamed: Any = field(default=None, repr=False)  #: weight-only: the quantized weights, written when saved
    #: the plan quantized nothing (a lone tree ensemble): ``model`` is the float model, without Q/DQ, and the report
    #: runs one session for both (no calibration ran)
    unquantized: bool = False

    def __post_init__(self) -> None:
        if self.encoded_model is None:
            self.encoded_model = self.reference_model

    def __repr__(self) -> str:
        cfg = self.config
        what = (f"weight-only {cfg.weight_type} {cfg.weights}, {cfg.output_format}" if cfg.weight_only else
                f"{cfg.weight_type} weights {cfg.weights}, {cfg.activation_type} activations, target {cfg.target}")
        return f"QuantizedModel({what}: {len(self.encodings)} encodings)"

    @property
    def model(self) -> onnx.ModelProto:
        """The quantized model in memory (weight-only: built from the streamed weights; large models:
        :meth:`save_onnx`)."""
        return self.qdq_model if self.streamed is None else onnx.load_from_string(self.model_bytes())

    @property
    def rewritten(self) -> bool:
        """Whether the float model the encodings apply to differs from the input (BatchNorm folded, equalized, bias
        corrected, weights moved onto their grid; never for weight-only)."""
        if self.streamed is not None:
            return False
        return self.encoded_model.graph != self.float_model.graph   # field by field, without serializing

    def save_onnx(self, path: str | Path | BinaryIO, *, output_format: str | None = None,
                  external: bool | None = None) -> list[str]:
        """Write the quantized model to ``path`` (a file path, atomically, or a binary file object). Returns the file
        names written (with ``<name>.data`` when :func:`qlinear.graph.save.needs_external`, or for weight-only when
        the input had external data; none for a file object). Weight-only: ``output_format`` ``qdq`` or
        ``matmulnbits`` (default: the config's), ``external`` forces external data on or off."""
        from qlinear.graph.save import save_model

        if self.streamed is None and (output_format not in (None, "qdq") or external is not None):
            raise ConfigError("save_onnx: output_format and external apply to weight-only results (activation_type "
                              "float); this model is written as Q/DQ, with external data past 1 GiB")
        if is_file(path):
            if not is_binary(path):
                raise OutputError(f"save_onnx: {type(path).__name__} is a text file object; open the file in binary "
                                  "mode ('wb') or pass a path")
            if external:
                raise OutputError("save_onnx: external data needs a file path (the .data file is written beside "
                                  "it), not a file object")
            path.write(self.model_bytes(output_format))
            return []
        if self.streamed is not None:
            return self.streamed.save_onnx(path_of(path, "save_onnx"), output_format or self.config.output_format,
                                           external)
        return save_model(self.model, path_of(path, "save_onnx"))

    write_onnx = save_onnx  #: the former name of :meth:`save_onnx`

    def model_bytes(self, output_format: str | None = None) -> bytes:
        """The serialized quantized model without external data (small models)."""
        if self.streamed is None:
            return self.qdq_model.SerializeToString()
        return self.streamed.model_bytes(output_format or self.config.output_format)

    def save_encodings(self, path: str | Path | IO, version: str | None = None) -> None:
        """Write the AIMET encodings (``version``, default 2.0.0) to ``path`` (a file path or a file object)."""
        from qlinear.encodings import VERSIONS, save

        version = version or "2.0.0"
        if version not in VERSIONS:
            raise ConfigError(f"save_encodings: version {version!r} is not one of {', '.join(VERSIONS)}")
        if is_file(path) and is_binary(path):
            buf = io.StringIO()
            save(self.encodings, buf, version=version, drop_float=True)
            path.write(buf.getvalue().encode("utf-8"))
            return
        save(self.encodings, path if is_file(path) else path_of(path, "save_encodings"), version=version,
             drop_float=True)

    def save_tflite(self, path: str | Path, *, float_io: bool = True) -> None:
        """Write the full-integer ``.tflite`` of the model (target ``tflite``; :func:`qlinear.tflite.export`): NHWC
        float input and output (``float_io=False``: the integers), every parameter the Q/DQ model's own. A model
        that breaks the TFLite int8 rules (:func:`qlinear.ptq.targets.check_tflite`) is refused."""
        from qlinear._atomic import write_bytes
        from qlinear.tflite.export import convert, island_note

        p = path_of(path, "save_tflite")
        if self.streamed is not None:
            raise UnsupportedError("save_tflite: a weight-only model (activation_type float) keeps float activations "
                                   "and a full-integer .tflite needs them quantized; quantize with activation_type "
                                   "int8 and target tflite, or save the ONNX model (save_onnx)")
        bad = targets.check_tflite(self.model)
        if bad:
            raise GraphError(f"save_tflite: the model (target {self.config.target}) breaks {len(bad)} TFLite rule(s): "
                             + "; ".join(str(v) for v in bad[:5]) + (" ..." if len(bad) > 5 else "")
                             + "; quantize with target tflite")
        out = convert(self.model, float_io=float_io, full_integer=self.config.full_integer)
        note = island_note(out.islands)
        if note and note not in self.notes:
            self.notes.append(note)
        check_loads_in_litert(out.data)
        write_bytes(p, out.data)

    @property
    def fitted(self) -> bool:
        """Whether the run fitted anything on the data (its calibration samples are then not held out; weight-only
        round to nearest never sees the data)."""
        return self.streamed is None or self.config.w_method in WEIGHT_ONLY_DATA_METHODS

    def held_out(self) -> tuple[int, int]:
        """``(start, stop)`` of the samples the report evaluates: the ones after the calibration samples (all of them
        when the run fitted nothing on the data, :attr:`fitted`), or the calibration samples themselves when none are
        left (the report then says so)."""
        return held_out_span(0 if self.dataset is None else len(self.dataset), self.config, self.fitted)

    def report(self, *, samples: int | None = None, progress: Callable[[int], None] | None = None,  # noqa: ANN201
               model_path: Path | None = None, sensitivity: int = 0,
               sensitivity_progress: Callable[[str, int], Callable[[int], None]] | None = None):
        """Accuracy report on the held-out samples (computed once), see :mod:`qlinear.ptq.report.evaluate`: output
        agreement; per-tensor SQNR (full-integer), or per-weight SQNR against round to nearest, sizes and coverage
        (weight-only). ``model_path``: the weight-only model as written (else written to a temporary folder first);
        a full-integer result evaluates the model in memory. ``sensitivity``: also the output's sensitivity to each
        quantized tensor on that many held-out samples (:mod:`qlinear.ptq.report.sensitivity`; 0: not computed; full-integer
        only), with a progress bar from ``sensitivity_progress(task, total)``."""
        check_samples(samples)
        if isinstance(sensitivity, bool) or not isinstance(sensitivity, (int, np.integer)) or sensitivity < 0:
            raise ConfigError(f"sensitivity: expected a number of held-out samples (0: none), got {sensitivity!r}")
        if self._report is None:
            self._report = self._evaluate(samples, progress, model_path)
        if sensitivity and not self._report.sensitivity:
            if self.streamed is not None:
                raise ConfigError("sensitivity: not available for weight-only results (activation_type float)")
            from qlinear.ptq.report.sensitivity import as_dicts
            from qlinear.ptq.report.sensitivity import sensitivity as sensitivity_of

            scored = {o: r["sqnr_db"] for o, r in self._report.outputs.items()
                      if np.isfinite(r.get("sqnr_db", np.inf))}   # the worst output (CenterFace's offsets)
            self._report.sensitivity = as_dicts(sensitivity_of(self, samples=sensitivity, progress=sensitivity_progress,
                                                               output=min(scored, key=scored.get) if scored else None))
        return self._report

    def _evaluate(self, samples: int | None, progress: Callable[[int], None] | None, model_path: Path | None):  # noqa: ANN202
        from qlinear.ptq.report.evaluate import evaluate

        if self.dataset is None:
            raise ConfigError("report: no data was given; pass --data (or --no-report)")
        if self.streamed is not None and model_path is None:
            with tempfile.TemporaryDirectory() as d:
                p = Path(d) / self.model_file
                self.save_onnx(p)
                return evaluate(self, samples=samples, progress=progress, model_path=p)
        return evaluate(self, samples=samples, progress=progress, model_path=model_path)

    @property
    def model_file(self) -> str:
        """The name :meth:`save` gives the quantized ONNX model."""
        if self.streamed is not None and self.config.output_format == "matmulnbits":
            return "model.matmulnbits.onnx"
        return "model.qdq.onnx"

    def reportable(self, report: bool) -> bool:
        """Whether :meth:`save` with ``report`` writes the report (a weight-only run without data has none)."""
        if self.streamed is not None:
            return report and self.dataset is not None and bool(self.config.evaluation_samples)
        return report

    def config_report(self) -> dict[str, Any]:
        """The settled configuration as the report shows it: every option (full-integer), or only the options a
        weight-only run uses."""
        d = self.config.to_dict()
        if self.streamed is None:
            return d
        keep = set(WEIGHT_ONLY_OPTIONS)
        if self.config.weights != "per-channel":
            keep.add("block_size")
        if self.config.w_method in WEIGHT_ONLY_DATA_METHODS:
            keep |= {"calibration_samples"} | ({"gptq_act_order", "gptq_damp"} if "gptq" in self.config.w_method
                                              else set())
            if self.config.w_method in ("gptq", "aag+gptq"):  # sequential or one-pass Hessians
                keep.add("gptq_sequential")
        d["weight_method"] = self.config.w_method
        return {k: v for k, v in d.items() if k in keep}

    def save(self, outdir: str | Path | Any, *, encodings_version: str = "2.0.0", report: bool = True,
             progress: Callable[[int], None] | None = None, latency: bool = False) -> list[str]:
        """Write the run's outputs into ``outdir`` as one transaction (all new files or the old ones untouched):
        ``model.qdq.onnx`` (weight-only: or ``model.matmulnbits.onnx``, with ``.data`` when external),
        ``model.encodings``, ``model.float.onnx`` (when BatchNorm folding or equalization changed the float model: the
        encodings name its tensors), ``model.tflite`` for target ``tflite``, and with ``report`` ``report.json`` and
        ``report.html`` (``latency``: with the written model timed against the float model in ONNX Runtime, target
        ort: :func:`~qlinear.ptq.report.deployed.ort_latency`). Returns the file names written."""
        from qlinear.encodings import VERSIONS
        from qlinear.outdir import OutputFolder

        if encodings_version not in VERSIONS:
            raise ConfigError(f"encodings version {encodings_version!r}: expected one of {', '.join(VERSIONS)}")
        if not isinstance(outdir, (str, os.PathLike, OutputFolder)):
            raise OutputError(f"save: expected an output folder path, got {type(outdir).__name__}")
        folder = outdir if isinstance(outdir, OutputFolder) else OutputFolder(outdir)
        folder.check()
        if not self.reportable(report):   # no report to run the load check's session: its memory goes now
            self._quant_session = None
        with folder.transaction() as stage:
            t0 = time.perf_counter()
            self.save_onnx(stage / self.model_file)
            self.timings["write"] = time.perf_counter() - t0
            self.save_encodings(stage / "model.encodings", version=encodings_version)
            if self.rewritten:
                from qlinear.graph.save import save_model

                save_model(self.encoded_model, stage / "model.float.onnx")
            if self.config.target == "tflite" and not self.config.weight_only:
                self.save_tflite(stage / "model.tflite")
            if self.reportable(report):
                rep = self.report(progress=progress, model_path=stage / self.model_file)
                from qlinear._atomic import write_text
                from qlinear.ptq.report.deployed import deployed
                rep.deployed = deployed(self, rep, stage, self.model_file, latency=latency)
                from qlinear.ptq.report.html import to_html, to_json

                write_text(stage / "report.json", to_json(self, rep))
                write_text(stage / "report.html", to_html(self, rep))
            written = sorted(p.name for p in stage.iterdir())
        return written


#: the options every weight-only run uses (with ``block_size`` for blocks, the GPTQ options for ``gptq``)
WEIGHT_ONLY_OPTIONS = ("activation_type", "weight_type", "weights", "weight_method", "weight_symmetric", "target",
                       "output_format", "lm_head_type", "exclude_nodes", "exclude_op_types", "evaluation_samples",
                       "batch_size", "batch_axes")


def held_out_span(n: int, cfg: QuantizeConfig, fitted: bool = True) -> tuple[int, int]:
    """``(start, stop)`` of the held-out samples among ``n`` (:meth:`QuantizedModel.held_out`)."""
    start = min(cfg.calibration_samples, n) if fitted else 0
    stop = min(n, start + cfg.evaluation_samples)
    if stop <= start:
        return 0, min(n, cfg.evaluation_samples or n)
    return start, stop


def check_samples(samples: Any) -> None:
    """``report(samples=...)``: None or a positive integer."""
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, (int, np.integer))
                                or samples < 1):
        raise ConfigError(f"samples: expected a positive integer (how many held-out samples to evaluate), got "
                          f"{samples!r}")


def is_file(x: Any) -> bool:
    return callable(getattr(x, "write", None))


def is_binary(f: Any) -> bool:
    return isinstance(f, (io.RawIOBase, io.BufferedIOBase)) or "b" in str(getattr(f, "mode", ""))


def check_loads_in_litert(data: bytes) -> None:
    """A written ``.tflite`` must load in LiteRT (when ``ai-edge-litert`` is installed): an
    :class:`~qlinear.errors.OutputError` naming LiteRT's complaint otherwise, before anything is written."""
    import importlib.util

    if importlib.util.find_spec("ai_edge_litert") is None:
        return
    from ai_edge_litert.interpreter import Interpreter

    try:
        Interpreter(model_content=data, num_threads=1).allocate_tensors()
    except Exception as e:  # noqa: BLE001 - LiteRT raises RuntimeError / ValueError with multi-line text
        first = " ".join(str(e).split())[:300]
        raise OutputError(f"save_tflite: the .tflite built from this model does not load in LiteRT ({first}); nothing "
                          "was written. This is a qlinear defect: please report it; target ort writes a Q/DQ model "
                          "ONNX Runtime runs") from None


def path_of(x: Any, what: str) -> Path:
    if not isinstance(x, (str, os.PathLike)):
        raise OutputError(f"{what}: expected a file path{' or a file object' if what != 'save_tflite' else ''}, "
                          f"got {type(x).__name__}")
    return Path(x)


__all__ = ["QuantizedModel", "WEIGHT_ONLY_OPTIONS", "check_samples", "held_out_span", "is_binary", "is_file",
           "path_of"]
