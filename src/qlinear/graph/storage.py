"""How quantized weights are stored in an ONNX Q/DQ model: the rules every writer of qlinear follows (the graph's
Q/DQ insertion, :class:`qlinear.graph.passes.insert_qdq.InsertQDQ`, for full-integer and weight-only runs alike).

* 2-bit weights are stored on the exact 4-bit grid (ONNX Runtime has no int2 DequantizeLinear kernel):
  :func:`storage_type` and :data:`STORAGE` (the NumPy dtype of each stored type).
* A weight ``W`` becomes ``DequantizeLinear(W_quantized, W_scale[, W_zero_point]) -> W`` (:func:`param_names`); an
  LPBQ weight's scale is itself ``DequantizeLinear(W_per_block_int_scale, W_per_channel_float_scale) -> W_scale``
  (spec §1 "LPBQ", :func:`lpbq_names`).
"""

from __future__ import annotations

from dataclasses import dataclass

from qlinear.core.types import TABLE, qtype


def storage_type(dtype: str) -> str:
    """The type a weight of ``dtype`` is stored as: 2-bit types on the 4-bit grid (exact, and runnable by ONNX
    Runtime), every other type as itself."""
    t = qtype(dtype)
    if t.bits == 2:
        return "int4" if t.signed else "uint4"
    return t.name


def two_bit_note(what: str, dtype: str) -> str:
    """The note a run with 2-bit weights gives (``what``: which weights), saying how the file stores them."""
    return (f"{what}: model.qdq.onnx stores the weights on the exact {storage_type(dtype)} grid (ONNX Runtime has no "
            "2-bit DequantizeLinear), 4 bits a weight in the file; the values and model.encodings are on the 2-bit "
            "grid")


#: NumPy storage of each integer weight type as written (2-bit types on the 4-bit grid), from core's type table
STORAGE = {t.name: qtype(storage_type(t.name)).storage for t in TABLE if t.is_int and t.bits <= 8}


@dataclass(frozen=True)
class ParamNames:
    """Names of a quantized weight's tensors and node (bases: a writer may suffix them to keep them unique)."""

    quantized: str
    scale: str
    zero_point: str
    node: str


@dataclass(frozen=True)
class LpbqNames:
    """Names of an LPBQ weight's scale tensors and the node computing its effective scale ``W_scale``."""

    int_scale: str
    float_scale: str
    scale: str
    node: str


def param_names(weight: str) -> ParamNames:
    return ParamNames(f"{weight}_quantized", f"{weight}_scale", f"{weight}_zero_point",
                      f"{weight}_DequantizeLinear")


def lpbq_names(weight: str) -> LpbqNames:
    return LpbqNames(f"{weight}_per_block_int_scale", f"{weight}_per_channel_float_scale", f"{weight}_scale",
                     f"{weight}_scale_DequantizeLinear")


__all__ = ["STORAGE", "LpbqNames", "ParamNames", "lpbq_names", "param_names", "storage_type"]
