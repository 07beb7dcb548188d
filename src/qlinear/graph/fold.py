"""Graph preparation: fold BatchNormalization into the preceding Conv (when the Conv output feeds only the BN)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.graph.model import GraphIndex, attr


def fold_batchnorm(m: onnx.ModelProto) -> int:
    """Fold ``Conv -> BatchNormalization`` pairs in place: ``W' = W * g/sqrt(v+eps)``, ``b' = (b - mu) * g/sqrt(v+eps)
    + beta``. Returns the number of folded pairs."""
    g = GraphIndex.build(m, infer_shapes=False)
    graph = m.graph
    folded = 0
    remove = []
    inits = {t.name: t for t in graph.initializer}
    for bn in list(graph.node):
        if bn.op_type != "BatchNormalization" or len(bn.output) != 1 and any(bn.output[1:]):
            continue
        conv = g.producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or len(g.consumers.get(bn.input[0], [])) != 1:
            continue
        names = bn.input[1:5]
        if not all(n in inits for n in names) or conv.input[1] not in inits:
            continue
        scale, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64) for n in names)
        eps = attr(bn, "epsilon", 1e-5)
        w = numpy_helper.to_array(inits[conv.input[1]])
        f = scale / np.sqrt(var + eps)
        b = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) if len(conv.input) > 2 and conv.input[2] \
            else np.zeros(w.shape[0])
        w2 = (w.astype(np.float64) * f.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b2 = ((b - mean) * f + beta).astype(w.dtype)
        inits[conv.input[1]].CopyFrom(numpy_helper.from_array(w2, conv.input[1]))
        bname = conv.input[2] if len(conv.input) > 2 and conv.input[2] else f"{conv.input[1]}_bn_bias"
        if bname in inits:
            inits[bname].CopyFrom(numpy_helper.from_array(b2, bname))
        else:
            graph.initializer.append(numpy_helper.from_array(b2, bname))
            while len(conv.input) < 3:
                conv.input.append("")
            conv.input[2] = bname
        conv.output[0] = bn.output[0]
        remove.append(bn)
        folded += 1
    for n in remove:
        graph.node.remove(n)
    if folded:  # drop the BatchNorm parameters nothing uses any more
        used = {i for n in graph.node for i in n.input}
        keep = [t for t in graph.initializer if t.name in used]
        del graph.initializer[:]
        graph.initializer.extend(keep)
    return folded
