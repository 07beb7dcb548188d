"""Normalize an ONNX model before planning, as one pass: the model every later step sees is the one it expects.

:func:`normalize` (in this order):

1. **opset 7..12 upgraded** to 13 with ``onnx.version_converter`` (Clip min/max, Split and ReduceSum attributes
   become inputs, Upsample becomes Resize, ...); a conversion the converter cannot do, or whose result
   ``onnx.checker`` refuses, is a :class:`~qlinear.errors.GraphError` naming the node. :func:`check_upgrade` runs
   the original and the upgraded model in ONNX Runtime on the first calibration samples and names the first tensor
   (and the node computing it) that differs beyond float tolerance;
2. **every ``Constant`` node of the main graph** holding a tensor (``value``, ``value_float(s)``, ``value_int(s)``)
   becomes an initializer of the same name (all of them, not only weights: a weight, a bias, a Reshape's shape or an
   Add's operand are all constants to the plan); ``sparse_value`` and string constants and a constant that is itself
   a graph output stay nodes;
3. **constant folding of layout chains**: ``Identity`` of an initializer is removed (its readers read the
   initializer: one tensor, one encoding, however many nodes read it); ``Cast`` and the registry's data-movement
   ops (``Transpose``, ``Reshape``, ``Squeeze``, ``Unsqueeze``, ``Flatten``, ``Slice``, ...) of initializers become
   an initializer of the result (computed with ``onnx.reference``, the ONNX definition) when that stores nothing
   twice: the constant is read by that node only (or is small, a shape), is not external data, and the result is
   not larger than its inputs (an ``Expand`` stays) (a tied embedding's ``Transpose`` stays: the weight-only
   planner reads through it); the inputs nothing reads any more are dropped;
4. **weights left float are named**: a Conv/ConvTranspose/Gemm/MatMul whose weight is still computed from
   constants by a node not folded (a ``DequantizeLinear``, a ``Mul`` of constants, a sparse ``Constant``) is named
   in a note (:func:`unfolded_weight_notes`; a ``Transpose`` of a tied weight is not: weight-only quantization
   reads through it);
5. **subgraphs** (``If``/``Loop``/``Scan`` bodies) are left float: a note names every node holding one and the
   Conv/ConvTranspose/Gemm/MatMul inside it.

Before all of this, **text that is not UTF-8** (protobuf keeps such a string as bytes, which ``onnx_ir`` cannot write
back): in documentation and metadata (``producer_name``, ``doc_string``, ``metadata_props``, the graph's name) it is
decoded with replacement characters, with a note; in a name the plan and the encodings use (a node, tensor, input,
output or operator) it is a :class:`~qlinear.errors.GraphError` naming the field (:func:`text_notes`).

The notes say what changed (one line each); nothing is changed silently, and a model that needs none of this comes
back with an identical graph. Shapes are not stored in the file: the plan's ``GraphIndex`` infers them
(``onnx.shape_inference``, symbolic dimensions kept) on the normalized model, where every weight is now an
initializer with its dims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.errors import GraphError
from qlinear.graph.model import declared_dims, opset, serialized, tensor_outputs
from qlinear.graph.ops import DATA_MOVEMENT, WEIGHTED

#: ``(samples, names) -> {name: [value per sample, None where not an array]}``: a model's values from a session
Runner = Callable[[Sequence[Mapping[str, Any]], list[str]], dict[str, list]]

TARGET_OPSET = 13
MIN_OPSET = 7
#: folded when all their inputs are constants: the registry's data-movement ops and Cast (when not growing the data)
FOLDABLE = frozenset(DATA_MOVEMENT) | {"Cast"}
_TENSOR_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints")


def normalize(model: onnx.ModelProto, label: str = "model", *, copy: bool = True) -> tuple[onnx.ModelProto, list[str]]:
    """The normalized ``model`` (see the module docstring) and the notes saying what changed; ``copy=False``
    rewrites ``model`` itself (a model the caller loaded: no second copy of its weights) when the opset needs no
    upgrade."""
    m = model
    if copy:
        m = onnx.ModelProto()
        m.CopyFrom(model)
    notes: list[str] = text_notes(m, label)
    m = upgrade(m, label, notes)
    n_const = constants_to_initializers(m.graph)
    n_fold = fold_constant_chains(m.graph, opset(m))
    done = ([f"{n_const} Constant nodes became initializers"] if n_const else []) + \
        ([f"{n_fold} Identity/Cast/Transpose/Reshape/... nodes of constants were folded"] if n_fold else [])
    if done:
        notes.append(", ".join(done) + " (weights stored as Constant nodes or computed from constants are quantized "
                     "like initializers)")
    notes += unfolded_weight_notes(m)
    notes += subgraph_notes(m)
    return m, notes


_TEXT = ("doc_string", "producer_name", "producer_version", "domain", "key", "value")  # repaired where not UTF-8
_NAMED = {"NodeProto": ("name", "op_type", "domain", "input", "output"), "ValueInfoProto": ("name",),
          "TensorProto": ("name",), "AttributeProto": ("name",), "GraphProto": ()}


def text_notes(m: onnx.ModelProto, label: str = "model") -> list[str]:
    """Repair the documentation and metadata strings of ``m`` that are not UTF-8 (in place, replacement characters)
    and say so; a name that is not UTF-8 is a :class:`GraphError` naming where it is."""
    fixed: list[str] = []

    def walk(msg: Any, path: str) -> None:
        kind = msg.DESCRIPTOR.name
        if kind == "TensorProto":  # never its data: only the fields that are text
            fields = [(msg.DESCRIPTOR.fields_by_name[f], getattr(msg, f)) for f in ("name", "doc_string")]
        else:
            fields = msg.ListFields()
        for fd, val in fields:
            where = f"{path}.{fd.name}"
            if fd.type == fd.TYPE_MESSAGE:
                for i, sub in enumerate(val if fd.is_repeated else [val]):
                    walk(sub, f"{where}[{i}]" if fd.is_repeated else where)
            elif fd.type == fd.TYPE_STRING:
                _repair(msg, fd, val, where, label, fixed)

    walk(m, "model")
    if not fixed:
        return []
    return [f"{len(fixed)} text field(s) that are not UTF-8 decoded with replacement characters: "
            + ", ".join(fixed[:4]) + (" ..." if len(fixed) > 4 else "")]


def _repair(msg: Any, fd: Any, val: Any, where: str, label: str, fixed: list[str]) -> None:
    """One string field of ``msg`` (``val``: a str, bytes when not UTF-8, or a repeated field of them)."""
    vals = list(val) if fd.is_repeated else [val]
    if not any(isinstance(v, bytes) for v in vals):
        return
    if fd.name not in _TEXT or fd.name in _NAMED.get(msg.DESCRIPTOR.name, ()):
        raise GraphError(f"{label}: {where} is not UTF-8 text ({next(v for v in vals if isinstance(v, bytes))[:40]!r});"
                         " names must be UTF-8 (ONNX's rule): fix or re-export the model")
    new = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in vals]
    if fd.is_repeated:
        del val[:]
        val.extend(new)
    else:
        setattr(msg, fd.name, new[0])
    fixed.append(where)


def unfolded_weight_notes(m: onnx.ModelProto) -> list[str]:
    """A note naming the Conv/ConvTranspose/Gemm/MatMul of the main graph whose weight is computed from constants
    alone by nodes this pass does not fold (a DequantizeLinear, a Mul of two constants, a sparse Constant): their
    weights stay float."""
    const = {t.name for t in m.graph.initializer}
    for n in m.graph.node:  # computed from constants alone: a deterministic node of constants (or a Constant)
        random = n.op_type.startswith("Random") or n.op_type in ("Multinomial", "Bernoulli")
        if (n.op_type == "Constant" or any(n.input)) and not random and not list(subgraphs(n)) \
                and all(x in const for x in n.input if x):
            const.update(o for o in n.output if o)
    inits = {t.name for t in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    tied = {x for x, p in prod.items() if p.op_type == "Transpose" and p.input[0] in inits}  # weight-only reads it
    read = inits | tied  # once, not per node
    bad = [f"{n.op_type} {n.name or n.output[0]!r}" for n in m.graph.node
           if n.op_type in WEIGHTED and len(n.input) > 1 and n.input[1] in const and n.input[1] not in read]
    if not bad:
        return []
    return [f"{len(bad)} layer(s) whose weight is computed from constants by nodes qlinear does not fold stay float: "
            + ", ".join(bad[:6]) + (" ..." if len(bad) > 6 else "")]


def upgrade(m: onnx.ModelProto, label: str = "model", notes: list[str] | None = None) -> onnx.ModelProto:
    """``m`` at opset 13 when it is at 7..12 (``onnx.version_converter``), else ``m`` itself."""
    ops = opset(m)
    if ops >= TARGET_OPSET:
        return m
    if ops < MIN_OPSET:
        raise GraphError(f"{label}: opset {ops} is older than the oldest supported, {MIN_OPSET}; re-export the "
                         "model at opset 13 or newer")
    from onnx import version_converter

    try:
        up = version_converter.convert_version(m, TARGET_OPSET)
    except Exception as e:  # noqa: BLE001 - the converter raises RuntimeError/ConvertError with the op named
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GraphError(f"{label}: cannot upgrade opset {ops} to {TARGET_OPSET} with onnx.version_converter "
                         f"({first}); re-export the model at opset 13 or newer") from None
    if up.ir_version < 4:  # IR 3 listed every initializer as a graph input too: they are constants, not inputs
        inits = {t.name for t in up.graph.initializer}
        ins = [v for v in up.graph.input if v.name not in inits]
        del up.graph.input[:]
        up.graph.input.extend(ins)
    up.ir_version = max(up.ir_version, 7)  # opset 13 needs IR 7
    try:
        onnx.checker.check_model(up)
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GraphError(f"{label}: the opset {ops} -> {TARGET_OPSET} upgrade by onnx.version_converter is not "
                         f"valid ONNX ({first}); re-export the model at opset 13 or newer") from None
    if notes is not None:
        notes.append(f"opset {ops} upgraded to {TARGET_OPSET} with onnx.version_converter")
    return up


def constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The tensor a ``Constant`` node holds, or ``None`` (sparse or string constants, a malformed node)."""
    for a in node.attribute:
        if a.name not in _TENSOR_ATTRS:
            continue
        if a.name == "value":
            if a.t.data_type == onnx.TensorProto.STRING:
                return None
            return numpy_helper.to_array(a.t)
        v = helper.get_attribute_value(a)
        return np.asarray(v, dtype=np.float32 if "float" in a.name else np.int64)
    return None


def constants_to_initializers(graph: onnx.GraphProto) -> int:
    """Replace the ``Constant`` nodes of ``graph`` (not of its subgraphs) by initializers of the same name, keeping
    an external-data ``value`` as it is stored. Returns how many."""
    outputs = {o.name for o in graph.output}
    keep, done = [], 0
    for n in graph.node:
        if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or n.output[0] in outputs:
            keep.append(n)
            continue
        vals = [a for a in n.attribute if a.name in _TENSOR_ATTRS]
        if len(vals) != 1:
            keep.append(n)
            continue
        if vals[0].name == "value" and vals[0].t.data_type != onnx.TensorProto.STRING:
            t = onnx.TensorProto()
            t.CopyFrom(vals[0].t)  # as stored (raw or external data)
        else:
            arr = constant_value(n)
            if arr is None:
                keep.append(n)
                continue
            t = numpy_helper.from_array(arr)
        t.name = n.output[0]
        graph.initializer.append(t)
        done += 1
    if done:
        del graph.node[:]
        graph.node.extend(keep)
    return done


def _eval_node(node: onnx.NodeProto, args: list[np.ndarray], version: int = TARGET_OPSET) -> np.ndarray:
    """``node`` on constant ``args``, by the ONNX reference implementation (at opset ``version``)."""
    from onnx.reference import ReferenceEvaluator

    names = [f"x{i}" for i in range(len(args))]
    n = helper.make_node(node.op_type, [names[i] if x else "" for i, x in enumerate(node.input)], ["y"])
    n.attribute.extend(node.attribute)
    ins = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for nm, a in zip(names, args)]
    g = helper.make_graph([n], "fold", [i for i, x in zip(ins, node.input) if x],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", version)])
    feeds = {nm: a for nm, a, x in zip(names, args, node.input) if x}
    return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])


def fold_constant_chains(graph: onnx.GraphProto, version: int = TARGET_OPSET) -> int:
    """Remove ``Identity`` of initializers (readers rewired) and fold :data:`FOLDABLE` nodes of initializers into
    initializers, and the shape arithmetic of constants (:func:`_shape_value`: tf2onnx spells an Einsum's weight as
    ``Reshape(W, Concat(.., ReduceProd(Gather(Shape(W), ..))))``); drop the initializers nothing reads any more.
    ``version``: the model's opset, the nodes' semantics. Returns the number of nodes removed."""
    inits = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    readers = _reader_counts(graph)
    # the key of every node that may fold, once (its attributes serialized; no other node's key is ever read, and
    # a tree ensemble's are hundreds of MB)
    keys = [_fold_key(n) if n.op_type in FOLDABLE or n.op_type == "Identity" else None for n in graph.node]
    twins: dict[bytes, int] = {}  # nodes computing the same thing from the same inputs (two Casts of one weight)
    for k in keys:
        if k is not None:
            twins[k] = twins.get(k, 0) + 1
    rename: dict[str, str] = {}
    seen: dict[bytes, str] = {}  # the same fold of the same constants: one initializer
    keep, folded = [], 0
    for n, key0 in zip(graph.node, keys):
        _rename_inputs(n, rename)
        y = _shape_value(n, inits, outputs, version)
        if y is not None:   # read no more by it: the weight whose Shape it was may fold now
            for x in n.input:
                readers[x] = readers.get(x, 1) - 1
            inits[n.output[0]] = t = numpy_helper.from_array(y, n.output[0])
            graph.initializer.append(t)
            folded += 1
            continue
        if key0 is None:
            keep.append(n)
            continue
        ins = [x for x in n.input if x]
        pure = n.domain in ("", "ai.onnx") and len(n.output) == 1 and n.output[0] not in outputs \
            and ins and all(x in inits for x in ins)
        if pure and n.op_type == "Identity":
            rename[n.output[0]] = n.input[0]
            readers[n.input[0]] = readers.get(n.input[0], 1) - 1 + readers.get(n.output[0], 0)
            folded += 1
            continue
        # a constant also read elsewhere (a tied embedding and its Transpose) would be stored twice: not folded
        pure = pure and all(readers.get(x, 0) <= max(1, twins[key0]) or _small(inits[x]) for x in ins) \
            and not any(inits[x].data_location == onnx.TensorProto.EXTERNAL for x in ins)
        key = _fold_key(n) if pure else b""
        if pure and n.op_type in FOLDABLE and key in seen:
            rename[n.output[0]] = seen[key]
            folded += 1
            continue
        if pure and n.op_type in FOLDABLE:
            try:
                y = _eval_node(n, [numpy_helper.to_array(inits[x]) if x else None for x in n.input], version)
            except Exception:  # noqa: BLE001 - a node the reference cannot fold stays as it is
                y = None
            if y is None or y.size > sum(_numel(inits[x]) for x in ins):  # Expand/Tile: the file would grow
                keep.append(n)
                continue
            t = numpy_helper.from_array(y, n.output[0])
            graph.initializer.append(t)
            inits[t.name] = t
            seen[key] = t.name
            folded += 1
            continue
        keep.append(n)
    if not folded:
        return 0
    del graph.node[:]
    graph.node.extend(keep)
    rename_in_subgraphs(graph, rename)
    for o in graph.output:  # an Identity's output is never a graph output here; kept for safety
        o.name = rename.get(o.name, o.name)
    prune_initializers(graph)
    return folded


_INTEGER_TYPES = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)


def _shape_value(n: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto], outputs: set[str],
                 version: int) -> np.ndarray | None:
    """The value of a ``Shape``/``Size`` of an initializer (read from its dims), or of a node of the default domain
    whose inputs are all small integer initializers (shape arithmetic: Gather, ReduceProd, Concat ... of shapes) and
    whose value is small; else ``None``."""
    if n.domain not in ("", "ai.onnx") or len(n.output) != 1 or n.output[0] in outputs or list(subgraphs(n)) \
            or not n.input or n.op_type.startswith("Random"):
        return None
    if n.op_type in ("Shape", "Size") and n.input[0] in inits:
        return shape_node_value(n, inits[n.input[0]].dims)
    ins = [x for x in n.input if x]
    if not all(x in inits and _small(inits[x]) and inits[x].data_type in _INTEGER_TYPES for x in ins):
        return None
    try:
        y = _eval_node(n, [numpy_helper.to_array(inits[x]) if x else None for x in n.input], version)
    except Exception:  # noqa: BLE001 - a node the reference cannot fold stays as it is
        return None
    return y if y.size <= 64 else None


def shape_node_value(n: onnx.NodeProto, dims: Sequence[int]) -> np.ndarray:
    """The value of a ``Shape`` (its ``start``/``end`` attributes) or ``Size`` node ``n`` reading a tensor of shape
    ``dims``."""
    shp = np.array(dims, np.int64)
    if n.op_type == "Size":
        return np.array(int(np.prod(shp)), np.int64)
    start = next((a.i for a in n.attribute if a.name == "start"), 0)
    end = next((a.i for a in n.attribute if a.name == "end"), None)
    return shp[start:end]


def prune_initializers(graph: onnx.GraphProto) -> None:
    """Drop the initializers (and their graph-input entries) that nothing reads any more, subgraphs included."""
    used = _used_names(graph)
    inits = {t.name for t in graph.initializer}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = [v for v in graph.input if v.name in used or v.name not in inits]
    del graph.input[:]
    graph.input.extend(inputs)


def _rename_inputs(n: onnx.NodeProto, rename: dict[str, str]) -> None:
    for i, x in enumerate(n.input):
        if x in rename:
            n.input[i] = rename[x]


def _fold_key(n: onnx.NodeProto) -> bytes:
    return n.op_type.encode() + b"|" + "|".join(n.input).encode() + b"|" + \
        b"".join(a.SerializeToString() for a in n.attribute)


def _numel(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def _small(t: onnx.TensorProto, limit: int = 64) -> bool:
    """At most ``limit`` elements (a shape or a scalar, not a weight: copying it costs nothing)."""
    return _numel(t) <= limit


def _reader_counts(graph: onnx.GraphProto) -> dict[str, int]:
    """How many node inputs (in subgraphs too) and graph outputs read each name."""
    counts: dict[str, int] = {}
    for o in graph.output:
        counts[o.name] = counts.get(o.name, 0) + 1

    def visit(g: onnx.GraphProto) -> None:
        for n in g.node:
            for x in n.input:
                if x:
                    counts[x] = counts.get(x, 0) + 1
            for sg in subgraphs(n):
                visit(sg)
                for o in sg.output:
                    counts[o.name] = counts.get(o.name, 0) + 1

    visit(graph)
    return counts


def subgraphs(node: onnx.NodeProto) -> Iterable[onnx.GraphProto]:
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def rename_in_subgraphs(graph: onnx.GraphProto, rename: Mapping[str, str]) -> None:
    """Outer-scope names a subgraph reads, renamed (a name the subgraph defines itself shadows the outer one)."""
    if not rename:
        return
    for n in graph.node:
        for sg in subgraphs(n):
            local = {v.name for v in sg.input} | {t.name for t in sg.initializer} | \
                {o for sn in sg.node for o in sn.output}
            inner = {k: v for k, v in rename.items() if k not in local}
            for sn in sg.node:
                for i, x in enumerate(sn.input):
                    if x in inner:
                        sn.input[i] = inner[x]
            for o in sg.output:
                if o.name in inner:  # a subgraph output that was an outer Identity: read through an Identity
                    sg.node.append(helper.make_node("Identity", [inner[o.name]], [o.name]))
            rename_in_subgraphs(sg, inner)


def _used_names(graph: onnx.GraphProto) -> set[str]:
    """Every name read by a node of ``graph`` or of its subgraphs, and the graph outputs."""
    used = {o.name for o in graph.output}
    for n in graph.node:
        used.update(n.input)
        for sg in subgraphs(n):
            used |= _used_names(sg)
    return used


def subgraph_notes(m: onnx.ModelProto) -> list[str]:
    """A note for every ``If``/``Loop``/``Scan`` (any node holding a subgraph) of the main graph: its subgraphs are
    left float, with the weighted layers inside named."""
    notes = []
    for n in m.graph.node:
        subs = list(subgraphs(n))
        if not subs:
            continue
        inner = [f"{s.op_type} {s.name or s.output[0]!r}" for sg in subs for s in _walk(sg) if s.op_type in WEIGHTED]
        what = (f"; the {len(inner)} weighted layer(s) inside stay float: " + ", ".join(inner[:6])
                + (" ..." if len(inner) > 6 else "")) if inner else ""
        notes.append(f"{n.op_type} node {n.name or n.output[0]!r}: its subgraph(s) are left in float "
                     f"(qlinear does not quantize inside If/Loop/Scan bodies yet){what}{if_way_out(m.graph, n)}")
    return notes


def if_way_out(g: onnx.GraphProto, n: onnx.NodeProto) -> str:
    """For an ``If`` whose condition the graph inputs decide (by value or by shape): the option that fixes them, so
    the branch taken is inlined (:mod:`qlinear.graph.passes.fix_inputs`, :mod:`qlinear.graph.passes.shapes`)."""
    if n.op_type != "If" or not n.input:
        return ""
    prod = {o: p for p in g.node for o in p.output}
    inputs = {v.name for v in g.input} - {t.name for t in g.initializer}
    seen: set[tuple[str, bool]] = set()
    todo, by_value, by_shape = [(n.input[0], False)], set(), set()
    while todo:
        x, shape = todo.pop()
        if (x, shape) in seen or not x:
            continue
        seen.add((x, shape))
        if x in inputs:
            (by_shape if shape else by_value).add(x)
        p = prod.get(x)
        if p is not None:
            todo += [(y, shape or p.op_type in ("Shape", "Size")) for y in p.input]
    if by_value:
        return (f"; its condition depends on the value of input(s) {', '.join(sorted(by_value))}: fixing them with "
                "--fix-input NAME=VALUE (config fix_inputs) replaces the If by the branch taken, quantized")
    if by_shape:
        return (f"; its condition depends on the shape of input(s) {', '.join(sorted(by_shape))}: fixing it with "
                "--input-shape (config input_shapes) replaces the If by the branch taken, quantized")
    return ""


def _walk(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for n in graph.node:
        yield n
        for sg in subgraphs(n):
            yield from _walk(sg)


def check_upgrade(original: onnx.ModelProto, upgraded: onnx.ModelProto, samples: Sequence[Mapping[str, Any]],
                  label: str = "model", *, rtol: float = 1e-3, atol: float = 1e-4,
                  upgraded_outputs: Runner | None = None) -> str:
    """Run ``original`` and ``upgraded`` in ONNX Runtime on ``samples`` (feed dicts) and raise a
    :class:`GraphError` naming the first tensor, in the upgraded graph's order, and its node, that differs beyond
    ``|a - b| <= atol * max(1, max|b|) + rtol * |b|``. Returns a note saying what was checked.
    ``upgraded_outputs(samples, names)``: ``upgraded``'s graph outputs as :func:`_run` gives them, from a session of
    it at ONNX Runtime's full level that the caller holds (else one is built here)."""
    outs = tensor_outputs(upgraded)
    bad = _first_difference(original, upgraded, samples, outs, rtol, atol, level="all", run_b=upgraded_outputs)
    if bad is None:
        return (f"the opset upgrade computes the original's outputs on the first {len(samples)} calibration "
                f"sample(s) (ONNX Runtime, within rtol {rtol:g})")
    prod = {o: n for n in upgraded.graph.node for o in n.output}
    inner = [o for n in upgraded.graph.node for o in n.output if o]
    where = _first_difference(original, upgraded, samples, inner, rtol, atol) or bad
    n = prod.get(where[0])
    node = f"{n.op_type} node {n.name or n.output[0]!r}" if n is not None else "a graph input"
    raise GraphError(f"{label}: the opset upgrade by onnx.version_converter changed the results: tensor "
                     f"{where[0]!r} ({node}) differs from the original by up to {where[1]:.3g} on the first "
                     f"calibration samples (output {bad[0]!r}: {bad[1]:.3g}); re-export the model at opset 13 or "
                     "newer")


def _first_difference(a: onnx.ModelProto, b: onnx.ModelProto, samples: Sequence[Mapping[str, Any]],
                      names: list[str], rtol: float, atol: float,
                      level: str = "disable", run_b: Runner | None = None) -> tuple[str, float] | None:
    """The first of ``names`` whose float values differ between models ``a`` and ``b`` (name, max difference), both
    run at ONNX Runtime's optimization ``level`` (``disable``: every node as written, to find where they part;
    ``run_b``: ``b``'s values from the caller's session)."""
    have_a = {o for n in a.graph.node for o in n.output} | {v.name for v in a.graph.input}
    names = [x for x in names if x in have_a]
    ra = _run(a, samples, names, level)
    rb = run_b(samples, names) if run_b is not None else _run(b, samples, names, level)
    for x in names:
        worst = 0.0
        for va, vb in zip(ra[x], rb[x]):
            if va is None or vb is None or va.dtype.kind != "f" or vb.dtype.kind != "f" or va.shape != vb.shape:
                continue
            va64, vb64 = va.astype(np.float64), vb.astype(np.float64)
            fin = np.isfinite(vb64)
            if not np.array_equal(fin, np.isfinite(va64)):
                return x, float("inf")
            if not fin.any():
                continue
            tol = atol * max(1.0, float(np.abs(vb64[fin]).max())) + rtol * np.abs(vb64[fin])
            d = np.abs(va64[fin] - vb64[fin])
            if np.any(d > tol):
                worst = max(worst, float(d.max()))
        if worst:
            return x, worst
    return None


def _run(m: onnx.ModelProto, samples: Sequence[Mapping[str, Any]], names: list[str],
         level: str = "disable") -> dict[str, list]:
    """``names`` (exposed as extra outputs) computed by ONNX Runtime for each sample; ``None`` where ORT cannot."""
    import onnxruntime as ort

    have = {o.name for o in m.graph.output}
    so = ort.SessionOptions()
    so.graph_optimization_level = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    so.log_severity_level = 4
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        sess = ort.InferenceSession(serialized(m, [x for x in dict.fromkeys(names) if x not in have]), so,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        raise GraphError(f"ONNX Runtime cannot load the model to check the opset upgrade: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None
    out_names = [o.name for o in sess.get_outputs()]
    res: dict[str, list] = {x: [] for x in names}
    for feed in samples:
        try:
            vals = dict(zip(out_names, sess.run(None, dict(feed))))
        except Exception as e:  # noqa: BLE001 - e.g. samples that do not fit the declared input shapes
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise GraphError(f"ONNX Runtime cannot run the model on the first calibration samples to check the "
                             f"opset upgrade: {first}; make the samples match the model's declared inputs "
                             f"({_declared(m)})") from None
        for x in names:
            v = vals.get(x)
            res[x].append(np.asarray(v) if isinstance(v, np.ndarray) else None)
    return res


def _declared(m: onnx.ModelProto) -> str:
    """The graph inputs' declared shapes, e.g. ``input [N, 3, 224, 224]``."""
    def dims(v: onnx.ValueInfoProto) -> str:
        return ", ".join("?" if d is None else str(d) for d in declared_dims(v) or ())
    init = {t.name for t in m.graph.initializer}
    return "; ".join(f"{v.name} [{dims(v)}]" for v in m.graph.input if v.name not in init)


__all__ = ["check_upgrade", "constants_to_initializers", "fold_constant_chains", "normalize", "prune_initializers",
           "rename_in_subgraphs", "if_way_out", "subgraph_notes", "subgraphs", "unfolded_weight_notes",
           "upgrade"]
