"""Clamps against a constant moved onto the integers of a Q/DQ model: the same outputs, bit for bit.

A chain of ``Max``/``Min`` against constants between a ``DequantizeLinear`` and a ``QuantizeLinear`` with the same
per-tensor 8-bit parameters (the plan gives a clamp's output the grid of its input) runs in float in ONNX Runtime:
no fused kernel takes it, so every inference dequantizes, clamps and quantizes again. ``QuantizeLinear`` is
monotone and gives back the integers ``DequantizeLinear`` took (``round((q - z) * s / s) = q - z`` for any 8-bit
``q``), so ``Q(min(DQ(q), c)) = min(q, Q(c))`` and ``Q(max(DQ(q), c)) = max(q, Q(c))``, saturation included: the
chain becomes the same ``Min``/``Max`` on the integers against the quantized constants (ONNX Runtime has int8/uint8
``Min``/``Max`` since opset 12), and the ``DequantizeLinear``/``QuantizeLinear`` around it go. Cross-layer
equalization writes a ReLU6 as ``Max(x, 0) -> Min(x, bound per channel)``; :mod:`qlinear.graph.satisfied_clamps`
drops the ``Max`` a uint8 grid satisfies, and this pass moves the ``Min``: EfficientNet-Lite0 per-tensor on target
ort, 32 of them (timings in the README). The clamps' float outputs leave the model: only chains whose tensors are
no graph output, no subgraph reference and read by nothing else are moved. :func:`float_clamps` writes such chains
back as ``DequantizeLinear -> float clamps -> QuantizeLinear`` (bounds: the quantized ones dequantized, which give
the same integers) for what reads a Q/DQ model tensor by tensor (``qlinear debug``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.core.dequantize import dequantize_linear
from qlinear.core.quantize import quantize_linear
from qlinear.graph.model import node_inputs, opset, prune
from qlinear.graph.satisfied_clamps import against_constant, per_tensor_params

#: the integer types ONNX Runtime's CPU Min/Max take (as NumPy dtypes, as ONNX tensor types)
_INT8 = (np.dtype(np.int8), np.dtype(np.uint8))
_INT8_TYPES = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)


def integer_clamps(m: onnx.ModelProto) -> list[str]:
    """Move (in place, main graph) every ``DequantizeLinear -> Max/Min(constant)... -> QuantizeLinear`` chain onto
    the integers (module docstring); returns the moved clamps' names."""
    g = m.graph
    if opset(m) < 12:
        return []
    inits = {t.name: t for t in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for x in dict.fromkeys(node_inputs(n)):
            readers.setdefault(x, []).append(n)
    keep = {o.name for o in g.output}
    new: dict[int, onnx.NodeProto] = {}   # id of a moved clamp -> its integer node
    gone: set[int] = set()                # ids of the QuantizeLinear nodes the chains end at
    dqs: set[int] = set()                 # ids of the DequantizeLinear nodes they start from
    moved: list[str] = []
    made: dict[tuple, str] = {}           # (constant, grid) -> its quantized initializer
    for n in g.node:
        chain = _chain(n, prod, readers, inits, keep) if id(n) not in new else None
        if chain is None:
            continue
        clamps, dq, q = chain
        s, zp = per_tensor_params(dq, inits)
        src = dq.input[0]
        for i, c in enumerate(clamps):
            bound = _quantized_bound(c, inits, s, zp, g, made)
            out = q.output[0] if i == len(clamps) - 1 else f"{c.output[0]}_{zp.dtype.name}"
            new[id(c)] = helper.make_node(c.op_type, [src, bound], [out], name=c.name or c.output[0])
            src = out
            moved.append(c.name or c.output[0])
        gone.add(id(q))
        dqs.add(id(dq))
    if new:
        _rewrite(g, new, gone, dqs)
    return moved


def _chain(n: onnx.NodeProto, prod: dict[str, onnx.NodeProto], readers: dict[str, list[onnx.NodeProto]],
           inits: dict[str, onnx.TensorProto], keep: set[str]
           ) -> tuple[list[onnx.NodeProto], onnx.NodeProto, onnx.NodeProto] | None:
    """The clamps from ``n`` (whose input is a ``DequantizeLinear`` output) to the ``QuantizeLinear`` they end at,
    with that pair, when the chain can move (module docstring); None otherwise."""
    x = _clamped(n, inits)
    dq = prod.get(x) if x is not None else None
    pin = per_tensor_params(dq, inits)
    if pin is None or pin[1].dtype not in _INT8:
        return None
    clamps = [n]
    while True:
        out = clamps[-1].output[0]
        rs = readers.get(out, [])
        if out in keep or len(rs) != 1:
            return None
        nxt = rs[0]
        if nxt.op_type == "QuantizeLinear" and nxt.input[0] == out:
            pout = per_tensor_params(nxt, inits, "QuantizeLinear")
            same = pout is not None and all(a.dtype == b.dtype and a.tobytes() == b.tobytes()
                                            for a, b in zip(pin, pout))
            return (clamps, dq, nxt) if same else None
        if _clamped(nxt, inits) != out:
            return None
        clamps.append(nxt)


def _clamped(n: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> str | None:
    """The input ``n`` clamps when it is a ``Max``/``Min`` of one tensor against a finite float32 constant."""
    x, c = against_constant(n, inits, (onnx.TensorProto.FLOAT,))
    return x if c is not None and np.all(np.isfinite(numpy_helper.to_array(inits[c]))) else None


def _quantized_bound(c: onnx.NodeProto, inits: dict[str, onnx.TensorProto], s: np.ndarray, zp: np.ndarray,
                     g: onnx.GraphProto, made: dict[tuple, str]) -> str:
    """The name of an initializer holding clamp ``c``'s constant quantized with ``(s, zp)`` (new, or the one
    ``made`` for the same constant and grid)."""
    name = next(x for x in c.input if x in inits)
    key = (name, s.tobytes(), zp.tobytes(), zp.dtype.str)
    if key not in made:
        q = quantize_linear(numpy_helper.to_array(inits[name]), s.reshape(()), zp.reshape(()))
        t = numpy_helper.from_array(np.asarray(q, zp.dtype), _fresh(f"{name}_{zp.dtype.name}", set(inits)))
        g.initializer.append(t)
        inits[t.name] = t
        made[key] = t.name
    return made[key]


def float_clamps(m: onnx.ModelProto) -> list[str]:
    """Write every chain of integer ``Max``/``Min`` against integer constants that starts at a ``QuantizeLinear``
    back as ``DequantizeLinear -> float clamps -> QuantizeLinear`` with that quantizer's parameters (in place, main
    graph; module docstring); returns the clamps' names. The float tensors are named after the integer ones
    (``x_quantized`` -> ``x``, unless that name is taken)."""
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    readers: dict[str, int] = {}
    for n in g.node:
        for x in node_inputs(n):
            readers[x] = readers.get(x, 0) + 1
    names = set(prod) | set(inits) | {v.name for v in g.input}
    start: dict[str, onnx.NodeProto] = {}     # integer tensor -> the QuantizeLinear its chain starts at
    inner: dict[str, tuple[str, onnx.NodeProto]] = {}  # a chain's integer tensor -> (its float value, its quantizer)
    nodes: list[onnx.NodeProto] = []
    done: list[str] = []
    for n in g.node:
        x, c = against_constant(n, inits, _INT8_TYPES)
        q = prod.get(x) if x is not None else None
        q = start.get(x) or (q if q is not None and q.op_type == "QuantizeLinear" else None)
        params = per_tensor_params(q, inits, "QuantizeLinear")
        if params is None:
            nodes.append(n)
            continue
        if x in inner and readers.get(x) == 1 and x not in {o.name for o in g.output}:
            fx, quantizer = inner.pop(x)
            nodes.remove(quantizer)   # within the chain: float to float, as before the move
        else:
            fx = _fresh(f"{q.input[0]}_dequantized" if x == q.output[0] else f"{x}_float", names)
            nodes.append(helper.make_node("DequantizeLinear", [x, q.input[1], q.input[2]], [fx], name=f"{fx}_dq"))
        fout = _float_name(n, names)
        bound = numpy_helper.from_array(np.asarray(dequantize_linear(numpy_helper.to_array(inits[c]),
                                                                     params[0].reshape(()), params[1].reshape(())),
                                                   np.float32), _fresh(f"{c}_float", names))
        g.initializer.append(bound)
        quantizer = helper.make_node("QuantizeLinear", [fout, q.input[1], q.input[2]], [n.output[0]], name=f"{fout}_q")
        nodes += [helper.make_node(n.op_type, [fx, bound.name], [fout], name=n.name), quantizer]
        start[n.output[0]], inner[n.output[0]] = q, (fout, quantizer)
        done.append(n.name or n.output[0])
    del g.node[:]
    g.node.extend(nodes)
    prune(g)
    return done


def has_integer_clamps(m: onnx.ModelProto) -> bool:
    """Whether the main graph holds a ``Max``/``Min`` against an int8/uint8 constant (:func:`float_clamps`)."""
    inits = {t.name: t for t in m.graph.initializer}
    return any(against_constant(n, inits, _INT8_TYPES)[0] is not None for n in m.graph.node)


def _float_name(n: onnx.NodeProto, names: set[str]) -> str:
    out = n.output[0]
    return _fresh(out[: -len("_quantized")] if out.endswith("_quantized") else f"{out}_float", names)


def _fresh(name: str, names: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``... whichever is not in ``names`` (added to it)."""
    k, out = 0, name
    while out in names:
        k += 1
        out = f"{name}_{k}"
    names.add(out)
    return out


def _rewrite(g: onnx.GraphProto, new: dict[int, onnx.NodeProto], gone: set[int], dqs: set[int]) -> None:
    """The moved clamps replaced by their integer nodes, the chains' QuantizeLinear nodes removed, and their
    ``DequantizeLinear`` nodes when nothing else reads them; then the constants nothing reads go."""
    nodes = [new.get(id(n), n) for n in g.node if id(n) not in gone]
    read = {x for n in nodes for x in node_inputs(n)} | {o.name for o in g.output}
    nodes = [n for n in nodes if id(n) not in dqs or n.output[0] in read]
    del g.node[:]
    g.node.extend(nodes)
    prune(g)


__all__ = ["float_clamps", "has_integer_clamps", "integer_clamps"]
