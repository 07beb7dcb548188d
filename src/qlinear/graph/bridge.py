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
  ``metadata_props["qlinear.encodings"]`` so that ``extract(apply(e, m)) == e`` exactly.
* :func:`extract`: the encodings of any Q/DQ model (qlinear's, ONNX Runtime's ``quantize_static``, AIMET's
  ``to_onnx_qdq``): the param name is the DQ output (or the initializer without its ``_quantized`` suffix), the
  activation name is the Q input (or the DQ output when that is a graph output).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qlinear.core.types import Kind, qtype
from qlinear.encodings.model import Encoding, EncodingSet, Style
from qlinear.errors import EncodingError, GraphError, UnsupportedError
from qlinear.graph.axes import resolve_encoding
from qlinear.graph.model import GraphIndex, attr, load_model, opset, topological_sort
from qlinear.graph.storage import lpbq_names, storage_type

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
    m = load_model(model)
    g = GraphIndex.build(m)
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
        bad("no tensor of this name in the graph (not an input, initializer or node output)")
        return
    is_param = e.name in g.initializers
    shape = g.shape(e.name)
    p = g.producer.get(e.name)
    if not is_param and p is not None and p.op_type in ("DequantizeLinear", "Cast") and p.input[0] in g.initializers:
        is_param = True  # a Q/DQ model: the param is the DequantizeLinear (or Cast) of its quantized initializer
        shape = g.shape(p.input[0])
    if e.role == "param" and not is_param:
        bad("marked as a param but it is not an initializer")
    if e.name in g.initializers:
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
    gran = e.granularity
    if gran in ("float", "per_tensor"):
        return
    if shape is None or any(not isinstance(d, int) or d <= 0 for d in shape):
        bad(f"{gran.replace('_', '-')} needs a known static shape, shape inference gave {shape}")
        return
    rank = len(shape)
    if e.axis is None:
        bad("axis unknown (activation encodings from 0.6.1/1.0.0 files have none)")
        return
    if not -rank <= e.axis < rank:
        bad(f"axis {e.axis} is out of range for a tensor of rank {rank} {list(shape)}")
        return
    ax = e.axis % rank
    if gran == "per_channel":
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
_NEEDS_OPSET = {"int4": 21, "uint4": 21, "int16": 21, "uint16": 21, "int2": 25, "uint2": 25, "float4e2m1": 23,
                "float8e4m3fn": 19, "float8e4m3fnuz": 19, "float8e5m2": 19, "float8e5m2fnuz": 19}


class _Names:
    def __init__(self, m: onnx.ModelProto) -> None:
        g = m.graph
        self.used = {t.name for t in g.initializer} | {v.name for v in g.input} | {v.name for v in g.output}
        self.used |= {o for n in g.node for o in n.output} | {n.name for n in g.node}

    def new(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def _required_opset(es: EncodingSet) -> int:
    need = 13
    for e in es:
        if e.qtype.kind is Kind.REAL:
            continue
        need = max(need, _NEEDS_OPSET.get(_storage_type(e), 13))
        if e.qtype.is_float and e.role != "param":
            need = max(need, 21)  # QuantizeLinear output_dtype (no float8 zero point: see _apply_activation)
        if e.block_size:
            need = max(need, 21)
    return need


def _storage_type(e: Encoding) -> str:
    """2-bit params are stored on the 4-bit grid (:func:`qlinear.graph.storage.storage_type`)."""
    return storage_type(e.qtype.name) if e.role == "param" and e.qtype.kind is Kind.INT else e.qtype.name


def _set_opset(m: onnx.ModelProto, need: int) -> onnx.ModelProto:
    have = opset(m)
    if have >= need:
        return m
    try:
        from onnx import version_converter

        m2 = version_converter.convert_version(m, need)
    except Exception as e:  # noqa: BLE001 - the converter raises assorted errors
        raise GraphError(f"the encodings need opset {need} (the model has {have}) and onnx's version converter "
                         f"failed: {e}") from None
    return m2


def apply(es: EncodingSet, model: Any, *, opset_version: int | None = None, keep_metadata: bool = True) -> onnx.ModelProto:
    """The Q/DQ model for ``es`` on ``model`` (a new ``ModelProto``; the input is not changed).

    Raises ``EncodingError`` listing every problem when ``es`` does not validate against the model, and when the
    model is already quantized where an encoding points.
    """
    if not isinstance(es, EncodingSet):
        raise EncodingError(f"expected an EncodingSet, got {type(es).__name__}")
    m = load_model(model)
    g0 = GraphIndex.build(m, infer_shapes=False)
    for e in es:
        p = g0.producer.get(e.name)
        if p is not None and p.op_type in ("DequantizeLinear", "QuantizeLinear"):
            raise EncodingError(f"{e.name}: the model is already quantized here (this tensor is the output of "
                                f"{p.op_type} {p.name or ''!s}); apply encodings to the float model (qlinear quantize "
                                "writes it as model.float.onnx)")
    rep = validate(es, m)
    rep.raise_if_failed()
    es = es.with_encodings(resolve_encoding(e, g0) for e in es)
    for e in es:
        if e.shifted and e.role != "param":
            raise UnsupportedError(f"{e.name}: the shifted {e.dtype} grid on an activation has no ONNX "
                                   "QuantizeLinear equivalent (zero points are integers)")
    m = _set_opset(m, max(opset_version or 0, _required_opset(es)))
    g = GraphIndex.build(m, infer_shapes=False)
    names = _Names(m)
    graph = m.graph
    new_nodes: list[onnx.NodeProto] = []
    drop_inits: set[str] = set()
    for e in es:
        if e.role == "param" or e.name in g.initializers:
            _apply_param(e, g, graph, names, new_nodes, drop_inits)
        else:
            _apply_activation(e, g, graph, names, new_nodes)
    kept = [t for t in graph.initializer if t.name not in drop_inits]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.node.extend(new_nodes)
    topological_sort(graph)
    if keep_metadata:
        _store_metadata(m, es)
    return m


def _const(graph: onnx.GraphProto, names: _Names, base: str, arr: np.ndarray, dtype: str | None = None) -> str:
    name = names.new(base)
    if dtype is not None and qtype(dtype).storage != arr.dtype:
        arr = arr.astype(qtype(dtype).storage)
    graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
    return name


def _dq(inputs: list[str], output: str, name: str, *, axis: int | None, block_size: int = 0) -> onnx.NodeProto:
    kw: dict[str, Any] = {}
    if axis is not None:
        kw["axis"] = axis
    if block_size:
        kw["block_size"] = block_size
    return helper.make_node("DequantizeLinear", inputs, [output], name=name, **kw)


def _params(e: Encoding, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None, int | None]:
    """float32 scale, zero point (storage dtype) and axis attribute, in ONNX shapes."""
    p = e.onnx_params(shape) if not e.shifted else None
    if p is None:  # shifted int2 grid: handled by the caller
        raise AssertionError
    axis = None if e.granularity == "per_tensor" else p["axis"]
    return p["scale"], p["zero_point"], axis


def _apply_param(e: Encoding, g: GraphIndex, graph: onnx.GraphProto, names: _Names,
                 new_nodes: list[onnx.NodeProto], drop: set[str]) -> None:
    w = g.array(e.name)
    drop.add(e.name)
    t = e.qtype
    if t.kind is Kind.REAL:
        c = _const(graph, names, f"{e.name}_{t.name}", w.astype(t.storage))
        new_nodes.append(helper.make_node("Cast", [c], [e.name], name=names.new(f"{e.name}_Cast"),
                                          to=helper.np_dtype_to_tensor_dtype(w.dtype)))
        return
    w = w.astype(np.float32) if w.dtype != np.float32 else w
    if t.name == "int32":
        # int32 bias (AIMET §2.10 / ORT): round half to even of bias / scale in float64, saturated to int32
        s = e.scale.astype(np.float32)
        sb = np.broadcast_to(s.reshape(-1) if s.ndim else s, w.shape).astype(np.float64)
        qf = np.rint(w.astype(np.float64) / sb)
        if np.any(np.abs(qf) > 2.0 ** 31 - 1):
            i = int(np.argmax(np.abs(qf).reshape(-1)))
            raise EncodingError(f"{e.name}: bias value {float(w.reshape(-1)[i])!r} / scale "
                                f"{float(sb.reshape(-1)[i]):.3g} = {float(qf.reshape(-1)[i]):.4g} does not fit in "
                                "int32 (it would saturate and every integer runtime would compute a wrong result); "
                                "raise the weight scale of that channel (qlinear quantize does: "
                                "qlinear.calibration.bias)")
        q = qf.astype(np.int32)
        qn = _const(graph, names, f"{e.name}_quantized", q)
        sn = _const(graph, names, f"{e.name}_scale", s)
        zn = _const(graph, names, f"{e.name}_zero_point", np.zeros(s.shape, np.int32))
        axis = None if s.ndim == 0 else e.axis
        new_nodes.append(_dq([qn, sn, zn], e.name, names.new(f"{e.name}_DequantizeLinear"), axis=axis))
        return
    if e.shifted:
        # int2 shifted grid (AIMET shift_zero_point): q' = 2q - 2zp on int4 with scale s/2 is the same grid exactly
        s = e.scale.astype(np.float32)
        z = e.zero_point
        axis = e.axis if e.granularity != "per_tensor" else None
        ax = 1 if axis is None else axis
        half = (s.astype(np.float64) / 2).astype(np.float32)
        if not np.array_equal(half.astype(np.float64) * 2, s.astype(np.float64)):
            raise UnsupportedError(f"{e.name}: scale/2 is not exact in float32; the shifted grid cannot be stored")
        # shifted grid: q = clamp(round(x/s + zp)), x^ = (q - zp)*s = (2q - 2zp)*(s/2), 2q - 2zp odd in [-3, 3]
        sh = s.reshape(-1) if s.ndim else s
        zz = z.reshape(-1) if z.ndim else z
        bshape = [1] * w.ndim
        if axis is not None:
            bshape[ax % w.ndim] = -1
        sb = np.reshape(sh, bshape) if axis is not None else sh
        zb = np.reshape(zz, bshape) if axis is not None else zz
        k = np.clip(np.rint(w.astype(np.float64) / sb.astype(np.float64) + zb), t.qmin, t.qmax)
        q4 = (2 * (k - zb)).astype(np.int8)
        qn = _const(graph, names, f"{e.name}_quantized", q4, "int4")
        sn = _const(graph, names, f"{e.name}_scale", half)
        new_nodes.append(_dq([qn, sn], e.name, names.new(f"{e.name}_DequantizeLinear"), axis=axis))
        return
    shape = tuple(w.shape)
    if e.granularity == "lpbq":
        ints = e.int_scale
        from qlinear.encodings.model import expand_block_scale

        ints_full = expand_block_scale(ints, shape, e.axis, e.block_size)
        pc = e.scale
        ch = next((i for i in range(pc.ndim) if pc.shape[i] > 1), None)
        if ch is None:
            ch = next(i for i in range(pc.ndim) if i != e.axis % pc.ndim)
        pcf = pc.reshape(-1).astype(np.float32)
        ln = lpbq_names(e.name)  # DQ(int scales uint8, per-channel float scale) -> W_scale -> blocked DQ
        isn = _const(graph, names, ln.int_scale, ints_full.astype(np.uint8))
        pcn = _const(graph, names, ln.float_scale, pcf)
        sname = names.new(ln.scale)
        new_nodes.append(_dq([isn, pcn], sname, names.new(ln.node),
                             axis=ch if pcf.size > 1 else None))
        q = e.quantize(w)
        qn = _const(graph, names, f"{e.name}_quantized", q)
        zn = _const(graph, names, f"{e.name}_zero_point", np.zeros(ints_full.shape, t.storage))
        new_nodes.append(_dq([qn, sname, zn], e.name, names.new(f"{e.name}_DequantizeLinear"), axis=e.axis,
                             block_size=e.block_size))
        return
    s, z, axis = _params(e, shape)
    q = e.quantize(w)
    st = _storage_type(e)
    qn = _const(graph, names, f"{e.name}_quantized", q, st)
    ins = [qn, _const(graph, names, f"{e.name}_scale", s)]
    if z is not None:
        ins.append(_const(graph, names, f"{e.name}_zero_point", z, st))
    new_nodes.append(_dq(ins, e.name, names.new(f"{e.name}_DequantizeLinear"), axis=axis,
                         block_size=e.block_size))


def _rewire(graph: onnx.GraphProto, old: str, new: str, skip: set[str]) -> None:
    for n in graph.node:
        if n.name in skip:
            continue
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                for sn in a.g.node:
                    for i, x in enumerate(sn.input):
                        if x == old:
                            sn.input[i] = new


def _apply_activation(e: Encoding, g: GraphIndex, graph: onnx.GraphProto, names: _Names,
                      new_nodes: list[onnx.NodeProto]) -> None:
    t = e.qtype
    name = e.name
    if name in g.outputs:
        src = names.new(f"{name}_prequant")
        prod = g.producer.get(name)
        if prod is None:
            raise GraphError(f"{name}: a graph output that is also a graph input cannot carry Q/DQ")
        for i, o in enumerate(prod.output):
            if o == name:
                prod.output[i] = src
        out = name
        _rewire(graph, name, src, skip=set())
    else:
        src, out = name, None
    if t.kind is Kind.REAL:
        mid = names.new(f"{name}_{t.name}")
        out = out or names.new(f"{name}_cast")
        new_nodes.append(helper.make_node("Cast", [src], [mid], name=names.new(f"{name}_Cast"), to=t.onnx_type))
        new_nodes.append(helper.make_node("Cast", [mid], [out], name=names.new(f"{name}_Cast_back"),
                                          to=TensorProto.FLOAT))
    else:
        s, z, axis = _params(e, tuple(int(d) for d in g.shape(name)) if e.block_size else None or ())
        qname, dqname = names.new(f"{name}_QuantizeLinear"), names.new(f"{name}_DequantizeLinear")
        sn = _const(graph, names, f"{name}_scale", s)
        qo = names.new(f"{name}_quantized")
        out = out or names.new(f"{name}_dequantized")
        kw: dict[str, Any] = {}
        if axis is not None:
            kw["axis"] = axis
        if e.block_size:
            kw["block_size"] = e.block_size
        if z is None:
            # float8: no zero point, the type in output_dtype (opset 21). A float8 zero-point input makes ONNX
            # Runtime's Clip/Relu->Q fusion fail, or drop a Relu whose negative values float8 can represent.
            ins = [sn]
            qkw = {**kw, "output_dtype": t.onnx_type}
        else:
            ins = [sn, _const(graph, names, f"{name}_zero_point", z, t.name)]
            qkw = kw
        new_nodes.append(helper.make_node("QuantizeLinear", [src, *ins], [qo], name=qname, **qkw))
        new_nodes.append(helper.make_node("DequantizeLinear", [qo, *ins], [out], name=dqname, **kw))
    if name not in g.outputs:
        consumers = {n.name for n, _ in g.consumers.get(name, [])}
        for n in graph.node:
            if n.name in consumers or (not n.name and any(x == name for x in n.input)):
                for i, x in enumerate(n.input):
                    if x == name:
                        n.input[i] = out


# --------------------------------------------------------------------------------------------- metadata
def _store_metadata(m: onnx.ModelProto, es: EncodingSet) -> None:
    """Keep what float32 ONNX tensors cannot: the float64 scales, the order and the file-level fields."""
    exact: dict[str, Any] = {}
    for e in es:
        if e.scale is not None and not np.array_equal(e.scale.astype(np.float32).astype(np.float64), e.scale):
            exact[e.name] = {"scale": e.scale.tolist()}
        if e.qtype.bits == 2 and e.role == "param":
            exact.setdefault(e.name, {})["dtype"] = e.dtype
            if e.zero_point is not None:
                exact[e.name]["zero_point"] = e.zero_point.tolist()
            exact[e.name]["scale"] = e.scale.tolist()
    doc = {"order": [e.name for e in es], "exact": exact, "quantizer_args": es.quantizer_args,
           "excluded_layers": list(es.excluded_layers) if es.excluded_layers is not None else None,
           "producer": es.producer, "version": es.version,
           "style": {"indent": es.style.indent, "sort_keys": es.style.sort_keys, "int_offsets": es.style.int_offsets}}
    for p in list(m.metadata_props):
        if p.key == META_KEY:
            m.metadata_props.remove(p)
    m.metadata_props.add(key=META_KEY, value=json.dumps(doc))


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
            if q is None or q.op_type != "QuantizeLinear":
                continue
            src = q.input[0]
            name = n.output[0] if n.output[0] in g.outputs else src
            if name in done:
                continue
            found.append(_activation_from_q(name, q, value, g))
            done.add(name)
        elif n.op_type == "Cast" and attr(n, "to") in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
            nxt = g.consumers.get(n.output[0], [])
            if len(nxt) == 1 and nxt[0][0].op_type == "Cast" and attr(nxt[0][0], "to") == TensorProto.FLOAT:
                src = n.input[0]
                dt = "float16" if attr(n, "to") == TensorProto.FLOAT16 else "bfloat16"
                back = nxt[0][0].output[0]
                name = back if back in g.outputs else src
                found.append(Encoding(name, dt, role="activation"))
                done.add(name)
        elif n.op_type == "Cast" and n.input[0] in g.initializers and attr(n, "to") == TensorProto.FLOAT:
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
    z = None if zv is None or t.kind is Kind.FLOAT else zv.astype(np.int64)
    if bs:
        ax = axis % rank
        s = _collapse(s, ax)
        z = None if z is None else _collapse(z, ax, like=s)
        return Encoding(name, t.name, scale=s, zero_point=z, axis=ax, block_size=bs, role="param")
    if s.ndim == 1 and s.size > 1 or (s.ndim == 1 and rank and sv.size == xv.shape[axis % rank] and s.size > 1):
        return Encoding(name, t.name, scale=s, zero_point=z, axis=axis % rank, role="param")
    return Encoding(name, t.name, scale=s.reshape(()), zero_point=None if z is None else z.reshape(()), role="param")


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


def _activation_from_q(name: str, q: onnx.NodeProto, value: Any, g: GraphIndex) -> Encoding:
    sv = value(q.input[1])
    if sv is None:
        raise GraphError(f"{name}: QuantizeLinear {q.name!r} has a non-constant scale (dynamic quantization)")
    zv = value(q.input[2]) if len(q.input) > 2 and q.input[2] else None
    od = attr(q, "output_dtype", 0)
    t = qtype(zv.dtype) if zv is not None else (qtype(od) if od else qtype("uint8"))
    s = sv.astype(np.float64)
    z = None if zv is None or t.kind is Kind.FLOAT else zv.astype(np.int64)
    axis = attr(q, "axis", 1)
    bs = attr(q, "block_size", 0)
    if s.size == 1 and not bs and s.ndim <= 1:
        return Encoding(name, t.name, scale=s.reshape(()), zero_point=None if z is None else z.reshape(()))
    return Encoding(name, t.name, scale=s, zero_point=z, axis=axis, block_size=bs)


def _apply_metadata(es: EncodingSet, meta: dict) -> EncodingSet:
    exact = meta.get("exact", {})
    out: list[Encoding] = []
    for e in es:
        x = exact.get(e.name)
        if x is not None and e.scale is not None:
            s64 = np.array(x["scale"], np.float64)
            dt = x.get("dtype")
            if dt is not None:  # 2-bit param stored on the 4-bit grid
                zp = np.array(x["zero_point"]) if "zero_point" in x else None
                cand = Encoding(e.name, dt, scale=s64, zero_point=zp, axis=e.axis, role=e.role)
                s32 = s64.astype(np.float32)
                stored = s32 / 2 if cand.shifted else s32
                if stored.shape == e.scale.shape and np.array_equal(stored.astype(np.float64), e.scale):
                    e = cand
            elif s64.shape == e.scale.shape and np.array_equal(s64.astype(np.float32).astype(np.float64), e.scale):
                e = e.replace(scale=s64)
        out.append(e)
    order = {n: i for i, n in enumerate(meta.get("order", []))}
    out.sort(key=lambda e: order.get(e.name, len(order)))
    st = meta.get("style") or {}
    return EncodingSet(tuple(out), quantizer_args=meta.get("quantizer_args"),
                       excluded_layers=meta.get("excluded_layers"), producer=meta.get("producer"),
                       version=meta.get("version"),
                       style=Style(indent=st.get("indent", 4), sort_keys=st.get("sort_keys", True),
                                   int_offsets=st.get("int_offsets", False)))
