"""The boundary between ``onnx.ModelProto`` and ``onnx_ir`` (the ONNX project's IR: def-use chains, passes).

Graph rewrites run as ``onnx_ir`` passes (``qlinear.graph.passes``) on an :class:`onnx_ir.Model`; protos are made
only where a proto is needed (ONNX Runtime, ``onnx.checker``, files). ``to_ir(m)`` then ``to_proto`` gives back the
same bytes: ``value_info`` keeps the entries of ``m`` that still name a value, in their order (``onnx_ir`` would
write one per typed value, initializers included, in node order), new values get none, and sparse initializers
(which ``onnx_ir`` 1.1 does not read) are carried over as they were, and so are map types (``onnx_ir`` cannot read
them: the ``ZipMap`` output of skl2onnx's and onnxmltools' classifiers, a sequence of maps), read untyped. The list
attributes of a main-graph node longer than :data:`LONG_ATTRIBUTE` values (a tree ensemble's node tables: luscinia's
LightGBM model holds 194 MB of them, which ``onnx_ir`` reads into Python tuples in seconds) are kept aside as
protos too: the IR node holds them empty (no pass reads or rewrites such an operator) and :func:`to_proto` fills
them again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

_VALUE_INFO, _SPARSE, _MAPS = "qlinear.value_info", "qlinear.sparse_initializer", "qlinear.map_types"
_LONG = "qlinear.long_attributes"
#: values in a list attribute beyond which :func:`to_ir` keeps it aside (module docstring)
LONG_ATTRIBUTE = 1 << 16


def _has_map(t: onnx.TypeProto) -> bool:
    kind = t.WhichOneof("value")
    if kind in ("sequence_type", "optional_type"):
        return _has_map(getattr(t, kind).elem_type)
    return kind == "map_type"


def to_ir(m: onnx.ModelProto) -> ir.Model:
    """The IR of ``m`` (tensors are shared with ``m``, not copied: do not change ``m`` afterwards)."""
    g = m.graph
    maps = [v for v in (*g.input, *g.output, *g.value_info) if _has_map(v.type)]
    saved = {v.name: v.type.SerializeToString() for v in maps}
    for v in maps:   # read untyped (the proto is left as it was), the type put back by to_proto
        v.ClearField("type")
    aside = _set_aside(g)
    try:
        model = ir.serde.deserialize_model(m)
    finally:
        for v in maps:
            v.type.ParseFromString(saved[v.name])
        _restore(g, aside)
    nodes = list(model.graph) if aside else []
    model.meta[_LONG] = {nodes[i]: kept for i, kept in aside.items()}
    model.meta[_MAPS] = saved
    model.meta[_VALUE_INFO] = [v.name for v in m.graph.value_info]
    model.meta[_SPARSE] = list(m.graph.sparse_initializer)  # onnx_ir 1.1 drops them: put back by to_proto
    return model


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """The ``ModelProto`` of ``model`` (main-graph ``value_info`` as described in the module docstring)."""
    m = ir.serde.serialize_model(model)
    names = model.meta.get(_VALUE_INFO)
    if names is not None:
        by_name = {v.name: v for v in m.graph.value_info}
        kept = [by_name[n] for n in names if n in by_name]
        del m.graph.value_info[:]
        m.graph.value_info.extend(kept)
    m.graph.sparse_initializer.extend(model.meta.get(_SPARSE, ()))
    _put_back(model, m.graph)
    maps = model.meta.get(_MAPS) or {}
    for v in (*m.graph.input, *m.graph.output, *m.graph.value_info):
        if v.name in maps and v.type.WhichOneof("value") is None:
            v.type.ParseFromString(maps[v.name])
    return m


def _long(a: onnx.AttributeProto) -> bool:
    return max(len(a.ints), len(a.floats), len(a.strings)) > LONG_ATTRIBUTE


def _set_aside(g: onnx.GraphProto) -> dict[int, list[onnx.AttributeProto]]:
    """The long list attributes (:data:`LONG_ATTRIBUTE`) of the main-graph nodes of ``g``, by node index: a copy of
    each, its values cleared in ``g`` (the attribute itself stays, empty: no message the IR may hold is replaced)
    until :func:`to_ir` restores them."""
    aside: dict[int, list[onnx.AttributeProto]] = {}
    for i, n in enumerate(g.node):
        for a in n.attribute:
            if _long(a):
                kept = onnx.AttributeProto()
                if len(a.strings):  # protobuf copies strings faster with their message, numbers by the field
                    kept.CopyFrom(a)
                else:
                    kept.name, kept.type = a.name, a.type
                    kept.ints.MergeFrom(a.ints)
                    kept.floats.MergeFrom(a.floats)
                aside.setdefault(i, []).append(kept)
                for f in ("ints", "floats", "strings"):
                    a.ClearField(f)
    return aside


def _restore(g: onnx.GraphProto, aside: dict[int, list[onnx.AttributeProto]]) -> None:
    """Fill the attributes :func:`_set_aside` emptied (in nodes of ``g``, by index and name)."""
    for i, kept in aside.items():
        by_name = {a.name: a for a in g.node[i].attribute}
        for k in kept:
            a = by_name.get(k.name)
            if a is None:
                continue
            if len(k.strings):
                a.CopyFrom(k)
            else:
                a.ints.MergeFrom(k.ints)
                a.floats.MergeFrom(k.floats)


def _put_back(model: ir.Model, g: onnx.GraphProto) -> None:
    """The long attributes :func:`to_ir` kept aside, into the nodes of ``g`` (``model`` serialized), where the IR
    node holds them empty."""
    aside = model.meta.get(_LONG)
    if aside:
        _restore(g, {i: aside[node] for i, node in enumerate(model.graph) if node in aside})


_LIGHT_LIMIT = 4096  # bytes: larger initializers cannot be shapes, axes or pads, shape inference never reads them


def light_proto(model: ir.Model) -> onnx.ModelProto:
    """:func:`to_proto` of ``model`` with the data of initializers over 4 kB left out (marked external, dims and type
    kept): for ONNX shape inference, which gives the same shapes and types without the weights being copied."""
    swapped: list[tuple[ir.Value, Any]] = []
    for v in model.graph.initializers.values():
        t = v.const_value
        if t is not None and not isinstance(t, ir.ExternalTensor) and t.nbytes > _LIGHT_LIMIT:
            swapped.append((v, t))
            v.const_value = ir.ExternalTensor("", None, None, t.dtype, shape=t.shape, name=v.name)
    try:
        return to_proto(model)
    finally:
        for v, t in swapped:
            v.const_value = t


class Names:
    """Fresh names in a graph: ``new("x")`` is ``x``, else ``x_1``, ``x_2``... (never a name already used by a value,
    an initializer or a node of the main graph)."""

    def __init__(self, graph: ir.Graph) -> None:
        used = {v.name for v in graph.inputs} | {v.name for v in graph.outputs} | set(graph.initializers)
        for n in graph:
            used.update(o.name for o in n.outputs)
            if n.name:
                used.add(n.name)
        used.discard(None)
        self.used: set[str] = used

    def new(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def add_initializer(graph: ir.Graph, name: str, arr: np.ndarray) -> ir.Value:
    """Register ``arr`` as the initializer ``name`` (serialized to the same bytes as ``numpy_helper.from_array``)."""
    arr = np.asarray(arr)
    t = ir.Tensor(arr, name=name)
    v = ir.Value(name=name, const_value=t, type=ir.TensorType(t.dtype), shape=ir.Shape(arr.shape))
    graph.register_initializer(v)
    return v


def make_node(op_type: str, inputs: list[ir.Value | None], output: str, name: str, **attrs: Any) -> ir.Node:
    """A default-domain node with one output named ``output`` (attributes in sorted order, like
    ``onnx.helper.make_node``)."""
    attributes = ir.convenience.convert_attributes({k: attrs[k] for k in sorted(attrs)})
    return ir.Node("", op_type, inputs, attributes, outputs=[ir.Value(name=output)], name=name)


def set_initializer(v: ir.Value, arr: np.ndarray) -> None:
    """Give the initializer ``v`` the data ``arr`` (its name kept; a new type or shape is set on ``v``)."""
    arr = np.asarray(arr)
    t = ir.Tensor(arr, name=v.name)
    old = v.const_value
    v.const_value = t
    if old is None or old.dtype != t.dtype or tuple(old.shape) != arr.shape:
        v.type, v.shape = ir.TensorType(t.dtype), ir.Shape(arr.shape)


def drop_unused_initializers(graph: ir.Graph) -> None:
    """Drop the initializers nothing reads (a folded BatchNorm's parameters), and their graph-input entries: an IR 3
    export lists every initializer as an input too (CenterFace), and an input left without its initializer is a
    required input ONNX Runtime asks to be fed."""
    for name, v in list(graph.initializers.items()):
        if not v.uses() and not v.is_graph_output():
            graph.initializers.pop(name)
            if v.is_graph_input():
                graph.inputs.remove(v)


def set_bias(graph: ir.Graph, node: ir.Node, arr: np.ndarray, name: str) -> None:
    """Give ``node`` (a Conv) the bias ``arr``: its bias initializer takes the values, or a new initializer ``name``
    (made unique) becomes its input 2."""
    bv = node.inputs[2] if len(node.inputs) > 2 else None
    if bv is not None:
        set_initializer(bv, arr)
        return
    while name in graph.initializers:
        name += "_"
    nb = add_initializer(graph, name, arr)
    if len(node.inputs) < 3:
        node.resize_inputs(3)
    node.replace_input_with(2, nb)


def absorb(graph: ir.Graph, producer: ir.Node, node: ir.Node) -> None:
    """Remove ``node`` (folded into ``producer``): the producer's output takes the node's output name, type, shape
    and metadata, and every use of it (graph outputs included)."""
    y, out = node.outputs[0], producer.outputs[0]
    name = y.name
    y.name = None
    out.name = name
    out.type, out.shape, out.doc_string = y.type, y.shape, y.doc_string
    out.metadata_props.update(y.metadata_props)
    y.replace_all_uses_with(out, replace_graph_outputs=True)
    graph.remove(node, safe=True)

