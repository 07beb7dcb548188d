"""Initializers read one at a time: a model loaded without its external data (``onnx.load(...,
load_external_data=False)``) keeps only the graph in memory; :meth:`Tensors.array` reads one tensor from its
external data file (``numpy.fromfile`` at its offset: exactly that tensor's bytes, nothing mapped beyond it) or
from the proto; :meth:`Tensors.nk_rows` reads a slab of output channels of an external weight (exactly its bytes: the
process holds that slab only). External paths are resolved inside the model's folder only (ONNX external data rule; a path that
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

    def is_external(self, name: str) -> bool:
        return external_info(self.by_name[name]) is not None

    def nk_rows(self, name: str, k_first: bool, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of the 2-D weight ``name`` seen as ``W[N, K]`` (stored ``[K, N]`` when ``k_first``),
        float32, contiguous. An external weight's slab is read with exactly its bytes (contiguous rows: one read;
        ``[K, N]`` storage: one ``preadv`` per stored row into the slab; no mapping of the file, whose neighbouring
        pages would count in the process's memory); an inline one is converted whole and sliced."""
        t = self.by_name[name]
        info = external_info(t)
        if info is None:
            a = numpy_helper.to_array(t)
            return np.array(a[:, start:stop].T if k_first else a[start:stop], np.float32, order="C")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        path, (d0, d1) = self._path(t, info), tuple(t.dims)
        off = int(info.get("offset", 0))
        if not k_first:
            a = np.fromfile(path, dtype=dtype, count=(stop - start) * d1, offset=off + start * d1 * dtype.itemsize)
            got = a.size // d1 if d1 else 0
            slab = a.reshape(got, d1)
        else:
            slab = np.empty((d0, stop - start), dtype)
            width, got = (stop - start) * dtype.itemsize, d0
            with open(path, "rb", buffering=0) as f:
                fd = f.fileno()
                for i in range(d0):
                    if os.preadv(fd, [memoryview(slab[i]).cast("B")], off + (i * d1 + start) * dtype.itemsize) \
                            != width:
                        got = 0
                        break
        if got != (d0 if k_first else stop - start):
            raise GraphError(f"{self.label}: external data of {t.name!r} in {path.name} is truncated")
        return np.array(slab.T if k_first else slab, np.float32, order="C")

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
