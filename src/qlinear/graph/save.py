"""Writing ONNX models atomically (external data for models over 2 GB)."""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from qlinear._atomic import atomic_open

_PROTO_LIMIT = 2**31 - 1


def save_model(m: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Serialize ``m`` to ``path`` via a temp file + rename; models past protobuf's 2 GB limit get external data
    (``<name>.data`` next to it)."""
    p = Path(path)
    if m.ByteSize() < _PROTO_LIMIT:
        data = m.SerializeToString()
        with atomic_open(p, "wb") as f:
            f.write(data)
        return
    tmp = p.with_name(f".{p.name}.tmp")
    onnx.save_model(m, str(tmp), save_as_external_data=True, location=p.name + ".data", size_threshold=1024)
    os.replace(tmp, p)
