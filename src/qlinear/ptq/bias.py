"""Bias correction (Nagel et al. 2019, "empirical" variant with input means from the calibration pass).

Weight quantization shifts the expected output of a layer by ``E[(W_q - W) x] = (W_q - W) E[x]``; subtracting it
from the float bias removes that systematic error. ``E[x]`` is the per-channel mean of the layer input over the
calibration samples (spatially constant, so zero padding at the borders is ignored). Conv (groups included),
ConvTranspose is skipped, Gemm (transB either way).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.encodings import Encoding
from qlinear.graph.model import GraphIndex, attr
from qlinear.graph.plan import Plan


def correct_biases(m: onnx.ModelProto, plan: Plan, weights: dict[str, Encoding], means: dict, *,
                   skip: set[str] = frozenset()) -> int:
    """Correct the biases of ``m`` in place for the weight encodings ``weights`` (module docstring), except the
    bias initializers in ``skip``; returns how many were corrected."""
    g = GraphIndex.build(m, infer_shapes=False)
    inits = {t.name: t for t in m.graph.initializer}
    done = 0
    for b in plan.biases:
        we = weights.get(b.weight)
        if we is None or b.name in skip or b.input not in means or means[b.input].sum is None:
            continue
        node = next((n for n, _ in g.consumers.get(b.weight, []) if n.op_type in ("Conv", "Gemm")), None)
        if node is None:
            continue
        w = numpy_helper.to_array(inits[b.weight]).astype(np.float64)
        wq = we.fake_quantize(w.astype(np.float32)).astype(np.float64)
        dw = wq - w
        mu = means[b.input].mean
        if node.op_type == "Conv":
            groups = attr(node, "group", 1)
            o, i_per = dw.shape[0], dw.shape[1]
            per_in = dw.reshape(o, i_per, -1).sum(2)          # (O, I/groups)
            out_per_group = o // groups
            mu_g = mu.reshape(groups, i_per)
            shift = np.einsum("goi,gi->go", per_in.reshape(groups, out_per_group, i_per), mu_g).reshape(-1)
        else:
            tb = attr(node, "transB", 0)
            shift = (dw if tb else dw.T) @ mu
        bias = numpy_helper.to_array(inits[b.name])
        new = (bias.astype(np.float64) - shift).astype(bias.dtype)
        inits[b.name].CopyFrom(numpy_helper.from_array(new, b.name))
        done += 1
    return done
