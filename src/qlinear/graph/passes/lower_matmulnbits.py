"""Lower ``DequantizeLinear(int4/int8 W) -> MatMul`` to ONNX Runtime's ``com.microsoft.MatMulNBits``: one
``onnx_ir`` pass, ``graph -> graph``.

A product is lowered when its weight operand is the output of a ``DequantizeLinear`` of constant 4- or 8-bit
integers ``W[K, N]`` (``MatMul(x, DQ(W))``, ``Gemm(x, DQ(W), C)`` with ``transB`` 0 or 1, or
``MatMul(x, Transpose(DQ(E)))`` with ``E[N, K]``, a tied embedding), dequantized in blocks of a power of two >= 16
along K or per channel (one block of the next power of two >= K), with a constant scale or an LPBQ scale
(``DequantizeLinear(int scales, per-channel float scale)``, its float32 product is the MatMulNBits scale):

* ``B`` uint8 ``[N, n_blocks, block * bits / 8]``, low nibble first, the padding of a partial last block set to the
  block's zero point (it dequantizes to 0); ``scales`` ``[N, n_blocks]`` in the scale's type; ``zero_points`` uint8
  ``[N, ceil(n_blocks * bits / 8)]`` packed the same way (omitted when the DequantizeLinear has none: MatMulNBits
  then takes ``2^(bits-1)``, the signed grid's zero); attributes ``K``, ``N``, ``bits``, ``block_size``;
* a Gemm's bias becomes an ``Add`` after it (``<output>_nobias``);
* the names: ``<node>_B_nbits``, ``<node>_scales``, ``<node>_zero_points``, ``<node>_MatMulNBits``, ``<node>_bias``.

``B`` is computed when the model is written (``onnx_ir.LazyTensor`` over the integers, themselves possibly lazy), so
a large model streams one tensor at a time. A DequantizeLinear (or Transpose) whose output no longer has a consumer
goes, with the initializers only it read; one still read by other nodes (a tied embedding's ``Gather``) stays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

BITS = {ir.DataType.INT4: (4, True), ir.DataType.UINT4: (4, False), ir.DataType.INT8: (8, True),
        ir.DataType.UINT8: (8, False)}


@dataclass(frozen=True)
class _Weight:
    """A lowerable weight seen as ``[N, K]``: its DequantizeLinear, the layout of its integers, its grid."""

    dq: ir.Node
    k_first: bool           # the integers are stored [K, N]
    k: int
    n: int
    bits: int
    signed: bool
    block: int              # MatMulNBits block size
    per_channel: bool


def _const(v: ir.Value | None) -> ir.TensorProtocol | None:
    return None if v is None or not v.is_initializer() else v.const_value


def _attr(node: ir.Node, name: str, default: int | float) -> int | float:
    a = node.attributes.get(name)
    return default if a is None else a.value


def _weight(dq: ir.Node | None, k_first: bool) -> _Weight | None:
    """``dq`` as a lowerable weight (``None`` when it is not one)."""
    if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx"):
        return None
    q = _const(dq.inputs[0])
    if q is None or q.dtype not in BITS or len(q.shape) != 2 or (len(dq.inputs) > 2 and _const(dq.inputs[2]) is None):
        return None
    scale = dq.inputs[1]
    sp = scale.producer() if scale is not None else None
    if _const(scale) is None and not (sp is not None and sp.op_type == "DequantizeLinear"
                                      and all(_const(x) is not None for x in sp.inputs if x is not None)):
        return None
    k, n = (int(q.shape[0]), int(q.shape[1])) if k_first else (int(q.shape[1]), int(q.shape[0]))
    axis = int(_attr(dq, "axis", 1)) % 2
    block = int(_attr(dq, "block_size", 0))
    bits, signed = BITS[q.dtype]
    k_axis = 0 if k_first else 1
    if block:
        if axis != k_axis or block < 16 or block & (block - 1):
            return None
        return _Weight(dq, k_first, k, n, bits, signed, block, False)
    if axis != 1 - k_axis or len(scale.shape) != 1:
        return None
    return _Weight(dq, k_first, k, n, bits, signed, max(16, 1 << (k - 1).bit_length()), True)


def _find(node: ir.Node) -> tuple[_Weight, ir.Node | None, ir.Value | None] | None:
    """The weight of a MatMul/Gemm, the Transpose in between (tied weights) and a Gemm's bias."""
    if node.domain not in ("", "ai.onnx") or len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    p = node.inputs[1].producer()
    if node.op_type == "MatMul":
        if p is not None and p.op_type == "Transpose" and list(_attr(p, "perm", [1, 0])) == [1, 0]:
            w = _weight(p.inputs[0].producer(), False)
            return None if w is None else (w, p, None)
        w = _weight(p, True)
        return None if w is None else (w, None, None)
    if node.op_type == "Gemm":
        if _attr(node, "transA", 0) or _attr(node, "alpha", 1.0) != 1.0 or _attr(node, "beta", 1.0) != 1.0:
            return None
        w = _weight(p, not _attr(node, "transB", 0))
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        return None if w is None else (w, None, bias)
    return None


#: ``B`` is packed in slabs of about this many integers (:meth:`_Lowering.packed_b`)
PACK_SLAB = 1 << 22


def _nk(a: np.ndarray, w: _Weight) -> np.ndarray:
    """A ``[K, N]`` (or ``[K-blocks, N]``) array of the weight's layout as ``[N, x]``; 1-D per-channel as ``[N, 1]``."""
    a = np.asarray(a)
    if a.ndim == 1:
        return a.reshape(-1, 1)
    return np.ascontiguousarray(a.T) if w.k_first else a


def _pack(v: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned fields ``[..., m * 8 / bits]`` packed little-end first into ``[..., m]`` uint8."""
    per = 8 // bits
    v = v.reshape(*v.shape[:-1], -1, per)
    out = np.zeros(v.shape[:-1], np.uint8)
    for i in range(per):
        out |= (v[..., i].astype(np.uint8) << (bits * i)).astype(np.uint8)
    return out


class _Lowering:
    """The tensors of one weight's MatMulNBits: zero points and scales now (small), ``B`` when written."""

    def __init__(self, w: _Weight) -> None:
        self.w = w
        self.nb = -(-w.k // w.block)
        self.off = 2 ** (w.bits - 1)
        dq = w.dq
        zp = _const(dq.inputs[2]) if len(dq.inputs) > 2 else None
        self.zu = None if zp is None else (_nk(zp.numpy(), w).astype(np.int16) + (self.off if w.signed else 0))
        self.zu = None if self.zu is None else self.zu.astype(np.uint8)
        self.q = _const(dq.inputs[0])

    def scales(self) -> np.ndarray:
        w, s = self.w, self.w.dq.inputs[1]
        if _const(s) is not None:
            return _nk(s.const_value.numpy(), w).reshape(w.n, self.nb)
        sp = s.producer()  # LPBQ: the float32 product the scale's DequantizeLinear computes
        ints = _nk(sp.inputs[0].const_value.numpy(), w).astype(np.float32)
        pc = sp.inputs[1].const_value.numpy().astype(np.float32).reshape(-1)
        return (ints * pc[:, None]).astype(np.float32)

    def zero_points(self) -> np.ndarray:
        per = 8 // self.w.bits
        full = np.zeros((self.w.n, -(-self.nb // per) * per), np.uint8)
        full[:, :self.nb] = self.zu
        return _pack(full, self.w.bits)

    def packed_b(self) -> np.ndarray:
        """``B`` ``[N, blocks, block * bits / 8]``, packed in slabs of rows (no wide temporaries of the weight)."""
        w = self.w
        q = _nk(self.q.numpy(), w)
        pad = np.full((w.n,), self.off, np.uint8) if self.zu is None else self.zu[:, -1]
        out = None
        rows = max(1, PACK_SLAB // max(1, self.nb * w.block))
        for r0 in range(0, w.n, rows):
            r1 = min(w.n, r0 + rows)
            full = np.empty((r1 - r0, self.nb * w.block), np.uint8)
            full[:, :w.k] = (q[r0:r1].astype(np.int16) + (self.off if w.signed else 0)).astype(np.uint8)
            full[:, w.k:] = pad[r0:r1, None]  # padding dequantizes to 0
            b = _pack(full.reshape(r1 - r0, self.nb, w.block), w.bits)
            if r1 - r0 == w.n:
                return b
            if out is None:
                out = np.empty((w.n,) + b.shape[1:], np.uint8)
            out[r0:r1] = b
        return out


def _initializer(graph: ir.Graph, name: str, arr: np.ndarray) -> ir.Value:
    t = ir.Tensor(np.asarray(arr), name=name)
    v = ir.Value(name=name, const_value=t, type=ir.TensorType(t.dtype), shape=ir.Shape(t.shape))
    graph.register_initializer(v)
    return v


def _lazy_initializer(graph: ir.Graph, name: str, fn, shape: tuple[int, ...]) -> ir.Value:  # noqa: ANN001
    t = ir.LazyTensor(lambda: ir.Tensor(fn()), dtype=ir.DataType.UINT8, shape=ir.Shape(shape), name=name)
    v = ir.Value(name=name, const_value=t, type=ir.TensorType(t.dtype), shape=ir.Shape(shape))
    graph.register_initializer(v)
    return v


def _remove_dead(graph: ir.Graph, node: ir.Node) -> None:
    """Remove ``node`` if none of its outputs is used, then the producers and initializers only it read."""
    if node.graph is not graph or any(o.uses() or o.is_graph_output() for o in node.outputs):
        return
    ins = [x for x in node.inputs if x is not None]
    graph.remove(node, safe=True)
    for x in ins:
        if x.uses() or x.is_graph_output():
            continue
        if x.is_initializer():
            graph.initializers.pop(x.name)
        elif x.producer() is not None:
            _remove_dead(graph, x.producer())


class LowerMatMulNBits(ir.passes.InPlacePass):
    """Every lowerable ``DequantizeLinear -> MatMul/Gemm`` of the main graph becomes ``MatMulNBits`` (module
    docstring). ``nodes``: the names of the products to lower (default: all that can be)."""

    def __init__(self, nodes: set[str] | None = None) -> None:
        super().__init__()
        self.nodes = nodes

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        g = model.graph
        dead: list[ir.Node] = []
        done = 0
        for node in list(g):
            if node.op_type not in ("MatMul", "Gemm") or (self.nodes is not None and node.name not in self.nodes):
                continue
            found = _find(node)
            if found is None:
                continue
            w, transpose, bias = found
            self._lower(g, node, w, bias)
            dead += [x for x in (transpose, w.dq) if x is not None]
            done += 1
        for n in dead:
            _remove_dead(g, n)
        if done:
            model.opset_imports.setdefault("com.microsoft", 1)
        return ir.passes.PassResult(model, modified=bool(done))

    @staticmethod
    def _lower(g: ir.Graph, node: ir.Node, w: _Weight, bias: ir.Value | None) -> None:
        low = _Lowering(w)
        tag = node.name
        b = _lazy_initializer(g, f"{tag}_B_nbits", low.packed_b, (w.n, low.nb, w.block * w.bits // 8))
        ins = [node.inputs[0], b, _initializer(g, f"{tag}_scales", low.scales())]
        if low.zu is not None:
            ins.append(_initializer(g, f"{tag}_zero_points", low.zero_points()))
        out = node.outputs[0]
        keep, out.name = out.name, f"{out.name}_lowered"
        attrs = ir.convenience.convert_attributes({"K": w.k, "N": w.n, "bits": w.bits, "block_size": w.block})
        name = keep if bias is None else f"{keep}_nobias"
        mm = ir.Node("com.microsoft", "MatMulNBits", ins, attrs, outputs=[ir.Value(name=name)],
                     name=f"{tag}_MatMulNBits")
        new = [mm]
        result = mm.outputs[0]
        if bias is not None:
            add = ir.Node("", "Add", [result, bias], outputs=[ir.Value(name=keep)], name=f"{tag}_bias")
            new.append(add)
            result = add.outputs[0]
        g.insert_before(node, new)
        result.type, result.shape = out.type, out.shape
        out.replace_all_uses_with(result, replace_graph_outputs=True)
        g.remove(node, safe=True)


__all__ = ["LowerMatMulNBits"]
