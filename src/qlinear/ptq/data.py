"""Calibration / evaluation data: one interface over the sources ``qlinear quantize --data`` accepts.

* an ``.npz`` file mapping each model input name to an array whose first axis is the sample index;
* a folder of ``.npy`` (single-input models) or ``.npz`` (input name -> array) files, one sample each;
* a folder of images (``.jpg``/``.jpeg``/``.png``/``.bmp``), preprocessed by :class:`ImagePreprocess`
  (default: resize to the model's input size, RGB, ``(x - 127) / 128``, NCHW); a leading number in the file name
  (``0001_n01443537.jpg``) is the class label;
* a folder of ONNX ``test_data_set_*`` directories (``input_0.pb`` …, in model input order).

Samples are loaded lazily, so memory is bounded by the batch, not the data set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from qlinear.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


@dataclass(frozen=True)
class ImagePreprocess:
    """Image -> model input: resize (bilinear) to ``size`` (default: the model input's H, W), channel order,
    ``(x - mean) / std`` per channel or overall, layout ``NCHW`` or ``NHWC``."""

    size: tuple[int, int] | None = None
    mean: float | tuple[float, float, float] = 127.0
    std: float | tuple[float, float, float] = 128.0
    layout: str = "NCHW"
    bgr: bool = False

    def __call__(self, path: Path, model_shape: tuple[Any, ...] | None) -> np.ndarray:
        try:
            from PIL import Image
        except ModuleNotFoundError:  # pragma: no cover - pillow is a dependency
            raise DataError("image folders need Pillow (pip install pillow)") from None
        try:
            img = Image.open(path).convert("RGB")
        except Exception as e:  # noqa: BLE001 - PIL raises many kinds
            raise DataError(f"{path}: cannot read image ({e})") from None
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


class Dataset:
    """``len(ds)`` samples; ``ds.sample(i)`` -> {input name: array with batch dim 1}; ``ds.labels`` if known."""

    def __init__(self, loaders: list[Callable[[], dict[str, np.ndarray]]], labels: list[int] | None,
                 source: str) -> None:
        self._loaders = loaders
        self.labels = labels
        self.source = source

    def __len__(self) -> int:
        return len(self._loaders)

    def sample(self, i: int) -> dict[str, np.ndarray]:
        return self._loaders[i]()

    def batches(self, start: int, stop: int, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        for s in range(start, stop, batch_size):
            items = [self.sample(i) for i in range(s, min(s + batch_size, stop))]
            yield {k: np.concatenate([it[k] for it in items]) for k in items[0]}


def _fix(a: np.ndarray, name: str, shape: tuple[Any, ...] | None, where: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if shape is not None and a.ndim == len(shape) - 1:
        a = a[None]
    if shape is not None and a.ndim != len(shape):
        raise DataError(f"{where}: input {name!r} has shape {list(a.shape)}, the model expects rank {len(shape)} "
                        f"({list(shape)})")
    return a


def load_dataset(src: str | Path | dict[str, np.ndarray] | Dataset, inputs: dict[str, tuple[Any, ...]], *,
                 preprocess: ImagePreprocess | None = None) -> Dataset:
    """A :class:`Dataset` from ``src`` for a model whose inputs are ``{name: shape}``."""
    if isinstance(src, Dataset):
        return src
    names = list(inputs)
    if isinstance(src, dict):
        return _from_arrays(src, inputs, "<arrays>")
    p = Path(src)
    if not p.exists():
        raise DataError(f"{p}: data not found (expected an .npz file or a folder of .npy/.npz files, images or "
                        "test_data_set_* directories)")
    if p.is_file():
        if p.suffix != ".npz":
            raise DataError(f"{p}: a data file must be .npz (input name -> array with the sample index first)")
        try:
            arrays = dict(np.load(p))
        except Exception as e:  # noqa: BLE001
            raise DataError(f"{p}: cannot read ({e})") from None
        return _from_arrays(arrays, inputs, str(p))
    sets = sorted(d for d in p.iterdir() if d.is_dir() and d.name.startswith("test_data_set"))
    if sets:
        return _from_test_sets(sets, inputs, str(p))
    files = sorted(f for f in p.iterdir() if f.is_file())
    images = [f for f in files if f.suffix.lower() in IMAGE_SUFFIXES]
    arrays = [f for f in files if f.suffix in (".npy", ".npz")]
    if images:
        if len(names) != 1:
            raise DataError(f"{p}: image folders need a single-input model, this one has {names}")
        pre = preprocess or ImagePreprocess()
        shape = inputs[names[0]]
        labels: list[int] | None = []
        for f in images:
            mt = re.match(r"(\d+)", f.name)
            if mt is None:
                labels = None
                break
            labels.append(int(mt.group(1)))
        return Dataset([(lambda f=f: {names[0]: pre(f, shape)}) for f in images], labels, str(p))
    if arrays:
        def load(f: Path) -> dict[str, np.ndarray]:
            try:
                if f.suffix == ".npy":
                    if len(names) != 1:
                        raise DataError(f"{f}: .npy samples need a single-input model; use .npz with input names")
                    return {names[0]: _fix(np.load(f), names[0], inputs[names[0]], str(f))}
                d = dict(np.load(f))
            except DataError:
                raise
            except Exception as e:  # noqa: BLE001
                raise DataError(f"{f}: cannot read ({e})") from None
            missing = [n for n in names if n not in d]
            if missing:
                raise DataError(f"{f}: missing model input(s) {missing}; it has {sorted(d)}")
            return {n: _fix(d[n], n, inputs[n], str(f)) for n in names}

        return Dataset([(lambda f=f: load(f)) for f in arrays], None, str(p))
    raise DataError(f"{p}: no .npy/.npz files, images or test_data_set_* directories found")


def _from_arrays(arrays: dict[str, np.ndarray], inputs: dict[str, tuple[Any, ...]], where: str) -> Dataset:
    names = list(inputs)
    missing = [n for n in names if n not in arrays]
    if missing:
        raise DataError(f"{where}: missing model input(s) {missing}; it has {sorted(arrays)}")
    n = {len(arrays[k]) for k in names}
    if len(n) != 1:
        raise DataError(f"{where}: inputs have different sample counts {sorted(n)}")
    count = n.pop()
    if count == 0:
        raise DataError(f"{where}: no samples")
    for k in names:
        shape = inputs[k]
        if shape is not None and arrays[k].ndim != len(shape):
            raise DataError(f"{where}: input {k!r} has shape {list(arrays[k].shape)}; the model expects rank "
                            f"{len(shape)} per batch, i.e. [samples, ...] with the samples as the batch axis")

    def get(i: int) -> dict[str, np.ndarray]:
        return {k: _fix(arrays[k][i:i + 1], k, inputs[k], where) for k in names}

    labels = None
    if "labels" in arrays and "labels" not in names:
        labels = [int(v) for v in np.asarray(arrays["labels"]).reshape(-1)]
    return Dataset([(lambda i=i: get(i)) for i in range(count)], labels, where)


def _from_test_sets(sets: list[Path], inputs: dict[str, tuple[Any, ...]], where: str) -> Dataset:
    import onnx
    from onnx import numpy_helper

    names = list(inputs)

    def load(d: Path) -> dict[str, np.ndarray]:
        out = {}
        for i, n in enumerate(names):
            f = d / f"input_{i}.pb"
            if not f.is_file():
                raise DataError(f"{d}: missing {f.name} for model input {n!r}")
            t = onnx.TensorProto()
            try:
                t.ParseFromString(f.read_bytes())
            except Exception as e:  # noqa: BLE001
                raise DataError(f"{f}: not a TensorProto ({e})") from None
            out[n] = _fix(numpy_helper.to_array(t), n, inputs[n], str(f))
        return out

    return Dataset([(lambda d=d: load(d)) for d in sets], None, where)
