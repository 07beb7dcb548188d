"""Activation smoothing for transformer MatMuls (SmoothQuant, Xiao et al. 2023, arXiv:2211.10438, eq. 4) as one
``onnx_ir`` pass; the per-channel statistics it needs are an input (:mod:`qlinear.ptq.algorithms.smooth` measures them with
ONNX Runtime).

A MatMul input ``X[..., K]`` with outlier channels (the LayerNorm outputs of BERT-like encoders) loses most of its
8-bit grid to a few channels. For ``Y = X W`` with a constant ``W[K, N]``, any positive ``s[K]`` gives
``Y = (X diag(s)^-1) (diag(s) W)``; with

    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)          (alpha = 0.5)

the activation's channels are flattened and the weights (quantized per output channel, which absorbs a row scaling
well) take the difference. The division is folded into the producer when it is a ``LayerNormalization`` whose output
feeds only smoothed MatMuls (``gamma / s``, ``beta / s``); otherwise it is an explicit float ``Mul`` by
``{X}_smooth_inv`` writing ``{X}_smoothed`` on the MatMul branch (the residual branch keeps ``X``), placed before the
first of those MatMuls. The model stays the same function up to float rounding.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from qlinear.graph.ir import Names, add_initializer, make_node, set_initializer
from qlinear.graph.ops import AFFINE_NORMS

ALPHA = 0.5
NORMS = AFFINE_NORMS  # the normalizations a per-channel factor folds into (the registry's role)


def _const(v: ir.Value | None) -> np.ndarray | None:
    if v is None or not v.is_initializer() or v.const_value is None:
        return None
    return v.const_value.numpy()


def _const_rank(v: ir.Value | None) -> int | None:
    if v is None or not v.is_initializer() or v.const_value is None:
        return None
    return len(v.const_value.shape)


def is_norm_output(x: ir.Value) -> bool:
    """Produced by a normalization: LayerNormalization (or RMS), or the affine end of a decomposed one (``Mul`` by or
    ``Add`` of a 1-D constant over the last axis)."""
    p = x.producer()
    if p is None:
        return False
    if p.op_type in NORMS:
        return True
    if p.op_type in ("Mul", "Add") and len(p.inputs) == 2:
        consts = [i for i, v in enumerate(p.inputs) if _const_rank(v) == 1]
        if len(consts) == 1:
            other = p.inputs[1 - consts[0]]
            if other is None:
                return False
            q = other.producer()
            return q is not None and (q.op_type in ("Div", "Mul") or is_norm_output(other))
    return False


def smoothable(graph: ir.Graph) -> dict[str, list[ir.Node]]:
    """Normalization outputs feeding MatMuls with a constant 2-D weight ``[K, N]`` -> those MatMuls, in node order.
    (Gelu/SiLU outputs are not smoothed: measured on MiniLM, moving their heavy positive tail into the
    down-projection's weights costs more than it saves.)"""
    out: dict[str, list[ir.Node]] = {}
    for n in graph:
        if n.op_type == "MatMul" and len(n.inputs) == 2 and _const_rank(n.inputs[1]) == 2 \
                and n.inputs[0] is not None and not n.inputs[0].is_initializer() and is_norm_output(n.inputs[0]):
            out.setdefault(n.inputs[0].name, []).append(n)
    return out


class Smooth(ir.passes.InPlacePass):
    """Smooth every smoothable MatMul input (:func:`smoothable`) whose per-channel ``max|X|`` is in ``absmax``
    (name -> array over the last axis); ``self.smoothed`` counts the activations smoothed."""

    def __init__(self, absmax: Mapping[str, np.ndarray], *, alpha: float = ALPHA) -> None:
        super().__init__()
        self.absmax, self.alpha = absmax, alpha
        self.smoothed = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        self.smoothed = 0
        names: Names | None = None
        for x, mms in smoothable(graph).items():
            s = self.scales(x, mms)
            if s is None:
                continue
            for mm in mms:
                w = mm.inputs[1].const_value.numpy().astype(np.float64)
                set_initializer(mm.inputs[1], (w * s[:, None]).astype(np.float32))
            if not _fold_into_norm(mms[0].inputs[0], mms, s):
                names = names or Names(graph)
                _insert_mul(graph, names, mms, s)
            self.smoothed += 1
        return ir.passes.PassResult(model, modified=bool(self.smoothed))

    def scales(self, x: str, mms: list[ir.Node]) -> np.ndarray | None:
        """The smoothing factors ``s`` of ``x`` (None: not smoothed)."""
        if x not in self.absmax:
            return None
        ax = np.asarray(self.absmax[x]).astype(np.float64)
        ws = [mm.inputs[1].const_value.numpy().astype(np.float64) for mm in mms]
        if any(w.shape[0] != ax.size for w in ws):
            return None
        if any(len(mm.inputs[1].uses()) != 1 for mm in mms):
            return None  # a weight shared with another product would be scaled for both
        aw = np.max([np.abs(w).max(1) for w in ws], axis=0)
        alpha = self.alpha
        s = np.where((ax > 0) & (aw > 0), ax ** alpha / np.maximum(aw, 1e-12) ** (1 - alpha), 1.0)
        s = np.clip(s, 1e-5, 1e5)
        return None if np.allclose(s, 1.0) else s


def _fold_into_norm(x: ir.Value, mms: list[ir.Node], s: np.ndarray) -> bool:
    """Fold ``1/s`` into a LayerNormalization producer of ``x`` read only by ``mms`` (gamma, beta read only by it)."""
    p = x.producer()
    ids = {id(mm) for mm in mms}
    if p is None or p.op_type != "LayerNormalization" or any(id(u.node) not in ids for u in x.uses()) \
            or x.is_graph_output() or len(p.inputs) < 2 or _const(p.inputs[1]) is None:
        return False
    params = [v for v in p.inputs[1:3] if v is not None]
    if any(len(v.uses()) != 1 or _const(v) is None for v in params):
        return False
    for v in params:
        set_initializer(v, (v.const_value.numpy().astype(np.float64) / s).astype(np.float32))
    return True


def _insert_mul(graph: ir.Graph, names: Names, mms: list[ir.Node], s: np.ndarray) -> None:
    x = mms[0].inputs[0]
    inv = add_initializer(graph, names.new(f"{x.name}_smooth_inv"), (1.0 / s).astype(np.float32))
    mul = make_node("Mul", [x, inv], names.new(f"{x.name}_smoothed"), names.new(f"{x.name}_Smooth"))
    graph.insert_before(mms[0], mul)
    for mm in mms:
        mm.replace_input_with(0, mul.outputs[0])
