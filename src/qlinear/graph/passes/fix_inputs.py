"""Fix graph inputs to a value (``--fix-input sr=16000``), then fold what that made constant.

A model often takes a setting as an input: silero-vad's sample rate ``sr`` chooses, through an ``If``, which of two
networks runs. Calibration data holds one value of it, so only one branch can be calibrated; and qlinear leaves
``If`` bodies float. Fixing the input says which value the quantized model is for. :func:`fix_input_values`:

1. checks every named input before anything changes (each error names the input, the field and the fix,
   :class:`~qlinear.errors.GraphError`): it is a graph input, not an initializer; the value converts to the input's
   element type without change (``16000.5`` is not an int64; an int8 value within -128..127); its shape fits the
   declared one (a scalar takes one value; a fully static shape takes that many values in order; otherwise a
   nested list of the declared rank whose sizes match every static dimension);
2. makes each input an initializer of that value (the written model no longer has the input: a note says so);
3. folds the nodes of constants that follow (:func:`~qlinear.graph.passes.shapes.fold_static_shapes`, with the
   ONNX definition), which inlines every ``If`` whose condition became constant
   (:mod:`qlinear.graph.passes.inline_if`): the layers of the branch taken are quantized like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.errors import GraphError
from qlinear.graph.model import declared_dims
from qlinear.graph.passes.normalize import constants_to_initializers
from qlinear.graph.passes.shapes import fold_static_shapes


def fix_input_values(model: onnx.ModelProto, values: Mapping[str, Any] | None,
                     label: str = "model") -> tuple[onnx.ModelProto, list[str]]:
    """``model`` (rewritten in place) with the graph inputs in ``values`` made constants and what follows folded
    (module docstring), and the notes saying so. ``values`` empty: ``model`` unchanged, no notes."""
    if not values:
        return model, []
    g = model.graph
    arrays = input_values(model, values, label)
    kept = [v for v in g.input if v.name not in arrays]
    del g.input[:]
    g.input.extend(kept)
    g.initializer.extend(numpy_helper.from_array(a, name) for name, a in arrays.items())
    del g.value_info[:]
    constants_to_initializers(g)  # done by normalize already in the pipeline; a model given directly may hold some
    inlined: list[str] = []
    n_fold = fold_static_shapes(model, inlined)
    shown = ", ".join(f"{k}={_show(a)}" for k, a in arrays.items())
    note = (f"inputs fixed: {shown} (the written model has no such input{'s' if len(arrays) > 1 else ''}: "
            "it computes the model for this value)")
    if n_fold:
        note += f"; {n_fold} node(s) of constants folded"
    return model, [note] + inlined


def input_values(model: onnx.ModelProto, values: Mapping[str, Any] | None,
                 label: str = "model") -> dict[str, np.ndarray]:
    """``values`` as arrays of their graph inputs' element types and shapes (:func:`input_value`), checked."""
    inits = {t.name for t in model.graph.initializer}
    inputs = {v.name: v for v in model.graph.input if v.name not in inits}
    return {name: input_value(label, name, v, inputs) for name, v in (values or {}).items()}


def input_value(label: str, name: str, value: Any, inputs: Mapping[str, onnx.ValueInfoProto]) -> np.ndarray:
    """``value`` for graph input ``name`` as an array of its element type and shape (module docstring, step 1)."""
    where = f"{label}: fix_inputs: input {name!r}"
    if name not in inputs:
        raise GraphError(f"{label}: fix_inputs: {name!r} is not a graph input; the model's inputs are "
                         f"{sorted(inputs)} (--fix-input NAME=VALUE)")
    tt = inputs[name].type.tensor_type
    if not tt.elem_type or tt.elem_type == onnx.TensorProto.STRING:
        raise GraphError(f"{where} is not a numeric tensor; only numeric inputs can be fixed")
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
    try:
        raw = np.asarray(value, dtype=np.float64 if dtype != np.bool_ else None)
    except (TypeError, ValueError):
        raise GraphError(f"{where}: expected numbers (a value or a list), got {value!r}") from None
    if raw.dtype == object or raw.dtype.kind not in "biuf":
        raise GraphError(f"{where}: expected numbers (a value or a list), got {value!r}")
    arr = _converted(where, raw, np.dtype(dtype))
    return _shaped(where, arr, declared_dims(inputs[name]))


def _converted(where: str, raw: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        bad = raw[(raw != np.round(raw)) | (raw < info.min) | (raw > info.max)]
        if bad.size:
            raise GraphError(f"{where} is {dtype.name}; {bad.reshape(-1)[0]:g} is not one (give an integer in "
                             f"{info.min}..{info.max})")
    elif dtype == np.bool_:
        bad = raw[(raw != 0) & (raw != 1)]
        if bad.size:
            raise GraphError(f"{where} is bool; {bad.reshape(-1)[0]!r} is not one (give 0 or 1)")
    return raw.astype(dtype)


def _shaped(where: str, arr: np.ndarray, dims: tuple[Any, ...] | None) -> np.ndarray:
    if dims is None:
        return arr
    static = all(isinstance(d, int) and d > 0 for d in dims)
    if static:
        if arr.size != int(np.prod(dims, dtype=np.int64)):
            raise GraphError(f"{where} has the shape {list(dims)} ({int(np.prod(dims, dtype=np.int64))} values); "
                             f"{arr.size} value(s) given")
        return arr.reshape(dims)
    shown = ["?" if not isinstance(d, int) or d <= 0 else d for d in dims]
    if arr.ndim != len(dims) or any(isinstance(d, int) and d > 0 and d != n for d, n in zip(dims, arr.shape)):
        raise GraphError(f"{where} has the shape {shown}; the value given has the shape {list(arr.shape)} (give a "
                         "nested list of that rank in the configuration file, fix_inputs)")
    return arr


def _show(a: np.ndarray) -> str:
    if a.size == 1:
        return str(a.reshape(-1)[0].item())
    return f"[{a.dtype.name} {list(a.shape)}]"


__all__ = ["fix_input_values", "input_value", "input_values"]
