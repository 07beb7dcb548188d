"""Encodings: one in-memory model of quantization parameters (:class:`Encoding`, :class:`EncodingSet`), readers and
writers for the AIMET encoding formats 0.6.1, 1.0.0, 2.0.0 and 2.1.0, and the bridge to ONNX Q/DQ models
(:func:`validate`, :func:`apply`, :func:`extract`, which load ``onnx`` on first use).

Spec: ``aimet-encoding-format.txt``; what AIMET 2.42 really writes: notes ``aimet.md`` §3.
"""

from __future__ import annotations

from typing import Any

from qlinear.encodings.io import VERSIONS, detect_version, dumps, load, loads, save
from qlinear.encodings.model import AIMET_ONNX, AIMET_TORCH, Encoding, EncodingSet, Style


def validate(encoding_set: EncodingSet, model: Any):  # noqa: ANN201 - returns qlinear.graph.bridge.Report
    """Check ``encoding_set`` against an ONNX model; returns a report listing every problem."""
    from qlinear.graph.bridge import validate as _v

    return _v(encoding_set, model)


def apply(encoding_set: EncodingSet, model: Any, **kw: Any):  # noqa: ANN201 - returns onnx.ModelProto
    """A Q/DQ ONNX model carrying ``encoding_set``."""
    from qlinear.graph.bridge import apply as _a

    return _a(encoding_set, model, **kw)


def extract(qdq_model: Any, **kw: Any) -> EncodingSet:
    """The encodings of a Q/DQ ONNX model."""
    from qlinear.graph.bridge import extract as _e

    return _e(qdq_model, **kw)


__all__ = ["AIMET_ONNX", "AIMET_TORCH", "Encoding", "EncodingSet", "Style", "VERSIONS", "apply", "detect_version",
           "dumps", "extract", "load", "loads", "save", "validate"]
