"""Encodings <-> ONNX Q/DQ models.

* :func:`validate`: every encoding names a tensor of the graph, its scale fits the tensor's shape (from the
  initializer or shape inference), its axis is legal; all problems are reported, not just the first.
* :func:`apply`: a Q/DQ model. Params become ``DequantizeLinear(W_quantized, scale, zero_point) -> W`` (int32 bias
  included); activations get ``QuantizeLinear -> DequantizeLinear`` right after their producer, consumers rewired
  to ``T_dequantized`` (a graph output keeps its name on the DQ output, its producer writes ``T_prequant``); LPBQ
  weights are ``DequantizeLinear(int scales, per-channel float scale) -> W_scale`` feeding a blocked
  ``DequantizeLinear`` (spec §1 "LPBQ"); fp16/bf16 encodings become a Cast pair. 2-bit weights are stored on the
  exact 4-bit grid (ONNX Runtime has no int2 kernels; the int2 shifted grid {-1.5..1.5}·s is {-3,-1,1,3}·s/2),
  scales are float32 (the only ONNX scale type that fits), and the file's float64 scales travel in the model's
  ``metadata_props["qlinear.encodings"]`` so that ``extract(apply(e, m)) == e`` exactly: packed as their
  difference to the float32 scale (:func:`pack_scale`), an int32 bias's as the input and weight whose product it is
  (EfficientNet-Lite0 W8A8 per-channel: 68 kB, where the decimal JSON of earlier versions, still read, took 1.03 MB).
* :func:`extract`: the encodings of any Q/DQ model (qlinear's, ONNX Runtime's ``quantize_static``, AIMET's
  ``to_onnx_qdq``): the param name is the DQ output (or the initializer without its ``_quantized`` suffix), the
  activation name is the Q input (or the DQ output when that is a graph output).
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from qlinear.core import granularity as gr
from qlinear.core.types import Kind, QType, qtype
from qlinear.encodings.model import Encoding, EncodingSet, Style
from qlinear.errors import EncodingError, GraphError, UnsupportedError
from qlinear.graph.axes import resolve_encoding
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.model import GraphIndex, attr, input_name, load_model, opset, topological_sort
from qlinear.graph.ops import CONSTANT_CLAMPS
from qlinear.graph.passes.insert_qdq import CAST_TYPES, FLOAT_TYPES, InsertQDQ, storage_type
from qlinear.graph.passes.raise_opset import RaiseOpset

META_KEY = "qlinear.encodings"


# --------------------------------------------------------------------------------------------- validate
@dataclass
class Problem:
    tensor: str
    message: str

    def __str__(self) -> str:
        return f"{self.tensor}: {self.message}"


@dataclass
class Report:
    """Result of :func:`validate`: ``ok`` and the list of ``problems`` (each names its tensor)."""

    checked: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.ok:
            return f"{self.checked} encodings valid"
        return f"{len(self.problems)} problem(s) in {self.checked} encodings:\n" + "\n".join(
            f"  {p}" for p in self.problems)

    def raise_if_failed(self) -> None:
        if self.problems:
            raise EncodingError(str(self))


def validate(es: EncodingSet, model: Any) -> Report:
    if not isinstance(es, EncodingSet):
        raise EncodingError(f"expected an EncodingSet, got {type(es).__name__}")
    return _validate(es, GraphIndex.build(load_model(model)))


def _validate(es: EncodingSet, g: GraphIndex) -> Report:
    """:func:`validate` on a shape-inferred index of the model."""
    rep = Report(checked=len(es))
    for e in es:
        try:
            _validate_one(e, g, rep)
        except EncodingError as err:
            rep.problems.append(Problem(e.name, str(err).removeprefix(f"{e.name}: ")))
    return rep


def _validate_one(e: Encoding, g: GraphIndex, rep: Report) -> None:
    def bad(msg: str) -> None:
        rep.problems.append(Problem(e.name, msg))

    if not g.exists(e.name):
        moved = g.producer.get(f"{e.name}_quantized")   # a clamp computed on the integers: its Q/DQ pair is gone
        if moved is None or moved.op_type not in CONSTANT_CLAMPS:   # (qlinear.graph.integer_clamps)
            bad("no tensor of this name in the graph (not an input, initializer or node output)")
            return
    is_param = e.name in g.initializers
    shape = g.shape(e.name)
    p = g.producer.get(e.name)
    if not is_param and p is not None and p.op_type in ("DequantizeLinear", "Cast") \
            and input_name(p, 0) in g.initializers:
        is_param = True  # a Q/DQ model: the param is the DequantizeLinear (or Cast) of its quantized initializer
        shape = g.shape(input_name(p, 0))
    if e.role == "param" and not is_param:
        bad("marked as a param but it is not an initializer")
    et = g.elem_types.get(e.name)
    if et is not None and et not in FLOAT_TYPES:
        bad(f"the tensor is {onnx.TensorProto.DataType.Name(et)}; only float32, float16, bfloat16 and float64 "
            "tensors can carry an encoding (drop this encoding)")
        return
    if not is_param and e.name in g.inputs and e.name in g.outputs:
        bad("a graph input that is also a graph output cannot carry Q/DQ (no node produces it)")
        return
    if not is_param and e.shifted:
        bad(f"the shifted {e.dtype} grid on an activation has no ONNX QuantizeLinear equivalent (zero points are "
            "integers)")
        return
    if is_param:  # an initializer, or the DequantizeLinear of one in a Q/DQ model
        e = resolve_encoding(e, g)
    for f in ("scale", "int_scale"):
        v = getattr(e, f)
        if v is not None and f == "scale":
            v32 = np.asarray(v, np.float64).astype(np.float32)
            if np.any(v32 == 0) or not np.all(np.isfinite(v32)):
                bad_v = float(np.asarray(v).reshape(-1)[np.flatnonzero((v32 == 0) | ~np.isfinite(v32))[0]])
                bad(f"scale {bad_v!r} is {'0' if abs(bad_v) < 1 else 'infinite'} in float32, the type ONNX scales "
                    "are stored in; recalibrate (a scale must be in [1.2e-38, 3.4e38])")
                return
    grain = e.grain
    if grain is None or isinstance(grain, gr.PerTensor):
        return
    if shape is None or any(not isinstance(d, int) or d <= 0 for d in shape):
        bad(f"{'per-channel' if isinstance(grain, gr.PerAxis) else 'per-block'} needs a known static shape, shape inference gave {shape}")
        return
    rank = len(shape)
    if e.axis is None:
        bad("axis unknown (activation encodings from 0.6.1/1.0.0 files have none)")
        return
    if not -rank <= e.axis < rank:
        bad(f"axis {e.axis} is out of range for a tensor of rank {rank} {list(shape)}")
        return
    ax = e.axis % rank
    if isinstance(grain, gr.PerAxis):
        if e.scale.size != shape[ax]:
            bad(f"{e.scale.size} scales but the tensor {list(shape)} has {shape[ax]} on axis {ax}")
        return
    grid = e.int_scale if e.int_scale is not None else e.scale
    if grid.ndim != rank:
        bad(f"block scale of shape {list(grid.shape)} does not have the tensor's rank {rank} {list(shape)}")
        return
    nb = -(-shape[ax] // e.block_size)
    for i, (sd, d) in enumerate(zip(grid.shape, shape)):
        want = nb if i == ax else d
        if sd != want and not (i != ax and sd == 1):
            bad(f"block scale shape {list(grid.shape)} does not fit the tensor {list(shape)} with block_size "
                f"{e.block_size} on axis {ax} (dim {i}: expected {want}{' or 1' if i != ax else ''}, got {sd})")
            return


# --------------------------------------------------------------------------------------------- apply
def _required_opset(es: EncodingSet) -> int:
    """The lowest opset whose Q/DQ take every type written (``QType.opset``: float6 needs 28), at least 13."""
    need = 13
    for e in es:
        if e.qtype.kind is Kind.REAL:
            continue
        need = max(need, qtype(storage_type(e)).opset)
        if e.qtype.is_float and e.role != "param":
            need = max(need, 21)  # QuantizeLinear output_dtype (no float8 zero point: see _apply_activation)
        if e.block_size:
            need = max(need, 21)
    return need


def apply(es: EncodingSet, model: Any, *, opset_version: int | None = None, keep_metadata: bool = True) -> onnx.ModelProto:
    """The Q/DQ model for ``es`` on ``model`` (a new ``ModelProto``; the input is not changed).

    Raises ``EncodingError`` listing every problem when ``es`` does not validate against the model, and when the
    model is already quantized where an encoding points.
    """
    if not isinstance(es, EncodingSet):
        raise EncodingError(f"expected an EncodingSet, got {type(es).__name__}")
    m = load_model(model)
    if not es.encodings and opset(m) >= max(opset_version or 0, _required_opset(es)):
        return _unchanged(m, es, keep_metadata)  # nothing to insert, no opset to raise: no IR, no shape inference
    model = to_ir(m)
    g = GraphIndex.from_ir(model, m)  # one index (shape inference on m included) for the checks, validation and axes
    for e in es:
        p = g.producer.get(e.name)
        if p is not None and p.op_type in ("DequantizeLinear", "QuantizeLinear"):
            raise EncodingError(f"{e.name}: the model is already quantized here (this tensor is the output of "
                                f"{p.op_type} {p.name or ''!s}); apply encodings to the float model (qlinear quantize "
                                "writes it as model.float.onnx)")
    _validate(es, g).raise_if_failed()
    es = es.with_encodings(resolve_encoding(e, g) for e in es)
    for e in es:
        if e.shifted and e.role != "param":
            raise UnsupportedError(f"{e.name}: the shifted {e.dtype} grid on an activation has no ONNX "
                                   "QuantizeLinear equivalent (zero points are integers)")
    RaiseOpset(max(opset_version or 0, _required_opset(es)))(model)
    InsertQDQ(es.encodings, elem_types=g.elem_types)(model)
    m = to_proto(model)
    topological_sort(m.graph)
    if keep_metadata:
        _store_metadata(m, es)
    return m


def _unchanged(m: onnx.ModelProto, es: EncodingSet, keep_metadata: bool) -> onnx.ModelProto:
    """:func:`apply` of an empty ``es`` on ``m`` (a copy, at the opset it needs): ``m`` in topological order with the
    metadata, what the ``onnx_ir`` round trip gives back without re-reading a model in which nothing changes (a
    194 MB tree ensemble: seconds). Its opset imports are written as ``onnx_ir`` writes them: one per domain (the
    last version given), the domain always set."""
    imports = {o.domain: o.version for o in m.opset_import}
    del m.opset_import[:]
    for domain, version in imports.items():
        m.opset_import.add(domain=domain, version=version)
    topological_sort(m.graph)
    if keep_metadata:
        _store_metadata(m, es)
    return m


# --------------------------------------------------------------------------------------------- metadata
#: the metadata's map of exact scales since qlinear wrote them packed (:func:`pack_scale`); files written before hold
#: ``"exact"`` (decimal JSON lists, still read), which earlier versions read: they ignore this key
EXACT_KEY = "exact_packed"


def pack_scale(s64: np.ndarray) -> dict[str, Any]:
    """A float64 scale as what the file's float32 scale lacks: per value the difference of the float64 bit patterns
    of the exact scale and of the float32 one (``ulps``: int32 little-endian, zlib, base64; about 5.4 characters a
    value instead of ~20 of decimal text, ~3 for scales computed in float64 from float32 values, ``max / 127``), or
    float64 bytes (zlib, base64) where a difference does not fit in int32 (float32 subnormals); ``crc32`` of the
    float32 scale it is relative to, so that a file whose scales were changed since is not given stale ones."""
    s = np.ascontiguousarray(s64, np.float64).reshape(-1)
    s32 = s.astype(np.float32)
    d = s.view(np.int64) - s32.astype(np.float64).view(np.int64)
    out: dict[str, Any] = {"shape": list(np.shape(s64)), "crc32": zlib.crc32(s32.astype("<f4").tobytes())}
    if np.all(np.abs(d) < 2 ** 31):
        out["ulps"] = base64.b64encode(zlib.compress(d.astype("<i4").tobytes(), 9)).decode("ascii")
    else:
        out["float64"] = base64.b64encode(zlib.compress(s.astype("<f8").tobytes(), 9)).decode("ascii")
    return out


def unpack_scale(x: dict[str, Any], stored: np.ndarray) -> np.ndarray | None:
    """The float64 scale of a :func:`pack_scale` entry ``x`` (or an old ``{"scale": [...]}`` one) for the float32
    scale ``stored`` in the file; None when ``x`` was not written for it (other values or size)."""
    if "scale" in x:
        return np.array(x["scale"], np.float64)
    s32 = np.asarray(stored, np.float64).astype(np.float32).reshape(-1)
    if zlib.crc32(s32.astype("<f4").tobytes()) != x.get("crc32"):
        return None
    if "ulps" in x:
        d = np.frombuffer(zlib.decompress(base64.b64decode(x["ulps"])), "<i4").astype(np.int64)
        if d.size != s32.size:
            return None
        s = (s32.astype(np.float64).view(np.int64) + d).view(np.float64)
    else:
        s = np.frombuffer(zlib.decompress(base64.b64decode(x["float64"])), "<f8").astype(np.float64)
    return s.reshape(x["shape"]) if s.size == int(np.prod(x["shape"])) else None


def _products(m: onnx.ModelProto, es: EncodingSet) -> dict[str, list[str]]:
    """The int32 biases whose scale is exactly the float64 product of their layer's input and weight scales (as
    qlinear computes them): bias name -> [input encoding, weight encoding]."""
    encs = {e.name: e for e in es}
    producer = {o: n for n in m.graph.node for o in n.output}
    out: dict[str, list[str]] = {}
    for n in m.graph.node:
        if len(n.input) < 3 or n.input[2] not in encs or encs[n.input[2]].dtype != "int32" or n.input[1] not in encs:
            continue
        dq = producer.get(n.input[0])
        q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        if q is None or q.op_type != "QuantizeLinear" or q.input[0] not in encs:
            continue
        b, x, w = encs[n.input[2]], encs[q.input[0]], encs[n.input[1]]
        if x.scale is None or w.scale is None or np.size(x.scale) != 1 or np.size(w.scale) != np.size(b.scale):
            continue
        if np.array_equal(np.asarray(x.scale, np.float64).reshape(-1) * np.asarray(w.scale, np.float64).reshape(-1),
                          np.asarray(b.scale, np.float64).reshape(-1)):
            out[b.name] = [x.name, w.name]
    return out


def _store_metadata(m: onnx.ModelProto, es: EncodingSet) -> None:
    """Keep what float32 ONNX tensors cannot: the float64 scales (packed: :func:`pack_scale`; a single scale as its
    decimal text, shorter than a packed entry; an int32 bias's as the names of the input and weight whose scales'
    product it is), the order and the file-level fields."""
    exact: dict[str, Any] = {}
    products = _products(m, es)
    for e in es:
        two_bit = e.qtype.bits == 2 and e.role == "param"
        if e.scale is not None and (two_bit or not np.array_equal(e.scale.astype(np.float32).astype(np.float64),
                                                                   e.scale)):
            own = pack_scale(e.scale) if np.size(e.scale) > 1 else {"scale": e.scale.tolist()}
            prod = {"product": products[e.name], "shape": list(np.shape(e.scale))} if e.name in products else own
            exact[e.name] = min(own, prod, key=lambda x: len(json.dumps(x)))  # the shorter (a scalar: its value)
        if two_bit:
            exact[e.name]["dtype"] = e.dtype
            if e.zero_point is not None:
                exact[e.name]["zero_point"] = e.zero_point.tolist()
    doc = {"order": [e.name for e in es], EXACT_KEY: exact, "quantizer_args": es.quantizer_args,
           "excluded_layers": list(es.excluded_layers) if es.excluded_layers is not None else None,
           "producer": es.producer, "version": es.version,
           "style": {"indent": es.style.indent, "sort_keys": es.style.sort_keys, "int_offsets": es.style.int_offsets}}
    for p in list(m.metadata_props):
        if p.key == META_KEY:
            m.metadata_props.remove(p)
    m.metadata_props.add(key=META_KEY, value=json.dumps(doc, separators=(",", ":")))


# --------------------------------------------------------------------------------------------- extract
def _strip(name: str) -> str:
    for suf in ("_quantized", "_QuantizeLinear_Output", "_DequantizeLinear_Output"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def extract(qdq_model: Any, *, use_metadata: bool = True) -> EncodingSet:
    """The :class:`EncodingSet` of a Q/DQ model (see the module docstring for naming)."""
    m = load_model(qdq_model)
    g = GraphIndex.build(m, infer_shapes=False)
    const = {n.output[0]: n for n in m.graph.node if n.op_type == "Constant"}

    def value(name: str) -> np.ndarray | None:
        if name in g.initializers:
            return g.array(name)
        if name in const:
            return numpy_helper.to_array(attr(const[name], "value"))
        return None

    found: list[Encoding] = []
    done: set[str] = set()
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.domain in ("", "ai.onnx", "com.microsoft"):
            x = n.input[0]
            xv = value(x)
            if xv is not None:
                if x in done:
                    continue
                if any(c.op_type == "DequantizeLinear" and c.input[1] == n.output[0]
                       for c, _ in g.consumers.get(n.output[0], [])):
                    continue  # the int-scale DQ of an LPBQ weight; read with its weight
                enc = _param_from_dq(n, xv, value, g)
                found.append(enc)
                done.add(x)
                continue
            q = g.producer.get(x)
            start = _clamped_from(q, g, value)
            if start is not None:   # Q -> integer Min/Max... -> DQ (qlinear.graph.integer_clamps)
                for name, node in ((start.input[0], start), (_strip(x), n)):
                    if name not in done:
                        found.append(_activation_from_q(name, node, value, g))
                        done.add(name)
                continue
            if q is None or q.op_type != "QuantizeLinear":
                continue
            src, out = _through_casts(q.input[0], n.output[0], g)
            name = out if out in g.outputs else src
            if name in done:
                continue
            found.append(_activation_from_q(name, q, value, g))
            done.add(name)
        elif n.op_type == "Cast" and attr(n, "to") in (TensorProto.FLOAT16, TensorProto.BFLOAT16) \
                and n.input[0] not in g.initializers:
            nxt = g.consumers.get(n.output[0], [])
            if len(nxt) == 1 and nxt[0][0].op_type == "Cast" and attr(nxt[0][0], "to") in FLOAT_TYPES:
                src = n.input[0]
                dt = "float16" if attr(n, "to") == TensorProto.FLOAT16 else "bfloat16"
                back = nxt[0][0].output[0]
                name = back if back in g.outputs else src
                found.append(Encoding(name, dt, role="activation"))
                done.add(name)
        elif n.op_type == "Cast" and n.input[0] in g.initializers and attr(n, "to") in FLOAT_TYPES:
            t = g.initializers[n.input[0]].data_type
            if t in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
                found.append(Encoding(n.output[0], "float16" if t == TensorProto.FLOAT16 else "bfloat16",
                                      role="param"))
                done.add(n.output[0])
    es = EncodingSet(tuple(found))
    meta = next((p.value for p in m.metadata_props if p.key == META_KEY), None)
    if use_metadata and meta:
        es = _apply_metadata(es, json.loads(meta))
    return es


def _through_casts(src: str, out: str, g: GraphIndex) -> tuple[str, str]:
    """The tensor and the output of Q/DQ on a float16/bfloat16/float64 tensor, which apply writes as
    ``T -> Cast(float) -> Q -> DQ -> Cast(T)``; ``(src, out)`` unchanged otherwise."""
    p = g.producer.get(src)
    nxt = g.consumers.get(out, [])
    if p is None or p.op_type != "Cast" or attr(p, "to") != TensorProto.FLOAT or len(nxt) != 1:
        return src, out
    back = nxt[0][0]
    if back.op_type != "Cast" or attr(back, "to") not in CAST_TYPES:
        return src, out
    return p.input[0], back.output[0]


def _param_from_dq(n: onnx.NodeProto, xv: np.ndarray, value: Any, g: GraphIndex) -> Encoding:
    x = n.input[0]
    name = n.output[0] if not x.endswith("_quantized") else _strip(x)
    if name != n.output[0] and not g.consumers.get(n.output[0]) and n.output[0] not in g.outputs:
        name = n.output[0]
    t = qtype(xv.dtype)
    axis = attr(n, "axis", 1)
    bs = attr(n, "block_size", 0)
    sname = n.input[1]
    sv = value(sname)
    zv = value(n.input[2]) if len(n.input) > 2 and n.input[2] else None
    if sv is None:
        p = g.producer.get(sname)
        if p is None or p.op_type != "DequantizeLinear" or value(p.input[0]) is None:
            raise GraphError(f"{name}: the scale {sname!r} of its DequantizeLinear is neither a constant nor an LPBQ "
                             "DequantizeLinear of constant integer scales")
        ints = value(p.input[0]).astype(np.int64)
        pcs = value(p.input[1]).astype(np.float64)
        rank = ints.ndim
        keep = [1] * rank
        if pcs.size > 1:
            keep[attr(p, "axis", 1) % rank] = pcs.size
        ints = _collapse(ints, bs and axis % rank)
        bits = int(np.ceil(np.log2(max(int(ints.max()), 2))))
        return Encoding(name, t.name, scale=pcs.reshape(keep), axis=axis % rank, block_size=bs, role="param",
                        int_scale=ints, decompressed_bits=t.bits + bits if t.bits + bits > t.bits else 2 * t.bits)
    rank = xv.ndim
    s = sv.astype(np.float64)
    z = _zero_point(name, t, zv)
    if bs:
        ax = axis % rank
        s = _collapse(s, ax)
        z = None if z is None else _collapse(z, ax, like=s)
        return Encoding(name, t.name, scale=s, zero_point=z, axis=ax, block_size=bs, role="param")
    if s.ndim == 1 and s.size > 1 or (s.ndim == 1 and rank and sv.size == xv.shape[axis % rank] and s.size > 1):
        return Encoding(name, t.name, scale=s, zero_point=z, axis=axis % rank, role="param")
    return Encoding(name, t.name, scale=s.reshape(()), zero_point=None if z is None else z.reshape(()), role="param")


def _zero_point(name: str, t: QType, zv: np.ndarray | None) -> np.ndarray | None:
    """The integer zero point of an encoding; float8/float6/float4 encodings have none, so a non-zero float zero
    point in the model is refused rather than dropped."""
    if zv is None or t.kind is not Kind.FLOAT:
        return None if zv is None else zv.astype(np.int64)
    zf = zv.astype(np.float32)
    if np.any(zf != 0):
        raise UnsupportedError(f"{name}: its {t.name} zero point holds {float(zf[zf != 0][0])!r}; qlinear encodings "
                               "of float types have no zero point, so this Q/DQ cannot be extracted without changing "
                               "its values (write the model with a zero (or no) zero point)")
    return None


def _collapse(a: np.ndarray, block_axis: int, like: np.ndarray | None = None) -> np.ndarray:
    """Undo the ONNX expansion of AIMET's size-1 block dims: dims after the channel axis that are constant."""
    if like is not None:
        return np.ascontiguousarray(np.broadcast_to(a, a.shape)[tuple(slice(0, d) for d in like.shape)])
    others = [i for i in range(a.ndim) if i != block_axis]
    if not others:
        return a
    for i in others[1:]:
        if a.shape[i] > 1 and np.all(a == a.take([0], axis=i)):
            a = a.take([0], axis=i)
    return a


def _clamped_from(n: onnx.NodeProto | None, g: GraphIndex, value: Any) -> onnx.NodeProto | None:
    """The ``QuantizeLinear`` a chain of ``Max``/``Min`` nodes against integer constants, ending at ``n``, starts
    from (:mod:`qlinear.graph.integer_clamps` moves clamps onto the integers: the tensor before them and the one
    after keep their parameters, the second in the ``DequantizeLinear`` that reads the chain); None for anything
    else."""
    while n is not None and n.op_type in CONSTANT_CLAMPS and len(n.input) == 2:
        consts = [value(x) for x in n.input]
        if sum(c is not None for c in consts) != 1 or next(c for c in consts if c is not None).dtype.kind not in "iu":
            return None
        n = g.producer.get(n.input[0] if consts[0] is None else n.input[1])
        if n is not None and n.op_type == "QuantizeLinear":
            return n
    return None


def _activation_from_q(name: str, q: onnx.NodeProto, value: Any, g: GraphIndex) -> Encoding:
    sv = value(q.input[1])
    if sv is None:
        raise GraphError(f"{name}: QuantizeLinear {q.name!r} has a non-constant scale (dynamic quantization)")
    zv = value(q.input[2]) if len(q.input) > 2 and q.input[2] else None
    od = attr(q, "output_dtype", 0)
    t = qtype(zv.dtype) if zv is not None else (qtype(od) if od else qtype("uint8"))
    s = sv.astype(np.float64)
    z = _zero_point(name, t, zv)
    axis = attr(q, "axis", 1)
    bs = attr(q, "block_size", 0)
    if s.size == 1 and not bs and s.ndim <= 1:
        return Encoding(name, t.name, scale=s.reshape(()), zero_point=None if z is None else z.reshape(()))
    return Encoding(name, t.name, scale=s, zero_point=z, axis=axis, block_size=bs)


def _apply_metadata(es: EncodingSet, meta: dict) -> EncodingSet:
    exact = {**meta.get("exact", {}), **meta.get(EXACT_KEY, {})}  # "exact": files of earlier versions
    out: list[Encoding] = []
    for e in es:
        x = exact.get(e.name)
        if x is not None and e.scale is not None and "product" not in x:
            out.append(_exact(e, x))
        else:
            out.append(e)
    got = {e.name: e for e in out}
    for i, e in enumerate(out):  # int32 bias scales: the product of the exact input and weight scales
        x = exact.get(e.name)
        if x is not None and e.scale is not None and "product" in x:
            out[i] = _product(e, x, got)
    order = {n: i for i, n in enumerate(meta.get("order", []))}
    out.sort(key=lambda e: order.get(e.name, len(order)))
    st = meta.get("style") or {}
    return EncodingSet(tuple(out), quantizer_args=meta.get("quantizer_args"),
                       excluded_layers=meta.get("excluded_layers"), producer=meta.get("producer"),
                       version=meta.get("version"),
                       style=Style(indent=st.get("indent", 4), sort_keys=st.get("sort_keys", True),
                                   int_offsets=st.get("int_offsets", False)))


def _exact(e: Encoding, x: dict) -> Encoding:
    """``e`` (read from the file's float32 scales) with the exact scale of its metadata entry ``x``, if ``x`` is for
    these scales."""
    dt = x.get("dtype")
    if dt is not None:  # 2-bit param stored on the 4-bit grid
        zp = np.array(x["zero_point"]) if "zero_point" in x else None
        shifted = Encoding(e.name, dt, scale=e.scale, zero_point=zp, axis=e.axis, block_size=e.block_size,
                           role=e.role).shifted
        s64 = unpack_scale(x, e.scale * 2 if shifted else e.scale)
        if s64 is None:
            return e
        cand = Encoding(e.name, dt, scale=s64, zero_point=zp, axis=e.axis, block_size=e.block_size, role=e.role)
        s32 = s64.astype(np.float32)
        stored = s32 / 2 if cand.shifted else s32
        if stored.shape == e.scale.shape and np.array_equal(stored.astype(np.float64), e.scale):
            return cand
        return e
    s64 = unpack_scale(x, e.scale)
    if s64 is not None and s64.shape == e.scale.shape and np.array_equal(s64.astype(np.float32).astype(np.float64),
                                                                         e.scale):
        return e.replace(scale=s64)
    return e


def _product(e: Encoding, x: dict, got: dict[str, Encoding]) -> Encoding:
    """``e`` (an int32 bias read from the file's float32 scale) with the scale ``x["product"]`` names: the float64
    product of its input's and weight's exact scales, if that is what the file stores."""
    parts = [got.get(t) for t in x["product"]]
    if any(p is None or p.scale is None for p in parts):
        return e
    a, w = (np.asarray(p.scale, np.float64).reshape(-1) for p in parts)
    if a.size != 1 or w.size != e.scale.size:
        return e
    s64 = (a * w).reshape(x["shape"])
    if s64.shape == e.scale.shape and np.array_equal(s64.astype(np.float32).astype(np.float64), e.scale):
        return e.replace(scale=s64)
    return e
