"""Calibration / evaluation data: one interface over the sources ``qlinear quantize --data`` accepts.

* an ``.npz`` file mapping each model input name to an array whose first axis is the sample index (an optional
  ``labels`` array of class indices, one per sample); an input without a batch axis (a scalar such as a sample rate,
  or a fully static shape) may also be given once, shaped like the model input, and is then fed unchanged with
  every sample;
* a folder of ``.npy`` (single-input models) or ``.npz`` (input name -> array) files, one sample each;
* a folder of images (``.jpg``/``.jpeg``/``.png``/``.bmp``), preprocessed by :class:`ImagePreprocess`
  (default: resize to the model's input size, RGB, ``(x - 127) / 128``, NCHW); a leading number in the file name
  (``0001_n01443537.jpg``) is the class label;
* a folder of ONNX ``test_data_set_*`` directories (``input_0.pb`` …, in model input order);
* in the API, a dict ``{input name: array}`` or a :class:`Dataset`.

Samples stream: an ``.npz`` is read member by member and row by row (memory-mapped when stored uncompressed, a
forward-reading stream when deflated), folders file by file, so memory is bounded by the batch, not the data set.

Batch axes: each input's batch axis is its first dynamic dimension (one whose name contains ``batch`` first; a
recurrent state ``[2, batch, 128]`` has it at axis 1), or axis 0 when the input is static with a leading 1 (or
has a leading 1 followed by dynamic dimensions: ``[1, seq]``); ``batch_axes={name: axis}`` (``--batch-axis
NAME=AXIS``) overrides it. A sample is the model input with a batch axis of size 1 there (an ``.npz`` row may leave
that axis out or keep it as 1); batches are stacked along it. Inputs with no batch axis (rank 0, or static and not
led by 1) are fed whole: given once or once per sample; a batch then holds one sample unless they were given once.

Every sample is checked against the model's inputs before it is used: rank, static dimensions, element type
(float data for float inputs, integer data for integer inputs; float64 is narrowed) and, for float inputs, finite
values. :meth:`Dataset.validate` runs the checks that need no decoding (headers, shapes, labels, and the values of
array sources) before any work starts. Errors are :class:`~qlinear.errors.DataError` naming the file, the input and
the sample.
"""

from __future__ import annotations

import re
import threading
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from qlinear.errors import ConfigError, DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


@dataclass(frozen=True)
class InputSpec:
    """A model input: name, dims (``int`` static, ``str``/``None`` dynamic) and NumPy element type."""

    name: str
    shape: tuple[Any, ...] | None
    dtype: np.dtype
    batch_axis: int | None = 0  #: where samples stack (None: the input has no batch axis, it is fed whole)
    fixed: bool = False  #: its dims were fixed by the user (``input_shapes``), not declared by the model

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def stackable(self) -> bool:
        """Samples can be stacked into one batch along the batch axis (it is dynamic)."""
        return self.batch_axis is not None and (self.shape is None or _dynamic(self.shape[self.batch_axis]))

    def layout(self) -> str:
        """The expected layout in words, for messages."""
        if self.shape is None:
            return "[samples, ...] (batch axis 0)"
        if self.batch_axis is None:
            return (f"{_dims(self.shape)} given once (fed with every sample) or [samples, "
                    f"{_dims(self.shape)[1:]} (one per sample); it has no batch axis")
        rest = [d for i, d in enumerate(self.shape) if i != self.batch_axis]
        return (f"[samples, {_dims(tuple(rest))[1:]} (one row per sample; batch axis {self.batch_axis} of "
                f"{_dims(self.shape)} left out, or kept as 1)")


def _dynamic(d: Any) -> bool:
    return not (isinstance(d, int) and d > 0)


def default_batch_axis(shape: tuple[Any, ...] | None) -> int | None:
    """The batch axis of a model input of dims ``shape`` (module docstring), or None when it has none."""
    if shape is None:
        return 0
    dyn = [i for i, d in enumerate(shape) if _dynamic(d)]
    named = [i for i in dyn if isinstance(shape[i], str) and "batch" in shape[i].lower()]
    if named:
        return named[0]
    if dyn and not (shape[0] == 1 and dyn[0] != 0):
        return dyn[0]
    return 0 if shape and shape[0] == 1 else None


def with_batch_axes(specs: Mapping[str, InputSpec], batch_axes: Mapping[str, Any] | None = None
                    ) -> dict[str, InputSpec]:
    """``specs`` with each input's batch axis: ``batch_axes[name]`` when given (checked against the model
    inputs: a :class:`~qlinear.errors.ConfigError` names the input and its rank), else :func:`default_batch_axis`."""
    over = dict(batch_axes or {})
    unknown = sorted(set(over) - set(specs))
    if unknown:
        raise ConfigError(f"batch_axes: {unknown} not model input(s); the model's inputs are {sorted(specs)}")
    out = {}
    for n, sp in specs.items():
        ax = default_batch_axis(sp.shape)
        if n in over:
            ax = over[n]
            if ax is not None and (isinstance(ax, bool) or not isinstance(ax, int)):
                raise ConfigError(f"batch_axes: input {n!r}: expected an integer axis (or none), got {ax!r}")
            if ax is not None and sp.rank is not None:
                if not -sp.rank <= ax < sp.rank:
                    raise ConfigError(f"batch_axes: input {n!r} has rank {sp.rank} {_dims(sp.shape)}; axis {ax} is "
                                      f"outside 0..{sp.rank - 1}" if sp.rank else
                                      f"batch_axes: input {n!r} is a scalar (rank 0); it has no batch axis")
                ax %= sp.rank
                if not _dynamic(sp.shape[ax]) and sp.shape[ax] != 1:
                    raise ConfigError(f"batch_axes: input {n!r} {_dims(sp.shape)} has the static size "
                                      f"{sp.shape[ax]} at axis {ax}; a batch axis is dynamic or 1")
        out[n] = replace(sp, batch_axis=ax)
    return out


def model_inputs(m: Any) -> dict[str, InputSpec]:
    """The :class:`InputSpec` of every graph input of an ``onnx.ModelProto`` that is not an initializer."""
    from onnx import helper

    from qlinear.graph.model import declared_dims

    inits = {t.name for t in m.graph.initializer}
    out = {}
    for v in m.graph.input:
        if v.name in inits:
            continue
        tt = v.type.tensor_type
        dims = declared_dims(v)
        try:
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else np.dtype(np.float32)
        except (KeyError, TypeError, ValueError):
            dt = np.dtype(np.float32)
        out[v.name] = InputSpec(v.name, dims, dt)
    return out


def _specs(inputs: Mapping[str, Any]) -> dict[str, InputSpec]:
    """Accept ``{name: InputSpec}`` or the older ``{name: dims}``."""
    return {k: v if isinstance(v, InputSpec) else InputSpec(k, None if v is None else tuple(v), np.dtype(np.float32))
            for k, v in inputs.items()}


def check_header(shape: tuple[int, ...], dtype: np.dtype, spec: InputSpec, where: str) -> bool:
    """Shape and element-type checks of one sample against a model input (no data needed). Returns whether the
    sample lacks the batch dimension (one is then added). Raises :class:`DataError`."""
    name = spec.name
    dtype = np.dtype(dtype)
    if dtype.kind in "OUSV" or dtype.hasobject:
        raise DataError(f"{where}: input {name!r} has dtype {dtype}, not numbers; the model expects {spec.dtype}")
    if len(shape) == 0 and spec.rank != 0 and not (spec.rank == 1 and spec.batch_axis == 0):
        raise DataError(f"{where}: input {name!r} is a scalar; expected an array shaped like the model input "
                        f"{_dims(spec.shape)}")
    add_batch = False
    if spec.shape is not None:
        if len(shape) == len(spec.shape) - 1 and spec.batch_axis is not None:
            shape, add_batch = tuple(shape[:spec.batch_axis]) + (1,) + tuple(shape[spec.batch_axis:]), True
        if len(shape) != len(spec.shape):
            raise DataError(f"{where}: input {name!r} has shape {list(shape)}, the model expects rank "
                            f"{len(spec.shape)} {_dims(spec.shape)}")
        off = [f"dimension {i} is {d}, not {w}" for i, (d, w) in enumerate(zip(shape, spec.shape))
               if isinstance(w, int) and w > 0 and d != w]
        if off:
            raise DataError(f"{where}: input {name!r} has shape {list(shape)}, the model expects "
                            f"{_dims(spec.shape)} ({'; '.join(off)}); {_shape_advice(spec, shape)}")
    want = spec.dtype
    if dtype != want:
        same_kind = (want.kind == "f" and dtype.kind == "f") or (want.kind in "iu" and dtype.kind in "iu") or \
            (want.kind == "b" and dtype.kind == "b")
        if not same_kind:
            hint = " after preprocessing" if want.kind == "f" else ""
            raise DataError(f"{where}: input {name!r} has dtype {dtype}, the model expects {want}; convert the data "
                            f"(e.g. array.astype(np.{want.name})){hint}")
    return add_batch


def check_named_dims(shapes: Mapping[str, tuple[int, ...]], specs: Mapping[str, InputSpec], where: str) -> None:
    """Inputs that declare one named dimension (``sequence_length`` of ``input_ids`` and ``attention_mask``) must
    give it one size in a sample: ONNX Runtime fails on it deep in the graph otherwise (a Mul's broadcast). Batch
    axes are left to the stacking; dims fixed by ``input_shapes`` to :func:`check_header`; a name that is no
    identifier (paddle2onnx's ``?``) or that one input gives two of its dims is a placeholder, not compared."""
    seen: dict[str, tuple[str, int]] = {}
    for k, shape in shapes.items():
        sp = specs.get(k)
        if sp is None or sp.shape is None or sp.fixed:
            continue
        dims: tuple[Any, ...] = tuple(shape)
        if len(dims) == len(sp.shape) - 1 and sp.batch_axis is not None:
            dims = dims[:sp.batch_axis] + (None,) + dims[sp.batch_axis:]
        named = [w for w in sp.shape if isinstance(w, str)]
        if len(dims) != len(sp.shape):
            continue
        for i, (d, w) in enumerate(zip(dims, sp.shape)):
            if i == sp.batch_axis or not isinstance(w, str) or not w.isidentifier() or named.count(w) > 1 \
                    or d is None:
                continue
            other, size = seen.setdefault(w, (k, int(d)))
            if size != d:
                raise DataError(f"{where}: inputs {other!r} and {k!r} both declare dimension {w!r} but give it "
                                f"{size} and {int(d)}; the model takes one size for it: give them the same length in "
                                "each sample")


def _shape_advice(spec: InputSpec, shape: tuple[int, ...]) -> str:
    """What to do about a sample whose dims differ from the static ones of ``spec``."""
    given = ",".join(str(int(d)) for d in shape)
    if spec.fixed:
        return ("that shape was fixed by --input-shape (config input_shapes), and every sample must have it: give "
                "samples of that size (a .tflite takes one input size), or leave the input dynamic (target ort "
                "takes samples of several sizes)")
    return (f"resize the data, or, if the model's declared size is stale and its layers take yours, --input-shape "
            f"{spec.name}={given} (config input_shapes)")


def conform(a: Any, spec: InputSpec, where: str, *, check_values: bool = True) -> np.ndarray:
    """``a`` as a feed for ``spec`` (batch dim added if missing, float64 narrowed), or a :class:`DataError`."""
    a = np.asarray(a)
    if check_header(a.shape, a.dtype, spec, where):
        a = np.expand_dims(a, spec.batch_axis)
    want = spec.dtype
    if a.dtype != want:
        if want.kind in "iu" and a.size:
            info = np.iinfo(want)
            if a.min() < info.min or a.max() > info.max:
                raise DataError(f"{where}: input {spec.name!r} has values outside the {want} range of the model input")
        a = a.astype(want)
    if check_values and want.kind == "f" and a.size and not np.isfinite(a).all():
        idx = np.argwhere(~np.isfinite(a))[0]
        raise DataError(f"{where}: input {spec.name!r} holds a non-finite value ({a[tuple(idx)]} at index "
                        f"{[int(i) for i in idx]}); calibration needs finite data: clean or drop that sample")
    return a


def _dims(shape: tuple[Any, ...] | None) -> str:
    return "[?]" if shape is None else "[" + ", ".join(str(d) if isinstance(d, int) and d > 0 else (d or "?")
                                                      for d in shape) + "]"


def labels_from(raw: Any, count: int, where: str) -> tuple[list[int], str | None]:
    """Class indices from a ``labels`` array: 1-D integers (or integral floats), one per sample; one-hot rows are
    turned into indices (the returned note says so). Anything else is a :class:`DataError`."""
    a = np.asarray(raw)
    if a.dtype.kind not in "biuf":
        raise DataError(f"{where}: 'labels' has dtype {a.dtype}; expected integer class indices (0-based), one per "
                        "sample")
    note = None
    if a.ndim == 2 and a.shape[1] > 1:
        onehot = a.shape[0] == count and np.all((a == 0) | (a == 1)) and np.all(a.sum(1) == 1)
        if not onehot:
            raise DataError(f"{where}: 'labels' has shape {list(a.shape)}; expected class indices of shape "
                            f"[{count}] (or one-hot rows [{count}, classes])")
        a = a.argmax(1)
        note = f"{where}: one-hot labels converted to class indices"
    a = a.reshape(-1) if a.ndim == 2 and a.shape[1] == 1 else a
    if a.ndim != 1:
        raise DataError(f"{where}: 'labels' has shape {list(a.shape)}; expected one class index per sample, shape "
                        f"[{count}]")
    if len(a) != count:
        raise DataError(f"{where}: {len(a)} labels for {count} samples; labels must align with the samples (one "
                        "per sample, same order)")
    if a.dtype.kind == "f" and (not np.isfinite(a).all() or np.any(a != np.floor(a))):
        raise DataError(f"{where}: 'labels' holds non-integer values; expected class indices")
    if a.size and a.min() < 0:
        raise DataError(f"{where}: 'labels' holds a negative class index ({int(a.min())}); expected 0-based indices")
    return [int(v) for v in a], note


@dataclass(frozen=True)
class ImagePreprocess:
    """Image -> model input: resize (bilinear) to ``size`` (default: the model input's H, W), channel order,
    ``(x - mean) / std`` per channel or overall, layout ``NCHW`` or ``NHWC``."""

    size: tuple[int, int] | None = None
    mean: float | tuple[float, float, float] = 127.0
    std: float | tuple[float, float, float] = 128.0
    layout: str = "NCHW"
    bgr: bool = False

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            v = getattr(self, name)
            try:
                a = np.asarray(v, np.float64)
            except (TypeError, ValueError):
                a = np.array(np.nan)
            if a.shape not in ((), (3,)) or not np.all(np.isfinite(a)) or (name == "std" and np.any(a == 0)):
                raise ConfigError(f"image {name}: expected a finite{' non-zero' if name == 'std' else ''} number or "
                                  f"one per channel (R, G, B), got {v!r}; pixels become (x - mean) / std (--image-mean "
                                  "127 --image-std 128 by default; 0 and 255 for x / 255)")

    def __call__(self, path: Path, model_shape: tuple[Any, ...] | None) -> np.ndarray:
        from PIL import Image

        try:
            img = _open_image(path).convert("RGB")
        except DataError:
            raise
        except Exception as e:  # noqa: BLE001 - PIL raises many kinds
            raise DataError(f"{path}: cannot read image ({e}); replace or remove that file") from None
        size = self.size
        if size is None and model_shape is not None and len(model_shape) == 4:
            hw = model_shape[2:4] if self.layout == "NCHW" else model_shape[1:3]
            if all(isinstance(d, int) and d > 0 for d in hw):
                size = (int(hw[0]), int(hw[1]))
        if size is not None and img.size != (size[1], size[0]):
            img = img.resize((size[1], size[0]), Image.BILINEAR)
        a = np.asarray(img, np.float32)
        if self.bgr:
            a = a[..., ::-1]
        a = (a - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        if self.layout == "NCHW":
            a = a.transpose(2, 0, 1)
        return np.ascontiguousarray(a[None])


def _open_image(path: Path) -> Any:
    """The image at ``path``, opened (PIL reads its header now, its pixels when used)."""
    try:
        from PIL import Image
    except ModuleNotFoundError:  # pragma: no cover - pillow is a dependency
        raise DataError("image folders need Pillow (pip install pillow)") from None
    try:
        return Image.open(path)
    except Exception as e:  # noqa: BLE001 - PIL raises many kinds
        raise DataError(f"{path}: cannot read image ({e})") from None


def _check_images(images: list[Path]) -> None:
    """Every image's header read before any work: a file that is no image fails now, not after calibration; so does
    a JPEG or PNG cut short (a broken download), found by its missing end marker (then decoded to be sure: some
    writers append data after it)."""
    for f in images:
        img = _open_image(f)
        try:
            end = _END_MARKERS.get(img.format or "")
            if end is not None and not _ends_with(f, end):
                img.load()
        except Exception as e:  # noqa: BLE001 - PIL raises many kinds
            raise DataError(f"{f}: cannot read image ({e}); replace or remove that file") from None
        finally:
            img.close()


#: the bytes a whole file of an image format holds near its end (JPEG's EOI marker, PNG's IEND chunk)
_END_MARKERS = {"JPEG": b"\xff\xd9", "PNG": b"IEND"}


def _ends_with(f: Path, marker: bytes, tail: int = 64) -> bool:
    """Whether ``marker`` is within the last ``tail`` bytes of ``f``."""
    with open(f, "rb") as fh:
        fh.seek(max(0, f.stat().st_size - tail))
        return marker in fh.read()


#: how many samples :meth:`Dataset.check_stacking` reads at most to find two it would stack
PROBE_SAMPLES = 128


class Dataset:
    """``len(ds)`` samples; ``ds.sample(i)`` -> {input name: array with a batch dim}, checked against the model's
    inputs; ``ds.labels`` (class indices) if known; ``ds.notes`` what was done to the data on the way."""

    def __init__(self, loaders: list[Callable[[], dict[str, np.ndarray]]] | int,
                 labels: list[int] | None, source: str, *, get: Callable[[int], dict[str, np.ndarray]] | None = None,
                 specs: Mapping[str, InputSpec] | None = None, where: Callable[[int], str] | None = None,
                 precheck: Callable[[int], None] | None = None, notes: list[str] | None = None,
                 shared: frozenset[str] = frozenset()) -> None:
        if isinstance(loaders, int):
            self._n, self._get = loaders, get
        else:
            self._n, self._get = len(loaders), (lambda i, _l=loaders: _l[i]())
        self.labels = labels
        self.source = source
        self.specs = dict(specs) if specs else None
        self._where = where or (lambda i: f"{source}, sample {i}")
        self._precheck = precheck
        self.notes = list(notes or [])
        self.shared = frozenset(shared)  #: inputs given once, fed unchanged with every sample
        #: whether the model runs samples stacked in one call (None: not checked, :meth:`check_stacking`) and why not
        self.stacks: bool | None = None
        self.unstacked = ""
        self._lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return self._n

    def sample(self, i: int) -> dict[str, np.ndarray]:
        with self._lock:   # the loaders (an open .npz, say) are not thread-safe; the report reads beside calibration
            raw = self._get(i)
        if self.specs is None:
            return raw
        where = self._where(i)
        return {n: conform(raw[n], s, where) for n, s in self.specs.items()}

    def validate(self, stop: int | None = None) -> None:
        """The checks that need no decoding, for samples ``[0, stop)``: headers, shapes, dtypes and, for array
        sources, values. Raises :class:`DataError` before any work starts."""
        if self._precheck is not None:
            self._precheck(self._n if stop is None else min(stop, self._n))

    def axes(self) -> dict[str, int | None]:
        """Each input's batch axis in a feed (None: fed whole, no batch axis)."""
        specs = self.specs or {}
        return {k: specs[k].batch_axis if k in specs else 0 for k in (self.specs or {})}

    def batch_len(self, feed: Mapping[str, np.ndarray]) -> int:
        """How many samples a feed from :meth:`batches` holds."""
        axes = self.axes()
        for k, v in feed.items():
            ax = axes.get(k, 0)
            if ax is not None and k not in self.shared and np.ndim(v) > ax:
                return int(np.shape(v)[ax])
        return 1

    def batches(self, start: int, stop: int, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        """Batches of up to ``batch_size`` consecutive samples, stacked along each input's batch axis (inputs given
        once are fed once); samples of different shapes (a dynamic sequence length, say) go to different batches; a
        model with an input whose batch axis is static (or absent, with data per sample) gets one sample per call.
        The first input of a feed has its batch axis first when one does (older callers count samples by it)."""
        if self.stacks is False or not self._stackable():
            batch_size = 1
        axes = self.axes()
        items: list[dict[str, np.ndarray]] = []
        for i in range(start, stop):
            it = self.sample(i)
            if items and (len(items) >= batch_size or _sig(it, axes) != _sig(items[0], axes)):
                yield _stack(items, axes, self.shared)
                items = []
            items.append(it)
        if items:
            yield _stack(items, axes, self.shared)

    def _stackable(self) -> bool:
        """Every input given per sample has a dynamic batch axis (else one sample per call)."""
        return all(sp.stackable or k in self.shared for k, sp in (self.specs or {}).items())

    def check_stacking(self, run: Callable[[dict[str, np.ndarray]], Any], batch_size: int) -> None:
        """Once per dataset, before the first stacked call: ``run`` (a session of the model) on the first two
        consecutive samples :meth:`batches` would stack (among the first :data:`PROBE_SAMPLES`). A model whose batch
        axis is only nominally dynamic (an exported Reshape that fixes it at 1) fails there and runs one sample per
        call from then on (``stacks`` False, ``unstacked`` says why); when one sample fails too, the failure is not
        the stacking's and is left to the caller's own run."""
        if self.stacks is not None or batch_size < 2:
            return
        axes = self.axes()
        if not self._stackable():
            return
        prev = None
        for i in range(min(len(self), PROBE_SAMPLES)):
            it = self.sample(i)
            if prev is not None and _sig(it, axes) == _sig(prev, axes):
                break
            prev = it
        else:
            return
        from qlinear.errors import QlinearError

        try:
            run(_stack([prev, it], axes, self.shared))
            self.stacks = True
        except QlinearError as e:
            try:
                run(_stack([prev], axes, self.shared))
            except QlinearError:
                return
            self.stacks = False
            m = re.search(r"running (\w+) node\. Name:'([^']*)'", str(e))
            self.unstacked = f"its {m.group(1)} node {m.group(2)!r} fails on two samples" if m else \
                " ".join(str(e).split())[:200]


def _sig(d: dict[str, np.ndarray], axes: Mapping[str, int | None]) -> tuple:
    def rest(k: str, v: np.ndarray) -> tuple:
        ax = axes.get(k, 0)
        return v.shape if ax is None else v.shape[:ax] + v.shape[ax + 1:]

    return tuple((k, rest(k, v), v.dtype) for k, v in d.items())


class Feed(dict):
    """A feed of :meth:`Dataset.batches`: input name -> array, and ``samples``, how many samples it stacks (a
    sample may hold several rows: a batch of 32 words per sample; progress counts samples)."""

    samples = 1


def _stack(items: list[dict[str, np.ndarray]], axes: Mapping[str, int | None],
           shared: frozenset[str]) -> dict[str, np.ndarray]:
    first = sorted(items[0], key=lambda k: axes.get(k, 0) != 0 or k in shared)
    if len(items) == 1:
        out = Feed({k: items[0][k] for k in first})
    else:
        out = Feed({k: items[0][k] if k in shared or axes.get(k, 0) is None
                    else np.concatenate([it[k] for it in items], axis=axes.get(k, 0)) for k in first})
    out.samples = len(items)
    return out


# --------------------------------------------------------------------------------------------- .npz streaming
def _npy_header_of(f: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of the ``.npy`` stream ``f``, leaving it at the start of the data."""
    fmt = np.lib.format
    major, _ = fmt.read_magic(f)
    read = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
    return read(f, max_header_size=1 << 20)


class NpzMember:
    """One array of an ``.npz`` read row by row: ``len``, ``shape``, ``dtype``, ``[i]`` / ``[a:b]`` (first axis
    only). Stored members are memory-mapped; deflated ones are read by a forward stream (re-opened when a read goes
    backwards). Object arrays (pickles) are refused."""

    def __init__(self, path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
        self.path, self._zf, self.info = path, zf, info
        self.key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        with zf.open(info) as f:
            try:
                hdr = _npy_header_of(f)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
                raise DataError(f"{path}: member {self.key!r} is not a NumPy array ({e})") from None
            self.header_len = f.tell()
        self.shape, fortran, self.dtype = tuple(hdr[0]), bool(hdr[1]), np.dtype(hdr[2])
        if self.dtype.hasobject:
            raise DataError(f"{path}: member {self.key!r} holds Python objects; qlinear never loads pickles (save "
                            "numeric arrays)")
        self._whole: np.ndarray | None = None
        self._mmap: np.ndarray | None = None
        self._stream = None
        self._pos = 0
        if fortran and len(self.shape) > 1:  # rows are not contiguous: read the member whole (rare)
            self._whole = self._read_whole()
        elif info.compress_type == zipfile.ZIP_STORED and self.shape and self.dtype.itemsize:
            with open(path, "rb") as fh:
                fh.seek(info.header_offset)
                local = fh.read(30)
            if len(local) == 30 and local[:4] == b"PK\x03\x04":
                n, m = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
                offset = info.header_offset + 30 + n + m + self.header_len
                try:
                    self._mmap = np.memmap(path, self.dtype, "r", offset=offset, shape=self.shape)
                except (ValueError, OSError):
                    self._mmap = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise DataError(f"{self.path}: member {self.key!r} is a scalar; expected [samples, ...]")
        return self.shape[0]

    def _read_whole(self) -> np.ndarray:
        with self._zf.open(self.info) as f:
            f.seek(self.header_len)
            data = f.read()
        a = np.frombuffer(data, self.dtype)
        order = "F" if len(self.shape) > 1 else "C"
        try:
            return a.reshape(self.shape, order=order)
        except ValueError:
            raise DataError(f"{self.path}: member {self.key!r} is truncated") from None

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self[:] if self.shape else self._read_whole()
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, idx: Any) -> np.ndarray:
        if isinstance(idx, (int, np.integer)):
            return self[int(idx):int(idx) + 1][0]
        if not isinstance(idx, slice) or idx.step not in (None, 1):
            raise TypeError("NpzMember supports [i] and [a:b]")
        a, b, _ = idx.indices(len(self))
        if self._whole is not None:
            return self._whole[a:b]
        if self._mmap is not None:
            return np.array(self._mmap[a:b])
        row = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        want = self.header_len + a * row
        if self._stream is None or want < self._pos:
            if self._stream is not None:
                self._stream.close()
            self._stream = self._zf.open(self.info)
            self._pos = 0
        try:
            if want > self._pos:
                self._stream.seek(want)
            data = self._stream.read(max(b - a, 0) * row)
        except (OSError, zipfile.BadZipFile, EOFError) as e:
            raise DataError(f"{self.path}: cannot read member {self.key!r} ({e})") from None
        self._pos = want + len(data)
        if len(data) != max(b - a, 0) * row:
            raise DataError(f"{self.path}: member {self.key!r} is truncated")
        return np.frombuffer(data, self.dtype).reshape((b - a,) + self.shape[1:]).copy()


def open_npz(path: Path) -> dict[str, NpzMember]:
    """The members of an ``.npz`` as lazy :class:`NpzMember` arrays."""
    try:
        zf = zipfile.ZipFile(path)
        infos = [i for i in zf.infolist() if not i.is_dir()]
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read as .npz ({e})") from None
    out = {}
    for info in infos:
        if not info.filename.endswith(".npy"):
            continue
        mem = NpzMember(path, zf, info)
        out[mem.key] = mem
    if not out:
        raise DataError(f"{path}: holds no arrays")
    return out


# --------------------------------------------------------------------------------------------- sources
#: a dynamic dimension named like a sequence, not a batch (a note when it is taken as the batch axis)
SEQUENCE_DIM = re.compile(r"seq|len|time|frame|step|token|window", re.IGNORECASE)


def sequence_axis_notes(specs: Mapping[str, InputSpec], batch_axes: Mapping[str, Any] | None) -> list[str]:
    """A note for each input whose batch axis was taken by default at a dimension named like a sequence: samples are
    stacked along it, which a recurrent model reads as one longer sequence."""
    out = []
    for n, sp in specs.items():
        ax = sp.batch_axis
        if n in (batch_axes or {}) or ax is None or sp.shape is None or ax >= len(sp.shape):
            continue
        d = sp.shape[ax]
        if isinstance(d, str) and SEQUENCE_DIM.search(d) and "batch" not in d.lower():
            out.append(f"input {n!r}: its dynamic dimension {d!r} (axis {ax}) is read as the batch axis, samples "
                       f"stacked along it; if each sample is a whole sequence, give --batch-axis {n}=none "
                       "(config batch_axes)")
    return out


def load_dataset(src: str | Path | Mapping[str, Any] | Dataset, inputs: Mapping[str, Any], *,
                 preprocess: ImagePreprocess | None = None, batch_axes: Mapping[str, int] | None = None,
                 fixed: Mapping[str, np.ndarray] | None = None) -> Dataset:
    """A :class:`Dataset` from ``src`` for a model whose inputs are ``{name: InputSpec}`` (:func:`model_inputs`);
    ``batch_axes`` overrides the batch axis of inputs by name (:func:`with_batch_axes`; a default taken at a
    dimension named like a sequence is noted, :func:`sequence_axis_notes`). ``fixed``: the values of inputs the
    model no longer takes (``fix_inputs``); samples may leave them out, and where they hold one it must be that
    value (:func:`check_fixed`, before any work)."""
    ds = _load(src, inputs, preprocess, batch_axes, fixed)
    ds.notes += [n for n in sequence_axis_notes(ds.specs or {}, batch_axes) if n not in ds.notes]
    return ds


def _load(src: str | Path | Mapping[str, Any] | Dataset, inputs: Mapping[str, Any],
          preprocess: ImagePreprocess | None, batch_axes: Mapping[str, int] | None,
          fixed: Mapping[str, np.ndarray] | None) -> Dataset:
    specs = with_batch_axes(_specs(inputs), batch_axes)
    fixed = dict(fixed or {})
    if isinstance(src, Dataset):
        if src.specs is None:
            src.specs = specs
        return src
    if isinstance(src, Mapping):
        check_fixed(src, fixed, "<arrays>")
        return _noting_extra(_from_arrays(dict(src), specs, "<arrays>"), src, fixed)
    if not isinstance(src, (str, Path)) or (isinstance(src, str) and not src):
        raise DataError(f"data: expected a path (.npz file or folder), a dict of arrays or a Dataset, got "
                        f"{type(src).__name__}")
    p = Path(src)
    if not p.exists():
        raise DataError(f"{p}: data not found (expected an .npz file or a folder of .npy/.npz files, images or "
                        "test_data_set_* directories)")
    if p.is_file():
        if p.suffix != ".npz":
            raise DataError(f"{p}: a data file must be .npz (input name -> array with the sample index first)")
        members = open_npz(p)
        check_fixed(members, fixed, str(p))
        return _noting_extra(_from_arrays(members, specs, str(p)), members, fixed)
    try:
        entries = sorted(p.iterdir())
    except OSError as e:
        raise DataError(f"{p}: cannot list the folder ({e.strerror})") from None
    sets = [d for d in entries if d.is_dir() and d.name.startswith("test_data_set")]
    if sets:
        if fixed:
            raise DataError(f"{p}: test_data_set folders match their input_N.pb files to the model's inputs by "
                            f"position, which fixing {sorted(fixed)} changes; give the samples as .npz files (input "
                            "name -> array) with fix_inputs")
        return _from_test_sets(sets, specs, str(p))
    files = [f for f in entries if f.is_file()]
    images = [f for f in files if f.suffix.lower() in IMAGE_SUFFIXES]
    arrays = [f for f in files if f.suffix in (".npy", ".npz")]
    if images:
        return _from_images(images, specs, p, preprocess or ImagePreprocess())
    if arrays:
        ds = _from_files(arrays, specs, str(p), fixed)
        return _noting_extra(ds, open_npz(arrays[0]), fixed, str(arrays[0])) if arrays[0].suffix == ".npz" else ds
    raise DataError(f"{p}: no .npy/.npz files, images or test_data_set_* directories found")


def _from_images(images: list[Path], specs: dict[str, InputSpec], p: Path, pre: ImagePreprocess) -> Dataset:
    names = list(specs)
    if len(names) != 1:
        raise DataError(f"{p}: image folders need a single-input model, this one has {names}")
    spec = specs[names[0]]
    if spec.dtype.kind != "f":
        raise DataError(f"{p}: images give float data, but model input {spec.name!r} is {spec.dtype}")
    labels: list[int] | None = []
    for f in images:
        mt = re.match(r"(\d+)", f.name)
        if mt is None:
            labels = None
            break
        labels.append(int(mt.group(1)))
    return Dataset(len(images), labels, str(p), get=lambda i: {spec.name: pre(images[i], spec.shape)}, specs=specs,
                   where=lambda i: str(images[i]), precheck=lambda stop: _check_images(images[:stop]))


def _npy_header(f: Path) -> tuple[tuple[int, ...], np.dtype]:
    try:
        with open(f, "rb") as fh:
            shape, _, dtype = _npy_header_of(fh)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"{f}: not a NumPy .npy file ({e})") from None
    if np.dtype(dtype).hasobject:
        raise DataError(f"{f}: holds Python objects; qlinear never loads pickles (save numeric arrays)")
    return tuple(shape), np.dtype(dtype)


def check_fixed(members: Mapping[str, Any], fixed: Mapping[str, np.ndarray], where: str) -> None:
    """Every input of ``fixed`` that ``members`` (one source's arrays) holds has that value in every sample: an
    array of the value's shape, or of samples of it (a :class:`DataError` names the input, the values and the
    fix)."""
    for n, v in fixed.items():
        if n not in members:
            continue
        a = np.asarray(members[n])
        fits = a.shape[a.ndim - v.ndim:] == v.shape if a.ndim >= v.ndim else False
        differ = a[a != v] if fits else a.reshape(-1)
        if differ.size:
            shape = "" if fits else f" (shape {list(a.shape)})"
            want = v.reshape(-1)[0].item() if v.size == 1 else v.tolist()
            raise DataError(f"{where}: input {n!r} holds {differ.reshape(-1)[0].item()!r}{shape}, but fix_inputs "
                            f"fixes it to {want!r}: the model is quantized for that value; give samples of it or fix "
                            "the input to theirs")


def _noting_extra(ds: Dataset, members: Mapping[str, Any], fixed: Mapping[str, Any], where: str = "") -> Dataset:
    """``ds`` with a note naming the arrays of ``members`` that no model input, fixed input or ``labels`` takes:
    they are not read (a misnamed input or labels array would otherwise be dropped silently)."""
    extra = [k for k in members if k not in (ds.specs or {}) and k not in fixed and k != "labels"]
    if extra:
        ds.notes.append(f"{where or ds.source}: {', '.join(map(repr, extra))} "
                        f"{'is no input' if len(extra) == 1 else 'are no inputs'} of the model, not read (the "
                        f"model takes {', '.join(map(repr, ds.specs or {}))}; class labels go in an array named "
                        "'labels')")
    return ds


def _from_files(arrays: list[Path], specs: dict[str, InputSpec], where: str,
                fixed: Mapping[str, np.ndarray] | None = None) -> Dataset:
    names = list(specs)

    def load(f: Path) -> dict[str, np.ndarray]:
        try:
            if f.suffix == ".npy":
                if len(names) != 1:
                    raise DataError(f"{f}: .npy samples need a single-input model; use .npz with input names")
                return {names[0]: np.load(f, allow_pickle=False)}
            members = open_npz(f)
        except DataError:
            raise
        except Exception as e:  # noqa: BLE001 - numpy raises many kinds on corrupt files
            raise DataError(f"{f}: cannot read ({e})") from None
        missing = [n for n in names if n not in members]
        if missing:
            raise DataError(f"{f}: missing model input(s) {missing}; it has {sorted(members)}")
        return {n: np.asarray(members[n]) for n in names}

    def precheck(stop: int) -> None:
        for f in arrays[:stop]:
            if f.suffix == ".npy":
                if len(names) != 1:
                    raise DataError(f"{f}: .npy samples need a single-input model; use .npz with input names")
                heads = {names[0]: _npy_header(f)}
            else:
                members = open_npz(f)
                missing = [n for n in names if n not in members]
                if missing:
                    raise DataError(f"{f}: missing model input(s) {missing}; it has {sorted(members)}")
                check_fixed(members, fixed or {}, str(f))
                heads = {n: (members[n].shape, members[n].dtype) for n in names}
            for n, (shape, dt) in heads.items():
                check_header(shape, dt, specs[n], str(f))
            check_named_dims({n: shape for n, (shape, _) in heads.items()}, specs, str(f))

    return Dataset(len(arrays), None, where, get=lambda i: load(arrays[i]), specs=specs,
                   where=lambda i: str(arrays[i]), precheck=precheck)


def _from_arrays(arrays: dict[str, Any], specs: dict[str, InputSpec], where: str) -> Dataset:
    names = list(specs)
    missing = [n for n in names if n not in arrays]
    if missing:
        raise DataError(f"{where}: missing model input(s) {missing}; it has {sorted(arrays)}")
    arrs, modes = {}, {}
    for k in names:
        a = arrays[k]
        if not isinstance(a, (NpzMember, np.ndarray)):
            a = np.asarray(a)
        if a.dtype.kind in "OUSV":
            raise DataError(f"{where}: input {k!r} has dtype {a.dtype}, not numbers")
        arrs[k], modes[k] = a, array_layout(tuple(a.shape), specs[k], where)
        check_header(_sample_shape(tuple(a.shape), modes[k], specs[k]), a.dtype, specs[k], where)
    check_named_dims({k: _sample_shape(tuple(arrs[k].shape), modes[k], specs[k]) for k in names}, specs, where)
    per = [k for k in names if modes[k] != "once"]
    counts = {len(arrs[k]) for k in per}
    if len(counts) > 1:
        raise DataError(f"{where}: inputs have different sample counts "
                        f"{ {k: len(arrs[k]) for k in per} }; every input given per sample needs one row per sample")
    count = counts.pop() if counts else 1
    if count == 0:
        raise DataError(f"{where}: no samples")
    labels, notes = None, []
    if "labels" in arrays and "labels" not in names:
        raw = arrays["labels"]
        labels, note = labels_from(np.asarray(raw), count, where)
        if note:
            notes.append(note)

    def precheck(stop: int) -> None:
        step = 64
        for k in names:
            if specs[k].dtype.kind != "f":
                continue
            for s in range(0, stop if modes[k] != "once" else 1, step):
                block = arrs[k][s:min(s + step, stop)] if modes[k] != "once" else np.asarray(arrs[k])
                if block.dtype.kind == "f" and not np.isfinite(block).all():
                    bad = np.argwhere(~np.isfinite(block))[0]
                    raise DataError(f"{where}: input {k!r}, sample {s + int(bad[0])} holds a non-finite value "
                                    f"({block[tuple(bad)]}); calibration needs finite data: clean or drop that "
                                    "sample")

    once = {k: np.asarray(arrs[k]) for k in names if modes[k] == "once"}

    def get(i: int) -> dict[str, np.ndarray]:
        return {k: once[k] if k in once else _row(arrs[k], i, modes[k], specs[k]) for k in names}

    return Dataset(count, labels, where, get=get, specs=specs, where=lambda i: f"{where}, sample {i}",
                   precheck=precheck, notes=notes, shared=frozenset(once))


def array_layout(shape: tuple[int, ...], spec: InputSpec, where: str) -> str:
    """How an array of ``shape`` holds the samples of input ``spec``: ``rows`` (``[samples, ...]`` with the batch
    axis left out), ``items`` (``[samples, ...]`` with the batch axis kept as 1, or whole inputs without one) or
    ``once`` (one input without a batch axis, fed with every sample). Anything else is a :class:`DataError` naming
    the input, the shape and the expected layout."""
    name, r, ax = spec.name, spec.rank, spec.batch_axis
    if r is None:
        if not shape:
            raise DataError(f"{where}: input {name!r} is a scalar; expected an array of samples [samples, ...]")
        return "rows"
    static = tuple(d if isinstance(d, int) and d > 0 else None for d in spec.shape)

    def fits(got: tuple[int, ...], want: tuple[Any, ...]) -> bool:
        return len(got) == len(want) and all(w is None or g == w for g, w in zip(got, want))

    if ax is None:
        if fits(shape, static):
            return "once"
        if len(shape) == r + 1 and fits(shape[1:], static):
            return "items"
    else:
        for mode, ok in (("rows", len(shape) == r and r > 0), ("items", len(shape) == r + 1 and shape[1 + ax] == 1)):
            if ok and (ax == 0 or fits(_sample_shape(shape, mode, spec), static)):
                return mode  # batch-first: check_header names the dimension that differs
    if not shape:
        raise DataError(f"{where}: input {name!r} is a scalar; the model input {_dims(spec.shape)} needs "
                        f"{spec.layout()}")
    hint = ""
    if ax and len(shape) == r and fits(shape[:ax] + (None,) + shape[ax + 1:], static):
        hint = f"; these are the samples along axis {ax}: put them first (np.moveaxis(a, {ax}, 0))"
    elif r:
        hint = f"; to use another batch axis, set batch_axes (--batch-axis {name}=AXIS)"
    raise DataError(f"{where}: input {name!r} has shape {list(shape)}; the model input {_dims(spec.shape)} needs "
                    f"{spec.layout()}{hint}")


def _sample_shape(shape: tuple[int, ...], mode: str, spec: InputSpec) -> tuple[int, ...]:
    """The shape of one sample (as the model sees it) of an array of ``shape`` in layout ``mode``."""
    if mode == "once":
        return shape
    if mode == "items":
        return shape[1:]
    ax = spec.batch_axis or 0
    return shape[1:1 + ax] + (1,) + shape[1 + ax:]


def _row(a: Any, i: int, mode: str, spec: InputSpec) -> np.ndarray:
    """Sample ``i`` of array ``a`` in layout ``mode`` (:func:`array_layout`), batch axis included."""
    if mode == "items":
        return np.asarray(a[i])
    if not spec.batch_axis:
        return np.asarray(a[i:i + 1])
    return np.expand_dims(np.asarray(a[i]), spec.batch_axis)


def _from_test_sets(sets: list[Path], specs: dict[str, InputSpec], where: str) -> Dataset:
    import onnx
    from onnx import numpy_helper

    names = list(specs)

    def load(d: Path) -> dict[str, np.ndarray]:
        out = {}
        for i, n in enumerate(names):
            f = d / f"input_{i}.pb"
            if not f.is_file():
                raise DataError(f"{d}: missing {f.name} for model input {n!r}")
            t = onnx.TensorProto()
            try:
                t.ParseFromString(f.read_bytes())
                out[n] = numpy_helper.to_array(t, base_dir=str(d))
            except Exception as e:  # noqa: BLE001 - protobuf / onnx external-data errors
                raise DataError(f"{f}: cannot read the tensor ({type(e).__name__}: {e}); test data tensors must be "
                                "TensorProtos, external data inside their folder") from None
        return out

    return Dataset(len(sets), None, where, get=lambda i: load(sets[i]), specs=specs, where=lambda i: str(sets[i]))


__all__ = ["Dataset", "ImagePreprocess", "InputSpec", "NpzMember", "array_layout", "check_fixed", "check_header",
           "conform", "sequence_axis_notes", "default_batch_axis", "labels_from", "load_dataset", "model_inputs", "open_npz",
           "with_batch_axes"]
