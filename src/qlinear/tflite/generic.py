"""TFLite builtins that run on integer tensors and on float ones alike: data movement (TRANSPOSE, STRIDED_SLICE,
SPLIT_V, GATHER, RESIZE_*), and the float builtins of *float islands* (``DEQUANTIZE -> float builtin -> QUANTIZE``)
for operators outside the integer set (:data:`ISLANDS`). Which op type uses which emitter is the operator registry's
(:mod:`qlinear.graph.ops`: ``OpSpec.tflite_move``, ``OpSpec.tflite_island``, ``OpSpec.tflite_float_builtin``).

Every emitter writes one ONNX node with the tensors a :class:`Ctx` makes: integer tensors with the node's quantization
parameters (data movement between tensors of equal parameters: the integers are moved, not recomputed) or float32
tensors (a float island: the values are the ONNX definition's in float32, which is what ``run_integer`` evaluates on
the dequantized values). Layout: every 4-D tensor is stored NHWC (:mod:`qlinear.tflite.export`); an emitter maps
its axes onto the stored order, or goes through ONNX's order with a TRANSPOSE where that is simpler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from qlinear.errors import UnsupportedError
from qlinear.graph import ops
from qlinear.graph.model import attr
from qlinear.tflite import schema as S

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
#: float builtins whose first version is not 1 (LiteRT registers BROADCAST_TO from version 2)
FLOAT_VERSIONS = {"BROADCAST_TO": 2}
#: ONNX axis of a 4-D tensor -> its axis in the stored NHWC order
NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}


@dataclass
class Slot:
    """A TFLite tensor being written: its index (-1: a constant not written yet), ONNX shape, whether it is stored
    NHWC, and the value of a constant."""

    index: int
    onnx_shape: tuple[int, ...]
    nhwc: bool
    const: np.ndarray | None = None


class Ctx:
    """What an emitter writes with: ``new`` tensors of the node's kind (integer with ``quant``, or of the ONNX dtype),
    output ``k`` (``out``), int32 parameter tensors (``param``), operators (``op``)."""

    def __init__(self, w: Any, node: onnx.NodeProto, out: Callable[[int, bool], Slot], dtype: str,
                 quant: Any = None, version_of: Any = None) -> None:
        self.w, self.node, self._out, self.dtype, self.quant, self.version_of = w, node, out, dtype, quant, version_of

    @property
    def name(self) -> str:
        return self.node.name or self.node.output[0]

    def shape(self, k: int = 0) -> tuple[int, ...]:
        s = self.w.shapes.get(self.node.output[k])
        if s is None:
            raise UnsupportedError(f"node {self.name} ({self.node.op_type}): the shape of output {k} is unknown; fix "
                                   "the input shapes (--input-shape)")
        return s

    def new(self, tag: str, onnx_shape: tuple[int, ...], nhwc: bool) -> Slot:
        shape = [onnx_shape[i] for i in TO_NHWC] if nhwc else list(onnx_shape)
        return Slot(self.w.tensor(f"{self.name}_{tag}", shape, self.dtype, self.quant), tuple(onnx_shape), nhwc)

    def out(self, k: int, nhwc: bool) -> Slot:
        return self._out(k, nhwc and len(self.shape(k)) == 4)

    def param(self, tag: str, values: Any, dtype: str = "int32") -> int:
        a = np.asarray(values, {"int32": np.int32, "float32": np.float32, "int64": np.int64}[dtype])
        return self.w.tensor(f"{self.name}_{tag}", list(a.shape), dtype, data=a)

    def op(self, name: str, ins: list[int], outs: list[int], options: str | None = None, **values: Any) -> None:
        version = self.version_of(name) if self.version_of is not None else FLOAT_VERSIONS.get(name, 1)
        self.w.md.operators.append(self.w.opmaker(name, version, ins, outs, options, values))

    def index(self, s: Slot, like: Slot | None = None) -> int:
        """The tensor index of ``s`` (a constant is written now, in the layout of ``like``: NHWC broadcast, and of
        ``like``'s element type when it is a tensor)."""
        if s.index >= 0:
            return s.index
        a = np.asarray(s.const)
        if like is not None and like.nhwc and a.ndim <= 4 and a.size > 1:
            a = a.reshape((1,) * (4 - a.ndim) + a.shape).transpose(TO_NHWC)
        kind = self.w.md.tensors[like.index].type if like is not None and like.index >= 0 else None
        if kind in ("int32", "int64"):
            a = a.astype(np.int32 if kind == "int32" else np.int64)
        elif a.dtype.kind == "f" or self.dtype == "float32" or kind == "float32":
            a = a.astype(np.float32)
        elif a.dtype == np.int64:
            a = a.astype(np.int32)
        s.index = self.w.tensor(f"{self.name}_const{len(self.w.md.tensors)}", list(a.shape),
                                {np.dtype(np.float32): "float32", np.dtype(np.int64): "int64"}.get(a.dtype, "int32"),
                                data=np.ascontiguousarray(a))
        return s.index

    def onnx_order(self, x: Slot) -> Slot:
        """``x`` in ONNX's axis order (a TRANSPOSE from NHWC when it is stored so)."""
        if not x.nhwc:
            return x
        t = self.new("nchw", x.onnx_shape, False)
        self.op("TRANSPOSE", [x.index, self.param("perm_nchw", TO_NCHW)], [t.index], "TransposeOptions")
        return t

    def store(self, k: int, write: Callable[[Slot], None]) -> Slot:
        """Output ``k``: ``write`` fills a tensor in ONNX order, moved to NHWC when the output is 4-D."""
        shape = self.shape(k)
        if len(shape) != 4:
            o = self.out(k, False)
            write(o)
            return o
        t = self.new(f"out{k}_nchw", shape, False)
        write(t)
        o = self.out(k, True)
        self.op("TRANSPOSE", [t.index, self.param(f"perm_nhwc{k}", TO_NHWC)], [o.index], "TransposeOptions")
        return o


def _const(ctx: Ctx, i: int) -> np.ndarray | None:
    n = ctx.node
    if len(n.input) <= i or not n.input[i]:
        return None
    v = ctx.w.qg.consts.get(n.input[i])
    if v is None:
        raise UnsupportedError(f"node {ctx.name} ({n.op_type}): input {i} ({n.input[i]!r}) must be a constant for "
                               "the TFLite export; fix the input shapes (--input-shape) so that it folds")
    return np.asarray(v)


# ---------------------------------------------------------------------------------------------- data movement
def transpose(ctx: Ctx, ins: list[Slot | None]) -> None:
    x = ins[0]
    r = len(x.onnx_shape)
    p = np.array(attr(ctx.node, "perm", list(range(r))[::-1]))
    a_inv = np.argsort(TO_NHWC) if x.nhwc else np.arange(r)
    out_shape = ctx.shape()
    b = np.array(TO_NHWC) if len(out_shape) == 4 else np.arange(r)
    q = a_inv[p][b]
    o = ctx.out(0, True)
    ctx.op("TRANSPOSE", [x.index, ctx.param("perm", q)], [o.index], "TransposeOptions")


def _stored_axis(x: Slot, a: int) -> int:
    a %= len(x.onnx_shape)
    return NHWC_AXIS[a] if x.nhwc else a


def slice_(ctx: Ctx, ins: list[Slot | None]) -> None:
    x = ins[0]
    r = len(x.onnx_shape)
    starts, ends = _const(ctx, 1), _const(ctx, 2)
    if starts is None:  # opset < 10: attributes
        starts, ends = np.array(attr(ctx.node, "starts")), np.array(attr(ctx.node, "ends"))
        axes = np.array(attr(ctx.node, "axes", list(range(len(starts)))))
        steps = np.ones(len(starts), np.int64)
    else:
        axes = _const(ctx, 3)
        axes = np.arange(len(starts)) if axes is None else axes
        steps = _const(ctx, 4)
        steps = np.ones(len(starts), np.int64) if steps is None else steps
    begin, end, stride, whole, to_start = [0] * r, [0] * r, [1] * r, set(range(r)), set()
    for s, e, a, st in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist()):
        a %= r
        begin[a], end[a], stride[a] = slice(int(s), int(e), int(st)).indices(x.onnx_shape[a])
        whole.discard(a)
        if stride[a] < 0 and end[a] < 0:  # runs to the start: TFLite reads end -1 as the last element
            to_start.add(a)
    order = TO_NHWC if x.nhwc else tuple(range(r))
    begin, end, stride = ([v[i] for i in order] for v in (begin, end, stride))
    # axes not sliced are taken whole by the masks (the batch stays resizable)
    begin_mask = sum(1 << _stored_axis(x, a) for a in whole)
    end_mask = sum(1 << _stored_axis(x, a) for a in whole | to_start)
    o = ctx.out(0, True)
    ctx.op("STRIDED_SLICE", [x.index, ctx.param("begin", begin), ctx.param("end", end), ctx.param("strides", stride)],
           [o.index], "StridedSliceOptions", begin_mask=begin_mask, end_mask=end_mask)


def split(ctx: Ctx, ins: list[Slot | None]) -> None:
    x = ins[0]
    n = ctx.node
    axis = attr(n, "axis", 0) % len(x.onnx_shape)
    sizes = _const(ctx, 1)
    if sizes is None:
        sizes = attr(n, "split")
    if sizes is None:
        sizes = [ctx.shape(k)[axis] for k in range(len(n.output))]
    outs = [ctx.out(k, True).index for k in range(len(n.output))]
    ctx.op("SPLIT_V", [x.index, ctx.param("sizes", sizes), ctx.param("axis", _stored_axis(x, axis))], outs,
           "SplitVOptions", num_splits=len(outs))


def gather(ctx: Ctx, ins: list[Slot | None]) -> None:
    x, idx = ctx.onnx_order(ins[0]), ins[1]
    axis = attr(ctx.node, "axis", 0) % len(x.onnx_shape)
    if idx.const is not None:
        c = np.asarray(idx.const).astype(np.int64)
        c = np.where(c < 0, c + x.onnx_shape[axis], c)
        ii = ctx.param("indices", c.astype(np.int32))
    else:
        ii = idx.index
    table = ctx.index(x)   # a constant table (a float island's embedding) is written here
    ctx.store(0, lambda o: ctx.op("GATHER", [table, ii], [o.index], "GatherOptions", axis=axis))


def resize(ctx: Ctx, ins: list[Slot | None]) -> None:
    x = ins[0]
    n = ctx.node
    shape = ctx.shape()
    if len(shape) != 4 or not x.nhwc or shape[:2] != x.onnx_shape[:2]:
        raise UnsupportedError(f"node {ctx.name} (Resize): only the H, W of a 4-D tensor resize in TFLite")
    mode = _s(attr(n, "mode", b"nearest"))
    ct = _s(attr(n, "coordinate_transformation_mode", b"half_pixel"))
    nearest = _s(attr(n, "nearest_mode", b"round_prefer_floor"))
    ok = {("nearest", "asymmetric", "floor"): (False, False), ("nearest", "align_corners", "round_prefer_ceil"):
          (True, False), ("linear", "align_corners", ""): (True, False), ("linear", "half_pixel", ""): (False, True),
          ("linear", "pytorch_half_pixel", ""): (False, True), ("linear", "asymmetric", ""): (False, False)}
    key = (mode, ct, nearest if mode == "nearest" else "")
    if key not in ok or (ct == "pytorch_half_pixel" and min(shape[2:]) == 1):
        raise UnsupportedError(f"node {ctx.name} (Resize): mode {mode}, coordinate_transformation_mode {ct}"
                               + (f", nearest_mode {nearest}" if mode == "nearest" else "")
                               + " has no TFLite RESIZE_BILINEAR/RESIZE_NEAREST_NEIGHBOR form")
    align, half = ok[key]
    o = ctx.out(0, True)
    size = ctx.param("size", [shape[2], shape[3]])
    if mode == "nearest":
        ctx.op("RESIZE_NEAREST_NEIGHBOR", [x.index, size], [o.index], "ResizeNearestNeighborOptions",
               align_corners=align, half_pixel_centers=half)
    else:
        ctx.op("RESIZE_BILINEAR", [x.index, size], [o.index], "ResizeBilinearOptions", align_corners=align,
               half_pixel_centers=half)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def reshape_target(shape: tuple[int, ...], in_shape: tuple[int, ...], const: Any, allowzero: int = 0) -> list[int]:
    """The RESHAPE target (ONNX order) of a Reshape whose output has the static ``shape`` (the batch fixed), that
    leaves the batch free so that LiteRT can resize the input: the node's own shape constant where it infers one
    dimension (-1, no 0): the batch flows into that dimension as in ONNX (``[-1, 150]`` after ``[N, 12, 150]`` is
    ``[12 N, 150]``, not ``[12, 150]``); else ``shape`` with its leading dimension free when it is the input's."""
    c = None if const is None else np.asarray(const).reshape(-1)
    if c is not None and len(c) == len(shape) and int((c == -1).sum()) == 1 and (allowzero or not (c == 0).any()):
        return [int(v) for v in c]
    target = list(shape)
    if target and in_shape and target[0] == in_shape[0]:
        target[0] = -1
    return target


def reshape(ctx: Ctx, ins: list[Slot | None]) -> None:
    x = ctx.onnx_order(ins[0])
    const = ctx.w.qg.consts.get(ctx.node.input[1]) if ctx.node.op_type == "Reshape" and len(ctx.node.input) > 1 \
        else None
    shape = reshape_target(ctx.shape(), x.onnx_shape, const, int(attr(ctx.node, "allowzero", 0)))
    ctx.store(0, lambda o: ctx.op("RESHAPE", [x.index, ctx.param("shape", shape)], [o.index], "ReshapeOptions",
                                  new_shape=shape))


def concat(ctx: Ctx, ins: list[Slot | None]) -> None:
    xs = [s for s in ins if s is not None]
    r = len(ctx.shape())
    axis = attr(ctx.node, "axis") % r
    nhwc = r == 4
    idx = [ctx.index(s) if s.const is None or not nhwc else ctx.index(s, Slot(-1, (), True)) for s in xs]
    if any(s.const is None and s.nhwc != nhwc for s in xs):
        raise UnsupportedError(f"node {ctx.name} (Concat): inputs in different layouts")
    o = ctx.out(0, True)
    ctx.op("CONCATENATION", idx, [o.index], "ConcatenationOptions", axis=NHWC_AXIS[axis] if nhwc else axis)


#: emitter name (the operator registry's ``OpSpec.tflite_move``) -> the emitter moving integers (or floats)
MOVEMENT: dict[str, Callable[[Ctx, list[Slot | None]], None]] = {
    "transpose": transpose, "slice": slice_, "split": split, "gather": gather, "resize": resize,
}


# ---------------------------------------------------------------------------------------------- float islands
#: the options table of a float builtin (None: it has none)
_OPTIONS = {"EXP": "ExpOptions", "NEG": "NegOptions", "ABS": "AbsOptions", "HARD_SWISH": "HardSwishOptions",
            "ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions", "POW": "PowOptions",
            "MAXIMUM": "MaximumMinimumOptions", "MINIMUM": "MaximumMinimumOptions", "EQUAL": "EqualOptions",
            "LESS": "LessOptions", "GREATER": "GreaterOptions", "LOGICAL_NOT": "LogicalNotOptions"}
_FUSED = ("AddOptions", "SubOptions", "MulOptions", "DivOptions")


def _float_builtin(ctx: Ctx) -> str:
    return ops.spec(ctx.node.op_type).tflite_float_builtin


def _elementwise_layout(ctx: Ctx, ins: list[Slot | None]) -> bool:
    """Whether the output is stored NHWC; refuses a non-constant of another rank next to a NHWC tensor."""
    nhwc = len(ctx.shape()) == 4 and any(s is not None and s.nhwc for s in ins)
    for s in ins:
        if s is not None and s.const is None and nhwc and not s.nhwc and int(np.prod(s.onnx_shape)) != 1:
            raise UnsupportedError(f"node {ctx.name} ({ctx.node.op_type}): broadcasting a {len(s.onnx_shape)}-D "
                                   "tensor against a 4-D one is not exported")
    return nhwc


def unary(ctx: Ctx, ins: list[Slot | None]) -> None:
    x = ins[0]
    o = ctx.out(0, x.nhwc)
    name = _float_builtin(ctx)
    ctx.op(name, [ctx.index(x)], [o.index], _OPTIONS.get(name))


def binary(ctx: Ctx, ins: list[Slot | None]) -> None:
    a, b = ins[0], ins[1]
    nhwc = _elementwise_layout(ctx, ins)
    tensor = a if a.const is None else b
    like = Slot(tensor.index, (), nhwc)
    name = _float_builtin(ctx)
    opts = _OPTIONS.get(name)
    o = ctx.out(0, nhwc)
    values = {"fused_activation_function": 0} if opts in _FUSED else {}
    ctx.op(name, [ctx.index(a, like), ctx.index(b, like)], [o.index], opts, **values)


def _scalar_op(ctx: Ctx, name: str, opts: str | None, x: int, c: float, out: int, **values: Any) -> None:
    ctx.op(name, [x, ctx.param(f"{name.lower()}_c{len(ctx.w.md.tensors)}", np.float32(c), "float32")], [out], opts,
           **values)


#: Abramowitz & Stegun 7.1.26: erf(x) = 1 - t (a1 + t (a2 + ... + t a5)) exp(-x^2), t = 1 / (1 + p x), x >= 0;
#: absolute error at most 1.5e-7
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(ctx: Ctx, ins: list[Slot | None]) -> None:
    """``erf(x)`` in float builtins (TFLite has no ERF; GELU exported by torch reads one): ``sign(x) * (1 - poly(t) *
    exp(-x^2))``, ``t = 1 / (1 + p |x|)`` (:data:`ERF_A`; within 1.5e-7 of erf, far below an 8- or 16-bit step)."""
    x = ins[0]
    k = [0]

    def new() -> Slot:
        k[0] += 1
        return ctx.new(f"erf{k[0]}", x.onnx_shape, x.nhwc)

    def op(name: str, a: int, b: int | float) -> int:
        o = new()
        if isinstance(b, float):
            _scalar_op(ctx, name, _OPTIONS[name], a, b, o.index, **({"fused_activation_function": 0}
                                                                    if _OPTIONS[name] in _FUSED else {}))
        else:
            ctx.op(name, [a, b], [o.index], _OPTIONS[name], fused_activation_function=0)
        return o.index

    xi = ctx.index(x)
    ax = new()
    ctx.op("ABS", [xi], [ax.index], "AbsOptions")
    den = op("ADD", op("MUL", ax.index, ERF_P), 1.0)
    t = new()
    ctx.op("DIV", [ctx.param(f"erf_one{len(ctx.w.md.tensors)}", np.float32(1), "float32"), den], [t.index],
           "DivOptions", fused_activation_function=0)
    poly = op("MUL", t.index, ERF_A[4])
    for a in reversed(ERF_A[:4]):
        poly = op("MUL", op("ADD", poly, a), t.index)
    e = new()
    ctx.op("EXP", [op("MUL", op("MUL", xi, xi), -1.0)], [e.index], "ExpOptions")
    body = op("ADD", op("MUL", op("MUL", poly, e.index), -1.0), 1.0)
    s = new()
    ctx.op("SIGN", [xi], [s.index])
    ctx.op("MUL", [s.index, body], [ctx.out(0, x.nhwc).index], "MulOptions", fused_activation_function=0)


def hard_sigmoid(ctx: Ctx, ins: list[Slot | None]) -> None:
    """``max(0, min(1, x * alpha + beta))`` in float32, as the ONNX definition: MUL, ADD, MINIMUM, MAXIMUM."""
    x = ins[0]
    alpha, beta = attr(ctx.node, "alpha", 0.2), attr(ctx.node, "beta", 0.5)
    t1, t2, t3 = (ctx.new(f"t{i}", x.onnx_shape, x.nhwc) for i in range(3))
    o = ctx.out(0, x.nhwc)
    _scalar_op(ctx, "MUL", "MulOptions", x.index, alpha, t1.index, fused_activation_function=0)
    _scalar_op(ctx, "ADD", "AddOptions", t1.index, beta, t2.index, fused_activation_function=0)
    _scalar_op(ctx, "MINIMUM", "MaximumMinimumOptions", t2.index, 1.0, t3.index)
    _scalar_op(ctx, "MAXIMUM", "MaximumMinimumOptions", t3.index, 0.0, o.index)


def clip(ctx: Ctx, ins: list[Slot | None]) -> None:
    """MAXIMUM then MINIMUM with the bounds: constants (inputs or attributes), or tensors computed in the graph
    (openwakeword's ``Clip(db, max(db) - 80)``, broadcast)."""
    x = ins[0]
    o = ctx.out(0, x.nhwc)
    bounds = []
    for k, (name, builtin) in enumerate((("min", "MAXIMUM"), ("max", "MINIMUM")), start=1):
        b = ins[k] if len(ins) > k else None
        if b is not None and b.const is None:
            bounds.append((builtin, b))
            continue
        v = _const(ctx, k) if len(ctx.node.input) > k and ctx.node.input[k] else None
        v = attr(ctx.node, name, None) if v is None else float(v)
        if v is not None:
            bounds.append((builtin, float(v)))
    cur = x.index
    if not bounds:
        ctx.op("RESHAPE", [cur], [o.index], "ReshapeOptions", new_shape=list(ctx.w.md.tensors[cur].shape))
        return
    for j, (builtin, b) in enumerate(bounds):
        dst = o.index if j == len(bounds) - 1 else ctx.new(f"clip{j}", x.onnx_shape, x.nhwc).index
        if isinstance(b, Slot):
            ctx.op(builtin, [cur, ctx.index(b, Slot(cur, (), x.nhwc))], [dst], "MaximumMinimumOptions")
        else:
            _scalar_op(ctx, builtin, "MaximumMinimumOptions", cur, b, dst)
        cur = dst


def reciprocal(ctx: Ctx, ins: list[Slot | None]) -> None:
    x = ins[0]
    o = ctx.out(0, x.nhwc)
    one = ctx.param("one", np.float32(1.0), "float32")
    ctx.op("DIV", [one, x.index], [o.index], "DivOptions", fused_activation_function=0)


def pad_spec(node: onnx.NodeProto, const: Callable[[int], Any], r: int, nhwc: bool,
             name: str) -> tuple[str, np.ndarray]:
    """``(mode, paddings)`` of an ONNX Pad for TFLite: ``constant`` (zero: PAD) or ``reflect`` (MIRROR_PAD REFLECT,
    which leaves the edge out as ONNX does), the ``[rank, 2]`` int32 paddings in the stored layout; ``const(i)``:
    the constant value of input ``i`` (None if absent or not constant). Anything else is an UnsupportedError."""
    mode = _s(attr(node, "mode", b"constant"))
    pads = const(1) if len(node.input) > 1 and node.input[1] else None
    pads = np.asarray(pads if pads is not None else attr(node, "pads"), np.int64).reshape(-1)
    cval = const(2) if len(node.input) > 2 and node.input[2] else None
    if mode not in ("constant", "reflect") or (len(node.input) > 3 and node.input[3]) or \
            (cval is not None and float(np.asarray(cval).reshape(-1)[0]) != 0.0):
        raise UnsupportedError(f"node {name} (Pad): only constant zero padding (PAD) and reflect padding "
                               f"(MIRROR_PAD) over every axis export, not {mode!r}")
    pr = np.stack([pads[:r], pads[r:]], 1)
    return mode, (pr[[0, 2, 3, 1]] if nhwc else pr).astype(np.int32)


def pad(ctx: Ctx, ins: list[Slot | None]) -> None:
    """A float Pad (:func:`pad_spec`)."""
    x = ins[0]
    mode, pr = pad_spec(ctx.node, lambda i: _const(ctx, i), len(x.onnx_shape), x.nhwc, ctx.name)
    o = ctx.out(0, x.nhwc)
    pi = ctx.param("paddings", pr)
    if mode == "reflect":
        ctx.op("MIRROR_PAD", [ctx.index(x), pi], [o.index], "MirrorPadOptions", mode=0)
    else:
        ctx.op("PAD", [ctx.index(x), pi], [o.index], "PadOptions")


def layer_norm(ctx: Ctx, ins: list[Slot | None]) -> None:
    """LayerNormalization (opset 17) in float builtins, in the ONNX reference's order of operations: ``d = x - sum(x)
    / n``, ``y = d * (1 / sqrt(sum(d * d) / n + epsilon)) * scale + bias`` over the axes from ``axis`` on (SUM,
    DIV, SUB, MUL, ADD, SQRT)."""
    n = ctx.node
    if len(n.output) > 1 and any(n.output[1:]):
        raise UnsupportedError(f"node {ctx.name} (LayerNormalization): the mean / inverse deviation outputs have no "
                               "TFLite form")
    x = ctx.onnx_order(ins[0])
    shape = tuple(x.onnx_shape)
    r = len(shape)
    axis = attr(n, "axis", -1) % r
    red = shape[:axis] + (1,) * (r - axis)
    count = ctx.param("count", np.float32(np.prod(shape[axis:])), "float32")
    axes = ctx.param("axes", list(range(axis, r)))
    k = [0]

    def op(name: str, ins_: list[int], like: tuple[int, ...], opts: str | None = None, **values: Any) -> int:
        k[0] += 1
        o = ctx.new(f"ln{k[0]}", like, False)
        ctx.op(name, ins_, [o.index], opts, **values)
        return o.index

    def arith(name: str, a: int, b: int, like: tuple[int, ...]) -> int:
        return op(name, [a, b], like, _OPTIONS[name], fused_activation_function=0)

    mean = arith("DIV", op("SUM", [x.index, axes], red, "ReducerOptions", keep_dims=True), count, red)
    d = arith("SUB", x.index, mean, shape)
    var = arith("DIV", op("SUM", [arith("MUL", d, d, shape), axes], red, "ReducerOptions", keep_dims=True), count, red)
    eps = ctx.param("epsilon", np.float32(attr(n, "epsilon", 1e-5)), "float32")
    sd = op("SQRT", [arith("ADD", var, eps, red)], red)
    y = arith("MUL", d, arith("DIV", ctx.param("one", np.float32(1.0), "float32"), sd, red), shape)
    scale, bias = ins[1], ins[2] if len(ins) > 2 else None
    if bias is None:
        ctx.store(0, lambda o: ctx.op("MUL", [y, ctx.index(scale)], [o.index], "MulOptions",
                                      fused_activation_function=0))
        return
    ys = arith("MUL", y, ctx.index(scale), shape)
    ctx.store(0, lambda o: ctx.op("ADD", [ys, ctx.index(bias)], [o.index], "AddOptions", fused_activation_function=0))


def batch_norm(ctx: Ctx, ins: list[Slot | None]) -> None:
    """Inference BatchNormalization as the ONNX definition computes it in float32: ``scale * (x - mean) /
    sqrt(var + epsilon) + bias`` (SUB, MUL, DIV, ADD on per-channel constants)."""
    x = ins[0]
    if len(ctx.node.output) > 1 and any(ctx.node.output[1:]):
        raise UnsupportedError(f"node {ctx.name} (BatchNormalization): training mode has no TFLite form")
    scale, bias, mean, var = (_const(ctx, i) for i in (1, 2, 3, 4))
    r = len(x.onnx_shape)
    eps = attr(ctx.node, "epsilon", 1e-5)

    def chan(a: np.ndarray) -> Slot:
        a = np.asarray(a, np.float32).reshape((1, -1) + (1,) * (r - 2))
        return Slot(-1, a.shape, False, a)

    sq = np.sqrt(np.asarray(var, np.float32) + np.float32(eps)).astype(np.float32)
    t = [ctx.new(f"bn{i}", x.onnx_shape, x.nhwc) for i in range(3)]
    o = ctx.out(0, x.nhwc)
    steps = [("SUB", x, chan(mean), t[0]), ("MUL", chan(scale), t[0], t[1]), ("DIV", t[1], chan(sq), t[2]),
             ("ADD", t[2], chan(bias), o)]
    for name, a, b, y in steps:
        ctx.op(name, [ctx.index(a, x), ctx.index(b, x)], [y.index], _OPTIONS[name], fused_activation_function=0)


def broadcast(ctx: Ctx, ins: list[Slot | None]) -> None:
    """Expand -> BROADCAST_TO (in ONNX's axis order)."""
    x = ctx.onnx_order(ins[0])
    shape = list(ctx.shape())
    ctx.store(0, lambda o: ctx.op("BROADCAST_TO", [ctx.index(x), ctx.param("shape", shape)], [o.index],
                                  "BroadcastToOptions"))


def compare(ctx: Ctx, ins: list[Slot | None]) -> None:
    """Equal / Less / Greater -> EQUAL / LESS / GREATER (a bool tensor)."""
    binary(ctx, ins)


def prelu(ctx: Ctx, ins: list[Slot | None]) -> None:
    """PRelu(x, slope) -> PRELU, the slope (a constant, ``[C, 1, 1]`` for NCHW) written in the tensor's layout."""
    x, a = ins[0], ins[1]
    nhwc = _elementwise_layout(ctx, ins)
    like = Slot(x.index if x.const is None else a.index, (), nhwc)
    o = ctx.out(0, nhwc)
    ctx.op("PRELU", [ctx.index(x, like), ctx.index(a, like)], [o.index])


def where(ctx: Ctx, ins: list[Slot | None]) -> None:
    """Where(cond, x, y) -> SELECT_V2 (broadcasting as ONNX does; constants written in the tensors' layout)."""
    nhwc = _elementwise_layout(ctx, ins)
    tensor = next((s for s in ins[1:] if s.const is None), ins[0])
    like = Slot(tensor.index, (), nhwc)
    o = ctx.out(0, nhwc)
    c = ins[0]
    if c.const is not None:   # a constant condition: a bool tensor in the output's layout
        a = np.asarray(c.const, bool)
        if nhwc and a.ndim <= 4 and a.size > 1:
            a = a.reshape((1,) * (4 - a.ndim) + a.shape).transpose(TO_NHWC)
        c = Slot(ctx.w.tensor(f"{ctx.name}_cond", list(a.shape), "bool", data=np.ascontiguousarray(a)), (), nhwc)
    ctx.op("SELECT_V2", [c.index] + [ctx.index(s, like) for s in ins[1:]], [o.index], "SelectV2Options")


def cast(ctx: Ctx, ins: list[Slot | None]) -> None:
    x = ins[0]
    o = ctx.out(0, x.nhwc)
    src = ctx.w.md.tensors[ctx.index(x)].type
    dst = ctx.w.md.tensors[o.index].type
    ctx.op("CAST", [ctx.index(x)], [o.index], "CastOptions", in_data_type=S.TENSOR_TYPE[src],
           out_data_type=S.TENSOR_TYPE[dst])


def reduce(ctx: Ctx, ins: list[Slot | None]) -> None:
    """ReduceSum / ReduceMax / GlobalMaxPool -> SUM / REDUCE_MAX over constant axes (attribute or input 1)."""
    n = ctx.node
    x = ins[0]
    r = len(x.onnx_shape)
    if n.op_type.startswith("Global"):
        axes, keep = list(range(2, r)), True
    else:
        axes = attr(n, "axes")
        if axes is None:
            c = _const(ctx, 1)
            axes = list(range(r)) if c is None or (c.size == 0 and not attr(n, "noop_with_empty_axes", 0)) \
                else [int(a) for a in c.reshape(-1)]
        keep = bool(attr(n, "keepdims", 1))
    if not axes:  # noop_with_empty_axes
        return reshape(ctx, ins)
    axes = sorted(a % r for a in axes)
    if x.nhwc and not keep:
        x = ctx.onnx_order(x)
    stored = [_stored_axis(x, a) for a in axes]
    o = ctx.out(0, x.nhwc and keep)
    ctx.op(_float_builtin(ctx), [x.index, ctx.param("axes", stored)], [o.index], "ReducerOptions", keep_dims=keep)


def matmul(ctx: Ctx, ins: list[Slot | None]) -> None:
    """A float MatMul: FULLY_CONNECTED with a constant 2-D weight, else BATCH_MATMUL (in ONNX's axis order). Float
    sums: the order of the additions is the kernel's (exact when every row has one non-zero product, a one-hot)."""
    x, w = ctx.onnx_order(ins[0]), ins[1]
    if w.const is not None and np.ndim(w.const) == 2:
        wt = np.ascontiguousarray(np.asarray(w.const, np.float32).T)
        wi = ctx.w.tensor(f"{ctx.name}_weight", list(wt.shape), "float32", data=wt)
        keep = {"keep_num_dims": True} if len(x.onnx_shape) > 2 else {}
        ctx.store(0, lambda o: ctx.op("FULLY_CONNECTED", [x.index, wi, -1], [o.index], "FullyConnectedOptions",
                                      fused_activation_function=0, **keep))
        return
    w2 = ctx.onnx_order(w) if w.const is None else w
    ctx.store(0, lambda o: ctx.op("BATCH_MATMUL", [x.index, ctx.index(w2)], [o.index], "BatchMatMulOptions",
                                  adj_x=False, adj_y=False))


def conv(ctx: Ctx, ins: list[Slot | None]) -> None:
    """A float 2-D Conv with constant weights: [PAD,] CONV_2D or DEPTHWISE_CONV_2D, VALID, NHWC; a 1-D Conv as a
    height-1 2-D one (TRANSPOSE + RESHAPE to ``[N, 1, L, C]`` before, RESHAPE + TRANSPOSE back after)."""
    n = ctx.node
    x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 else None
    one_d = len(x.onnx_shape) == 3 and w.const is not None and np.ndim(w.const) == 3
    if w.const is None or (np.ndim(w.const) != 4 and not one_d) or (len(x.onnx_shape) != 4 and not one_d) \
            or (b is not None and b.const is None):
        why = ("its weight is computed at run time" if w.const is None else
               "its bias is computed at run time" if b is not None and b.const is None else
               f"its input is {len(x.onnx_shape)}-D and its weight {np.ndim(w.const)}-D")
        raise UnsupportedError(f"node {ctx.name} (Conv): a float island needs a 1-D or 2-D Conv with constant weights "
                               f"and bias; {why}")
    wf = np.asarray(w.const, np.float32)
    lead = [1] if one_d else []
    strides = list(attr(n, "strides", [1] * (2 - len(lead))))
    dilations = list(attr(n, "dilations", [1] * (2 - len(lead))))
    try:
        pads = ops.conv_pads(n, x.onnx_shape[2:], wf.shape[2:])
    except ValueError as e:
        raise UnsupportedError(str(e)) from None
    geometry = {"pads": [0, pads[0], 0, pads[1]] if one_d else pads, "strides": lead + strides,
                "dilations": lead + dilations}
    if not one_d:
        _conv2d(ctx, x, wf, b, geometry, ctx.out(0, True))
        return
    nb, c, ln = x.onnx_shape
    t = ctx.new("nlc", (nb, ln, c), False)
    ctx.op("TRANSPOSE", [ctx.onnx_order(x).index, ctx.param("perm_nlc", [0, 2, 1])], [t.index], "TransposeOptions")
    h = ctx.new("h1", (nb, c, 1, ln), True)
    ctx.op("RESHAPE", [t.index, ctx.param("shape_h1", [nb, 1, ln, c])], [h.index], "ReshapeOptions",
           new_shape=[nb, 1, ln, c])
    o, lo = wf.shape[0], ctx.shape()[2]
    y = ctx.new("y2d", (nb, o, 1, lo), True)
    _conv2d(ctx, h, wf[:, :, None, :], b, geometry, y)
    r = ctx.new("nlo", (nb, lo, o), False)
    ctx.op("RESHAPE", [y.index, ctx.param("shape_nlo", [nb, lo, o])], [r.index], "ReshapeOptions",
           new_shape=[nb, lo, o])
    ctx.op("TRANSPOSE", [r.index, ctx.param("perm_nol", [0, 2, 1])], [ctx.out(0, False).index], "TransposeOptions")


def _conv2d(ctx: Ctx, x: Slot, wf: np.ndarray, b: Slot | None, geometry: dict, out: Slot) -> None:
    """CONV_2D or DEPTHWISE_CONV_2D in float of NHWC ``x`` by OIHW ``wf`` into ``out`` ([PAD,] VALID)."""
    o, cg, kh, kw = wf.shape
    groups = attr(ctx.node, "group", 1)
    depthwise = groups > 1 and cg == 1 and groups == x.onnx_shape[1]
    if groups != 1 and not depthwise:
        raise UnsupportedError(f"node {ctx.name} (Conv): grouped float convolutions are not exported")
    pads = geometry["pads"]
    if any(pads):
        shape = (x.onnx_shape[0], x.onnx_shape[1], x.onnx_shape[2] + pads[0] + pads[2],
                 x.onnx_shape[3] + pads[1] + pads[3])
        xp = ctx.new("padded", shape, True)
        ctx.op("PAD", [x.index, ctx.param("paddings", [[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]])],
               [xp.index], "PadOptions")
        x = xp
    stride, dil = geometry["strides"], geometry["dilations"]
    bias = np.zeros(o, np.float32) if b is None else np.asarray(b.const, np.float32).reshape(-1)
    bi = ctx.w.tensor(f"{ctx.name}_bias", [o], "float32", data=bias)
    common = {"padding": 1, "stride_w": stride[1], "stride_h": stride[0], "fused_activation_function": 0,
              "dilation_w_factor": dil[1], "dilation_h_factor": dil[0]}
    if depthwise:
        wt = np.ascontiguousarray(wf.reshape(o, kh, kw).transpose(1, 2, 0)[None])
        wi = ctx.w.tensor(f"{ctx.name}_weight", list(wt.shape), "float32", data=wt)
        ctx.op("DEPTHWISE_CONV_2D", [x.index, wi, bi], [out.index], "DepthwiseConv2DOptions",
               depth_multiplier=o // groups, **common)
        return
    wt = np.ascontiguousarray(wf.transpose(0, 2, 3, 1))
    wi = ctx.w.tensor(f"{ctx.name}_weight", list(wt.shape), "float32", data=wt)
    ctx.op("CONV_2D", [x.index, wi, bi], [out.index], "Conv2DOptions", **common)


#: emitter name (the operator registry's ``OpSpec.tflite_island``) -> float-island emitter (float32 in and out)
ISLANDS: dict[str, Callable[[Ctx, list[Slot | None]], None]] = {
    **MOVEMENT, "unary": unary, "binary": binary, "hard_sigmoid": hard_sigmoid, "clip": clip,
    "reciprocal": reciprocal, "reshape": reshape, "concat": concat, "batch_norm": batch_norm, "erf": erf,
    "broadcast": broadcast, "compare": compare, "cast": cast, "reduce": reduce, "matmul": matmul,
    "conv": conv, "where": where, "layer_norm": layer_norm, "pad": pad, "prelu": prelu,
}

__all__ = ["ISLANDS", "MOVEMENT", "Ctx", "Slot", "pad_spec"]
