"""BatchNormalization folding on a ``ModelProto``: :class:`qlinear.graph.passes.fold_batchnorm.FoldBatchNorm`."""

from __future__ import annotations

import onnx

from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.fold_batchnorm import FoldBatchNorm


def fold_batchnorm(m: onnx.ModelProto) -> int:
    """Fold ``Conv -> BatchNormalization`` pairs of ``m`` in place; returns the number of folded pairs."""
    model = to_ir(m)
    p = FoldBatchNorm()
    p(model)
    if p.folded:
        m.CopyFrom(to_proto(model))
    return p.folded
