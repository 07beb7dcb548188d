"""Initializers read one at a time: a model loaded without its external data (``onnx.load(...,
load_external_data=False)``) keeps only the graph in memory; :meth:`Tensors.array` reads one tensor from its
external data file (``numpy.fromfile`` at its offset: exactly that tensor's bytes, nothing mapped beyond it) or
from the proto; :meth:`Tensors.nk_rows` reads a slab of output channels of an external weight (exactly its bytes: the
process holds that slab only). External paths are resolved inside the model's folder only (ONNX external data rule; a path that
leaves it is refused).

A tensor's values can be replaced for the rest of the run (:meth:`Tensors.replace`: AWQ's scaled weights): the new
values go to a temporary file (:class:`~qlinear.ptq.weightonly.kept.KeptStore`), not into the graph, and every read
returns them (slabs too) unless it asks for the original; :meth:`Tensors.inline_replaced` writes those of inline
initializers into the graph at the end (a small model's graph stays complete)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.errors import GraphError
from qlinear.ptq.weightonly.kept import KeptStore


def external_info(t: onnx.TensorProto) -> dict[str, str] | None:
    if t.data_location != onnx.TensorProto.EXTERNAL:
        return None
    return {e.key: e.value for e in t.external_data}


def _read_rows(fd: int, off: int, dtype: np.dtype, dims: tuple[int, ...], k_first: bool, start: int,
               stop: int) -> np.ndarray | None:
    """Rows ``[start, stop)`` of ``W[N, K]`` stored at ``off`` in ``fd`` as ``dims`` (``[K, N]`` when ``k_first``),
    in the stored layout: contiguous rows in one buffer, or one ``preadv`` per stored row into the slab; ``None``
    when the file is short."""
    d0, d1 = dims
    if not k_first:
        slab = np.empty((stop - start, d1), dtype)
        return slab if _pread_into(fd, slab, off + start * d1 * dtype.itemsize) else None
    slab = np.empty((d0, stop - start), dtype)
    for i in range(d0):
        if not _pread_into(fd, slab[i], off + (i * d1 + start) * dtype.itemsize):
            return None
    return slab


def _pread_into(fd: int, a: np.ndarray, off: int) -> bool:
    """Fill the contiguous array ``a`` from ``fd`` at ``off``; false when the file ends first."""
    view, done = memoryview(a).cast("B"), 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], off + done)
        if n <= 0:
            return False
        done += n
    return True


class Tensors:
    """Lazy access to the initializers of ``model`` (a graph whose external data is not loaded) in ``base_dir``."""

    def __init__(self, model: onnx.ModelProto, base_dir: Path | None, label: str = "model") -> None:
        self.model = model
        self.base = base_dir
        self.label = label
        self.by_name = {t.name: t for t in model.graph.initializer}
        self.replaced: dict[str, tuple[int, int]] = {}  # name -> (offset, length) of its new values in the store
        self.store: KeptStore | None = None

    def replace(self, name: str, values: np.ndarray) -> None:
        """Use ``values`` (the initializer's shape, cast to its type) for ``name`` from now on (module docstring)."""
        t = self.by_name[name]
        a = np.ascontiguousarray(values, onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        if a.shape != tuple(t.dims):
            raise GraphError(f"{self.label}: new values of {name!r} have shape {a.shape}, not {tuple(t.dims)}")
        if self.store is None:
            self.store = KeptStore()
        self.replaced[name] = self.store.put(a)

    def inline_replaced(self) -> None:
        """Write the replaced values of inline initializers into the graph (external ones stay in the store)."""
        for name in [n for n in self.replaced if external_info(self.by_name[n]) is None]:
            self.by_name[name].CopyFrom(numpy_helper.from_array(self.array(name), name))
            del self.replaced[name]

    @property
    def external(self) -> bool:
        return any(external_info(t) is not None for t in self.by_name.values())

    def nbytes(self, name: str) -> int:
        t = self.by_name[name]
        info = external_info(t)
        if info is not None:
            return int(info.get("length", 0))
        return len(t.raw_data) if t.HasField("raw_data") else t.ByteSize()

    def array(self, name: str, *, original: bool = False) -> np.ndarray:
        """The values of ``name`` (the replaced ones unless ``original``)."""
        t = self.by_name[name]
        if name in self.replaced and not original:
            off, n = self.replaced[name]
            return self.store.get(off, n).view(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).reshape(
                tuple(t.dims))
        info = external_info(t)
        if info is None:
            return numpy_helper.to_array(t)
        return self._read_external(t, info)

    def is_external(self, name: str) -> bool:
        """Whether ``name`` is read from a file (its external data, or the store of replaced values)."""
        return name in self.replaced or external_info(self.by_name[name]) is not None

    def nk_rows(self, name: str, k_first: bool, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of the 2-D weight ``name`` seen as ``W[N, K]`` (stored ``[K, N]`` when ``k_first``),
        float32, contiguous. An external weight's slab is read with exactly its bytes (contiguous rows: one read;
        ``[K, N]`` storage: one ``preadv`` per stored row into the slab; no mapping of the file, whose neighbouring
        pages would count in the process's memory); an inline one is converted whole and sliced."""
        t = self.by_name[name]
        info = external_info(t)
        if info is None and name not in self.replaced:
            a = numpy_helper.to_array(t)
            return np.array(a[:, start:stop].T if k_first else a[start:stop], np.float32, order="C")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        if name in self.replaced:
            slab = _read_rows(self.store.fileno(), self.replaced[name][0], dtype, tuple(t.dims), k_first, start, stop)
            where = "the replaced values"
        else:
            path = self._path(t, info)
            with open(path, "rb", buffering=0) as f:
                slab = _read_rows(f.fileno(), int(info.get("offset", 0)), dtype, tuple(t.dims), k_first, start, stop)
            where = path.name
        if slab is None:
            raise GraphError(f"{self.label}: external data of {t.name!r} in {where} is truncated")
        return np.array(slab.T if k_first else slab, np.float32, order="C")

    def raw(self, name: str) -> bytes | None:
        """The external bytes of ``name`` as stored (``None`` for an inline tensor); replaced values as stored."""
        t = self.by_name[name]
        if name in self.replaced:
            return self.store.get(*self.replaced[name]).tobytes()
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
