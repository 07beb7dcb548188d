"""Bias correction (Nagel et al. 2019, "empirical" variant with input means from the calibration pass) as one
``onnx_ir`` pass.

Weight quantization shifts the expected output of a layer by ``E[(W_q - W) x] = (W_q - W) E[x]``; subtracting it
from the float bias removes that systematic error. ``E[x]`` is the per-channel mean of the layer input over the
calibration samples (spatially constant, so zero padding at the borders is ignored), given to the pass. Conv (groups
included), ConvTranspose is skipped, Gemm (transB either way).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from qlinear.encodings import Encoding
from qlinear.graph.ir import set_initializer
from qlinear.graph.plan import BiasSpec


class CorrectBias(ir.passes.InPlacePass):
    """Correct the bias initializers of ``biases`` (the plan's) for the weight encodings ``weights`` (name ->
    encoding) given the input means ``means`` (input name -> an object with ``sum`` and ``mean``, the calibration
    pass's), except the biases named in ``skip``; ``self.corrected`` counts them."""

    def __init__(self, biases: Sequence[BiasSpec], weights: Mapping[str, Encoding], means: Mapping[str, Any], *,
                 skip: Collection[str] = frozenset()) -> None:
        super().__init__()
        self.biases, self.weights, self.means, self.skip = biases, weights, means, skip
        self.corrected = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        inits = model.graph.initializers
        self.corrected = 0
        for b in self.biases:
            we = self.weights.get(b.weight)
            if we is None or b.name in self.skip or b.input not in self.means or self.means[b.input].sum is None \
                    or b.weight not in inits or b.name not in inits:
                continue
            node = next((u.node for u in inits[b.weight].uses() if u.node.op_type in ("Conv", "Gemm")), None)
            if node is None:
                continue
            w = inits[b.weight].const_value.numpy().astype(np.float64)
            dw = we.fake_quantize(w.astype(np.float32)).astype(np.float64) - w
            shift = output_shift(node, dw, self.means[b.input].mean)
            bias = inits[b.name].const_value.numpy()
            set_initializer(inits[b.name], (bias.astype(np.float64) - shift).astype(bias.dtype))
            self.corrected += 1
        return ir.passes.PassResult(model, modified=bool(self.corrected))


def output_shift(node: ir.Node, dw: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """``(W_q - W) E[x]`` per output channel of a Conv (groups included) or Gemm ``node``."""
    if node.op_type == "Conv":
        a = node.attributes.get("group")
        groups = 1 if a is None else int(a.value)
        o, i_per = dw.shape[0], dw.shape[1]
        per_in = dw.reshape(o, i_per, -1).sum(2)          # (O, I/groups)
        out_per_group = o // groups
        mu_g = mu.reshape(groups, i_per)
        return np.einsum("goi,gi->go", per_in.reshape(groups, out_per_group, i_per), mu_g).reshape(-1)
    a = node.attributes.get("transB")
    tb = 0 if a is None else int(a.value)
    return (dw if tb else dw.T) @ mu
