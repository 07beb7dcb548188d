"""Encodings against an ONNX model: :func:`resolve` gives 0.6.1/1.0.0 encodings (which store no axes) the model's
axes and tells params from activations (2.x files do not say which is which); :func:`load_encodings` loads a file
and resolves it. The table of axes per operator is :mod:`qlinear.graph.axes`.

This is the graph layer's side of the line: :mod:`qlinear.encodings` never reads a model.
"""

from __future__ import annotations

from typing import Any

from qlinear.encodings import EncodingSet, load
from qlinear.encodings.io import Source
from qlinear.errors import EncodingError
from qlinear.graph.axes import resolve_set


def resolve(es: EncodingSet, model: Any) -> EncodingSet:
    """``es`` with the axes of ``model`` (an ``onnx.ModelProto``, a path or serialized bytes) given to unresolved
    per-channel and per-block encodings, and initializers (or their Q/DQ chains) marked as params, other tensors of
    the graph as activations. Raises ``EncodingError`` for scales that do not fit the model's tensors."""
    if not isinstance(es, EncodingSet):
        raise EncodingError(f"resolve(es, model): es must be an EncodingSet, got {type(es).__name__} (read a file "
                            "with qlinear.encodings.load, or use qlinear.graph.load_encodings(path, model))")
    if model is None:
        raise EncodingError("resolve(es, model): model is None; pass the ONNX model (ModelProto or path) the "
                            "encodings belong to")
    return resolve_set(es, model)


def load_encodings(src: Source, model: Any) -> EncodingSet:
    """``resolve(qlinear.encodings.load(src), model)``: an encodings file (any version) read and resolved."""
    return resolve(load(src), model)


__all__ = ["load_encodings", "resolve"]
