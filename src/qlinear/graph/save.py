"""Writing ONNX models atomically, and the one rule deciding external data (used by :func:`save_model` and by
:func:`save_ir`, the writer of ``onnx_ir`` models whose tensors are computed or read when written: weight-only
quantization, :mod:`qlinear.ptq.weightonly.writer`)."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import onnx_ir as ir

from qlinear._atomic import atomic_open, write_bytes
from qlinear.errors import GraphError
from qlinear.graph.ir import to_proto

#: a model (or, for the streaming weight-only writer, its tensors) above this many bytes is written with external
#: data: half protobuf's 2 GiB limit, leaving room for the graph and for the tensors a writer adds
EXTERNAL_ABOVE = 1 << 30
#: with external data, tensors of at most this many bytes stay inline in the model file
INLINE_MAX = 1024


def needs_external(nbytes: int) -> bool:
    """Whether a model of ``nbytes`` (serialized size, or its tensors' bytes) is written with external data."""
    return nbytes > EXTERNAL_ABOVE


def save_model(m: onnx.ModelProto, path: str | os.PathLike) -> list[str]:
    """Serialize ``m`` to ``path`` via a temp file + rename; models past :data:`EXTERNAL_ABOVE` get external data
    (``<name>.data`` next to it, tensors over :data:`INLINE_MAX` bytes). Returns the file names written."""
    p = Path(path)
    try:
        data = m.SerializeToString()   # encoded once (ByteSize would encode it too)
    except ValueError:   # over protobuf's 2 GB
        data = None
    if data is not None and not needs_external(len(data)):
        with atomic_open(p, "wb") as f:
            f.write(data)
        return [p.name]
    del data
    tmp = p.with_name(f".{p.name}.tmp")
    onnx.save_model(m, str(tmp), save_as_external_data=True, location=p.name + ".data", size_threshold=INLINE_MAX)
    os.replace(tmp, p)
    return [p.name, f"{p.name}.data"]


def save_ir(model: ir.Model, path: str | os.PathLike, *, external: bool) -> list[str]:
    """Serialize ``model`` to ``path`` (atomically); with ``external`` its tensors over :data:`INLINE_MAX` bytes go to
    ``<name>.data`` (densely packed, ``onnx_ir``'s writer), one at a time: a lazy tensor (``onnx_ir.LazyTensor``) is
    computed, written and dropped before the next, so a model larger than memory is written. ``model``'s initializers
    then refer to that file. Returns the file names written."""
    p = Path(path)
    files = [p.name]
    if external:
        ir.external_data.unload_from_model(model, p.parent, f"{p.name}.data", size_threshold_bytes=INLINE_MAX)
        files.append(f"{p.name}.data")
    try:
        data = to_proto(model).SerializeToString()
    except ValueError as e:
        raise GraphError(f"{p.name}: the graph alone is over 2 GB ({e}); write it with external data") from None
    write_bytes(p, data)
    return files
