"""Write a weight-only quantized model one tensor at a time.

Two forms, with the same dequantized weights bit for bit (both compute ``(q - z) * s`` in the scale's type):

* ``qdq``: each weight becomes ``DequantizeLinear(q, scale, zero_point, axis=K axis, block_size)`` whose output
  keeps the weight's name (per-channel weights: a per-axis DequantizeLinear on the channel axis; LPBQ:
  ``DequantizeLinear(per_block_int_scale, per_channel_float_scale) -> scale`` feeding the blocked one, spec §1.2).
  ONNX Runtime (1.2x, level ``extended`` or ``all``, its default) fuses ``DequantizeLinear -> MatMul`` into
  ``MatMulNBits`` when the weight is a constant int4/uint4/int8/uint8 ``[K, N]`` tensor dequantized per axis or in
  blocks of a power of two >= 16 along K (``axis=0``), which is what this writer produces for MatMul weights.
* ``matmulnbits``: each MatMul (and Gemm, plus an ``Add`` of its bias) becomes ``com.microsoft.MatMulNBits``
  (``B`` uint8 ``[N, n_blocks, block * bits / 8]`` low nibble first, ``scales`` ``[N, n_blocks]``, ``zero_points``
  uint8 ``[N, ceil(n_blocks * bits / 8)]`` packed the same way, attributes ``K``, ``N``, ``bits``, ``block_size``);
  a weight that also feeds other nodes (a tied embedding's ``Gather``) keeps a ``DequantizeLinear`` for them.

Initializers are written in graph order; with ``external`` the tensors over ``INLINE_MAX`` (1 KiB,
:mod:`qlinear.graph.save`, the rule every writer of qlinear follows) go to ``<model file>.data``
(ONNX external data, offsets aligned to 64 bytes), each computed, written and dropped before the next, so memory
holds one tensor at a time; the original model's external tensors are copied byte for byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qlinear.errors import ConfigError, GraphError
from qlinear.graph.save import INLINE_MAX
from qlinear.graph.storage import STORAGE, lpbq_names, param_names, storage_type
from qlinear.ptq.algorithms.grids import BlockQuant, n_blocks
from qlinear.ptq.weightonly.plan import Linear
from qlinear.ptq.weightonly.tensors import Tensors, external_info

FORMATS = ("qdq", "matmulnbits")


@dataclass
class WeightResult:
    """A quantized weight: its linears, type, grid and a function computing its :class:`BlockQuant` ``[N, K]``
    (signed integers; unsigned types add ``2^(bits-1)`` when stored)."""

    linears: list[Linear]
    dtype: str                      # int4, uint4, int8, uint8, int2
    block: int                      # block length along K (K itself per channel)
    per_channel: bool
    compute: Callable[[], BlockQuant]
    int_scale: np.ndarray | None = None   # LPBQ [N, nb] integers, with pc_scale [N]
    pc_scale: np.ndarray | None = None
    weight_dtype: np.dtype = np.dtype(np.float32)
    lpbq: bool = False                    # LPBQ (int_scale / pc_scale filled when computed)
    has_zero_point: bool = True           # the grid has zero points (known before the integers are computed)
    on_computed: Callable[[BlockQuant], None] | None = None   # called once with the integers (the encoding)

    @property
    def name(self) -> str:
        return self.linears[0].weight

    @property
    def lin(self) -> Linear:
        return self.linears[0]

    @property
    def bits(self) -> int:
        return int(self.dtype.lstrip("u").removeprefix("int"))

    @property
    def unsigned(self) -> bool:
        return self.dtype.startswith("u")


def stored(bq: BlockQuant, r: WeightResult) -> tuple[np.ndarray, np.ndarray | None]:
    """Integers and zero points in the stored type's range (``[N, K]``, ``[N, nb]``; int8, or int16 when shifted to
    an unsigned type)."""
    off = 2 ** (r.bits - 1) if r.unsigned else 0
    q = bq.q.astype(np.int16) + off if off else bq.q
    z = None if bq.zero_point is None else bq.zero_point.astype(np.int16) + off
    if z is None and (off or r.has_zero_point):
        z = np.full(bq.scale.shape, off, np.int16)
    return q, z


def _layout(a: np.ndarray, lin: Linear) -> np.ndarray:
    """``[N, x]`` to the initializer's layout (``[x, N]`` for K-first weights)."""
    return np.ascontiguousarray(a.T) if lin.k_first else a


def _pack_rows(v: np.ndarray, bits: int, width: int) -> np.ndarray:
    """Unsigned values ``[N, m]`` (m <= width) packed little-end-first into ``bits``-bit fields, ``[N, width*bits/8]``
    uint8 (padding fields 0)."""
    n, m = v.shape
    per = 8 // bits
    full = np.zeros((n, -(-width // per) * per), np.uint8)
    full[:, :m] = v
    full = full.reshape(n, -1, per)
    out = np.zeros(full.shape[:2], np.uint8)
    for i in range(per):
        out |= (full[:, :, i] << (bits * i)).astype(np.uint8)
    return out


class Writer:
    """Builds the output graph from ``template`` (the float model's graph, external data not loaded)."""

    def __init__(self, template: onnx.ModelProto, tensors: Tensors, results: list[WeightResult], fmt: str) -> None:
        if fmt not in FORMATS:
            raise ConfigError(f"output format {fmt!r}: expected one of {', '.join(FORMATS)}")
        self.fmt = fmt
        self.tensors = tensors
        self.results = results
        m = onnx.ModelProto()
        m.CopyFrom(template)
        self.m = m
        self.pending: list[tuple[str, str, Callable[[], np.ndarray]]] = []  # (weight, name, fn): written lazily
        self._cache: dict[str, tuple[BlockQuant, np.ndarray, np.ndarray | None]] = {}
        self._users: dict[str, int] = {}

    # ---------------------------------------------------------------------------------------------- graph
    def build(self) -> onnx.ModelProto:
        ops = {o.domain: o.version for o in self.m.opset_import}
        if ops.get("", ops.get("ai.onnx", 21)) < 21:  # int4 / blocked DequantizeLinear: opset 21
            _convert_default_opset(self.m, 21)
        g = self.m.graph
        drop = {r.name for r in self.results}
        new_nodes: dict[int, list[onnx.NodeProto]] = {}
        node_pos = {(n.name or n.output[0]): i for i, n in enumerate(g.node)}
        self._consumers: dict[str, set[str]] = {}
        for n in g.node:
            for x in n.input:
                self._consumers.setdefault(x, set()).add(n.name or n.output[0])
        replaced: set[int] = set()
        needs_ms = False
        for r in self.results:
            fused: list[Linear] = []
            if self.fmt == "matmulnbits":
                for lin in r.linears:
                    self._check_nbits(r)
                    pos = node_pos[lin.node]
                    new_nodes.setdefault(pos, []).extend(self._matmulnbits(r, lin))
                    replaced.add(pos)
                    fused.append(lin)
                needs_ms = True
            # a DequantizeLinear for every remaining consumer of the weight (all of them in the qdq form)
            if self._other_consumers(r, fused):  # constants only: placed first, before any consumer
                new_nodes.setdefault(0, [])[0:0] = self._dq_nodes(r)
        # a Transpose whose only consumers were replaced goes too
        out_nodes: list[onnx.NodeProto] = []
        removed_tr = self._dead_transposes(replaced)
        for i, n in enumerate(g.node):
            out_nodes.extend(new_nodes.get(i, []))
            if i not in replaced and i not in removed_tr:
                out_nodes.append(n)
        del g.node[:]
        g.node.extend(out_nodes)
        kept = [t for t in g.initializer if t.name not in drop]
        del g.initializer[:]
        g.initializer.extend(kept)
        self._set_opsets(needs_ms)
        return self.m

    def _other_consumers(self, r: WeightResult, fused: list[Linear]) -> bool:
        fused_nodes = {lin.node for lin in fused} | {lin.transpose for lin in fused if lin.transpose}
        return bool(self._consumers.get(r.name, set()) - fused_nodes)

    def _dead_transposes(self, replaced: set[int]) -> set[int]:
        g = self.m.graph
        repl_names = {g.node[i].name or g.node[i].output[0] for i in replaced}
        dead: set[int] = set()
        for r in self.results:
            for lin in r.linears:
                if not lin.transpose or lin.node not in repl_names:
                    continue
                for i, n in enumerate(g.node):
                    if (n.name or n.output[0]) == lin.transpose:
                        out = n.output[0]
                        users = [m for m in g.node if out in m.input and (m.name or m.output[0]) not in repl_names]
                        if not users and out not in {o.name for o in g.output}:
                            dead.add(i)
        return dead

    def _check_nbits(self, r: WeightResult) -> None:
        b = r.block
        if r.bits not in (4, 8) or (not r.per_channel and (b < 16 or b & (b - 1))):
            raise ConfigError(f"{r.name}: MatMulNBits takes 4- or 8-bit weights in blocks of a power of two >= 16 "
                              f"(got {r.dtype}, block {b}); use output format qdq or another block size")

    def _get(self, r: WeightResult) -> tuple[BlockQuant, np.ndarray, np.ndarray | None]:
        if r.name not in self._cache:
            bq = r.compute()
            if r.on_computed is not None:
                r.on_computed(bq)
            q, z = stored(bq, r)
            self._cache[r.name] = (bq, q, z)
        return self._cache[r.name]

    def _lazy(self, r: WeightResult, name: str, fn: Callable[[], np.ndarray]) -> str:
        self.pending.append((r.name, name, fn))
        self._users[r.name] = self._users.get(r.name, 0) + 1
        return name

    def _scale_dtype(self, r: WeightResult) -> np.dtype:
        return np.dtype(np.float16) if r.weight_dtype == np.float16 else np.dtype(np.float32)

    def _dq_nodes(self, r: WeightResult) -> list[onnx.NodeProto]:
        # the names and the int2-on-int4 storage are qlinear.graph.storage's, as in qlinear.graph.apply
        lin, st = r.lin, STORAGE[storage_type(r.dtype)]
        pn = param_names(r.name)
        sd = self._scale_dtype(r)
        qn = self._lazy(r, pn.quantized, lambda: _layout(self._get(r)[1], lin).astype(st))
        nodes = []
        if r.per_channel:
            sn = self._lazy(r, pn.scale, lambda: self._get(r)[0].scale[:, 0].astype(sd))
            ins = [qn, sn]
            if self._get_z_any(r):
                ins.append(self._lazy(r, pn.zero_point, lambda: self._get(r)[2][:, 0].astype(st)))
            nodes.append(helper.make_node("DequantizeLinear", ins, [r.name], name=pn.node, axis=lin.channel_axis))
            return nodes
        if r.lpbq:  # LPBQ: the effective scale computed by a DequantizeLinear of the int scales
            def ints() -> np.ndarray:
                self._get(r)
                return _layout(r.int_scale, lin).astype(np.uint8)

            def pcs() -> np.ndarray:
                self._get(r)
                return r.pc_scale.astype(np.float32)

            ln = lpbq_names(r.name)
            isn = self._lazy(r, ln.int_scale, ints)
            pcn = self._lazy(r, ln.float_scale, pcs)
            sn = ln.scale
            nodes.append(helper.make_node("DequantizeLinear", [isn, pcn], [sn], name=ln.node, axis=lin.channel_axis))
        else:
            sn = self._lazy(r, pn.scale, lambda: _layout(self._get(r)[0].scale, lin).astype(sd))
        ins = [qn, sn]
        if self._get_z_any(r):
            ins.append(self._lazy(r, pn.zero_point, lambda: _layout(self._get(r)[2], lin).astype(st)))
        nodes.append(helper.make_node("DequantizeLinear", ins, [r.name], name=pn.node, axis=lin.block_axis,
                                      block_size=r.block))
        return nodes

    def _get_z_any(self, r: WeightResult) -> bool:
        # known without computing the integers: unsigned types and grids with offsets have zero points
        return r.unsigned or r.has_zero_point

    def _matmulnbits(self, r: WeightResult, lin: Linear) -> list[onnx.NodeProto]:
        bits, k, n = r.bits, lin.k, lin.n
        block = r.block if not r.per_channel else max(16, 1 << (k - 1).bit_length())
        nb = n_blocks(k, block)
        sd = self._scale_dtype(r)
        off = 2 ** (bits - 1)

        def packed_b() -> np.ndarray:
            _, q, z = self._get(r)
            qu = (q.astype(np.int16) + (0 if r.unsigned else off)).astype(np.uint8)   # [N, K] unsigned
            zu = None if z is None else (z + (0 if r.unsigned else off)).astype(np.uint8)
            full = np.empty((n, nb * block), np.uint8)
            full[:, :k] = qu
            pad = np.full((n,), off, np.uint8) if zu is None else zu[:, -1]
            full[:, k:] = pad[:, None]                                        # padding dequantizes to 0
            per = 8 // bits
            v = full.reshape(n, nb, block // per, per)
            out = np.zeros((n, nb, block // per), np.uint8)
            for i in range(per):
                out |= (v[..., i] << (bits * i)).astype(np.uint8)
            return out

        def scales() -> np.ndarray:
            bq = self._get(r)[0]
            if r.lpbq:  # LPBQ: the float32 product a DequantizeLinear of the int scales computes
                return (r.int_scale.astype(np.float32) * r.pc_scale.astype(np.float32)[:, None]).astype(sd)
            return bq.scale.astype(sd).reshape(n, nb)

        def zeros() -> np.ndarray:
            z = self._get(r)[2]
            zu = (z + (0 if r.unsigned else off)).astype(np.uint8)
            return _pack_rows(zu.reshape(n, nb), bits, nb)

        tag = lin.node
        bn = self._lazy(r, f"{tag}_B_nbits", packed_b)
        sn = self._lazy(r, f"{tag}_scales", scales)
        ins = [lin.input, bn, sn]
        if self._get_z_any(r):
            ins.append(self._lazy(r, f"{tag}_zero_points", zeros))
        out = lin.output if not lin.bias else f"{lin.output}_nobias"
        nodes = [helper.make_node("MatMulNBits", ins, [out], name=f"{tag}_MatMulNBits", domain="com.microsoft",
                                  K=k, N=n, bits=bits, block_size=block)]
        if lin.bias:
            nodes.append(helper.make_node("Add", [out, lin.bias], [lin.output], name=f"{tag}_bias"))
        return nodes

    def _set_opsets(self, needs_ms: bool) -> None:
        m = self.m
        ops = {o.domain: o for o in m.opset_import}
        if needs_ms and "com.microsoft" not in ops:
            m.opset_import.append(helper.make_opsetid("com.microsoft", 1))

    # ---------------------------------------------------------------------------------------------- files
    def write(self, path: Path, *, external: bool) -> list[str]:
        """Write the model (and ``<name>.data`` when ``external``); returns the file names."""
        m = self.build()
        g = m.graph
        data_name = f"{path.name}.data"
        files = [path.name]
        f = open(path.parent / data_name, "wb") if external else None
        try:
            def place(t: onnx.TensorProto, raw: bytes) -> None:
                if f is None or len(raw) <= INLINE_MAX:
                    t.raw_data = raw
                    return
                pos = f.tell()
                pad = (-pos) % 64
                if pad:
                    f.write(b"\0" * pad)
                    pos += pad
                f.write(raw)
                t.ClearField("raw_data")
                t.data_location = onnx.TensorProto.EXTERNAL
                del t.external_data[:]
                for key, v in (("location", data_name), ("offset", str(pos)), ("length", str(len(raw)))):
                    e = t.external_data.add()
                    e.key, e.value = key, v

            for t in g.initializer:  # the original tensors: external bytes copied, inline ones kept or moved out
                if external_info(t) is not None:
                    raw = self.tensors.raw(t.name)
                    if f is None:
                        t.data_location = onnx.TensorProto.DEFAULT
                        del t.external_data[:]
                    place(t, raw)
                elif f is not None and t.HasField("raw_data") and len(t.raw_data) > INLINE_MAX:
                    place(t, t.raw_data)
            for owner, name, fn in self.pending:
                t = numpy_helper.from_array(fn(), name)
                if t.HasField("raw_data"):
                    place(t, t.raw_data)
                g.initializer.append(t)
                self._users[owner] -= 1
                if self._users[owner] == 0:  # the weight's last tensor: its integers are dropped
                    self._cache.pop(owner, None)
        finally:
            if f is not None:
                f.flush()
                os.fsync(f.fileno())
                f.close()
        if f is not None:
            files.append(data_name)
        try:
            data = m.SerializeToString()
        except ValueError as e:
            raise GraphError(f"{path.name}: the graph alone is over 2 GB ({e})") from None
        from qlinear._atomic import write_bytes

        write_bytes(path, data)
        return files


def _convert_default_opset(m: onnx.ModelProto, need: int) -> None:
    """Raise the default-domain opset to ``need`` (int4 and blocked DequantizeLinear are opset 21) with onnx's
    version converter (external initializers stay references; the new weights are added after)."""
    from onnx import version_converter

    try:
        m2 = version_converter.convert_version(m, need)
    except Exception as e:  # noqa: BLE001
        raise GraphError(f"the quantized weights need opset {need} and onnx's version converter failed on the "
                         f"model: {e}") from None
    m.CopyFrom(m2)
