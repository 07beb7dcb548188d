"""MatMul of two integer activations as LiteRT's int8 BATCH_MATMUL: exact accumulation of ``(a - z_a) @ (b - z_b)``
(broadcast batch dimensions), then ``MultiplyByQuantizedMultiplier`` with the double-precision multiplier
``s_a * s_b / s_out`` (``GetQuantizedConvolutionMultipler``), mode ``fixed_double``: in both LiteRT profiles (the
default resolver does not delegate an int8 BATCH_MATMUL to XNNPACK in LiteRT 2.3.0; measured, tests/tflite).
Per-tensor parameters only (:class:`~qlinear.kernels.layer.NotInteger` otherwise)."""

from __future__ import annotations

import numpy as np

from qlinear.errors import OverflowRiskError
from qlinear.graph.qdq import QOp
from qlinear.kernels import native as NK
from qlinear.kernels.layer import EXACT32, NotInteger, exact_matmul, fused_clamp
from qlinear.kernels.profiles import Profile


class BatchMatMul:
    """A prepared activation x activation MatMul (module docstring)."""

    def __init__(self, op: QOp, prof: Profile) -> None:
        a, b, out = op.inputs[0], op.inputs[1], op.output
        if a is None or b is None or out is None or b.const is not None or a.const is not None:
            raise NotInteger
        if any(not v.params.per_tensor or v.params.dtype.bits != 8 or not v.params.dtype.is_int
               for v in (a, b, out)):
            raise NotInteger
        self.a, self.b, self.name = a, b, op.name
        self.mode = "fixed_double"
        m = np.float64(np.float32(a.params.s)) * np.float64(np.float32(b.params.s)) / np.float64(np.float32(out.params.s))
        self.mult = NK.Multiplier(np.array([m]))
        self.zo, self.out_dtype = out.params.z, out.params.dtype.storage
        self.lo, self.hi = fused_clamp(op, out.params, prof)

    def __call__(self, aq: np.ndarray, bq: np.ndarray) -> np.ndarray:
        ac = np.subtract(aq, np.float32(self.a.params.z), dtype=np.float32)
        bc = np.subtract(bq, np.float32(self.b.params.z), dtype=np.float32)
        chunk = max(1, int((EXACT32 - 1) // (256.0 * 256.0)))
        acc = exact_matmul(ac, bc, chunk)
        try:
            return NK.requant(acc, self.mult, self.mode, self.zo, self.lo, self.hi, self.out_dtype, channel_axis=-1)
        except OverflowRiskError as e:
            raise OverflowRiskError(f"node {self.name} (MatMul): {e}") from None


__all__ = ["BatchMatMul"]
