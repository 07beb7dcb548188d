"""The result of :func:`qlinear.quantize` in every mode: :class:`QuantizedModel` (``save``, ``save_onnx``,
``save_encodings``, ``save_tflite``, ``report()``). Full-integer runs fill it with the Q/DQ model in memory;
weight-only runs return its subclass :class:`qlinear.ptq.weightonly.WeightOnlyModel`, which streams the weights
to the file instead.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO, Callable

import numpy as np
import onnx

from qlinear.encodings import EncodingSet
from qlinear.errors import ConfigError, GraphError, OutputError
from qlinear.graph.plan import Plan
from qlinear.ptq import targets
from qlinear.ptq.config import QuantizeConfig
from qlinear.ptq.data import Dataset


@dataclass
class QuantizedModel:
    """Result of :func:`quantize`: the Q/DQ model, its encodings, and what is needed to evaluate it.

    ``float_model`` is the model as given; ``reference_model`` the float model qlinear calibrated (BatchNorm folded,
    equalized), what the report compares against; ``encoded_model`` that model with the changes quantization made to
    its float parameters (bias correction, weights moved onto their AdaRound/SeqMSE grid, layers restored by
    precision repair): the float model the encodings apply to, ``apply(encodings, encoded_model) == model``.
    ``decisions`` lists the precision repair's changes (:mod:`qlinear.ptq.repair`).
    """

    model: onnx.ModelProto
    float_model: onnx.ModelProto
    reference_model: onnx.ModelProto
    encodings: EncodingSet
    config: QuantizeConfig
    plan: Plan
    dataset: Dataset
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    integer_check: Any = None  #: :class:`qlinear.graph.IntegerCheck` of ``model``
    encoded_model: onnx.ModelProto | None = None
    decisions: list[dict] = field(default_factory=list)
    _report: Any = None
    _float_session: Any = field(default=None, repr=False)  # calibration's ORT session (float model, every tensor)

    def __post_init__(self) -> None:
        if self.encoded_model is None:
            self.encoded_model = self.reference_model

    @property
    def rewritten(self) -> bool:
        """Whether the float model the encodings apply to differs from the input (BatchNorm folded, equalized, bias
        corrected, weights moved onto their grid)."""
        return self.encoded_model.graph.SerializeToString() != self.float_model.graph.SerializeToString()

    def save_onnx(self, path: str | Path | BinaryIO) -> list[str]:
        """Write the Q/DQ model to ``path`` (a file path, atomically, or a binary file object). Returns the file
        names written (with ``<name>.data`` when :func:`qlinear.graph.save.needs_external`; none for a file
        object)."""
        from qlinear.graph.save import save_model

        if is_file(path):
            if not is_binary(path):
                raise OutputError(f"save_onnx: {type(path).__name__} is a text file object; open the file in binary "
                                  "mode ('wb') or pass a path")
            path.write(self.model.SerializeToString())
            return []
        return save_model(self.model, path_of(path, "save_onnx"))

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
        from qlinear.tflite.export import export

        p = path_of(path, "save_tflite")
        bad = targets.check_tflite(self.model)
        if bad:
            raise GraphError(f"save_tflite: the model (target {self.config.target}) breaks {len(bad)} TFLite rule(s): "
                             + "; ".join(str(v) for v in bad[:5]) + (" ..." if len(bad) > 5 else "")
                             + "; quantize with target tflite")
        write_bytes(p, export(self.model, float_io=float_io))

    @property
    def fitted(self) -> bool:
        """Whether the run fitted anything on the data (its calibration samples are then not held out)."""
        return True

    def held_out(self) -> tuple[int, int]:
        """``(start, stop)`` of the samples the report evaluates: the ones after the calibration samples (all of them
        when the run fitted nothing on the data, :attr:`fitted`), or the calibration samples themselves when none are
        left (the report then says so)."""
        n = 0 if self.dataset is None else len(self.dataset)
        start = min(self.config.calibration_samples, n) if self.fitted else 0
        stop = min(n, start + self.config.evaluation_samples)
        if stop <= start:
            return 0, min(n, self.config.evaluation_samples or n)
        return start, stop

    def report(self, *, samples: int | None = None, progress: Callable[[int], None] | None = None,  # noqa: ANN201
               model_path: Path | None = None, sensitivity: int = 0,
               sensitivity_progress: Callable[[str, int], Callable[[int], None]] | None = None):
        """Accuracy report on the held-out samples (computed once): per-tensor SQNR, sensitivity ranking, output
        agreement; see :mod:`qlinear.ptq.evaluate`. ``model_path``: the quantized model as written, for results that
        evaluate the file (weight-only); this one evaluates the model in memory. ``sensitivity``: also the output's
        sensitivity to each quantized tensor on that many held-out samples (:mod:`qlinear.ptq.sensitivity`; 0: not
        computed), with a progress bar from ``sensitivity_progress(task, total)``."""
        check_samples(samples)
        if isinstance(sensitivity, bool) or not isinstance(sensitivity, (int, np.integer)) or sensitivity < 0:
            raise ConfigError(f"sensitivity: expected a number of held-out samples (0: none), got {sensitivity!r}")
        if self._report is None:
            from qlinear.ptq.evaluate import evaluate

            self._report = evaluate(self, samples=samples, progress=progress)
        if sensitivity and not self._report.sensitivity:
            from qlinear.ptq.sensitivity import as_dicts
            from qlinear.ptq.sensitivity import sensitivity as sensitivity_of

            self._report.sensitivity = as_dicts(sensitivity_of(self, samples=sensitivity,
                                                               progress=sensitivity_progress))
        return self._report

    @property
    def model_file(self) -> str:
        """The name :meth:`save` gives the quantized ONNX model."""
        return "model.qdq.onnx"

    def reportable(self, report: bool) -> bool:
        """Whether :meth:`save` with ``report`` writes the report (a weight-only run without data has none)."""
        return report

    def save(self, outdir: str | Path | Any, *, encodings_version: str = "2.0.0", report: bool = True,
             progress: Callable[[int], None] | None = None) -> list[str]:
        """Write the run's outputs into ``outdir`` as one transaction (all new files or the old ones untouched):
        ``model.qdq.onnx`` (weight-only: or ``model.matmulnbits.onnx``, with ``.data`` when external),
        ``model.encodings``, ``model.float.onnx`` (when BatchNorm folding or equalization changed the float model: the
        encodings name its tensors), ``model.tflite`` for target ``tflite``, and with ``report`` ``report.json`` and
        ``report.html``. Returns the file names written."""
        from qlinear.encodings import VERSIONS
        from qlinear.outdir import OutputFolder

        if encodings_version not in VERSIONS:
            raise ConfigError(f"encodings version {encodings_version!r}: expected one of {', '.join(VERSIONS)}")
        if not isinstance(outdir, (str, os.PathLike, OutputFolder)):
            raise OutputError(f"save: expected an output folder path, got {type(outdir).__name__}")
        folder = outdir if isinstance(outdir, OutputFolder) else OutputFolder(outdir)
        folder.check()
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
                from qlinear.ptq.report import to_html, to_json

                write_text(stage / "report.json", to_json(self, rep))
                write_text(stage / "report.html", to_html(self, rep))
            written = sorted(p.name for p in stage.iterdir())
        return written


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


def path_of(x: Any, what: str) -> Path:
    if not isinstance(x, (str, os.PathLike)):
        raise OutputError(f"{what}: expected a file path{' or a file object' if what != 'save_tflite' else ''}, "
                          f"got {type(x).__name__}")
    return Path(x)


__all__ = ["QuantizedModel", "check_samples", "is_binary", "is_file", "path_of"]
