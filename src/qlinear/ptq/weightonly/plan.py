"""Which weights a weight-only run quantizes, seen as ``W[N, K]``.

A *linear* is a ``MatMul`` or ``Gemm`` whose second operand is a constant 2-D weight:

* ``MatMul(x, B)`` with ``B`` an initializer ``[K, N]``;
* ``MatMul(x, Transpose(E))`` with ``E`` an initializer ``[N, K]`` (``perm=[1, 0]``): a tied embedding / lm_head
  (the same ``E`` may also feed a ``Gather``: the embedding lookup then reads the dequantized ``E``);
* ``Gemm(x, B, C)`` with ``transA=0``, ``alpha=beta=1``, ``B`` ``[K, N]`` (``transB=0``) or ``[N, K]``
  (``transB=1``), ``C`` an optional bias.

Weights are float32 or float16. The weight and bias inputs and the axes are the operator registry's
(:data:`qlinear.graph.ops.REGISTRY`, :func:`qlinear.graph.ops.input_axes`, the rule the full-integer plan follows):
the block axis is K (the reduction), the channel axis N, as AIMET and ONNX Runtime quantize MatMul weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto

from qlinear.graph.model import attr
from qlinear.graph.ops import REGISTRY, input_axes

FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)


@dataclass(frozen=True)
class Linear:
    """One weight-only quantizable product.

    Attributes:
        weight: the initializer's name (what the encodings name).
        node: the MatMul/Gemm node's name.
        op: ``MatMul`` or ``Gemm``.
        input: the activation multiplied (``x``).
        output: the node's output.
        k_first: the initializer is stored ``[K, N]`` (MatMul, Gemm transB=0); else ``[N, K]``.
        transpose: name of the Transpose node between the initializer and the MatMul (tied weights), or ``""``.
        bias: Gemm's bias input, or ``""``.
        n, k: the product's output channels and reduction length.
    """

    weight: str
    node: str
    op: str
    input: str
    output: str
    k_first: bool
    transpose: str
    bias: str
    n: int
    k: int

    @property
    def block_axis(self) -> int:
        """The initializer's axis holding K."""
        return 0 if self.k_first else 1

    @property
    def channel_axis(self) -> int:
        return 1 - self.block_axis


def find_linears(m: onnx.ModelProto, *, exclude_nodes: tuple[str, ...] = (),
                 exclude_op_types: tuple[str, ...] = ()) -> tuple[list[Linear], dict[str, str]]:
    """The linears of ``m``'s main graph (initializers may be external: only their dims and types are read), and the
    skipped MatMul/Gemm nodes with the reason."""
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    skipped: dict[str, str] = {}
    out: list[Linear] = []
    for idx, n in enumerate(g.node):
        if n.op_type not in ("MatMul", "Gemm") or len(n.input) < 2:
            continue
        name = n.name or f"{n.op_type}_{idx}"
        if name in exclude_nodes or n.op_type in exclude_op_types:
            skipped[name] = "excluded"
            continue
        spec = REGISTRY.specs[n.op_type]
        w, tr, k_first = n.input[spec.weight_input], "", input_axes(n, spec.weight_input, 2)[1] == 0
        p = producer.get(w)
        if w not in inits and p is not None and p.op_type == "Transpose" and n.op_type == "MatMul" \
                and p.input[0] in inits and list(attr(p, "perm", [1, 0])) == [1, 0]:
            w, tr, k_first = p.input[0], p.name or p.output[0], False
        if w not in inits:
            skipped[name] = "no constant weight"
            continue
        t = inits[w]
        if len(t.dims) != 2 or t.data_type not in FLOAT_TYPES:
            skipped[name] = f"weight {w} is not a 2-D float32/float16 initializer"
            continue
        if n.op_type == "Gemm" and (attr(n, "transA", 0) or attr(n, "alpha", 1.0) != 1.0
                                    or attr(n, "beta", 1.0) != 1.0):
            skipped[name] = "Gemm with transA or alpha/beta != 1"
            continue
        bias = n.input[spec.bias_input] if spec.bias_input is not None and len(n.input) > spec.bias_input else ""
        k, nn = (t.dims[0], t.dims[1]) if k_first else (t.dims[1], t.dims[0])
        out.append(Linear(w, name, n.op_type, n.input[0], n.output[0], k_first, tr, bias, int(nn), int(k)))
    return out, skipped
