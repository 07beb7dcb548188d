"""Insert Q/DQ for a set of encodings: one ``onnx_ir`` pass, linear in the graph's size.

* Params (initializers) become ``DequantizeLinear(W_quantized, W_scale[, W_zero_point]) -> W``: int32 bias (round
  half to even of ``bias / scale`` in float64), int2 on the shifted grid stored exactly on int4 (``2q - 2zp`` with
  scale ``s/2``), LPBQ as ``DequantizeLinear(uint8 int scales, per-channel float scale) -> W_scale`` feeding the
  blocked ``DequantizeLinear`` (spec §1 "LPBQ"); fp16/bf16 encodings as ``Cast(W_float16) -> W``.
* Activations get ``QuantizeLinear -> DequantizeLinear`` after their producer; every use (subgraphs included) is
  rewired to ``T_dequantized`` through the def-use chain, never by scanning the graph. A graph output keeps its name
  on the DQ output and its producer writes ``T_prequant`` (its other consumers read the float value, as before).
* Tensors of type float16, bfloat16 or float64: Q/DQ run in float32 between two Casts (``T -> float32 -> Q -> DQ ->
  T``), params get ``DQ -> Cast(T)``, so the scales stay the exact float32 values of the encodings and ONNX
  Runtime accepts the model (ONNX requires the scale type to be the DQ output type).

* Params given a :class:`ParamSource` (weight-only quantization) take their integers from it, computed when the model
  is written (``onnx_ir.LazyTensor``: the weight itself is never read here, so a model larger than memory streams
  one tensor at a time), with the source's scale type (float16 weights: float16 scales, no Cast, the form ONNX
  Runtime fuses into ``MatMulNBits``) and the zero point only when the source has one.

New nodes are appended in the order they are made; the caller sorts the graph. Encodings must be resolved (axes)
and validated first (:func:`qlinear.graph.bridge.apply` does both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from qlinear.core.types import Kind, qtype
from qlinear.encodings.model import Encoding, expand_block_scale
from qlinear.errors import EncodingError, GraphError, UnsupportedError
from qlinear.graph.ir import Names, add_initializer, make_node
from qlinear.graph.storage import STORAGE, lpbq_names, param_names
from qlinear.graph.storage import storage_type as param_storage_type

#: element types that are quantized in float32 between Casts
CAST_TYPES = (TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
#: element types a Q/DQ or Cast pair can sit on
FLOAT_TYPES = (TensorProto.FLOAT, *CAST_TYPES)


def storage_type(e: Encoding) -> str:
    """2-bit params are stored on the 4-bit grid (:func:`qlinear.graph.storage.storage_type`, the rule the
    weight-only writer follows too)."""
    return param_storage_type(e.qtype.name) if e.role == "param" else e.qtype.name


@dataclass(frozen=True)
class ParamSource:
    """The integers of a param computed elsewhere (weight-only quantization: GPTQ's, or round to nearest redone when
    written): ``integers()`` returns them in the weight's layout and the stored type's range (signed values for
    signed types); ``scale_type`` is the scale's (and the DequantizeLinear output's) element type, the weight's own
    for float16 weights; ``zero_point``: whether the DequantizeLinear gets a zero-point input."""

    integers: Callable[[], np.ndarray]
    scale_type: int = TensorProto.FLOAT
    zero_point: bool = True


class InsertQDQ(ir.passes.InPlacePass):
    """Q/DQ for ``encodings`` (resolved, validated). ``elem_types``: element types of tensors known from shape
    inference (the IR's own types are used otherwise) to find float16/bfloat16/float64 activations. ``sources``:
    params whose integers come from a :class:`ParamSource` instead of quantizing the weight here."""

    def __init__(self, encodings: Sequence[Encoding], *, elem_types: Mapping[str, int] | None = None,
                 sources: Mapping[str, ParamSource] | None = None) -> None:
        super().__init__()
        self.encodings = tuple(encodings)
        self.elem_types = elem_types or {}
        self.sources = sources or {}

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        w = _Writer(model.graph, self.elem_types)
        w.sources = self.sources
        for e in self.encodings:
            if e.role == "param" or e.name in model.graph.initializers:
                w.param(e)
            else:
                w.activation(e)
        model.graph.extend(w.nodes)
        return ir.passes.PassResult(model, modified=bool(self.encodings))


class _Writer:
    def __init__(self, graph: ir.Graph, elem_types: Mapping[str, int]) -> None:
        self.graph = graph
        self.names = Names(graph)
        self.elem_types = elem_types
        self.values: dict[str, ir.Value] = {v.name: v for v in graph.inputs}
        self.values.update(graph.initializers)
        for n in graph:
            self.values.update((o.name, o) for o in n.outputs if o.name)
        self.nodes: list[ir.Node] = []
        self.sources: Mapping[str, ParamSource] = {}

    # ------------------------------------------------------------------ helpers
    def const(self, base: str, arr: np.ndarray, dtype: str | None = None) -> ir.Value:
        name = self.names.new(base)
        if dtype is not None and qtype(dtype).storage != arr.dtype:
            arr = arr.astype(qtype(dtype).storage)
        return add_initializer(self.graph, name, arr)

    def node(self, op: str, inputs: list[ir.Value], output: str, name: str, **attrs: Any) -> ir.Value:
        n = make_node(op, inputs, output, name, **{k: v for k, v in attrs.items() if v is not None})
        self.nodes.append(n)
        return n.outputs[0]

    def dq(self, inputs: list[ir.Value], output: str, name: str, *, axis: int | None, block_size: int = 0,
           restore: int | None = None) -> ir.Value:
        """DequantizeLinear -> ``output``; with ``restore`` (a non-float32 type) through ``output_float`` and a Cast."""
        if restore is None:
            return self.node("DequantizeLinear", inputs, output, name, axis=axis, block_size=block_size or None)
        mid = self.node("DequantizeLinear", inputs, self.names.new(f"{output}_float"), name, axis=axis,
                        block_size=block_size or None)
        return self.node("Cast", [mid], output, self.names.new(f"{output}_Cast"), to=restore)

    def elem_type(self, name: str, v: ir.Value) -> int | None:
        t = self.elem_types.get(name)
        if t is None and v.dtype is not None:
            t = int(v.dtype)
        return t

    # ------------------------------------------------------------------ params
    def param(self, e: Encoding) -> None:
        v = self.values[e.name]
        src = self.sources.get(e.name)
        w = None if src is not None else v.const_value.numpy()
        self.graph.initializers.pop(e.name)
        if v in self.graph.inputs:  # IR < 4: initializers listed as graph inputs
            self.graph.inputs.remove(v)
        t = e.qtype
        if src is not None:
            out = self.sourced(e, tuple(int(d) for d in v.shape), src)
        elif t.kind is Kind.REAL:
            c = self.const(f"{e.name}_{t.name}", w.astype(t.storage))
            out = self.node("Cast", [c], e.name, self.names.new(f"{e.name}_Cast"),
                            to=helper.np_dtype_to_tensor_dtype(w.dtype))
        else:
            et = helper.np_dtype_to_tensor_dtype(w.dtype)
            restore = et if et in CAST_TYPES else None
            w = w.astype(np.float32) if w.dtype != np.float32 else w
            if t.name == "int32":
                out = self.int32_bias(e, w, restore)
            elif e.shifted:
                out = self.shifted(e, w, restore)
            elif e.granularity == "lpbq":
                out = self.lpbq(e, w, restore)
            else:
                out = self.plain(e, w, restore)
        _take_info(out, v)
        v.replace_all_uses_with(out, replace_graph_outputs=True)
        self.values[e.name] = out

    def int32_bias(self, e: Encoding, w: np.ndarray, restore: int | None) -> ir.Value:
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
        qn = self.const(f"{e.name}_quantized", qf.astype(np.int32))
        sn = self.const(f"{e.name}_scale", s)
        zn = self.const(f"{e.name}_zero_point", np.zeros(s.shape, np.int32))
        axis = None if s.ndim == 0 else e.axis
        return self.dq([qn, sn, zn], e.name, self.names.new(f"{e.name}_DequantizeLinear"), axis=axis, restore=restore)

    def shifted(self, e: Encoding, w: np.ndarray, restore: int | None) -> ir.Value:
        # int2 shifted grid (AIMET shift_zero_point): q' = 2q - 2zp on int4 with scale s/2 is the same grid exactly
        t = e.qtype
        s = e.scale.astype(np.float32)
        axis = e.axis if e.granularity != "per_tensor" else None
        half = (s.astype(np.float64) / 2).astype(np.float32)
        if not np.array_equal(half.astype(np.float64) * 2, s.astype(np.float64)):
            raise UnsupportedError(f"{e.name}: scale/2 is not exact in float32; the shifted grid cannot be stored")
        # q = clamp(round(x/s + zp)), x^ = (q - zp)*s = (2q - 2zp)*(s/2), 2q - 2zp odd in [-3, 3]
        sh = s.reshape(-1) if s.ndim else s
        zz = e.zero_point.reshape(-1) if e.zero_point.ndim else e.zero_point
        bshape = [1] * w.ndim
        if axis is not None:
            bshape[axis % w.ndim] = -1
        sb = np.reshape(sh, bshape) if axis is not None else sh
        zb = np.reshape(zz, bshape) if axis is not None else zz
        k = np.clip(np.rint(w.astype(np.float64) / sb.astype(np.float64) + zb), t.qmin, t.qmax)
        qn = self.const(f"{e.name}_quantized", (2 * (k - zb)).astype(np.int8), "int4")
        sn = self.const(f"{e.name}_scale", half)
        return self.dq([qn, sn], e.name, self.names.new(f"{e.name}_DequantizeLinear"), axis=axis, restore=restore)

    def lpbq(self, e: Encoding, w: np.ndarray, restore: int | None) -> ir.Value:
        # LPBQ: DQ(int scales uint8, per-channel float scale, axis=channel) -> effective scale -> blocked DQ
        shape = tuple(w.shape)
        ints_full = expand_block_scale(e.int_scale, shape, e.axis, e.block_size)
        pc = e.scale
        ch = next((i for i in range(pc.ndim) if pc.shape[i] > 1), None)
        if ch is None:
            ch = next(i for i in range(pc.ndim) if i != e.axis % pc.ndim)
        pcf = pc.reshape(-1).astype(np.float32)
        ln, pn = lpbq_names(e.name), param_names(e.name)  # the weight-only writer's names too
        isn = self.const(ln.int_scale, ints_full.astype(np.uint8))
        pcn = self.const(ln.float_scale, pcf)
        sname = self.names.new(ln.scale)
        scale = self.dq([isn, pcn], sname, self.names.new(ln.node), axis=ch if pcf.size > 1 else None)
        qn = self.const(pn.quantized, e.quantize(w))
        zn = self.const(pn.zero_point, np.zeros(ints_full.shape, e.qtype.storage))
        return self.dq([qn, scale, zn], e.name, self.names.new(pn.node), axis=e.axis, block_size=e.block_size,
                       restore=restore)

    def plain(self, e: Encoding, w: np.ndarray, restore: int | None) -> ir.Value:
        s, z, axis = onnx_params(e, tuple(w.shape))
        st, pn = storage_type(e), param_names(e.name)
        ins = [self.const(pn.quantized, e.quantize(w), st), self.const(pn.scale, s)]
        if z is not None:
            ins.append(self.const(pn.zero_point, z, st))
        return self.dq(ins, e.name, self.names.new(pn.node), axis=axis, block_size=e.block_size, restore=restore)

    def sourced(self, e: Encoding, shape: tuple[int, ...], src: ParamSource) -> ir.Value:
        """The DequantizeLinear of a param whose integers ``src`` computes when the model is written."""
        st = storage_type(e)
        pn = param_names(e.name)
        qn = self.lazy_const(pn.quantized, lambda: src.integers().astype(STORAGE[st]), st, shape)
        sd = helper.tensor_dtype_to_np_dtype(src.scale_type)
        if e.granularity == "lpbq":  # DQ(int scales uint8, per-channel float scale, axis=channel) -> scale
            ln = lpbq_names(e.name)
            ints = expand_block_scale(e.int_scale, shape, e.axis, e.block_size)
            pcf = e.scale.reshape(-1).astype(np.float32)
            ch = next((i for i in range(e.scale.ndim) if e.scale.shape[i] > 1), 1 - e.axis % 2)
            isn, pcn = self.const(ln.int_scale, ints.astype(np.uint8)), self.const(ln.float_scale, pcf)
            scale = self.dq([isn, pcn], self.names.new(ln.scale), self.names.new(ln.node), axis=ch)
            ins = [qn, scale]
            z = np.full(ints.shape, 0 if e.qtype.signed else 2 ** (e.qtype.bits - 1), np.int64)
        else:
            s, z, _ = onnx_params(e, shape)
            ins = [qn, self.const(pn.scale, s.astype(sd))]
        if src.zero_point:
            ins.append(self.const(pn.zero_point, np.asarray(z).astype(STORAGE[st])))
        axis = None if e.granularity == "per_tensor" else e.axis
        return self.node("DequantizeLinear", ins, e.name, self.names.new(pn.node), axis=axis,
                         block_size=e.block_size or None)

    def lazy_const(self, base: str, fn: Callable[[], np.ndarray], dtype: str, shape: tuple[int, ...]) -> ir.Value:
        """An initializer computed when the model is serialized (and dropped after)."""
        name = self.names.new(base)
        t = ir.LazyTensor(lambda: ir.Tensor(fn()), dtype=ir.DataType.from_numpy(STORAGE[dtype]), shape=ir.Shape(shape),
                          name=name)
        v = ir.Value(name=name, const_value=t, type=ir.TensorType(t.dtype), shape=ir.Shape(shape))
        self.graph.register_initializer(v)
        return v

    # ------------------------------------------------------------------ activations
    def activation(self, e: Encoding) -> None:
        name, t = e.name, e.qtype
        v = self.values[name]
        et = self.elem_type(name, v)
        restore = et if et in CAST_TYPES else None
        is_output = v.is_graph_output()
        if is_output:
            if v.producer() is None:
                raise GraphError(f"{name}: a graph output that is also a graph input cannot carry Q/DQ")
            v.name = self.names.new(f"{name}_prequant")  # its consumers keep reading the float value
            out_name = name
        else:
            out_name = None
        if t.kind is Kind.REAL:
            mid_name = self.names.new(f"{name}_{t.name}")
            out_name = out_name or self.names.new(f"{name}_cast")
            first = self.node("Cast", [v], mid_name, self.names.new(f"{name}_Cast"), to=t.onnx_type)
            out = self.node("Cast", [first], out_name, self.names.new(f"{name}_Cast_back"),
                            to=restore or TensorProto.FLOAT)
        else:
            first, out = self.qdq(e, v, out_name, restore)
        if is_output:
            _take_info(out, v)
            outs = self.graph.outputs
            for i, o in enumerate(outs):
                if o is v:
                    outs[i] = out
            self.values[name] = out
        else:
            head = first.producer()
            for use in list(v.uses()):
                if use.node is not head:
                    use.node.replace_input_with(use.idx, out)

    def qdq(self, e: Encoding, v: ir.Value, out_name: str | None, restore: int | None) -> tuple[ir.Value, ir.Value]:
        """Q -> DQ of ``v`` (between Casts for ``restore``): the first new node's output and the last one's."""
        name, t = e.name, e.qtype
        shape = () if not e.block_size else tuple(int(d) for d in v.shape)
        s, z, axis = onnx_params(e, shape)
        qname, dqname = self.names.new(f"{name}_QuantizeLinear"), self.names.new(f"{name}_DequantizeLinear")
        sn = self.const(f"{name}_scale", s)
        qo = self.names.new(f"{name}_quantized")
        out_name = out_name or self.names.new(f"{name}_dequantized")
        if z is None:
            # float8: no zero point, the type in output_dtype (opset 21). A float8 zero-point input makes ONNX
            # Runtime's Clip/Relu->Q fusion fail, or drop a Relu whose negative values float8 can represent.
            ins, out_dtype = [sn], t.onnx_type
        else:
            ins, out_dtype = [sn, self.const(f"{name}_zero_point", z, t.name)], None
        bs = e.block_size or None
        x = v
        if restore is not None:
            x = self.node("Cast", [v], self.names.new(f"{name}_float"), self.names.new(f"{name}_Cast"),
                          to=TensorProto.FLOAT)
        q = self.node("QuantizeLinear", [x, *ins], qo, qname, axis=axis, block_size=bs, output_dtype=out_dtype)
        first = x if restore is not None else q
        if restore is None:
            return first, self.node("DequantizeLinear", [q, *ins], out_name, dqname, axis=axis, block_size=bs)
        dq = self.node("DequantizeLinear", [q, *ins], self.names.new(f"{name}_dequantized_float"), dqname, axis=axis,
                       block_size=bs)
        return first, self.node("Cast", [dq], out_name, self.names.new(f"{name}_Cast_back"), to=restore)


def _take_info(new: ir.Value, old: ir.Value) -> None:
    """``new`` takes the name's value info: type, shape, doc string and metadata (exporters put them there)."""
    new.type, new.shape, new.doc_string = old.type, old.shape, old.doc_string
    new.metadata_props.update(old.metadata_props)


def onnx_params(e: Encoding, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None, int | None]:
    """float32 scale, zero point (storage dtype) and axis attribute, in ONNX shapes."""
    p = e.onnx_params(shape)
    axis = None if e.granularity == "per_tensor" else p["axis"]
    return p["scale"], p["zero_point"], axis
