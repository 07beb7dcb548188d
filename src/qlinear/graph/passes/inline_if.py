"""Replace an ``If`` whose condition is a constant by the branch it takes, inlined into the main graph.

An ``If`` becomes decidable once what its condition depends on is known: an input fixed by value
(``--fix-input sr=16000``, :mod:`qlinear.graph.passes.fix_inputs`) or a shape fixed by ``--input-shape``
(:mod:`qlinear.graph.passes.shapes`; target tflite folds static shapes in any case), after their constant folding.
:func:`inline_constant_ifs` then puts the taken branch's nodes (and initializers; its ``Constant`` nodes become
initializers, as :mod:`~qlinear.graph.passes.normalize` made the main graph's) in the If's place, so the layers
inside are planned, calibrated and quantized like any other; the branch not taken is dropped. The model computes exactly what it did for that condition (the branch's
nodes run as they were; only names change where they must).

Names: a branch's own tensor that would clash with a name used anywhere else in the model gets a suffix; a branch
output produced inside the branch takes the If output's name (its readers are unchanged), any other branch output (a
tensor of the outer graph, a branch initializer, an output listed twice) is passed on by an ``Identity``. Only
``If`` nodes of the main graph are inlined; an inlined branch's own ``If`` nodes are main-graph nodes on the next
round of :func:`~qlinear.graph.passes.shapes.fold_static_shapes`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.graph.passes.normalize import constants_to_initializers, rename_in_subgraphs, subgraphs


def inline_constant_ifs(model: onnx.ModelProto) -> list[str]:
    """Inline every main-graph ``If`` whose condition is an initializer (module docstring); one line per If
    inlined."""
    g = model.graph
    consts = {t.name: t for t in g.initializer}
    done: list[str] = []
    nodes: list[onnx.NodeProto] = []
    for n in g.node:
        cond = _condition(n, consts)
        if cond is None:
            nodes.append(n)
            continue
        branch = next(a.g for a in n.attribute if a.name == ("then_branch" if cond else "else_branch"))
        nodes += _inline(branch, n, g, _names_outside(model, n))
        done.append(f"If {n.name or n.output[0]!r}: condition {cond} once fixed, replaced by its "
                    f"{'then' if cond else 'else'}_branch ({len(branch.node)} nodes)")
    if done:
        del g.node[:]
        g.node.extend(nodes)
    return done


def _condition(n: onnx.NodeProto, consts: Mapping[str, onnx.TensorProto]) -> bool | None:
    if n.op_type != "If" or n.domain not in ("", "ai.onnx") or not n.input or n.input[0] not in consts:
        return None
    c = numpy_helper.to_array(consts[n.input[0]])
    return None if c.size != 1 else bool(np.asarray(c).reshape(-1)[0])


def _inline(branch: onnx.GraphProto, node: onnx.NodeProto, g: onnx.GraphProto, taken: set[str]) -> list[onnx.NodeProto]:
    """``branch``'s nodes as main-graph nodes computing ``node``'s outputs; its initializers moved into ``g``."""
    own = [t.name for t in branch.initializer] + [o for m in branch.node for o in m.output if o]
    outs = [o.name for o in branch.output]
    same = {b for b, o in zip(outs, node.output) if b == o}   # a branch output named as the If's: no clash
    clash = [x for x in own if x in taken and x not in same]
    rename = {x: _fresh(x, taken) for x in clash}
    produced = {o for m in branch.node for o in m.output if o}
    extra: list[onnx.NodeProto] = []
    for b, o in zip(outs, node.output):
        if not o:
            continue
        src = rename.get(b, b)
        if b in produced and outs.count(b) == 1 and b not in rename:
            rename[b] = o
        else:
            extra.append(helper.make_node("Identity", [src], [o], name=f"{node.name or o}_out_{o}"))
    body = onnx.GraphProto()
    body.CopyFrom(branch)
    _rename(body, rename)
    constants_to_initializers(body)  # as the main graph's were (normalize): a weight stored as a Constant is one
    g.initializer.extend(body.initializer)
    g.sparse_initializer.extend(body.sparse_initializer)
    return list(body.node) + extra


def _fresh(name: str, taken: set[str]) -> str:
    k = 1
    while f"{name}__inlined{k}" in taken:
        k += 1
    taken.add(f"{name}__inlined{k}")
    return f"{name}__inlined{k}"


def _rename(graph: onnx.GraphProto, rename: Mapping[str, str]) -> None:
    """Every definition and use of the names in ``rename`` in ``graph``, and their uses in the subgraphs inside it."""
    if not rename:
        return
    for t in graph.initializer:
        t.name = rename.get(t.name, t.name)
    for m in graph.node:
        m.input[:] = [rename.get(x, x) for x in m.input]
        m.output[:] = [rename.get(x, x) for x in m.output]
    rename_in_subgraphs(graph, rename)


def _defined(graph: onnx.GraphProto) -> Iterable[str]:
    """Every name ``graph`` and its subgraphs define (inputs, initializers, node outputs)."""
    yield from (v.name for v in graph.input)
    yield from (t.name for t in graph.initializer)
    for m in graph.node:
        yield from (o for o in m.output if o)
        for sg in subgraphs(m):
            yield from _defined(sg)


def _names_outside(model: onnx.ModelProto, node: onnx.NodeProto) -> set[str]:
    """Every name the model defines or outputs outside ``node``'s branches (its own outputs included)."""
    g = model.graph
    out = {v.name for v in g.input} | {t.name for t in g.initializer} | {v.name for v in g.output}
    for m in g.node:
        out.update(o for o in m.output if o)
        if m is not node:
            for sg in subgraphs(m):
                out.update(_defined(sg))
    return out


__all__ = ["inline_constant_ifs"]
