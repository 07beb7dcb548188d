"""Clamps that the grid before them already satisfies, dropped from a Q/DQ model: the same outputs, bit for bit.

A ``Max(x, c)`` (``Min(x, c)``) against a constant ``c`` whose input ``x`` is a ``DequantizeLinear`` output can
change no value when every ``c`` is at most (at least) the lowest (highest) value that ``DequantizeLinear`` can give:
``(q - zero_point) * scale`` at the ends of the integer type, computed as ONNX computes it. Cross-layer equalization
writes a ReLU6 as ``Max(x, 0) -> Min(x, bound per channel)``; on target ort the layer before takes the grid of the
clip's output (:func:`qlinear.graph.plan.make_plan`), which starts at 0: its ``Max`` against zeros is such a clamp,
and ONNX Runtime ran it in float at every inference (EfficientNet-Lite0 per-tensor, 32 of them; ONNX Runtime 1.32's
default session, 2 threads of an AVX-512 VNNI EPYC, one image, medians of 15 interleaved rounds on a quiet machine:
13.3 -> 8.7 ms, the float model 8.1, per-channel 3.8; the outputs identical). Only clamps whose removal keeps the output's shape (``c`` broadcast into
``x``'s known shape) and whose output is no graph output or subgraph reference are dropped; the ``Min`` against
per-channel bounds below the grid's top stays.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.core.dequantize import dequantize_linear
from qlinear.core.types import int_stored_as
from qlinear.graph.model import node_inputs, prune, without_weights
from qlinear.graph.ops import CONSTANT_CLAMPS


def drop_satisfied_clamps(m: onnx.ModelProto) -> list[str]:
    """Drop (in place, main graph) every ``Max``/``Min`` of a ``DequantizeLinear`` output against a constant that no
    value of its grid crosses (module docstring); returns the dropped nodes' names."""
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    keep_names = {o.name for o in g.output} | _subgraph_reads(g)
    shapes = _Shapes(m)
    into: dict[str, str] = {}     # dropped output -> the tensor its readers read now
    dropped: list[str] = []
    for n in g.node:
        x, c = against_constant(n, inits, (onnx.TensorProto.FLOAT,))
        if x is None or n.output[0] in keep_names:
            continue
        x = into.get(x, x)
        ends = grid_ends(prod.get(x), inits)
        cv = numpy_helper.to_array(inits[c])
        if ends is None or not np.all(np.isfinite(cv)):
            continue
        lo, hi = ends
        satisfied = (n.op_type == "Max" and float(cv.max()) <= lo) or (n.op_type == "Min" and float(cv.min()) >= hi)
        if satisfied and _fits(cv.shape, _shape_of(x, prod, shapes)):
            into[n.output[0]] = x
            dropped.append(n.name or n.output[0])
    if into:
        _rewire(g, into)
    return dropped


def against_constant(n: onnx.NodeProto, inits: dict[str, onnx.TensorProto],
                     types: tuple[int, ...]) -> tuple[str | None, str | None]:
    """The tensor and the constant (an initializer of one of ``types``, not empty) of a ``Max``/``Min`` of the
    default domain that takes one of each; ``(None, None)`` for anything else."""
    if n.op_type not in CONSTANT_CLAMPS or n.domain not in ("", "ai.onnx") or len(n.input) != 2 \
            or len(n.output) != 1:
        return None, None
    x, c = n.input
    if x in inits:
        x, c = c, x
    if c not in inits or x in inits or inits[c].data_type not in types or not np.prod(inits[c].dims, dtype=int):
        return None, None
    return x, c


def per_tensor_params(d: onnx.NodeProto | None, inits: dict[str, onnx.TensorProto],
                      op: str = "DequantizeLinear") -> tuple[np.ndarray, np.ndarray] | None:
    """The scale (float32) and integer zero point of ``d``, a ``DequantizeLinear`` (or ``op``) of the default
    domain with constant per-tensor parameters and a float32 output; None for anything else."""
    if d is None or d.op_type != op or d.domain not in ("", "ai.onnx") or len(d.input) < 3 \
            or d.input[1] not in inits or d.input[2] not in inits:
        return None
    if any(a.name == "output_dtype" and a.i not in (0, onnx.TensorProto.FLOAT) for a in d.attribute):
        return None
    s, zp = numpy_helper.to_array(inits[d.input[1]]), numpy_helper.to_array(inits[d.input[2]])
    if s.size != 1 or zp.size != 1 or s.dtype != np.float32 or int_stored_as(zp.dtype) is None:
        return None
    return s, zp


def grid_ends(d: onnx.NodeProto | None, inits: dict[str, onnx.TensorProto]) -> tuple[float, float] | None:
    """The lowest and highest value ``d`` (:func:`per_tensor_params`) can give; None for anything else."""
    params = per_tensor_params(d, inits)
    if params is None:
        return None
    s, zp = params
    t = int_stored_as(zp.dtype)
    q = np.array([t.qmin, t.qmax], dtype=zp.dtype)
    lo, hi = dequantize_linear(q, s.reshape(()), zp.reshape(()))
    return float(lo), float(hi)


class _Shapes:
    """Shapes of the main graph's values (a dimension None when symbolic): the model's value infos, and at the first
    value they lack, what ONNX shape inference gives on the model without its weights (once, best effort)."""

    def __init__(self, m: onnx.ModelProto) -> None:
        self.m, self.inferred = m, False
        self.known = self._read(list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output))

    @staticmethod
    def _read(vis: list[onnx.ValueInfoProto]) -> dict[str, list[int | None]]:
        out = {}
        for v in vis:
            tt = v.type.tensor_type
            if tt.HasField("shape"):
                out[v.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        return out

    def infer(self) -> bool:
        """Add what shape inference gives (once); whether it ran now."""
        if self.inferred:
            return False
        self.inferred = True
        try:
            g = onnx.shape_inference.infer_shapes(without_weights(self.m), strict_mode=False).graph
            self.known = {**self._read(list(g.value_info) + list(g.output)), **self.known}
        except Exception:  # noqa: BLE001 - shape inference is best effort: an unknown shape keeps the clamp
            pass
        return True


def _shape_of(x: str, prod: dict[str, onnx.NodeProto], shapes: _Shapes) -> list | None:
    """The shape of ``x``, looked through the ``DequantizeLinear``/``QuantizeLinear`` pair that keeps it (shape
    inference only when the value infos know none of them)."""
    chain = [x]
    while len(chain) < 3 and (p := prod.get(chain[-1])) is not None \
            and p.op_type in ("DequantizeLinear", "QuantizeLinear"):
        chain.append(p.input[0])
    for _ in range(2):
        found = next((shapes.known[v] for v in chain if v in shapes.known), None)
        if found is not None or not shapes.infer():
            return found
    return None


def _fits(c: tuple[int, ...], x: list | None) -> bool:
    """``c`` broadcast against a tensor of shape ``x`` leaves its shape unchanged."""
    if x is None or len(c) > len(x):
        return False
    return all(cd == 1 or xd == cd for cd, xd in zip(reversed(c), reversed(x)))


def _subgraph_reads(g: onnx.GraphProto) -> set[str]:
    """Names the subgraphs of ``g``'s nodes read from the outer scope (a dropped node must not take them away)."""
    return {x for n in g.node for x in node_inputs(n)[sum(1 for i in n.input if i):]}


def _rewire(g: onnx.GraphProto, into: dict[str, str]) -> None:
    """Readers of each dropped output read its input; the dropped nodes and the constants only they read go."""
    kept = [n for n in g.node if not (len(n.output) == 1 and n.output[0] in into)]
    for n in kept:
        for i, x in enumerate(n.input):
            if x in into:
                n.input[i] = into[x]
    del g.node[:]
    g.node.extend(kept)
    prune(g)


__all__ = ["against_constant", "drop_satisfied_clamps", "grid_ends", "per_tensor_params"]
