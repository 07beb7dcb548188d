"""Activation smoothing for transformer MatMuls (SmoothQuant, Xiao et al. 2023, arXiv:2211.10438, eq. 4).

A MatMul input ``X[..., K]`` with outlier channels (the LayerNorm outputs of BERT-like encoders) loses most of its
8-bit grid to a few channels. For ``Y = X W`` with a constant ``W[K, N]``, any positive ``s[K]`` gives
``Y = (X diag(s)^-1) (diag(s) W)``; with

    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)          (alpha = 0.5)

the activation's channels are flattened and the weights (quantized per output channel, which absorbs a row scaling
well) take the difference. The division is folded into the producer when it is a ``LayerNormalization`` whose output
feeds only smoothed MatMuls (``gamma / s``, ``beta / s``); otherwise it is an explicit float ``Mul`` on the MatMul
branch (the residual branch keeps ``X``). The model stays the same function up to float rounding; the quantizers are
then placed on the smoothed tensors. ``max|X_j|`` comes from one ONNX Runtime pass over the calibration samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.graph.model import GraphIndex

ALPHA = 0.5


NORMS = ("LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization")


def _is_norm_output(x: str, g: GraphIndex) -> bool:
    """Produced by a normalization: LayerNormalization (or RMS), or the affine end of a decomposed one (``Mul`` by or
    ``Add`` of a 1-D constant over the last axis)."""
    p = g.producer.get(x)
    if p is None:
        return False
    if p.op_type in NORMS:
        return True
    if p.op_type in ("Mul", "Add") and len(p.input) == 2:
        consts = [i for i in p.input if i in g.initializers and len(g.initializers[i].dims) == 1]
        if len(consts) == 1:
            other = p.input[1 - list(p.input).index(consts[0])]
            q = g.producer.get(other)
            return q is not None and (q.op_type in ("Div", "Mul") or _is_norm_output(other, g))
    return False


def smoothable(m: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    """Normalization outputs feeding MatMuls with a constant 2-D weight ``[K, N]`` -> those MatMuls. (Gelu/SiLU
    outputs are not smoothed: measured on MiniLM, moving their heavy positive tail into the down-projection's weights
    costs more than it saves.)"""
    g = GraphIndex.build(m, infer_shapes=False)
    out: dict[str, list[onnx.NodeProto]] = {}
    for n in m.graph.node:
        if n.op_type == "MatMul" and len(n.input) == 2 and n.input[1] in g.initializers \
                and len(g.initializers[n.input[1]].dims) == 2 and n.input[0] not in g.initializers \
                and _is_norm_output(n.input[0], g):
            out.setdefault(n.input[0], []).append(n)
    return out


def channel_absmax(m: onnx.ModelProto, tensors: list[str], ds: Any, n: int, batch_size: int,
                   label: str) -> dict[str, np.ndarray]:
    from qlinear.ptq.collect import session

    s = session(m, tensors, label=label)
    acc: dict[str, np.ndarray] = {}
    for batch in ds.batches(0, n, batch_size):
        for t, x in zip(tensors, s.run(tensors, batch, where=f"{ds.source} (smoothing)")):
            a = np.abs(x.reshape(-1, x.shape[-1])).max(0)
            acc[t] = a if t not in acc else np.maximum(acc[t], a)
    return acc


def smooth(m: onnx.ModelProto, ds: Any, n: int, batch_size: int, *, alpha: float = ALPHA,
           label: str = "model") -> int:
    """Smooth every smoothable MatMul input of ``m`` in place; returns how many activations were smoothed."""
    targets = smoothable(m)
    if not targets:
        return 0
    amax = channel_absmax(m, list(targets), ds, n, batch_size, label)
    g = GraphIndex.build(m, infer_shapes=False)
    inits = g.initializers
    done = 0
    inserts: dict[str, tuple[onnx.NodeProto, list[str]]] = {}   # first MatMul's name -> (Mul node, MatMul names)
    for x, mms in targets.items():
        ax = amax[x].astype(np.float64)
        ws = [numpy_helper.to_array(inits[mm.input[1]]).astype(np.float64) for mm in mms]
        if any(w.shape[0] != ax.size for w in ws):
            continue
        if any(len(g.consumers.get(mm.input[1], [])) != 1 for mm in mms):
            continue  # a weight shared with another product would be scaled for both
        aw = np.max([np.abs(w).max(1) for w in ws], axis=0)
        s = np.where((ax > 0) & (aw > 0), ax ** alpha / np.maximum(aw, 1e-12) ** (1 - alpha), 1.0)
        s = np.clip(s, 1e-5, 1e5)
        if np.allclose(s, 1.0):
            continue
        for mm, w in zip(mms, ws):
            t = inits[mm.input[1]]
            t.CopyFrom(numpy_helper.from_array((w * s[:, None]).astype(np.float32), t.name))
        mul = _divide(m, g, x, mms, s)
        if mul is not None:
            inserts[mms[0].name or mms[0].output[0]] = (mul, [mm.name or mm.output[0] for mm in mms])
        done += 1
    if inserts:
        rewired = {name: mul.output[0] for mul, names in inserts.values() for name in names}
        nodes: list[onnx.NodeProto] = []
        for nd in m.graph.node:
            key = nd.name or nd.output[0]
            if key in inserts:
                nodes.append(inserts[key][0])
            if key in rewired:
                nd.input[0] = rewired[key]
            nodes.append(nd)
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    return done


def _divide(m: onnx.ModelProto, g: GraphIndex, x: str, mms: list[onnx.NodeProto],
            s: np.ndarray) -> onnx.NodeProto | None:
    """Fold ``1/s`` into a LayerNormalization producer (returns None), or the explicit Mul to insert."""
    p = g.producer.get(x)
    names = {mm.name or mm.output[0] for mm in mms}
    others = [c for c, _ in g.consumers.get(x, []) if (c.name or c.output[0]) not in names]
    if p is not None and p.op_type == "LayerNormalization" and not others and x not in g.outputs \
            and len(p.input) >= 2 and p.input[1] in g.initializers \
            and all(len(g.consumers.get(i, [])) == 1 for i in p.input[1:3] if i):
        for i in p.input[1:3]:
            if i:
                t = g.initializers[i]
                v = numpy_helper.to_array(t).astype(np.float64)
                t.CopyFrom(numpy_helper.from_array((v / s).astype(np.float32), t.name))
        return None
    inv = f"{x}_smooth_inv"
    m.graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), inv))
    return helper.make_node("Mul", [x, inv], [f"{x}_smoothed"], name=f"{x}_Smooth")
