"""Drop the ``Identity`` nodes between layers of the main graph: one ``onnx_ir`` pass, linear in the graph's size.

Some exporters write an ``Identity`` after every operator (paddle2onnx: 147 in PP-OCRv6's detector). Each would take
a second quantizer equal to its input's, which ONNX Runtime, dropping the Identity at its basic level, leaves as a
``DequantizeLinear -> QuantizeLinear`` pair it does not fuse. An Identity whose output is a graph output stays (its
output keeps its name and its own quantizer; ``onnx_ir``'s ``IdentityEliminationPass`` would rename the producer's
output instead, and the producer's other readers would then read a graph output).
"""

from __future__ import annotations

import onnx_ir as ir


class DropIdentity(ir.passes.InPlacePass):
    """Drop every ``Identity`` of the main graph whose output is no graph output; ``self.dropped`` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        self.dropped = 0
        for node in list(graph):
            if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 1 \
                    or node.inputs[0] is None or len(node.outputs) != 1 or node.outputs[0].is_graph_output():
                continue
            node.outputs[0].replace_all_uses_with(node.inputs[0])
            graph.remove(node, safe=True)
            self.dropped += 1
        return ir.passes.PassResult(model, modified=bool(self.dropped))
