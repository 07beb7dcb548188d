"""ONNX Runtime sessions for calibration and evaluation, with errors that say what failed.

ONNX Runtime raises its own exception types with multi-line messages; here a failure to build a session becomes a
:class:`~qlinear.errors.GraphError` naming the model, and a failure to run becomes a
:class:`~qlinear.errors.DataError` (bad feed) or ``GraphError`` (the model) naming the samples.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.errors import DataError, GraphError
from qlinear.graph.model import inline_bytes, serialized, weights_apart

LEVELS = ("disable", "basic", "extended", "all")
#: a model holding more bytes of weights hands them to ONNX Runtime as arrays (:func:`qlinear.graph.model.weights_apart`)
SHARE_ABOVE = 8 << 20
SPIN = False  #: the default of ``Session(spin=...)``


def _first_line(e: Exception) -> str:
    text = str(e).strip().replace("\n", " ")
    return text[:400] + ("…" if len(text) > 400 else "")


class Session:
    """An ``onnxruntime.InferenceSession`` over a model, with named errors.

    ``outputs`` are exposed as extra graph outputs; ``disable_qdq_fusion`` keeps ORT from fusing Q/DQ groups into its
    int8 kernels (the float emulation of a Q/DQ graph, at any optimization level); ``external_dir`` is the folder
    the external data of ``m`` (a graph loaded without it) is read from; ``arena`` / ``mem_pattern`` false: ONNX
    Runtime's CPU memory arena / memory pattern off (lower peak memory, the same outputs); ``spin``: ONNX Runtime's
    idle worker threads busy-wait for work (its default) instead of sleeping. Off by default: qlinear runs its sessions
    beside numpy work and the report runs three at once, where spinning threads take the cores that work needs
    (ppocr-v4-det's report run: a quarter of its CPU time); which thread computes what, and so every output, is the
    same either way.
    """

    def __init__(self, m: onnx.ModelProto, outputs: Sequence[str] = (), *, level: str = "basic",
                 label: str = "model", threads: int | None = None, disable_qdq_fusion: bool = False,
                 external_dir: str | None = None, arena: bool = True, mem_pattern: bool = True,
                 spin: bool = SPIN) -> None:
        import onnxruntime as ort

        have = {o.name for o in m.graph.output}
        extra = [t for t in dict.fromkeys(outputs) if t not in have]
        so = ort.SessionOptions()
        so.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
        so.log_severity_level = 4  # failures are raised as qlinear errors, not logged
        # idle worker threads sleep unless ``spin``: results alike, without burning the cores other work needs
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        if threads:
            so.intra_op_num_threads = int(threads)
        if disable_qdq_fusion:  # run QuantizeLinear/DequantizeLinear as ONNX defines them, not as int8 kernels
            so.add_session_config_entry("session.disable_quant_qdq", "1")
        if not arena:  # allocations returned to the system after each run (lower peak, a little slower)
            so.enable_cpu_mem_arena = False
        if not mem_pattern:  # no whole-run block planned from the first run's shapes (lower peak, same outputs)
            so.enable_mem_pattern = False
        if external_dir is not None:  # external data of a model passed as bytes: resolved in this folder
            so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(external_dir))
        self.label = label
        self._weights: list[Any] = []  # arrays handed to ONNX Runtime: they live as long as the session
        if external_dir is None and inline_bytes(m) > SHARE_ABOVE:
            m, taken = weights_apart(m)
            arrays = [numpy_helper.to_array(t) for t in taken]
            self._weights = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays] + arrays
            so.add_external_initializers([t.name for t in taken], self._weights[:len(taken)])
        try:
            self.sess = ort.InferenceSession(serialized(m, extra), so, providers=["CPUExecutionProvider"])
        except ValueError as e:  # > 2 GB protobuf
            raise GraphError(f"{label}: cannot serialize for ONNX Runtime ({e})") from None
        except Exception as e:  # noqa: BLE001 - onnxruntime's Fail / InvalidGraph / NotImplemented ...
            raise GraphError(f"{label}: ONNX Runtime cannot load it at optimization level {level!r}: "
                             f"{_first_line(e)}") from None
        self.input_names = [i.name for i in self.sess.get_inputs()]

    def run_all(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Every output of the session (the graph's and the exposed tensors) on ``feed``."""
        return self.run([o.name for o in self.sess.get_outputs()], feed, where="two samples in one call")

    def run(self, fetch: Sequence[str], feed: dict[str, np.ndarray], *, where: str = "samples") -> list[np.ndarray]:
        feed = {k: v for k, v in feed.items() if k in self.input_names}
        try:
            return self.sess.run(list(fetch), feed)
        except Exception as e:  # noqa: BLE001
            msg = _first_line(e)
            if "INVALID_ARGUMENT" in msg or "Unexpected input" in msg or "Got invalid dimensions" in msg:
                raise DataError(f"{where}: ONNX Runtime rejects the data for {self.label}: {msg}") from None
            raise GraphError(f"{self.label}: ONNX Runtime failed on {where}: {msg}") from None


def release_heap(collect: bool = True) -> None:
    """Return the heap memory freed so far to the system: ``gc.collect`` (with ``collect``) and, with glibc,
    ``malloc_trim(0)``, which gives back the free pages of every malloc arena, not only the top of the heap (the
    arrays and ONNX Runtime buffers of an earlier step leave them resident otherwise). No effect on any result."""
    if collect:
        gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (``None`` elsewhere)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc
        return None


def session(m: onnx.ModelProto, outputs: Sequence[str] = (), **kw: Any) -> Session:
    return Session(m, outputs, **kw)


__all__ = ["LEVELS", "SPIN", "Session", "release_heap", "session"]
