"""Bias correction on a ``ModelProto``: :class:`qlinear.graph.passes.correct_bias.CorrectBias` (the method is
described there)."""

from __future__ import annotations

import onnx

from qlinear.encodings import Encoding
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.correct_bias import CorrectBias
from qlinear.graph.plan import Plan


def correct_biases(m: onnx.ModelProto, plan: Plan, weights: dict[str, Encoding], means: dict, *,
                   skip: set[str] = frozenset()) -> int:
    """Correct the biases of ``m`` in place for the weight encodings ``weights``, except the bias initializers in
    ``skip``; returns how many were corrected."""
    if not weights or not plan.biases:   # nothing to correct: no IR of the model (luscinia's 194 MB of tree
        return 0                         # attributes took 10 s to read)
    model = to_ir(m)
    p = CorrectBias(plan.biases, weights, means, skip=skip)
    p(model)
    if p.corrected:
        m.CopyFrom(to_proto(model))
    return p.corrected
