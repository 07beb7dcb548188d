"""Cross-layer equalization on a ``ModelProto``: :class:`qlinear.graph.passes.equalize.Equalize` (the method is
described there)."""

from __future__ import annotations

import onnx

from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.equalize import Equalize


def equalize(m: onnx.ModelProto, *, passes: int = 4, clips: bool = True) -> int:
    """Equalize ``m`` in place; returns the number of Conv pairs equalized. ``clips=False``: only pairs joined by
    ReLU (no per-channel Max/Min bounds, which a runtime with fused activations such as TFLite cannot express)."""
    model = to_ir(m)
    p = Equalize(passes=passes, clips=clips)
    if p(model).modified:
        m.CopyFrom(to_proto(model))
    return p.pairs
