"""Encodings: one in-memory model of quantization parameters (:class:`Encoding`, :class:`EncodingSet`), and readers
and writers for the AIMET encoding formats 0.6.1, 1.0.0, 2.0.0 and 2.1.0.

This package never imports :mod:`qlinear.graph` (nor ``onnx``). What needs a model belongs to the graph layer:
``qlinear.graph.resolve`` (axes and roles), ``validate``, ``apply`` (a Q/DQ model), ``extract`` (the encodings of a
Q/DQ model) and ``load_encodings`` (load + resolve).

Spec: ``aimet-encoding-format.txt``; what AIMET 2.42 really writes: notes ``aimet.md`` §3.
"""

from __future__ import annotations

from qlinear.encodings.io import VERSIONS, detect_version, dumps, load, loads, save
from qlinear.encodings.model import AIMET_ONNX, AIMET_TORCH, Encoding, EncodingSet, Style

_MOVED = ("apply", "validate", "extract", "resolve")


def __getattr__(name: str) -> object:
    if name in _MOVED:
        raise AttributeError(f"qlinear.encodings.{name} moved to the graph layer: use qlinear.graph.{name} "
                             f"(from qlinear import graph as G; G.{name}(...))")
    raise AttributeError(f"module 'qlinear.encodings' has no attribute {name!r}")


__all__ = ["AIMET_ONNX", "AIMET_TORCH", "Encoding", "EncodingSet", "Style", "VERSIONS", "detect_version", "dumps",
           "load", "loads", "save"]
