"""Give every layer its own bias: one ``onnx_ir`` pass, linear in the graph's size.

An exporter that deduplicates equal constants (tf2onnx: basic-pitch's 18 ``Conv`` nodes read one bias initializer,
8 more another) makes several layers read one bias. Its int32 encoding is ``input_scale * weight_scale``, which
differs from layer to layer: one encoding can be right for one reader only, and the others read their bias at the
wrong scale (ONNX Runtime's ``QLinearConv`` and QNN take the int32 values as they are). Each bias input of a
``Conv``/``ConvTranspose``/``Gemm`` (the registry's ``bias_input``) that another node reads too becomes a copy of
its own, ``{name}_{k}``; the first bias reader keeps the original when only bias inputs read it.
"""

from __future__ import annotations

import onnx_ir as ir

from qlinear.graph import ops
from qlinear.graph.ir import add_initializer


class UnshareBiases(ir.passes.InPlacePass):
    """Copy every bias initializer another node reads too, one per reading layer; ``self.copied`` maps each
    original name to the number of layers that read it."""

    def __init__(self) -> None:
        super().__init__()
        self.copied: dict[str, int] = {}

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        self.copied = {}
        for v in list(graph.initializers.values()):
            if v.const_value is None or v.is_graph_input() or len(v.uses()) < 2:
                continue
            slots = [(u.node, u.idx) for u in v.uses() if ops.bias_input(u.node.op_type) == u.idx
                     and u.node.domain in ("", "ai.onnx")]
            if not slots or (len(slots) == 1 and len(v.uses()) == len(slots)):
                continue
            keep = 1 if len(slots) == len(v.uses()) else 0   # other readers keep the original
            for k, (node, idx) in enumerate(slots[keep:], start=1):
                name = f"{v.name}_{k}"
                while name in graph.initializers:
                    name += "_"
                node.replace_input_with(idx, add_initializer(graph, name, v.const_value.numpy()))
            self.copied[v.name] = len(slots)
        return ir.passes.PassResult(model, modified=bool(self.copied))


def unshare_note(copied: dict[str, int]) -> str:
    """The note on the biases :class:`UnshareBiases` copied."""
    names = list(copied)
    return (f"{len(names)} bias(es) read by several layers were copied, one per layer, so each int32 bias is at its "
            "own layer's input_scale * weight_scale: " + ", ".join(f"{n} ({copied[n]} layers)" for n in names[:5])
            + (" ..." if len(names) > 5 else ""))
