"""Run a model piece by piece over a fixed set of samples, so each piece can use constants decided after the pieces
before it ran: the sequential layer-by-layer scheme of AdaRound, SeqMSE and GPTQ.

The nodes (in topological order, each constant-only node such as a weight's ``DequantizeLinear`` moved just before
its first consumer) are cut before given nodes. :meth:`Staged.advance` runs the next piece as its own small ONNX
Runtime session over every batch, keeping only the tensors that later pieces consume. Constants of the piece can be
overridden (:meth:`Staged.set_constant`): a refined weight replaces the initializer, or the output of the node that
computed it from initializers (the weight's ``DequantizeLinear`` in a Q/DQ model). Every node runs exactly once, so
the whole scheme costs one pass over the samples; memory is the tensors alive across one cut, for all samples
(with ``spill_dir``, each such tensor larger than ``spill_bytes`` over all batches is kept in a memory-mapped file
there instead), and the constants set for the pieces not yet run (a constant is dropped after its last reader ran;
with ``constant_inputs`` the constants are inputs of the piece's session, fed to each run, not copied into it).
``level``: ONNX Runtime's optimization level of the pieces' sessions (``all`` by default); ``initializer_ops``: with
``constant_inputs``, the constants read by nodes of these types are still copied in as initializers (ONNX Runtime
prepacks a MatMul's constant weight, which rounds differently from a weight fed as an input).
"""

from __future__ import annotations

import os
from typing import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.errors import GraphError
from qlinear.graph.model import node_inputs


def _key(n: onnx.NodeProto) -> str:
    return n.name or n.output[0]


def _order(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """``graph.node`` with every node computed from constants alone placed just before its first consumer."""
    const = {t.name for t in graph.initializer}
    nodes = list(graph.node)
    floating: dict[int, onnx.NodeProto] = {}
    for i, n in enumerate(nodes):
        if all(x in const for x in node_inputs(n)):
            floating[i] = n
            const.update(o for o in n.output if o)
    consumer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for x in node_inputs(n):
            consumer.setdefault(x, i)
    placed: dict[int, list[onnx.NodeProto]] = {}
    for n in floating.values():  # a chain of constant nodes keeps its order: place at the first real consumer
        first = min((consumer[o] for o in n.output if o in consumer), default=len(nodes))
        j = first
        while j in floating:
            j = min((consumer[o] for o in nodes[j].output if o in consumer), default=len(nodes))
        placed.setdefault(j, []).append(n)
    out: list[onnx.NodeProto] = []
    for i, n in enumerate(nodes):
        out += placed.get(i, [])
        if i not in floating:
            out.append(n)
    out += placed.get(len(nodes), [])
    return out


def staged_order(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The order :class:`Staged` runs ``graph``'s nodes in (``Staged(...).nodes`` without building one)."""
    return _order(graph)


class Staged:
    """A model run piece by piece over ``batches`` (module docstring)."""

    def __init__(self, model: onnx.ModelProto, cuts: Iterable[str], batches: list[dict[str, np.ndarray]], *,
                 label: str = "model", disable_qdq_fusion: bool = False, spill_dir: str | None = None,
                 spill_bytes: int = 256 * 2 ** 20, arena: bool = True, constant_inputs: bool = False,
                 level: str = "all", initializer_ops: tuple[str, ...] = ()) -> None:
        self.model = model
        self.level = level
        self.initializer_ops = frozenset(initializer_ops)
        self.constant_inputs = constant_inputs
        self.arena = arena
        self.files: dict[str, str] = {}  # tensor -> its spill file
        self.spill_dir = spill_dir
        self.spill_bytes = spill_bytes
        self.spilled = 0  # files written to spill_dir
        self.label = label
        self.fusion_off = disable_qdq_fusion
        self.nodes = _order(model.graph)
        where = {_key(n): i for i, n in enumerate(self.nodes)}
        self.cuts = []
        for c in cuts:
            if c not in where:
                raise GraphError(f"{label}: no node named {c!r} to run up to")
            self.cuts.append(where[c])
        self.inits = {t.name: t for t in model.graph.initializer}
        self.last_use: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            for x in node_inputs(n):
                self.last_use[x] = i
        names = [v.name for v in model.graph.input if v.name not in self.inits]
        self.cache: dict[str, list[np.ndarray]] = {k: [b[k] for b in batches] for k in names if k in batches[0]}
        self.n_batches = len(batches)
        self.pos = 0
        self.constants: dict[str, np.ndarray] = {}

    def set_constant(self, name: str, value: np.ndarray) -> None:
        """Use ``value`` for the constant ``name`` (an initializer or a node output computed from constants) in
        every piece not yet run."""
        self.constants[name] = np.asarray(value)

    def tensor(self, name: str) -> list[np.ndarray]:
        """The batches of a tensor alive at the current cut (a model input or the output of a piece already run)."""
        return self.cache[name]

    def advance(self, cut: int) -> None:
        """Run the nodes from the current position up to (not including) the node of cut number ``cut``."""
        self.advance_to(self.cuts[cut])

    def advance_to(self, end: int) -> None:
        """Run the nodes from the current position up to (not including) ``self.nodes[end]`` (``len(self.nodes)``:
        to the end); tensors and constants no later node reads are dropped."""
        if end <= self.pos:
            return
        piece = self.nodes[self.pos:end]
        self._run(piece, end)
        self.pos = end
        for k in [k for k in self.cache if self.last_use.get(k, -1) < end]:
            del self.cache[k]
            if k in self.files:  # the maps still open stay readable until dropped (POSIX unlink)
                os.remove(self.files.pop(k))
        for k in [k for k in self.constants if self.last_use.get(k, -1) < end]:
            del self.constants[k]

    def _spill_file(self, first: np.ndarray) -> str | None:
        """A new file in ``spill_dir`` for a tensor whose batches (estimated from the first) pass ``spill_bytes``;
        ``None`` to keep it in memory."""
        if self.spill_dir is None or first.nbytes * self.n_batches <= self.spill_bytes:
            return None
        path = os.path.join(self.spill_dir, f"t{self.spilled}.bin")
        self.spilled += 1
        return path

    def _run(self, piece: list[onnx.NodeProto], end: int) -> None:
        from qlinear.ptq.stats.session import Session

        kept = [n for n in piece if not (n.output and all(o in self.constants for o in n.output if o))]
        produced = {o for n in kept for o in n.output if o}
        outs = [o for n in kept for o in n.output if o and self.last_use.get(o, -1) >= end]
        if not outs:
            return
        needed = list(dict.fromkeys(x for n in kept for x in node_inputs(n)))
        copied = {x for n in kept if n.op_type in self.initializer_ops for x in n.input}
        inits, feeds, given = [], [], {}
        for x in needed:
            if x in produced:
                continue
            if x in self.constants and self.constant_inputs and x not in copied:  # fed to every run: no copy
                given[x] = self.constants[x]
            elif x in self.constants:
                inits.append(numpy_helper.from_array(self.constants[x], x))
            elif x in self.inits:
                inits.append(self.inits[x])
            elif x in self.cache:
                feeds.append(x)
            else:
                raise GraphError(f"{self.label}: tensor {x!r} is not available at node {_key(piece[0])!r}")
        vi_in = [helper.make_tensor_value_info(x, helper.np_dtype_to_tensor_dtype(self.cache[x][0].dtype), None)
                 for x in feeds]
        vi_in += [helper.make_tensor_value_info(x, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                  for x, v in given.items()]
        g = helper.make_graph(kept, f"{self.model.graph.name}_piece", vi_in, [onnx.ValueInfoProto(name=o) for o in outs],
                              initializer=inits)
        m = helper.make_model(g, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version)
        m.functions.extend(self.model.functions)
        sess = Session(m, level=self.level, label=f"{self.label} (nodes {_key(piece[0])!r}..)",
                       disable_qdq_fusion=self.fusion_off, arena=self.arena)
        del g, m, inits
        results: dict[str, list[np.ndarray]] = {o: [] for o in outs}
        files: dict[str, str | None] = {}
        for b in range(self.n_batches):
            vals = sess.run(outs, {**{x: self.cache[x][b] for x in feeds}, **given})
            for o, v in zip(outs, vals):
                if b == 0:
                    files[o] = self._spill_file(v)
                    if files[o]:
                        self.files[o] = files[o]
                path = files[o]
                if path is not None and v.size:  # appended to the file, read back as a memory map
                    with open(path, "ab") as f:
                        off = f.tell()
                        f.write(np.ascontiguousarray(v).tobytes())
                    v = np.memmap(path, dtype=v.dtype, mode="r", offset=off, shape=v.shape)
                results[o].append(v)
            del vals
        self.cache.update(results)


__all__ = ["Staged", "staged_order"]
