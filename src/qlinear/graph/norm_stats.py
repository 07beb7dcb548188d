"""The statistics of a normalization written out in elementwise operators (LayerNorm, RMSNorm, GroupNorm or an L2
normalization as exporters decompose them): the mean and variance a reduction computes, what they pass through
before a square root, and the squares the variance sums.

These tensors are no data to quantize: a variance written as ``E[x^2] - E[x]^2`` (jax2tf's LayerNorm, magika) is
the difference of two nearly equal numbers, and an 8-bit grid over each leaves the difference noise (magika's
top-1 agreement with float fell to 0.41 with them at 8 bits); a runtime computes the reductions and the square root
in float in any case. :func:`norm_statistics` finds them for the plan (:mod:`qlinear.graph.plan`), which leaves them
float; the normalized data (``x - mean``, its product with the reciprocal square root) is quantized as before.

A tensor is a statistic when it lies on a path from a reduction (``ReduceMean``/``ReduceSum``) or a square
(``Mul(x, x)``, ``Pow(x, 2)``) to a square root (``Sqrt``, ``Pow`` by +-0.5, or the ``Reciprocal`` of one) through
elementwise and layout operators; the square a reduction on such a path reads is one too, and so is the root of a
reduction's value (a standard deviation). The squares cover a magnitude written out, ``sqrt(re^2 + im^2)`` of a
spectrogram (silero-vad's STFT): its squares span the square of the magnitude's range, and an 8-bit grid over them
rounds the quiet bins to zero before the root magnifies it (the sum's output SQNR alone: 15 dB); the magnitude
itself is data, quantized as before.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from qlinear.graph.ops import NORM_REDUCTIONS as REDUCTIONS
from qlinear.graph.ops import NORM_ROOTS
from qlinear.graph.ops import NORM_THROUGH as THROUGH


def _const(v: ir.Value | None) -> np.ndarray | None:
    return None if v is None or v.const_value is None else np.asarray(v.const_value.numpy())


def _is_root(n: ir.Node) -> bool:
    """A square root: Sqrt, or Pow by a constant +-0.5."""
    if n.op_type == "Sqrt":
        return True
    e = _const(n.inputs[1]) if n.op_type == "Pow" and len(n.inputs) > 1 else None
    return e is not None and e.size == 1 and abs(abs(float(e.reshape(-1)[0])) - 0.5) < 1e-6


def _is_square(n: ir.Node) -> bool:
    if n.op_type == "Mul" and len(n.inputs) == 2:
        return n.inputs[0] is n.inputs[1]
    e = _const(n.inputs[1]) if n.op_type == "Pow" and len(n.inputs) > 1 else None
    return e is not None and e.size == 1 and float(e.reshape(-1)[0]) == 2.0


def norm_statistics(nodes: list[ir.Node]) -> set[str]:
    """The names of the normalization statistics among the outputs of ``nodes`` (a graph's nodes in topological
    order; module docstring)."""
    after: set[str] = set()      # computed from a reduction or a square through THROUGH operators
    reduced: set[str] = set()    # those computed from a reduction: a root of one is a statistic too (a magnitude is data)
    for n in nodes:
        outs = {o.name for o in n.outputs if o.name}
        live = any(x is not None and x.name in after for x in n.inputs)
        of_reduction = any(x is not None and x.name in reduced for x in n.inputs)
        if n.op_type in REDUCTIONS or (n.op_type in NORM_ROOTS and of_reduction):
            after |= outs
            reduced |= outs
        elif _is_square(n) or (n.op_type in THROUGH and live):
            after |= outs
            if of_reduction:
                reduced |= outs
    before: set[str] = set()     # read, through THROUGH operators, by a square root of such a value
    for n in reversed(nodes):
        outs = {o.name for o in n.outputs}
        root = _is_root(n) and any(x is not None and x.name in after for x in n.inputs)
        if root:
            before |= outs
        if root or (outs & before and n.op_type in THROUGH):
            before.update(x.name for x in n.inputs if x is not None and x.name and x.const_value is None)
    stats = after & before
    for n in nodes:
        x = n.inputs[0] if n.inputs else None
        if x is None:
            continue
        if n.op_type == "Reciprocal" and x.name in stats:          # 1 / sqrt(var): a statistic too
            stats.add(n.outputs[0].name)
        p = x.producer()
        if n.op_type in REDUCTIONS and n.outputs[0].name in stats and p is not None and _is_square(p):
            stats.add(x.name)                                        # the squares the variance sums
    return stats


__all__ = ["norm_statistics"]
