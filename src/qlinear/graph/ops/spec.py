"""The record the operator registry holds for one ONNX op type, and the registry itself.

An :class:`OpSpec` says what qlinear knows about an operator, whatever layer asks: the quantization plan (weighted
input, fused activations, data movement, outputs that are not float data), the Q/DQ parser (clamps a runtime fuses
into the operator before it), the TFLite int8 table (fixed output parameters, same-scale operators, the builtins
and which writer of :mod:`qlinear.tflite.export` emits them; which emitter of :mod:`qlinear.tflite.generic` moves its
integers or writes it as a float island) and the integer kernel family that
:mod:`qlinear.kernels.run` dispatches to. The graph layer holds only this description: the kernels and the TFLite
writers register their implementations under the names given here (``kernel``, ``tflite_writer``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: the roles an op type can play (``OpSpec.roles``); :func:`with_role` refuses any other name
ROLES = {
    "weighted": "a weight initializer on input ``weight_input``, quantized per output channel (plan, check)",
    "fuses_activation": "a runtime fuses a following Relu/Clip into it (no quantizer in between)",
    "fusable_activation": "an activation a runtime fuses into its producer (plan)",
    "qdq_fused_activation": "a clamp the Q/DQ parser folds into the operator before it (TFLite fused activation)",
    "data_movement": "moves values without computing: its output reuses its input's encoding (plan)",
    "same_scale_tflite": "TFLite requires its output to have its input's scale and zero point",
    "non_float": "its outputs are not float data to quantize (shapes, indices, booleans, casts)",
    "shape_computation": "computes from tensor shapes only: folds to a constant once the input shapes are fixed",
    "smooth_activation": "a smooth activation function (Gelu and its forms, Sigmoid...): heavy-tailed MatMul inputs",
    "mlp_boundary": "the search for a smooth activation above a MatMul input stops here",
    "affine_norm": "a normalization ending in x_hat * scale (+ bias), scale on input 1, bias on input 2: per-input-"
                   "channel factors fold into them (SmoothQuant, AWQ)",
    "transformer_norm": "with Softmax and a constant-weight MatMul, marks a transformer graph",
    "lookup": "an embedding lookup when its data input is a float initializer",
    "constant_operand": "an elementwise operator whose float constant operand TFLite quantizes (int8 symmetric "
                        "per-tensor) instead of running it as a float island",
    "float_on_ort": "ONNX Runtime's CPU session fuses no Q/DQ into it: between them it runs in float, so target ort "
                    "leaves a tensor float whose producer and readers all run so (plan)",
    "ort_quantized_output": "ONNX Runtime's CPU session makes an integer kernel of it (QLinearConv) only when a "
                            "QuantizeLinear reads its output: with a float output it runs in float",
    "conv_affine": "an elementwise operator whose per-channel constant operand after a Conv folds into the Conv's "
                   "weight and bias (Mul) or bias (Add, Sub) before quantization (FoldConvAffine)",
    "constant_clamp": "a clamp when its second input is a constant (Max/Min): fused like a Relu/Clip",
    "qdq_structure": "part of the Q/DQ encoding itself (QuantizeLinear, DequantizeLinear, Constant), not an operator",
}


@dataclass(frozen=True)
class OpSpec:
    """What qlinear knows about one ONNX op type (module docstring)."""

    op_type: str
    family: str                                   # the registry module that defines it
    roles: frozenset[str] = frozenset()
    weight_input: int | None = None               # index of the weight input (role ``weighted``)
    bias_input: int | None = None                 # index of the bias input, if the op has one
    fixed_tflite: tuple[float, int] | None = None     # TFLite int8 fixed output (scale, zero point)
    fixed_tflite16: tuple[float, int] | None = None   # TFLite 16x8 fixed output (scale, zero point)
    tflite_builtins: tuple[str, ...] = ()         # the TFLite builtins it exports as
    tflite_writer: str | None = None              # the writer of qlinear.tflite.export that emits them
    kernel: str | None = None                     # the integer kernel family of qlinear.kernels.run
    tflite_move: str | None = None                # emitter of qlinear.tflite.generic moving its integers
    tflite_island: str | None = None              # emitter of qlinear.tflite.generic writing it in float
    tflite_float_builtin: str | None = None       # the float builtin of a one-builtin island (unary/binary)
    output_range: tuple[float, float] | None = None   # the bounds of its output whatever the input (Sigmoid: 0, 1)

    def has(self, role: str) -> bool:
        return role in self.roles


@dataclass
class Registry:
    """Op type -> :class:`OpSpec`, in registration order (families in the order :mod:`qlinear.graph.ops` loads them)."""

    specs: dict[str, OpSpec] = field(default_factory=dict)

    def add(self, family: str, op_types: str | tuple[str, ...], roles: tuple[str, ...] = (), **fields) -> None:
        """Register ``op_types`` (one name, or several sharing everything but the name) in ``family``."""
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown operator roles {sorted(unknown)}; known: {', '.join(ROLES)}")
        for t in (op_types,) if isinstance(op_types, str) else op_types:
            if t in self.specs:
                raise ValueError(f"operator {t} registered twice ({self.specs[t].family} and {family})")
            self.specs[t] = OpSpec(t, family, frozenset(roles), **fields)


REGISTRY = Registry()


def with_role(role: str) -> tuple[str, ...]:
    """The op types playing ``role`` (a key of :data:`ROLES`), in registry order."""
    if role not in ROLES:
        raise ValueError(f"unknown operator role {role!r}; known: {', '.join(ROLES)}")
    return tuple(t for t, s in REGISTRY.specs.items() if role in s.roles)
