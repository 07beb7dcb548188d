"""Loading ONNX models and looking things up in them (initializers, producers, consumers, shapes)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.errors import GraphError


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
        if not p.is_file():
            raise GraphError(f"{p}: ONNX model file not found")
        try:
            return onnx.load(str(p), load_external_data=load_external)
        except Exception as e:  # noqa: BLE001
            raise GraphError(f"{p}: cannot read ONNX model ({type(e).__name__}: {e})") from None
    raise GraphError(f"expected an ONNX model (path or onnx.ModelProto), got {type(model).__name__}")


def opset(m: onnx.ModelProto, domain: str = "") -> int:
    for o in m.opset_import:
        if o.domain in (domain, "ai.onnx" if domain == "" else domain):
            return int(o.version)
    return 0


@dataclass
class GraphIndex:
    """Lookups over a model's main graph (rebuilt after every edit)."""

    model: onnx.ModelProto
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = field(default_factory=dict)
    shapes: dict[str, tuple[Any, ...] | None] = field(default_factory=dict)
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
        vis = list(graph.input) + list(graph.output) + list(graph.value_info)
        if infer_shapes:
            try:
                inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False)
                vis += list(inferred.graph.value_info) + list(inferred.graph.output)
            except Exception:  # noqa: BLE001 - shape inference is best effort
                pass
        for v in vis:
            tt = v.type.tensor_type
            if tt.HasField("shape"):
                g.shapes[v.name] = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                         for d in tt.shape.dim)
        for name, t in g.initializers.items():
            g.shapes[name] = tuple(t.dims)
        return g

    def exists(self, name: str) -> bool:
        return name in self.initializers or name in self.producer or name in self.inputs

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.initializers[name])

    def shape(self, name: str) -> tuple[Any, ...] | None:
        return self.shapes.get(name)


def attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


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
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)
