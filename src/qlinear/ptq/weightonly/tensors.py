"""Initializers read one at a time: a model loaded without its external data (``onnx.load(...,
load_external_data=False)``) keeps only the graph in memory; :meth:`Tensors.array` reads one tensor from its
external data file (``numpy.fromfile`` at its offset: exactly that tensor's bytes, nothing mapped beyond it) or
from the proto. External paths are resolved inside the model's folder only (ONNX external data rule; a path that
leaves it is refused)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.errors import GraphError


def external_info(t: onnx.TensorProto) -> dict[str, str] | None:
    if t.data_location != onnx.TensorProto.EXTERNAL:
        return None
    return {e.key: e.value for e in t.external_data}


class Tensors:
    """Lazy access to the initializers of ``model`` (a graph whose external data is not loaded) in ``base_dir``."""

    def __init__(self, model: onnx.ModelProto, base_dir: Path | None, label: str = "model") -> None:
        self.model = model
        self.base = base_dir
        self.label = label
        self.by_name = {t.name: t for t in model.graph.initializer}

    @property
    def external(self) -> bool:
        return any(external_info(t) is not None for t in self.by_name.values())

    def nbytes(self, name: str) -> int:
        t = self.by_name[name]
        info = external_info(t)
        if info is not None:
            return int(info.get("length", 0))
        return len(t.raw_data) if t.HasField("raw_data") else t.ByteSize()

    def array(self, name: str) -> np.ndarray:
        t = self.by_name[name]
        info = external_info(t)
        if info is None:
            return numpy_helper.to_array(t)
        return self._read_external(t, info)

    def raw(self, name: str) -> bytes | None:
        """The external bytes of ``name`` as stored (``None`` for an inline tensor)."""
        t = self.by_name[name]
        info = external_info(t)
        if info is None:
            return None
        path = self._path(t, info)
        off, length = int(info.get("offset", 0)), int(info.get("length", -1))
        with open(path, "rb") as f:
            f.seek(off)
            return f.read() if length < 0 else f.read(length)

    def _path(self, t: onnx.TensorProto, info: dict[str, str]) -> Path:
        if self.base is None:
            raise GraphError(f"{self.label}: initializer {t.name!r} has external data but the model was not read "
                             "from a file; pass the model's path")
        loc = info.get("location", "")
        p = (self.base / loc).resolve()
        if os.path.isabs(loc) or self.base.resolve() not in p.parents:
            raise GraphError(f"{self.label}: initializer {t.name!r} points to external data {loc!r} outside the "
                             "model's folder; refusing to read it")
        if not p.is_file():
            raise GraphError(f"{self.label}: external data file {loc!r} of initializer {t.name!r} not found next "
                             "to the model")
        return p

    def _read_external(self, t: onnx.TensorProto, info: dict[str, str]) -> np.ndarray:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        count = int(np.prod(t.dims)) if t.dims else 1
        path = self._path(t, info)
        off = int(info.get("offset", 0))
        try:
            a = np.fromfile(path, dtype=dtype, count=count, offset=off)
        except (OSError, ValueError) as e:
            raise GraphError(f"{self.label}: cannot read initializer {t.name!r} from {path.name}: {e}") from None
        if a.size != count:
            raise GraphError(f"{self.label}: external data of {t.name!r} in {path.name} is truncated ({a.size} of "
                             f"{count} values)")
        return a.reshape(tuple(t.dims))
