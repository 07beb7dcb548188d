"""Which axis of a weight is the output channel and which is blocked, per consuming operator: the table is the
operator registry's (:mod:`qlinear.graph.ops.linear`, AIMET's ``_get_quantization_axes``); 1-D params (biases) are
per-channel on axis 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core import granularity as gr
from qlinear.encodings.model import Encoding, EncodingSet
from qlinear.errors import EncodingError
from qlinear.graph.model import GraphIndex, input_name, load_model
from qlinear.graph.ops import input_axes


def param_axes(g: GraphIndex, name: str) -> tuple[int, int | None] | None:
    """(channel axis, block axis) of initializer ``name`` (normalised, non-negative), from its first consumer."""
    shape = g.shape(name)
    if shape is None:
        return None
    return value_axes(g.consumers.get(name, []), len(shape))


def value_axes(uses: list[tuple[Any, int]], rank: int) -> tuple[int, int | None]:
    """(channel axis, block axis) of a parameter of rank ``rank`` from its ``(node, input index)`` uses in node order
    (the first consumer the registry's table knows decides), for ``onnx_ir`` nodes as for ``NodeProto``."""
    if rank <= 1:
        return (0, None)
    for node, idx in uses:
        axes = input_axes(node, idx, rank)
        if axes is not None:
            return axes
    return (0, 1)


def _place(flat: np.ndarray, shape: tuple[int, ...], c: int, b: int, nb: int) -> np.ndarray:
    """Un-flatten a (channel, block)-ordered array into the AIMET block shape (dims on c and b, 1 elsewhere)."""
    rank = len(shape)
    C = shape[c]
    a = flat.reshape(C, nb)
    order = [c, b] + [i for i in range(rank) if i not in (c, b)]
    full = a.reshape((C, nb) + (1,) * (rank - 2))
    inv = np.argsort(order)
    return full.transpose(inv)


def resolve_encoding(e: Encoding, g: GraphIndex) -> Encoding:
    is_param = e.name in g.initializers
    p = g.producer.get(e.name)
    qdq_param = p is not None and p.op_type in ("DequantizeLinear", "Cast") and input_name(p, 0) in g.initializers
    role = "param" if is_param or qdq_param else ("activation" if g.exists(e.name) else e.role)
    changes: dict[str, Any] = {}
    if role != e.role:
        changes["role"] = role
    if not e.resolved and (is_param or qdq_param):  # a Q/DQ model: the shape of the quantized initializer
        shape = tuple(int(d) for d in g.shape(e.name if is_param else input_name(p, 0)))
        c, b = value_axes(g.consumers.get(e.name, []), len(shape))
        n = e.scale.size
        if isinstance(e.grain, gr.PerAxis):
            if n != shape[c]:
                raise EncodingError(f"{e.name}: {n} per-channel scales, but the tensor {list(shape)} has {shape[c]} "
                                    f"channels on its channel axis {c}")
            changes["axis"] = c
        else:
            if b is None:
                raise EncodingError(f"{e.name}: a per-block encoding on a 1-D tensor")
            nb = -(-shape[b] // e.block_size)
            grid = e.int_scale if e.int_scale is not None else e.scale
            if grid.size != shape[c] * nb:
                raise EncodingError(f"{e.name}: {grid.size} block values, but the tensor {list(shape)} with "
                                    f"block_size {e.block_size} on axis {b} has {shape[c]} x {nb}")
            changes["axis"] = b
            if e.int_scale is not None:
                changes["int_scale"] = _place(e.int_scale, shape, c, b, nb)
                ks = [1] * len(shape)
                ks[c] = shape[c]
                changes["scale"] = e.scale.reshape(ks)
            else:
                changes["scale"] = _place(e.scale, shape, c, b, nb)
                if e.zero_point is not None:
                    changes["zero_point"] = _place(e.zero_point, shape, c, b, nb)
    return e.replace(**changes) if changes else e


def resolve_set(es: EncodingSet, model: Any) -> EncodingSet:
    g = GraphIndex.build(load_model(model), infer_shapes=False)
    return es.with_encodings(resolve_encoding(e, g) for e in es.encodings)
