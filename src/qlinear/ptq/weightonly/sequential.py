"""Sequential GPTQ (``gptq_sequential``, the default for every GPTQ variant): the Hessian of each linear's
input is taken on the outputs of the linears before it *already quantized*, as GPTQ is defined, in bounded memory.

The float graph (in :class:`qlinear.ptq.stats.staged.Staged`'s order: each constant-only node, such as a tied lm_head's
``Transpose``, just before its first reader) is cut before groups of linears (:func:`linear_groups`): a group starts
at a linear whose input is computed by the nodes before the cut, and takes every following linear whose input is
also ready there (the q/k/v projections reading one norm's output, gate/up of an MLP); the next linear whose input
is computed after the cut starts the next group (o_proj, down_proj, the lm_head). In a decoder this is the
"true-sequential" order of the GPTQ reference implementations, a few cuts per decoder block, each at a point where
only the residual stream, the group's input and the tensors every block reads (mask, rotary tables) are alive.

For each group, in order: the group's inputs on the calibration samples are at hand (the tensors alive across the
cut); their :class:`~qlinear.ptq.stats.Gram` matrices are GPTQ's Hessians; the group's weights are quantized; the
nodes up to the next cut run once (one small ONNX Runtime session) with the group's weights replaced by their
dequantized values. Every node runs once, so the whole scheme costs one pass over the samples.

Memory: the weights the running piece reads (read from the external data when it runs, dropped after), one group's
Hessians, and the tensors alive across one cut for the calibration samples, each kept in a memory-mapped file in a
temporary folder when it is over :data:`SPILL_BYTES`. A weight read before its own group (a tied embedding's
``Gather``, read first by the embedding lookup) is read float there, and dequantized from its group on.

With ``float_pass`` the pieces run the float weights instead (the statistics of the float model, in the same bounded
memory: AWQ and the activation-aware grid without GPTQ): the pieces' sessions at ONNX Runtime's level ``basic`` with
the MatMul/Gemm weights as initializers (prepacked), the one-pass statistics pass's settings, so that each group's
Hessians are those of that pass (byte-identical on SmolLM2 and the tests' models); other constants (an embedding
read by a ``Gather``) are fed as inputs, not copied into the session. The pass always reads a weight's original values
(:meth:`.tensors.Tensors.array`, ``original``), not AWQ's scaled ones.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from qlinear.graph.model import node_inputs
from qlinear.ptq.stats import Gram
from qlinear.ptq.stats.session import release_heap
from qlinear.ptq.stats.staged import Staged
from qlinear.ptq.weightonly.plan import Linear
from qlinear.ptq.weightonly.tensors import Tensors, external_info

SPILL_BYTES = 128 * 2 ** 20  # a tensor alive across a cut larger than this (all samples) goes to a memory map

#: ``quantize(weight, hessian) -> (result, dequantized weight in the initializer's layout and type, or None)``
Quantize = Callable[[str, "dict[str, tuple[np.ndarray, int]]"], "tuple[Any, np.ndarray]"]
#: ``prepare(group's weights, {input: Hessian}) -> {input: Hessian}``
Prepare = Callable[[list, "dict[str, tuple[np.ndarray, int]]"], "dict[str, tuple[np.ndarray, int]]"]


@dataclass
class Group:
    """Linears whose Hessians are taken at one cut: ``cut`` is the position (in the staged order) of the first node
    after it; ``weights`` the weights (keys of ``by_weight``) quantized there."""

    cut: int
    weights: list[str] = field(default_factory=list)


def linear_groups(nodes: list[onnx.NodeProto], by_weight: dict[str, list[Linear]],
                  constants: set[str]) -> list[Group]:
    """The groups of the module docstring over ``nodes`` (the staged order); ``constants``: the initializers. A
    weight belongs to the group of its first linear's position; the cut before a group is moved back over the
    constant-only nodes just before it (they run in the group's piece, with the dequantized weights)."""
    pos = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    const = set(constants)
    is_const = []
    for n in nodes:
        c = all(x in const for x in node_inputs(n))
        is_const.append(c)
        if c:
            const.update(o for o in n.output if o)
    groups: list[Group] = []
    for p, name in sorted((pos[lins[0].output], name) for name, lins in by_weight.items()):
        px = pos.get(by_weight[name][0].input, -1)  # -1: a graph input
        if groups and px < groups[-1].cut:
            groups[-1].weights.append(name)
            continue
        c = p
        while c - 1 > px and is_const[c - 1]:
            c -= 1
        groups.append(Group(c, [name]))
    return groups


def group_hessians(st: Staged, group: Group, by_weight: dict[str, list[Linear]]) -> dict[str, tuple[np.ndarray, int]]:
    """``{input: (X^T X, rows)}`` of the group's linear inputs over the batches alive at the cut (batch order: the
    float32 sums of the one-pass :class:`~qlinear.ptq.stats.Gram`)."""
    out: dict[str, tuple[np.ndarray, int]] = {}
    for name in group.weights:
        x = by_weight[name][0].input
        if x in out:
            continue
        g = Gram()
        for b in st.tensor(x):
            g.update(b)
        if g.matrix is not None:
            out[x] = (g.matrix, g.rows)
    return out


def quantize_sequential(m: onnx.ModelProto, tensors: Tensors, by_weight: dict[str, list[Linear]],
                        batches: list[dict[str, np.ndarray]], quantize: Quantize, *, label: str = "model",
                        progress: Callable[[int], None] | None = None, spill_bytes: int = SPILL_BYTES,
                        spill_dir: str | None = None, prepare: Prepare | None = None,
                        float_pass: bool = False) -> dict[str, Any]:
    """Every weight of ``by_weight`` quantized by ``quantize`` with its Hessian on the already quantized model's
    activations (module docstring), over ``batches`` (the calibration samples); ``{weight: result}``. ``prepare``:
    called with each group's weights and Hessians before they are quantized, returns the Hessians to use (AWQ
    scales the group there; ``quantize`` then returns the dequantized weight as the float graph reads it, or
    ``None`` with ``float_pass``: module docstring). :func:`.sequential_ray.quantize_sequential_ray` is the same on
    Ray actors."""
    with tempfile.TemporaryDirectory(prefix="qlinear-gptq-", dir=spill_dir) as tmp:
        st = staged(m, batches, label, tmp, spill_bytes, float_pass)
        batches.clear()  # the staged cache holds the inputs now
        groups = linear_groups(st.nodes, by_weight, set(tensors.by_name))
        dequantized: dict[str, np.ndarray] = {}
        results: dict[str, Any] = {}
        run_piece(st, tensors, dequantized, groups[0].cut)
        for j, g in enumerate(groups):
            hess = group_hessians(st, g, by_weight)
            if prepare is not None:
                hess = prepare(g.weights, hess)
            for name in g.weights:
                results[name], deq = quantize(name, hess)
                if deq is not None:
                    dequantized[name] = deq
                if progress:
                    progress(1)
            del hess
            release_heap(collect=False)
            run_piece(st, tensors, dequantized, groups[j + 1].cut if j + 1 < len(groups) else len(st.nodes))
            release_heap(collect=False)
        st.cache.clear()  # the memory maps closed before the folder goes
    return results


def staged(m: onnx.ModelProto, batches: list[dict[str, np.ndarray]], label: str, spill_dir: str, spill_bytes: int,
           float_pass: bool) -> Staged:
    """The staged float graph of the pass over ``batches`` (module docstring: ``float_pass``'s settings)."""
    return Staged(m, [], batches, label=label, spill_dir=spill_dir, spill_bytes=spill_bytes, arena=False,
                  constant_inputs=True, level="basic" if float_pass else "all",
                  initializer_ops=("MatMul", "Gemm") if float_pass else ())


def run_piece(st: Staged, tensors: Tensors, dequantized: dict[str, np.ndarray], end: int) -> None:
    """Run the staged nodes up to ``end`` with the weights they read: dequantized when already quantized, else
    the original values read from the external data now (inline initializers stay in the graph); dropped after."""
    reads = {x for n in st.nodes[st.pos:end] for x in node_inputs(n)}
    for x in reads:
        if x in dequantized:
            st.set_constant(x, dequantized[x])
        elif x in tensors.by_name and external_info(tensors.by_name[x]) is not None:
            st.set_constant(x, tensors.array(x, original=True))
    st.advance_to(end)
    st.constants.clear()
    for x in [x for x in dequantized if st.last_use.get(x, -1) < end]:
        del dequantized[x]


__all__ = ["Group", "Prepare", "SPILL_BYTES", "group_hessians", "linear_groups", "quantize_sequential", "run_piece",
           "staged"]
