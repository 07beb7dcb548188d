"""Loading ONNX models and looking things up in them (initializers, producers, consumers, shapes)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper

from qlinear.core.types import TABLE
from qlinear.errors import GraphError

#: element bits of the types ONNX packs in raw_data (int2/uint2, int4/uint4/float4e2m1, float6: onnx.proto)
_PACKED_BITS = {t.onnx_type: t.bits for t in TABLE if t.is_subbyte}


def load_model(model: Any, *, load_external: bool = True) -> onnx.ModelProto:
    """A ``ModelProto`` from a path, bytes or a ``ModelProto`` (a copy; the argument is never changed)."""
    if isinstance(model, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        return m
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:  # noqa: BLE001 - protobuf raises various errors
            raise GraphError(f"cannot parse ONNX model bytes: {e}") from None
    if isinstance(model, (str, os.PathLike)):
        p = Path(model)
        if p.is_dir():
            raise GraphError(f"{p}: is a folder, not an ONNX model file")
        if not p.is_file():
            raise GraphError(f"{p}: ONNX model file not found")
        if p.stat().st_size == 0:
            raise GraphError(f"{p}: empty file, not an ONNX model")
        try:
            m = onnx.load(str(p), load_external_data=load_external)
        except Exception as e:  # noqa: BLE001
            raise GraphError(f"{p}: cannot read ONNX model ({type(e).__name__}: {e})") from None
        if not m.graph.node and not m.graph.output:
            raise GraphError(f"{p}: not an ONNX model (no graph: no nodes, no outputs)")
        return m
    raise GraphError(f"expected an ONNX model (path or onnx.ModelProto), got {type(model).__name__}")


def _check_initializers(m: onnx.ModelProto, label: str) -> None:
    """Every initializer's data fits its dims and type (``onnx.checker`` does not look): raw data by its length,
    typed fields by decoding."""
    from onnx import helper

    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            continue
        n = 1
        for d in t.dims:
            if d < 0:
                raise GraphError(f"{label}: initializer {t.name!r} has a negative dimension {list(t.dims)}")
            n *= d
        if t.HasField("raw_data"):
            try:
                bits = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize * 8
            except (KeyError, TypeError, ValueError):
                raise GraphError(f"{label}: initializer {t.name!r} has an unknown data type {t.data_type}") from None
            bits = _PACKED_BITS.get(t.data_type, bits)
            if len(t.raw_data) != -(-n * bits // 8):
                raise GraphError(f"{label}: initializer {t.name!r} holds {len(t.raw_data)} bytes, but its dims "
                                 f"{list(t.dims)} and type need {-(-n * bits // 8)}; the file is corrupt")
        else:
            try:
                numpy_helper.to_array(t)
            except Exception as e:  # noqa: BLE001
                raise GraphError(f"{label}: initializer {t.name!r} cannot be read ({type(e).__name__}: {e})") from None


def check_model(m: onnx.ModelProto, label: str = "model") -> None:
    """``onnx.checker`` on ``m`` (structure, types, attributes), as a :class:`GraphError` naming ``label``."""
    if opset(m) == 0:
        raise GraphError(f"{label}: imports no opset of the default ONNX domain; it is not a usable ONNX model")
    if not m.graph.output:
        raise GraphError(f"{label}: the graph has no outputs")
    _check_initializers(m, label)
    try:
        try:
            data = m.SerializeToString()   # once (ByteSize would encode it too)
        except ValueError:   # over protobuf's 2 GB: the checker cannot take it
            data = b""
        if 0 < len(data) < 2**31 - 1:
            onnx.checker.check_model(data)
    except Exception as e:  # noqa: BLE001 - ValidationError and protobuf errors
        raise GraphError(f"{label}: invalid ONNX model: {checker_message(e)}") from None


def checker_message(e: Exception, limit: int = 600) -> str:
    """``onnx.checker``'s complaint on one line: it puts the node's name and type on the lines after the first
    (``... of node:`` then ``name: bn OpType: ...``; ``==> Context: Bad node spec for node. Name: bn ...``)."""
    text = " ".join(str(e).split()).replace(" ==> Context: ", "; ") or type(e).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


def opset(m: onnx.ModelProto, domain: str = "") -> int:
    for o in m.opset_import:
        if o.domain in (domain, "ai.onnx" if domain == "" else domain):
            return int(o.version)
    return 0


def tensor_outputs(m: onnx.ModelProto) -> list[str]:
    """The names of the graph outputs that are tensors (or untyped): ONNX Runtime gives a sequence or a map (the
    ``ZipMap`` output of skl2onnx's and onnxmltools' classifiers, a list of dicts) as Python objects, which no
    output metric or comparison reads."""
    return [o.name for o in m.graph.output if o.type.WhichOneof("value") in (None, "tensor_type")]


_SHAPE_DATA_LIMIT = 4096  # bytes: larger initializers cannot be shapes, axes or pads, inference never reads them


def without_weights(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` with the data of large initializers left out (marked external, dims and type kept) for shape inference:
    it gives the same shapes and types (only small constants such as Reshape's shape are read) without serializing
    the weights to C++ and back (5.4 s -> 1.2 s at 15,400 nodes and 95 MB). The weights are never copied: the model
    is rebuilt around them, their size read from dims and type; a model without such initializers is returned as it
    is (read only: no copy of its graph, a tree ensemble's 194 MB of attributes)."""
    big = lambda t: _data_bytes(t) > _SHAPE_DATA_LIMIT  # noqa: E731
    if not any(t.data_location != onnx.TensorProto.EXTERNAL and big(t) for t in m.graph.initializer):
        return m
    return _apart(m, big, "")[0]


#: initializer types ONNX Runtime takes as numpy arrays (:func:`weights_apart`)
_SHAREABLE = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                        onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16,
                        onnx.TensorProto.INT32, onnx.TensorProto.UINT32, onnx.TensorProto.INT64})


def weights_apart(m: onnx.ModelProto) -> tuple[onnx.ModelProto, list[onnx.TensorProto]]:
    """``m`` without the data of its large numeric initializers (marked external), and those initializers: an ONNX
    Runtime session takes them as arrays (``add_external_initializers``), so it neither serializes the weights nor
    parses and copies them again (a 69 MB encoder: 0.20 s and 95k page faults -> 0.04 s and 24k)."""
    read = reads(m.graph) | {v.name for v in m.graph.input} | {v.name for v in m.graph.output}
    return _apart(m, lambda t: t.data_type in _SHAREABLE and _data_bytes(t) > _SHAPE_DATA_LIMIT,
                  "qlinear-weights-passed-as-arrays", keep=lambda t: t.name in read)


def node_inputs(n: onnx.NodeProto) -> list[str]:
    """Inputs of ``n`` including the outer-scope names its subgraphs read."""
    out = [x for x in n.input if x]
    for a in n.attribute:
        for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            local = {v.name for v in sg.input} | {t.name for t in sg.initializer} | \
                {o for sn in sg.node for o in sn.output}
            out += [x for sn in sg.node for x in node_inputs(sn) if x not in local]
    return out


def all_nodes(g: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The nodes of ``g`` and of every subgraph (``If`` branches, ``Loop``/``Scan`` bodies) within it."""
    todo = [g]
    while todo:
        sg = todo.pop()
        for n in sg.node:
            yield n
            for a in n.attribute:
                todo += [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)


def reads(g: onnx.GraphProto) -> set[str]:
    """The names the nodes of ``g`` read, with the outer-scope names their subgraphs read."""
    return {x for n in g.node for x in node_inputs(n)}


def prune(g: onnx.GraphProto) -> None:
    """Drop (in place) the initializers nothing in ``g`` reads and the value infos of names nothing produces any
    more (after a rewrite removed nodes)."""
    read = reads(g) | {v.name for v in (*g.output, *g.input)}
    for t in [t for t in g.initializer if t.name not in read]:
        g.initializer.remove(t)
    produced = {o for n in g.node for o in n.output} | {v.name for v in g.input} | {t.name for t in g.initializer}
    vi = [v for v in g.value_info if v.name in produced]
    del g.value_info[:]
    g.value_info.extend(vi)


def inline_bytes(m: onnx.ModelProto) -> int:
    """Bytes of the main graph's initializers held in the model (not external), from their dims and types."""
    return sum(_data_bytes(t) for t in m.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL)


def _apart(m: onnx.ModelProto, take: Any, location: str,
           keep: Any = lambda t: True) -> tuple[onnx.ModelProto, list[onnx.TensorProto]]:
    """``m`` rebuilt around its weights: the main graph's initializers in memory for which ``take(t)`` holds become
    external stubs (dims and type kept, ``location``), returned with the model; those ``keep(t)`` rejects are left
    out (initializers nothing reads: ONNX Runtime drops them, then fails to find them among the arrays handed to it,
    "Failed to find existing initializer")."""
    g = m.graph
    light = onnx.ModelProto(ir_version=m.ir_version, opset_import=m.opset_import, functions=m.functions,
                            producer_name=m.producer_name, domain=m.domain, model_version=m.model_version)
    light.graph.CopyFrom(onnx.GraphProto(name=g.name, node=g.node, input=g.input, output=g.output,
                                         value_info=g.value_info, sparse_initializer=g.sparse_initializer))
    taken = []
    for t in g.initializer:
        if not keep(t):
            continue
        if t.data_location != onnx.TensorProto.EXTERNAL and take(t):
            stub = light.graph.initializer.add(name=t.name, dims=t.dims, data_type=t.data_type,
                                               data_location=onnx.TensorProto.EXTERNAL)
            stub.external_data.add(key="location", value=location)
            taken.append(t)
        else:
            light.graph.initializer.append(t)
    return light, taken


def _data_bytes(t: onnx.TensorProto) -> int:
    """The bytes of a tensor's values, from its dims and type (a string tensor: its serialized size)."""
    if t.data_type == onnx.TensorProto.STRING:
        return t.ByteSize()
    n = 1
    for d in t.dims:
        n *= int(d)
    try:
        return n * max(1, onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize)
    except (KeyError, ValueError, TypeError):   # a type numpy has no dtype for
        return t.ByteSize()


def serialized(m: onnx.ModelProto, outputs: Sequence[str] = ()) -> bytes:
    """``m`` serialized with ``outputs`` appended to its graph outputs, without copying the model: protobuf merges
    concatenated messages, so the encoded ``ModelProto(graph=GraphProto(output=...))`` adds them when parsed."""
    data = m.SerializeToString()
    if not outputs:
        return data
    extra = onnx.ModelProto(graph=onnx.GraphProto(output=[onnx.ValueInfoProto(name=t) for t in outputs]))
    return data + extra.SerializeToString()


def _value_infos(m: onnx.ModelProto, infer: bool) -> list[onnx.ValueInfoProto]:
    """The value infos of ``m``'s graph inputs, outputs and ``value_info``, plus (``infer``) what ONNX shape
    inference adds on the model without its weights (best effort)."""
    g = m.graph
    vis = list(g.input) + list(g.output) + list(g.value_info)
    if infer:
        try:
            inferred = onnx.shape_inference.infer_shapes(without_weights(m), strict_mode=False)
            vis += list(inferred.graph.value_info) + list(inferred.graph.output)
        except Exception:  # noqa: BLE001 - shape inference is best effort
            pass
    return vis


@dataclass
class GraphIndex:
    """Lookups over a model's main graph (rebuilt after every edit). :meth:`from_ir` indexes an ``onnx_ir`` model: its
    producers and consumers are then ``ir.Node`` and its initializers ``ir.Value`` (read node inputs with
    :func:`input_name`, arrays with :meth:`array`)."""

    model: onnx.ModelProto
    initializers: dict[str, onnx.TensorProto | ir.Value] = field(default_factory=dict)
    producer: dict[str, onnx.NodeProto | ir.Node] = field(default_factory=dict)
    consumers: dict[str, list[tuple[onnx.NodeProto | ir.Node, int]]] = field(default_factory=dict)
    shapes: dict[str, tuple[Any, ...] | None] = field(default_factory=dict)
    elem_types: dict[str, int] = field(default_factory=dict)  # TensorProto data types where known
    inputs: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, m: onnx.ModelProto, *, infer_shapes: bool = True) -> "GraphIndex":
        g = cls(m)
        graph = m.graph
        g.initializers = {t.name: t for t in graph.initializer}
        for n in graph.node:
            for o in n.output:
                if o:
                    g.producer[o] = n
            for i, name in enumerate(n.input):
                if name:
                    g.consumers.setdefault(name, []).append((n, i))
        g.inputs = {v.name for v in graph.input} - set(g.initializers)
        g.outputs = {v.name for v in graph.output}
        g._read_types(_value_infos(m, infer_shapes))
        for name, t in g.initializers.items():
            g.shapes[name] = tuple(t.dims)
            g.elem_types[name] = t.data_type
        return g

    @classmethod
    def from_ir(cls, model: ir.Model, m: onnx.ModelProto) -> "GraphIndex":
        """The index of the ``onnx_ir`` model ``model`` through its values (no pass over the proto's nodes): producers
        and consumers are ``ir.Node``, initializers ``ir.Value``. ``m``: the ``ModelProto`` ``model`` was read from
        (unchanged since), for the shape inference, run as :meth:`build` runs it."""
        g = cls(m)
        graph = model.graph
        g.initializers = dict(graph.initializers)
        for n in graph:
            for o in n.outputs:
                if o.name:
                    g.producer[o.name] = n
            for i, v in enumerate(n.inputs):
                if v is not None and v.name:
                    g.consumers.setdefault(v.name, []).append((n, i))
        g.inputs = {v.name for v in graph.inputs} - set(g.initializers)
        g.outputs = {v.name for v in graph.outputs}
        g._read_types(_value_infos(m, True))
        for name, v in g.initializers.items():
            t = v.const_value
            if t is not None:
                g.shapes[name] = tuple(int(d) for d in t.shape)
                g.elem_types[name] = int(t.dtype)
        return g

    def _read_types(self, vis: list[onnx.ValueInfoProto]) -> None:
        for v in vis:
            tt = v.type.tensor_type
            if tt.elem_type:
                self.elem_types[v.name] = tt.elem_type
            if tt.HasField("shape"):
                self.shapes[v.name] = declared_dims(v)

    def exists(self, name: str) -> bool:
        return name in self.initializers or name in self.producer or name in self.inputs

    def array(self, name: str) -> np.ndarray:
        t = self.initializers[name]
        return t.const_value.numpy() if isinstance(t, ir.Value) else numpy_helper.to_array(t)

    def shape(self, name: str) -> tuple[Any, ...] | None:
        return self.shapes.get(name)


class Initializers:
    """The initializers of a model's main graph by name, as arrays: what a :class:`GraphIndex` built only to read
    weights gave, without indexing the nodes."""

    def __init__(self, m: onnx.ModelProto) -> None:
        self.tensors = {t.name: t for t in m.graph.initializer}

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.tensors[name])


def attr(node: onnx.NodeProto | ir.Node, name: str, default: Any = None) -> Any:
    """The value of attribute ``name`` of ``node`` (a ``NodeProto`` or an ``onnx_ir`` node), else ``default``."""
    if isinstance(node, ir.Node):
        a = node.attributes.get(name)
        return default if a is None else a.value
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def input_name(node: onnx.NodeProto | ir.Node, i: int) -> str:
    """The name of input ``i`` of ``node`` (a ``NodeProto`` or an ``onnx_ir`` node); ``""`` when it is missing."""
    if isinstance(node, ir.Node):
        v = node.inputs[i] if i < len(node.inputs) else None
        return (v.name or "") if v is not None else ""
    return node.input[i] if i < len(node.input) else ""


def topological_sort(graph: onnx.GraphProto) -> None:
    """Reorder ``graph.node`` so every node comes after the producers of its inputs (stable)."""
    known = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    nodes = list(graph.node)
    producer_of = {o: i for i, n in enumerate(nodes) for o in n.output}
    deps = []
    for n in nodes:
        ins = set()
        for name in n.input:
            if name not in known and name in producer_of:
                ins.add(producer_of[name])
        for a in n.attribute:  # outer-scope names used by subgraphs
            if a.type == onnx.AttributeProto.GRAPH:
                for sn in a.g.node:
                    for name in sn.input:
                        if name in producer_of:
                            ins.add(producer_of[name])
        deps.append(ins)
    order, state = [], [0] * len(nodes)
    for start in range(len(nodes)):
        if state[start]:
            continue
        stack = [(start, iter(sorted(deps[start])))]
        state[start] = 1
        while stack:
            i, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[i] = 2
                order.append(i)
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(deps[nxt]))))
            elif state[nxt] == 1:
                raise GraphError(f"the graph has a cycle through node {nodes[nxt].name or nodes[nxt].op_type!r}")
    if order == list(range(len(nodes))):
        return  # sorted already: the nodes are not copied (a tree ensemble's 194 MB of attributes)
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)


def declared_dims(v: onnx.ValueInfoProto) -> tuple[int | str | None, ...] | None:
    """A value's declared shape: each dimension's size, its symbolic name, or None; None when no shape is declared."""
    tt = v.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
