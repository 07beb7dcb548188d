"""``run_integer(model, inputs, mode)``: execute a Q/DQ ONNX model in integer arithmetic, as a given runtime does.

The model is read once (:func:`qlinear.graph.qdq.parse`) into steps (:class:`IntegerModel`); the Q/DQ patterns a
runtime fuses run as integer kernels:

* ``DQ(x), DQ(W)[, DQ(bias int32)] -> Conv | Gemm | MatMul [-> Relu | Clip] -> Q`` : Conv2D (regular, grouped,
  depthwise) / fully connected with the fused clamp, exact accumulation, requantized per channel;
* ``DQ(a), DQ(b) -> Add | Sub | Mul -> Q``; ``DQ -> MaxPool | AveragePool | GlobalAveragePool | ReduceMean -> Q``;
  ``DQ -> Concat -> Q``; ``DQ -> Softmax | Sigmoid | Tanh -> Q``; ``DQ -> Relu | Clip -> Q`` (requantize + clamp);
* data movement (Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Identity) moves the integers.

Which kernel runs an operator is the operator registry's (:mod:`qlinear.graph.ops`, ``OpSpec.kernel``);
:data:`qlinear.kernels.steps.KERNELS` holds one kernel per family (:mod:`qlinear.kernels.layer` the Conv/Gemm/MatMul
layer) and this module only executes the steps they prepare.

Graph inputs are quantized by their QuantizeLinear and outputs dequantized, so the result is ``{output name: array}``
as ONNX Runtime returns it. Any other node runs in float on the dequantized values (the ONNX reference evaluator), as
a Q/DQ runtime without that kernel would.

**Modes.** A requantization mode of :mod:`qlinear.kernels.requant` (``fixed_double``, ``fixed_single``, ``ruy_x86``,
``f64_round_away``, ``f32_rne``, ``onednn``) applies that formula to every operator (ONNX QuantizeLinear at the
inputs; fused clamps rounded half away from zero in the fixed-point modes, to even in the float ones). A runtime
profile picks, operator by operator, what that runtime's kernels do (:data:`PROFILES`):

==================  =====================================================================================
``litert_ref``      LiteRT 2.3.0 reference kernels (``BUILTIN_REF``): CONV_2D/DEPTHWISE ``fixed_double``,
                    FULLY_CONNECTED ``f64_round_away``, ADD/SUB/MUL/MEAN/pools/requantize the reference
                    fixed-point formulas, QUANTIZE ``round_half_away(x / scale)`` in float32, clamps half away
``litert_xnnpack``  LiteRT's default resolver (XNNPACK delegate): ``f32_rne`` kernels, XNNPACK's ADD/SUB
                    and MEAN (``xnnpack`` in :mod:`qlinear.kernels.elementwise` / :mod:`~qlinear.kernels.pool`),
                    clamps half away
``ort``             ONNX Runtime on the Q/DQ model: ``f32_rne`` (same as that mode)
``ort_fused``       ONNX Runtime's fused int8 path on x86 (QLinearConv/QGemm ``f32_rne``, QLinearAdd's MLAS AVX2
                    formula, ReduceMean left in float as ORT leaves it); an operator with a 16-bit activation or
                    a weight other than 8-bit is not fused by ORT's CPU provider and runs in float between its
                    DequantizeLinear and QuantizeLinear, as there
==================  =====================================================================================

Every mode checks the accumulators: one outside int32 raises :class:`~qlinear.errors.OverflowRiskError` (16x8 layers
accumulate in int64, as TFLite does).
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from qlinear.core import quantize_linear
from qlinear.errors import KernelError, QlinearError
from qlinear.graph import ops
from qlinear.graph.qdq import QOp, parse
from qlinear.kernels.layer import NotInteger
from qlinear.kernels.profiles import PROFILES, Profile, profile
from qlinear.kernels.requant import round_half_away
from qlinear.kernels.steps import KERNELS, Env, FloatNode, Step


class IntegerModel:
    """A Q/DQ model prepared for integer execution in ``mode`` (see the module docstring); ``run`` many times."""

    def __init__(self, model: Any, mode: str = "f32_rne") -> None:
        self.profile = profile(mode)
        self.mode = mode
        self.qg = parse(model)
        self.steps: list[Callable[[Env], None]] = []
        self._compile()

    # ------------------------------------------------------------------------------------------ compile
    def _compile(self) -> None:
        qg, prof = self.qg, self.profile
        m = qg.model
        fused: set[int] = set()
        for op in qg.ops.values():
            step = self._integer_step(op)
            if step is not None:
                op._step = step  # type: ignore[attr-defined]
                if op.act_node is not None:
                    fused.add(id(op.act_node))
                if op.q_node is not None:
                    fused.add(id(op.q_node))
        for n in m.graph.node:
            if n.op_type in ("Constant", "DequantizeLinear") or id(n) in fused:
                continue
            if n.op_type == "QuantizeLinear":
                self.steps.append(self._quantize_step(n))
                continue
            key = n.name or (n.output[0] if n.output else "")
            op = qg.ops.get(key)
            if op is not None and getattr(op, "_step", None) is not None:
                self.steps.append(op._step)  # type: ignore[attr-defined]
                continue
            if all(not i or i in qg.consts for i in n.input) and n.output and all(o in qg.consts for o in n.output):
                continue  # folded constant
            if n.op_type in ops.CONSTANT_CLAMPS:
                self.steps.append(self._clamp_step(n))
                continue
            self.steps.append(self._float_step(n))
        del prof

    def _quantize_step(self, n: onnx.NodeProto) -> Callable[[Env], None]:
        qv = self.qg.values.get(n.output[0])
        src, out = n.input[0], n.output[0]
        tfl = self.profile.quantize == "tflite"

        def run(env: Env) -> None:
            x = env.float_of(src)
            if qv is None:
                raise KernelError(f"QuantizeLinear {n.name or out}: non-constant parameters")
            p = qv.params
            if tfl and p.per_tensor and p.dtype.is_int and np.asarray(x).dtype == np.float32:
                # TFLite reference QUANTIZE: (int32) TfLiteRound(val / (float)scale) + zp, ties away
                with np.errstate(over="ignore", invalid="ignore"):
                    r = round_half_away(np.asarray(x, np.float32) / np.float32(p.s))
                q = np.clip(r + p.z, p.dtype.qmin, p.dtype.qmax).astype(p.dtype.storage)
            else:
                z = p.zero_point.astype(p.dtype.storage) if p.dtype.is_int else None
                kw: dict[str, Any] = {"axis": 1 if p.axis is None else p.axis, "block_size": p.block_size}
                if z is None:
                    kw["output_dtype"] = p.dtype.name
                q = quantize_linear(x, p.scale if p.scale.size > 1 or p.block_size else p.scale.reshape(()),
                                    None if z is None else (z if z.size > 1 or p.block_size else z.reshape(())), **kw)
            env.ints[out] = np.asarray(q)

        return run

    def _clamp_step(self, n: onnx.NodeProto) -> Callable[[Env], None]:
        """A ``Max``/``Min``: on the integers when its input is an integer tensor and its other input an integer
        constant (:mod:`qlinear.graph.integer_clamps`; ONNX Runtime's int8 ``Min``/``Max``), else in float."""
        floating = self._float_step(n)
        consts = self.qg.consts
        pick = np.minimum if n.op_type == "Min" else np.maximum

        def run(env: Env) -> None:
            x = [i for i in n.input if i not in consts]
            c = [consts[i] for i in n.input if i in consts]
            if len(x) == 1 and len(c) == 1 and x[0] in env.ints and np.asarray(c[0]).dtype.kind in "iu":
                env.ints[n.output[0]] = pick(env.ints[x[0]], np.asarray(c[0], env.ints[x[0]].dtype))
            else:
                floating(env)

        return run

    def _float_step(self, n: onnx.NodeProto) -> Callable[[Env], None]:
        ev = FloatNode(n, self.qg.model)

        def run(env: Env) -> None:
            vals = [env.float_of(i) if i else None for i in n.input]
            try:
                res = ev(vals, [env.ints[x] if x in env.ints else env.float_of(x) for x in ev.outer])
            except QlinearError:
                raise
            except Exception as e:  # noqa: BLE001 - onnx.reference raises what its operator raises
                first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
                raise KernelError(f"node {n.name or n.output[0]} ({n.op_type}) runs in float (onnx.reference) and "
                                  f"failed: {first}; run_integer cannot run this model (its float parts: subgraphs "
                                  "reading outer values, shapes fixed for another batch...); compare the outputs "
                                  "with ONNX Runtime itself") from None
            for o, v in zip(n.output, res):
                env.floats[o] = v

        return run

    def _integer_step(self, op: QOp) -> Step | None:
        """The integer kernel of ``op`` (the registry's kernel family, :data:`KERNELS`), or None: it runs in
        float."""
        kernel = KERNELS.get(ops.kernel_of(op.op) or "")
        if kernel is None or not self._fusable(op):
            return None
        try:
            return kernel(op, self.profile, self.qg)
        except NotInteger:
            return None

    def _fusable(self, op: QOp) -> bool:
        """Whether the runtime fuses ``op`` by its integer widths (``Profile.fused_bits``; int32 biases aside)."""
        bits = self.profile.fused_bits
        vals = [v for v in [*op.inputs, op.output] if v is not None and not (v.const is not None
                                                                              and v.params.dtype.bits == 32)]
        return not bits or all(v.params.dtype.is_int and v.params.dtype.bits == bits for v in vals)

    # ------------------------------------------------------------------------------------------ run
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        qg = self.qg
        m = qg.model
        feed = {}
        for v in m.graph.input:
            if v.name in qg.index.initializers:
                continue
            if v.name not in inputs:
                raise KernelError(f"missing model input {v.name!r}")
            feed[v.name] = np.asarray(inputs[v.name])
        env = Env(qg, feed)
        for step in self.steps:
            step(env)
        out = {}
        for o in m.graph.output:
            out[o.name] = env.ints[o.name] if o.name in env.ints else env.float_of(o.name)
        return out


def run_integer(model: Any, inputs: dict[str, np.ndarray], *, mode: str = "f32_rne") -> dict[str, np.ndarray]:
    """Run a Q/DQ model with the integer kernels in ``mode`` (a requantization mode or a runtime profile, module
    docstring). For many runs, build an :class:`IntegerModel` once."""
    return IntegerModel(model, mode).run(inputs)


__all__ = ["PROFILES", "IntegerModel", "Profile", "profile", "run_integer"]
