"""Fold ``Conv -> BatchNormalization`` (or ``ConvTranspose -> BatchNormalization``: CenterFace's upsampling) into the
convolution (when its output feeds only the BatchNorm): one ``onnx_ir`` pass, linear in the graph's size.

``W' = W * g/sqrt(v+eps)`` along the output channels (axis 0 of a Conv weight; axis 1 within each group of a
ConvTranspose weight ``[C_in, C_out / group, k...]``), ``b' = (b - mu) * g/sqrt(v+eps) + beta`` in float64, stored in
the weight's type. The
Conv's output takes the BatchNorm output's name and value info; a Conv without a bias gets ``{W}_bn_bias``; the
initializers nothing reads any more (the BatchNorm parameters) are dropped.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from qlinear.graph.ir import absorb, drop_unused_initializers, set_bias, set_initializer


class FoldBatchNorm(ir.passes.InPlacePass):
    """Fold every foldable ``Conv -> BatchNormalization`` pair of the main graph; ``self.folded`` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.folded = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        self.folded = 0
        for bn in list(graph):
            conv = _foldable(bn, graph)
            if conv is None:
                continue
            _fold(graph, conv, bn)
            self.folded += 1
        if self.folded:  # drop the initializers nothing uses any more (the BatchNorm parameters)
            drop_unused_initializers(graph)
        return ir.passes.PassResult(model, modified=bool(self.folded))


def _const(v: ir.Value | None, graph: ir.Graph) -> bool:
    return v is not None and v.name in graph.initializers and graph.initializers[v.name] is v \
        and v.const_value is not None


def _foldable(bn: ir.Node, graph: ir.Graph) -> ir.Node | None:
    """The Conv ``bn`` folds into, or None."""
    if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") or len(bn.inputs) < 5:
        return None
    if len(bn.outputs) != 1 and any(o.name for o in bn.outputs[1:]):
        return None
    x = bn.inputs[0]
    conv = x.producer() if x is not None else None
    if conv is None or conv.op_type not in ("Conv", "ConvTranspose") or conv.domain not in ("", "ai.onnx") or len(x.uses()) != 1 \
            or x.is_graph_output():
        return None
    if not all(_const(v, graph) for v in bn.inputs[1:5]) or not _const(conv.inputs[1], graph) \
            or len(conv.inputs[1].uses()) != 1:  # a weight another node reads too keeps its values
        return None
    if len(conv.inputs) > 2 and conv.inputs[2] is not None and (not _const(conv.inputs[2], graph)
                                                                or len(conv.inputs[2].uses()) != 1):
        return None
    return conv


def _fold(graph: ir.Graph, conv: ir.Node, bn: ir.Node) -> None:
    scale, beta, mean, var = (v.const_value.numpy().astype(np.float64) for v in bn.inputs[1:5])
    attr = bn.attributes.get("epsilon")
    eps = attr.value if attr is not None else 1e-5
    wv = conv.inputs[1]
    w = wv.const_value.numpy()
    f = scale / np.sqrt(var + eps)
    bv = conv.inputs[2] if len(conv.inputs) > 2 else None
    b = bv.const_value.numpy().astype(np.float64) if bv is not None else np.zeros(f.shape[0])
    if conv.op_type == "ConvTranspose":   # [C_in, C_out / group, k...]: output channel g * C_out/group + j
        ga = conv.attributes.get("group")
        group = int(ga.value) if ga is not None else 1
        wg = w.astype(np.float64).reshape((group, w.shape[0] // group) + w.shape[1:])
        w2 = (wg * f.reshape((group, 1, -1) + (1,) * (w.ndim - 2))).reshape(w.shape).astype(w.dtype)
    else:
        w2 = (w.astype(np.float64) * f.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    b2 = ((b - mean) * f + beta).astype(w.dtype)
    set_initializer(wv, w2)
    set_bias(graph, conv, b2, f"{wv.name}_bn_bias")
    absorb(graph, conv, bn)
