"""The weight-only quantized model as an ``onnx_ir`` model, built by the graph passes every mode uses.

1. the float graph (external data not loaded; opset raised to 21 for int4 and blocked DequantizeLinear);
2. :class:`qlinear.graph.passes.insert_qdq.InsertQDQ` with the run's weight encodings, each weight's integers
   given as a :class:`~qlinear.graph.passes.insert_qdq.ParamSource` (GPTQ's kept integers, or round to nearest
   redone when the tensor is written): ``DequantizeLinear(q, scale[, zero_point]) -> W`` (LPBQ: the scale from
   ``DequantizeLinear(int scales, per-channel float scale)``), placed first in the graph (constants only);
   ONNX Runtime (level ``extended`` or ``all``, its default) fuses ``DequantizeLinear -> MatMul`` into
   ``MatMulNBits`` for blocks of a power of two >= 16 along K;
3. output format ``matmulnbits``: :class:`qlinear.graph.passes.lower_matmulnbits.LowerMatMulNBits` lowers the
   quantized MatMul/Gemm nodes (a weight that also feeds other nodes, a tied embedding's ``Gather``, keeps its
   DequantizeLinear for them);
4. the file: :func:`qlinear.graph.save.save_ir`, one tensor at a time (the input's external tensors are read by
   :mod:`.tensors` when written, the quantized ones computed then).

The new initializers follow the input's, grouped by weight in the run's order (MatMulNBits tensors, then the
DequantizeLinear tensors a weight keeps).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto

from qlinear.encodings import Encoding
from qlinear.errors import ConfigError, GraphError
from qlinear.graph.ir import to_ir
from qlinear.graph.passes.insert_qdq import InsertQDQ, ParamSource
from qlinear.graph.passes.lower_matmulnbits import LowerMatMulNBits
from qlinear.graph.save import save_ir
from qlinear.graph.storage import lpbq_names, param_names
from qlinear.ptq.weightonly.plan import Linear
from qlinear.ptq.weightonly.tensors import Tensors, external_info

FORMATS = ("qdq", "matmulnbits")


@dataclass
class WeightResult:
    """A quantized weight: its linears, type, grid, encoding and a function returning its integers in the
    initializer's layout and the stored type's range (unsigned types shifted by ``2^(bits-1)``)."""

    linears: list[Linear]
    dtype: str                      # int4, uint4, int8, uint8, int2
    block: int                      # block length along K (K itself per channel)
    per_channel: bool
    encoding: Encoding
    integers: Callable[[], np.ndarray]
    weight_dtype: np.dtype = np.dtype(np.float32)
    lpbq: bool = False
    has_zero_point: bool = True     # the grid has zero points (the DequantizeLinear gets a zero-point input)

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

    def source(self) -> ParamSource:
        st = TensorProto.FLOAT16 if self.weight_dtype == np.float16 else TensorProto.FLOAT
        return ParamSource(self.integers, scale_type=st, zero_point=self.has_zero_point)


def check_nbits(r: WeightResult) -> None:
    """MatMulNBits takes 4- or 8-bit weights in blocks of a power of two >= 16 (or per channel)."""
    b = r.block
    if r.bits not in (4, 8) or (not r.per_channel and (b < 16 or b & (b - 1))):
        raise ConfigError(f"{r.name}: MatMulNBits takes 4- or 8-bit weights in blocks of a power of two >= 16 "
                          f"(got {r.dtype}, block {b}); use output format qdq or another block size")


def build(template: onnx.ModelProto, tensors: Tensors, results: list[WeightResult], fmt: str) -> ir.Model:
    """The quantized model (``fmt`` ``qdq`` or ``matmulnbits``); no tensor is read or computed before it is
    written."""
    if fmt not in FORMATS:
        raise ConfigError(f"output format {fmt!r}: expected one of {', '.join(FORMATS)}")
    m = onnx.ModelProto()
    m.CopyFrom(template)
    ops = {o.domain: o.version for o in m.opset_import}
    if ops.get("", ops.get("ai.onnx", 21)) < 21:  # int4 / blocked DequantizeLinear: opset 21
        _convert_default_opset(m, 21)
    lowered: set[str] = set()
    if fmt == "matmulnbits":
        for r in results:
            check_nbits(r)
        lowered = _name_linears(m, results)
    model = to_ir(m)
    _read_lazily(model, tensors)
    _insert(model, results)
    if fmt == "matmulnbits":
        LowerMatMulNBits(lowered)(model)
    _group_initializers(model, [i.name for i in m.graph.initializer], results)
    return model


def write(model: ir.Model, path: Path, *, external: bool) -> list[str]:
    """Write ``model`` to ``path`` (and ``<name>.data`` when ``external``); returns the file names."""
    return save_ir(model, path, external=external)


def _name_linears(m: onnx.ModelProto, results: list[WeightResult]) -> set[str]:
    """The names of the linears to lower; an unnamed one gets its plan name (the node is replaced)."""
    names = {lin.node for r in results for lin in r.linears}
    counts: dict[str, int] = {}
    for idx, n in enumerate(m.graph.node):
        if not n.name and n.op_type in ("MatMul", "Gemm") and f"{n.op_type}_{idx}" in names:
            n.name = f"{n.op_type}_{idx}"
        counts[n.name] = counts.get(n.name, 0) + 1
    return {x for x in names if counts.get(x) == 1}


def _read_lazily(model: ir.Model, tensors: Tensors) -> None:
    """The input's external tensors read by ``tensors`` when written (``numpy.fromfile`` of exactly their bytes)."""
    for name, v in model.graph.initializers.items():
        t = tensors.by_name.get(name)
        if t is None or external_info(t) is None:
            continue
        v.const_value = ir.LazyTensor(lambda n=name: ir.Tensor(tensors.array(n)), dtype=ir.DataType(t.data_type),
                                      shape=ir.Shape(tuple(t.dims)), name=name)


def _insert(model: ir.Model, results: list[WeightResult]) -> None:
    """Q/DQ of every weight in one pass; the DequantizeLinear nodes (constants only) go first in the graph, the last
    weight's first (LPBQ: the scale's DequantizeLinear, then the weight's)."""
    g = model.graph
    before = len(g)
    InsertQDQ([r.encoding for r in results], sources={r.name: r.source() for r in results})(model)
    new = [g.node(i) for i in range(before, len(g))]
    sizes = [2 if r.lpbq else 1 for r in results]
    if sum(sizes) != len(new):  # not one node per weight (two for LPBQ): left where the pass put them
        return
    groups, at = [], 0
    for k in sizes:
        groups.append(new[at:at + k])
        at += k
    ordered = [n for grp in reversed(groups) for n in grp]
    g.remove(ordered)
    if len(g):
        g.insert_before(g.node(0), ordered)
    else:
        g.extend(ordered)


def _group_initializers(model: ir.Model, original: list[str], results: list[WeightResult]) -> None:
    """Initializers in order: the input's (those left), then each weight's new ones in the run's order."""
    inits = model.graph.initializers
    order = [n for n in original if n in inits]
    for r in results:
        pn, ln = param_names(r.name), lpbq_names(r.name)
        for lin in r.linears:
            order += [f"{lin.node}_B_nbits", f"{lin.node}_scales", f"{lin.node}_zero_points"]
        order += [pn.quantized, ln.int_scale, ln.float_scale, pn.scale, pn.zero_point]
    seen = set()
    order = [n for n in order if n in inits and not (n in seen or seen.add(n))]
    order += [n for n in inits if n not in seen]
    values = [inits.pop(n) for n in order]
    for v in values:
        model.graph.register_initializer(v)


def _convert_default_opset(m: onnx.ModelProto, need: int) -> None:
    """Raise the default-domain opset to ``need`` (int4 and blocked DequantizeLinear are opset 21) with onnx's
    version converter (external initializers stay references)."""
    from onnx import version_converter

    try:
        m2 = version_converter.convert_version(m, need)
    except Exception as e:  # noqa: BLE001
        raise GraphError(f"the quantized weights need opset {need} and onnx's version converter failed on the "
                         f"model: {e}") from None
    m.CopyFrom(m2)
