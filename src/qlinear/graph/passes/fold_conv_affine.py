"""Fold a per-channel ``Mul``/``Add``/``Sub`` by a constant after a ``Conv`` into the Conv's weight and bias: one
``onnx_ir`` pass, linear in the graph's size.

Some exporters write a convolution's bias, or a learned per-channel (or scalar) scale, as a node of its own after a
bias-less Conv (paddle2onnx: PP-OCRv6's 75 ``Conv -> Add(bias)``, PP-OCRv4's ``Conv -> Mul(scale)``). Left apart,
the Conv's output is quantized, then the sum or product again: two roundings where one suffices, and a
``DequantizeLinear -> Add -> QuantizeLinear`` that ONNX Runtime cannot fuse into its integer kernels. Folded:

* ``Mul(Conv(x, W, b), c)``: ``W' = W c[o]``, ``b' = b c`` (``c`` per output channel ``o``, or a scalar);
* ``Add(Conv(x, W, b), c)`` (either operand order): ``b' = b + c``; ``Sub(Conv(x, W, b), c)``: ``b' = b - c``;

in float64, stored in the weight's type (the same math, the float32 roundings of one more product). Only when the
Conv's output feeds nothing else and is no graph output, its weight and bias feed this Conv alone, and the constant
broadcasts to ``[1, C, 1, ...]`` (it cannot widen the output). Chains (``Conv -> Mul -> Add``) fold link by link.
The folded Conv's output takes the node's output name; a Conv without a bias gets ``{W}_bias``.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from qlinear.graph import ops
from qlinear.graph.ir import absorb, drop_unused_initializers, set_bias, set_initializer

#: the operators that fold (the registry's ``conv_affine`` role: Add, Sub, Mul)
OPS = ops.with_role("conv_affine")


class FoldConvAffine(ir.passes.InPlacePass):
    """Fold every foldable ``Conv -> Mul/Add/Sub(constant)`` of the main graph; ``self.folded`` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.folded = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        self.folded = 0
        for node in list(graph):  # graph order: a chain's first link folds before the next is looked at
            found = _foldable(node, graph)
            if found is None:
                continue
            _fold(graph, node, *found)
            self.folded += 1
        if self.folded:  # drop the constants nothing reads any more
            drop_unused_initializers(graph)
        return ir.passes.PassResult(model, modified=bool(self.folded))


def _const(v: ir.Value | None, graph: ir.Graph) -> bool:
    return v is not None and v.name in graph.initializers and graph.initializers[v.name] is v \
        and v.const_value is not None and not v.is_graph_input()


def _foldable(node: ir.Node, graph: ir.Graph) -> tuple[ir.Node, np.ndarray] | None:
    """The Conv ``node`` folds into and the constant as a per-output-channel vector (or a scalar), or None."""
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    for k in ((0, 1) if node.op_type != "Sub" else (0,)):
        x, c = node.inputs[k], node.inputs[1 - k]
        conv = x.producer() if x is not None else None
        if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(x.uses()) != 1 \
                or x.is_graph_output() or not _const(c, graph):
            continue
        w = conv.inputs[1] if len(conv.inputs) > 1 else None
        b = conv.inputs[2] if len(conv.inputs) > 2 else None
        if not _const(w, graph) or len(w.uses()) != 1 or (b is not None and (not _const(b, graph)
                                                                             or len(b.uses()) != 1)):
            continue
        vec = _per_channel(c.const_value.numpy(), w.const_value.numpy())
        if vec is not None:
            return conv, vec
    return None


def _per_channel(c: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """``c`` as a scalar or an ``[O]`` vector when it broadcasts against the Conv output ``[N, O, ...]`` without
    widening it (every other dimension 1); None otherwise."""
    if c.dtype != w.dtype or c.dtype.kind != "f" or c.ndim > w.ndim:
        return None
    shape = (1,) * (w.ndim - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, w.shape[0]):
        return None
    return c.reshape(()) if c.size == 1 else c.reshape(-1)


def _fold(graph: ir.Graph, node: ir.Node, conv: ir.Node, c: np.ndarray) -> None:
    wv = conv.inputs[1]
    w = wv.const_value.numpy()
    bv = conv.inputs[2] if len(conv.inputs) > 2 else None
    b = bv.const_value.numpy().astype(np.float64) if bv is not None else np.zeros(w.shape[0])
    c64 = np.broadcast_to(np.asarray(c, np.float64), (w.shape[0],))
    if node.op_type == "Mul":
        set_initializer(wv, (w.astype(np.float64) * c64.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype))
        b2 = b * c64
    else:
        b2 = b + c64 if node.op_type == "Add" else b - c64
    b2 = b2.astype(w.dtype)
    set_bias(graph, conv, b2, f"{wv.name}_bias")
    absorb(graph, conv, node)
