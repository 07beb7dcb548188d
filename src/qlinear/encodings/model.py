"""The in-memory model of quantization parameters: :class:`Encoding` and :class:`EncodingSet`.

Conventions (spec ``aimet-encoding-format.txt`` §1, version 2.0.0, which mirrors ONNX QuantizeLinear):

* ``scale`` and ``zero_point`` are stored the ONNX way: ``q = saturate(round(x / scale) + zero_point)``
  on the grid of ``dtype`` (signed types use the signed grid). AIMET's legacy ``offset`` on the unsigned
  grid (``offset = -zero_point - 2^(bw-1)`` for signed types, ``-zero_point`` for unsigned) exists only in
  the 0.6.1 / 1.0.0 serializers.
* granularity follows the shape of ``scale``, as in ONNX: per-tensor (``axis is None``, one value),
  per-channel (1-D, ``axis`` = channel axis), per-block (``block_size > 0``, ``axis`` = block axis, scale of the
  tensor's rank with ``dim / block_size`` on the block axis and 1 or the dim elsewhere), and LPBQ (per-block with
  ``int_scale`` = ``per_block_int_scale`` and ``scale`` = ``per_channel_float_scale`` kept with its dims, so the
  effective scale is ``int_scale * scale``, spec §1 "LPBQ").
* 1.0.0 and 0.6.1 files store no axes: such encodings are *unresolved* (``axis is None`` with a per-channel or
  flat per-block scale) until ``qlinear.graph.resolve(es, model)`` gives them the model's axes.
* float pass-through encodings (fp16, bf16: a cast, no scale) have ``scale is None``.
* the 2-bit shifted grid (AIMET ``zero_point_shift``: zero point -0.5, values {-1.5, -0.5, 0.5, 1.5}·scale) has no
  QuantizeLinear (``onnx_params`` refuses it); ``quantize``/``dequantize`` compute it as aimet-onnx's quantizer does.

Values are kept at the precision of the file (float64 scales), so files round-trip exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Literal, Mapping

import numpy as np

from qlinear.core import granularity as gr
from qlinear.core.types import Kind, QType, qtype
from qlinear.errors import EncodingError, EncodingKeyError

Role = Literal["activation", "param"]
Granularity = Literal["float", "per_tensor", "per_channel", "per_block", "lpbq"]
#: the AIMET spelling of each core granularity (:attr:`Encoding.granularity`)
SPELLING: dict[type, Granularity] = {gr.PerTensor: "per_tensor", gr.PerAxis: "per_channel", gr.PerBlock: "per_block",
                                     gr.LPBQ: "lpbq"}

#: Types an encoding may name: every quantized type of the core registry except the scale-only float8e8m0,
#: plus the float pass-through types.
PASSTHROUGH = ("float16", "bfloat16", "float32")
#: The newest QuantizeLinear opset whose types an AIMET file can name: 2.0.0's ``output_dtype`` list is
#: QuantizeLinear-25's (int2..int32, float8, float4e2m1; notes/aimet.md). The opset-28 float6 types
#: (``QType.opset``) exist as in-memory encodings and in Q/DQ models only; files refuse them.
AIMET_MAX_OPSET = 25


def aimet_refusal(name: str, t: QType) -> str | None:
    """Why ``t`` cannot be written to or read from an AIMET encodings file (None when it can)."""
    if t.opset <= AIMET_MAX_OPSET:
        return None
    return (f"{name}: {t.name} (QuantizeLinear opset {t.opset}) cannot be expressed in AIMET encodings: no AIMET "
            "format has the float6 types (2.0.0's output_dtype ends at float4e2m1 and int2); keep such encodings "
            "in memory or in the Q/DQ model (qlinear.graph.apply), or use float8e4m3fn / float4e2m1")


def _frozen_array(a: Any, dtype: Any, *, field_name: str) -> np.ndarray:
    try:
        arr = np.array(a, dtype=dtype, copy=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise EncodingError(f"{field_name}: cannot be read as {np.dtype(dtype).name} numbers ({e})",
                            where=field_name) from None
    arr.setflags(write=False)
    return arr


def _first_bad(mask: np.ndarray) -> str:
    idx = np.argwhere(mask)[0]
    return "".join(f"[{int(i)}]" for i in idx) if mask.ndim else ""


@dataclass(frozen=True, eq=False)
class Encoding:
    """Quantization parameters of one tensor (validated and immutable).

    Args:
        name: tensor name in the graph.
        dtype: quantized type name from the core registry (``"uint8"``, ``"int4"``, ``"float8e4m3fn"``…), or a
            float pass-through (``"float16"``, ``"bfloat16"``, ``"float32"``).
        scale: float64 array; 0-d or 1-element for per-tensor, 1-D per-channel, N-D per-block; for LPBQ the
            per-channel float scale (keepdims). ``None`` for pass-through types.
        zero_point: same shape as ``scale``; integer, or float for a shifted grid (int2 ``-0.5``); ``None``
            means zero (always ``None`` for float8 and pass-through types).
        axis: channel axis (per-channel) or block axis (per-block / LPBQ); ``None`` per-tensor or unresolved.
        block_size: elements per block (0 = not blocked).
        role: ``"activation"`` or ``"param"``.
        int_scale: LPBQ ``per_block_int_scale`` (integers in ``[1, 2^scale_bits]``).
        decompressed_bits: LPBQ decompressed bit width (``bw`` in 1.0.0; 8 for int4 weights with 4-bit scales).
    """

    name: str
    dtype: str
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    axis: int | None = None
    block_size: int = 0
    role: Role = "activation"
    int_scale: np.ndarray | None = None
    decompressed_bits: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise EncodingError(f"name: expected a non-empty string, got {self.name!r}", where="name")
        if self.role not in ("activation", "param"):
            raise EncodingError(f"role: expected 'activation' or 'param', got {self.role!r}", where="role")
        try:
            t = qtype(self.dtype, arg="dtype")
        except Exception:
            raise EncodingError(f"{self.name}: unknown dtype {self.dtype!r}; expected an ONNX type name such as "
                                "int8, uint8, int4, float8e4m3fn or float16", where="dtype") from None
        if t.kind is Kind.SCALE:
            raise EncodingError(f"{self.name}: dtype {t.name} is a scale type, not a quantized type", where="dtype")
        object.__setattr__(self, "dtype", t.name)
        if t.kind is Kind.REAL:
            for f in ("scale", "zero_point", "int_scale"):
                if getattr(self, f) is not None:
                    raise EncodingError(f"{self.name}: a {t.name} (pass-through) encoding has no {f}", where=f)
            return
        if self.scale is None:
            raise EncodingError(f"{self.name}: a {t.name} encoding needs a scale", where="scale")
        s = _frozen_array(self.scale, np.float64, field_name="scale")
        object.__setattr__(self, "scale", s)
        bad = ~np.isfinite(s) | (s <= 0)
        if bad.any():
            raise EncodingError(f"{self.name}: scale{_first_bad(bad)} = {float(s[bad][0] if s.ndim else s)!r}; "
                                "scales must be finite and > 0", where="scale" + _first_bad(bad))
        if self.block_size is None or isinstance(self.block_size, bool) or int(self.block_size) != self.block_size \
                or self.block_size < 0:
            raise EncodingError(f"{self.name}: block_size must be a positive integer, got {self.block_size!r}",
                                where="block_size")
        object.__setattr__(self, "block_size", int(self.block_size))
        if self.axis is not None:
            if isinstance(self.axis, bool) or not isinstance(self.axis, (int, np.integer)):
                raise EncodingError(f"{self.name}: axis must be an integer, got {self.axis!r}", where="axis")
            object.__setattr__(self, "axis", int(self.axis))
        s = self._canonical_per_tensor(s)
        self._check_granularity(s)
        self._check_zero_point(t, s)
        self._check_lpbq(t, s)

    @classmethod
    def _checked(cls, name: str, t: QType, scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None,
                 block_size: int, role: Role, int_scale: np.ndarray | None = None,
                 decompressed_bits: int | None = None, *, shapes_checked: bool = False) -> "Encoding":
        """An Encoding from values a reader validated in bulk (``v2_0_0.read_lifted``), for large files.

        The caller guarantees what the constructor would check value by value: ``t`` a quantized (integer or
        float8/float4) type; ``name`` a non-empty ``str``; ``axis``/``block_size`` Python ints (``block_size >= 0``);
        ``scale`` a read-only float64 array, finite and > 0; ``zero_point`` None or a read-only int64 array in
        ``t``'s range (integer types only); ``int_scale`` None or a read-only int64 array in
        ``[1, 2^(decompressed_bits - bits)]``. The shape rules are checked here exactly as by the constructor,
        unless ``shapes_checked``: this method already accepted an entry of the same type, axis, block size,
        decompressed bits and array shapes.
        """
        self = object.__new__(cls)
        object.__setattr__(self, "__dict__", {
            "name": name, "dtype": t.name, "scale": scale, "zero_point": zero_point, "axis": axis,
            "block_size": block_size, "role": role, "int_scale": int_scale, "decompressed_bits": decompressed_bits})
        if shapes_checked and (axis is not None or block_size or int_scale is not None or scale.ndim != 1
                               or scale.size != 1):
            return self  # the same shapes passed before, and the per-tensor canonical reshape does not apply
        s = self._canonical_per_tensor(scale)
        self._check_granularity(s)
        if zero_point is not None:
            self._check_zero_point_shape(self.zero_point, s)
        if int_scale is not None:
            self._check_decompressed_bits(t)
            self._check_lpbq_shapes(s, int_scale)
        return self

    def _canonical_per_tensor(self, s: np.ndarray) -> np.ndarray:
        if self.axis is None and not self.block_size and self.int_scale is None and s.size == 1 and s.ndim:
            s = s.reshape(())  # per-tensor: one canonical shape whatever the file wrote ([x] or x)
            object.__setattr__(self, "scale", s)
            if self.zero_point is not None:
                object.__setattr__(self, "zero_point", np.reshape(np.asarray(self.zero_point), ()))
        return s

    # --- validation ------------------------------------------------------------------------------
    def _check_granularity(self, s: np.ndarray) -> None:
        if self.block_size == 0 and self.int_scale is None:
            if self.axis is None and s.size != 1 and s.ndim != 1:
                raise EncodingError(f"{self.name}: a scale of shape {s.shape} needs an axis (per-channel) or a "
                                    "block_size (per-block)", where="scale")
            if self.axis is not None and s.ndim != 1:
                raise EncodingError(f"{self.name}: a per-channel scale must be 1-D, got shape {s.shape}",
                                    where="scale")
            if s.size == 0:
                raise EncodingError(f"{self.name}: empty scale", where="scale")
        elif self.block_size <= 0:
            raise EncodingError(f"{self.name}: LPBQ needs a positive block_size", where="block_size")
        if self.axis is not None and s.ndim > 0 and not -max(s.ndim, 1) <= self.axis < max(s.ndim, 1) \
                and self.block_size and self.int_scale is None:
            raise EncodingError(f"{self.name}: axis {self.axis} is out of range for a scale of rank {s.ndim}",
                                where="axis")

    def _check_zero_point(self, t: QType, s: np.ndarray) -> None:
        if self.zero_point is None:
            return
        if t.kind is Kind.FLOAT:
            raise EncodingError(f"{self.name}: a {t.name} encoding has no zero point", where="zero_point")
        z = _frozen_array(self.zero_point, np.float64, field_name="zero_point")
        self._check_zero_point_shape(z, s)
        if not np.isfinite(z).all():
            bad = ~np.isfinite(z)
            raise EncodingError(f"{self.name}: zero_point{_first_bad(bad)} is not finite",
                                where="zero_point" + _first_bad(bad))
        frac = z != np.floor(z)
        if frac.any():
            # only the 2-bit shifted grid (spec §1: "May be float for 2-bit encodings") has half-integer zero points
            if t.bits != 2 or not np.all(z[frac] * 2 == np.floor(z[frac] * 2)):
                raise EncodingError(f"{self.name}: zero_point{_first_bad(frac)} = {z[frac][0]} is not an integer "
                                    "(only 2-bit types may use a half-integer shifted grid)",
                                    where="zero_point" + _first_bad(frac))
        lo, hi = t.qmin - (0.5 if frac.any() else 0), t.qmax
        bad = (z < lo) | (z > hi)
        if bad.any():
            raise EncodingError(f"{self.name}: zero_point{_first_bad(bad)} = {z[bad][0]:g} is outside the {t.name} "
                                f"range [{t.qmin:g}, {t.qmax:g}]", where="zero_point" + _first_bad(bad))
        if not frac.any():
            z = _frozen_array(z, np.int64, field_name="zero_point")
        object.__setattr__(self, "zero_point", z)

    def _check_zero_point_shape(self, z: np.ndarray, s: np.ndarray) -> None:
        if z.shape != s.shape and not (z.size == 1 and s.size == 1):
            raise EncodingError(f"{self.name}: zero_point shape {z.shape} does not match scale shape {s.shape}",
                                where="zero_point")

    def _check_decompressed_bits(self, t: QType) -> None:
        if not t.is_int:
            raise EncodingError(f"{self.name}: LPBQ needs an integer dtype, got {t.name}", where="dtype")
        d = self.decompressed_bits
        if d is None or isinstance(d, bool) or int(d) != d or not t.bits < d <= 32:
            raise EncodingError(f"{self.name}: LPBQ decompressed_bits must be an integer in ({t.bits}, 32], got {d!r}",
                                where="bw")
        object.__setattr__(self, "decompressed_bits", int(d))

    def _check_lpbq(self, t: QType, s: np.ndarray) -> None:
        if self.int_scale is None:
            if self.decompressed_bits is not None:
                raise EncodingError(f"{self.name}: decompressed_bits is only meaningful for LPBQ", where="bw")
            return
        self._check_decompressed_bits(t)
        d = self.decompressed_bits
        i = _frozen_array(self.int_scale, np.float64, field_name="per_block_int_scale")
        hi = 2 ** (d - t.bits)
        bad = ~np.isfinite(i) | (i != np.floor(i)) | (i < 1) | (i > hi)
        if bad.any():
            raise EncodingError(f"{self.name}: per_block_int_scale{_first_bad(bad)} = {i[bad][0]!r} is not an integer "
                                f"in [1, {hi}]", where="per_block_int_scale" + _first_bad(bad))
        i = _frozen_array(i, np.int64, field_name="per_block_int_scale")
        self._check_lpbq_shapes(s, i)
        object.__setattr__(self, "int_scale", i)

    def _check_lpbq_shapes(self, s: np.ndarray, i: np.ndarray) -> None:
        if self.axis is not None:
            if s.ndim != i.ndim:
                raise EncodingError(f"{self.name}: per_channel_float_scale shape {s.shape} must keep the dims of "
                                    f"per_block_int_scale {i.shape}", where="per_channel_float_scale")
            try:
                np.broadcast_shapes(s.shape, i.shape)
            except ValueError:
                raise EncodingError(f"{self.name}: per_channel_float_scale shape {s.shape} does not broadcast "
                                    f"against per_block_int_scale {i.shape}",
                                    where="per_channel_float_scale") from None
        elif s.ndim != 1 or i.ndim != 1 or i.size % max(s.size, 1):
            raise EncodingError(f"{self.name}: unresolved LPBQ needs flat scales with len(per_block_int_scale) a "
                                f"multiple of len(scale), got {i.shape} and {s.shape}", where="per_block_int_scale")

    # --- facts ------------------------------------------------------------------------------------
    @property
    def qtype(self) -> QType:
        return qtype(self.dtype)

    @property
    def granularity(self) -> Granularity:
        """The AIMET spelling of :attr:`grain` (what the files and ``qlinear encodings inspect`` show)."""
        return "float" if self.scale is None else SPELLING[type(self.grain)]

    @property
    def grain(self) -> gr.Granularity | None:
        """The core granularity (``None`` for a float cast): :class:`~qlinear.core.granularity.PerTensor`,
        ``PerAxis(axis)``, ``PerBlock(axis, block_size)`` or ``LPBQ(axis, block_size, decompressed_bits - bits)``,
        the axis as stored (``None`` while unresolved). The AIMET spellings (:attr:`granularity`) are the files'."""
        if self.scale is None:
            return None
        if self.int_scale is not None:
            return gr.LPBQ(self.axis, self.block_size, self.decompressed_bits - self.qtype.bits)
        if self.block_size:
            return gr.PerBlock(self.axis, self.block_size)
        if self.axis is None and self.scale.size == 1:
            return gr.PerTensor()
        return gr.PerAxis(self.axis)

    @property
    def resolved(self) -> bool:
        """True when the axes are known (always, except per-channel/per-block read from 0.6.1 or 1.0.0)."""
        return self.scale is None or isinstance(self.grain, gr.PerTensor) or self.axis is not None

    @property
    def signed(self) -> bool:
        return self.qtype.signed

    @property
    def zero_point_or_zeros(self) -> np.ndarray:
        if self.zero_point is not None:
            return self.zero_point
        return np.zeros(self.scale.shape if self.scale is not None else (), np.int64)

    @property
    def shifted(self) -> bool:
        """The 2-bit shifted grid (AIMET ``zero_point_shift``: half-integer zero point)."""
        return self.zero_point is not None and self.zero_point.dtype.kind == "f"

    @property
    def effective_scale(self) -> np.ndarray:
        """The scale QuantizeLinear uses: ``int_scale * per_channel_float_scale`` in float32 for LPBQ
        (spec §1: ``y_scale = per_block_int_scale * per_channel_float_scale``), else ``scale``."""
        if self.scale is None:
            raise EncodingError(f"{self.name}: a {self.dtype} encoding has no scale")
        if self.int_scale is None:
            return self.scale
        self._need_resolved("its effective scale")
        return (self.int_scale.astype(np.float32) * self.scale.astype(np.float32)).astype(np.float64)

    def channel_scale(self, channel_axis: int, rank: int) -> np.ndarray:
        """One scale per output channel along ``channel_axis`` of a tensor of ``rank`` (a scalar per-tensor), what
        an int32 bias scale is built from: the scale itself; for LPBQ the per-channel float scale, the scale of the
        8-bit integers ``w_q * int_scale`` its blocks expand to (QNN's accumulator, AIMET's int32 bias, notes
        §2.9); for other per-block encodings the largest block scale of the channel."""
        if self.int_scale is not None:
            self._need_resolved("its per-channel scale")
            return np.asarray(self.scale, np.float64).reshape(-1)
        s = np.asarray(self.effective_scale, np.float64)
        if not isinstance(self.grain, gr.PerBlock):
            return s
        s = s.reshape(s.shape + (1,) * (rank - s.ndim)) if s.ndim < rank else s
        c = channel_axis % rank
        return s.max(axis=tuple(i for i in range(s.ndim) if i != c)).reshape(-1)

    def centered(self, x: Any) -> np.ndarray:
        """``quantize(x) - zero_point`` as int64 (the integers a kernel multiplies), any granularity."""
        x = np.asarray(x)
        q = self.quantize(x).astype(np.int64)
        if self.zero_point is None or not np.any(self.zero_point):
            return q
        p = self.onnx_params(x.shape)
        g = gr.resolve(x.shape, p["scale"].shape, p["axis"], p["block_size"])
        return q - gr.expand(np.asarray(p["zero_point"]).astype(np.int64), x.shape, g)

    def kernel_integers(self, x: Any) -> np.ndarray:
        """The integers an integer kernel multiplies (int64): :meth:`centered`, for LPBQ times each block's integer
        scale (8-bit values at the per-channel float scale, :meth:`channel_scale`)."""
        c = self.centered(x)
        if self.int_scale is None:
            return c
        i = expand_block_scale(np.asarray(self.int_scale, np.int64), c.shape, self.axis, self.block_size)
        return c * gr.expand(i, c.shape, gr.resolve(c.shape, i.shape, self.axis, self.block_size))

    def _need_resolved(self, what: str) -> None:
        if not self.resolved:
            raise EncodingError(f"{self.name}: the axes of this {self.granularity} encoding are unknown (0.6.1 and "
                                f"1.0.0 files do not store them), so {what} cannot be formed; resolve them against the model "
                                "with qlinear.graph.resolve(es, MODEL.onnx) (or qlinear.graph.load_encodings)")

    def replace(self, **changes: Any) -> "Encoding":
        return replace(self, **changes)

    # --- equality (exact: values, dtypes of the grid, shapes) --------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Encoding):
            return NotImplemented
        if (self.name, self.dtype, self.axis, self.block_size, self.role, self.decompressed_bits) != \
                (other.name, other.dtype, other.axis, other.block_size, other.role, other.decompressed_bits):
            return False
        for f in ("scale", "int_scale"):
            a, b = getattr(self, f), getattr(other, f)
            if (a is None) != (b is None) or (a is not None and (a.shape != b.shape or not np.array_equal(a, b))):
                return False
        if self.scale is None:
            return True
        za, zb = self.zero_point_or_zeros, other.zero_point_or_zeros
        return za.shape == zb.shape and np.array_equal(za, zb)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        g = self.granularity
        if g == "float":
            return f"Encoding({self.name!r}, {self.dtype})"
        s = self.scale
        rng = f"{s.min():.4g}" if s.size == 1 else f"{s.min():.4g}..{s.max():.4g}"
        extra = f", axis={self.axis}" if self.axis is not None else ""
        extra += f", block_size={self.block_size}" if self.block_size else ""
        return f"Encoding({self.name!r}, {self.dtype}, {g}, scale{list(s.shape)}={rng}{extra}, role={self.role})"

    # --- driving the core -------------------------------------------------------------------------
    def onnx_params(self, x_shape: tuple[int, ...] | None = None) -> dict[str, Any]:
        """Arguments for :func:`qlinear.quantize_linear` / :func:`qlinear.dequantize_linear` (float32 scale,
        zero point in the output type, ``axis``, ``block_size``).

        A blocked scale with size-1 dims (AIMET's ``(O, I/B, 1, 1)`` for Conv, spec §1 per-block) is expanded to
        the ONNX shape when ``x_shape`` is given.
        """
        t = self.qtype
        if t.kind is Kind.REAL:
            raise EncodingError(f"{self.name}: a {t.name} encoding is a cast, not a QuantizeLinear")
        self._need_resolved("QuantizeLinear parameters")
        if self.shifted:
            from qlinear.errors import UnsupportedError

            raise UnsupportedError(f"{self.name}: the shifted {t.name} grid (zero point {self.zero_point.flat[0]}) "
                                   "has no ONNX QuantizeLinear equivalent (ONNX zero points are integers)")
        s = self.effective_scale.astype(np.float32)
        z = None if t.is_float else self.zero_point_or_zeros.astype(t.storage)
        axis = 1 if self.axis is None else self.axis
        if isinstance(self.grain, gr.PerTensor):
            s = s.reshape(())
            z = None if z is None else z.reshape(())
        if self.block_size and x_shape is not None:
            s = expand_block_scale(s, x_shape, self.axis, self.block_size)
            z = None if z is None else expand_block_scale(z, x_shape, self.axis, self.block_size)
        return {"scale": s, "zero_point": z, "axis": axis, "block_size": self.block_size, "output_dtype": t.name}

    def quantize(self, x: Any, **kw: Any) -> np.ndarray:
        """``quantize_linear(x)`` with this encoding's parameters (LPBQ through its effective scale); the 2-bit
        shifted grid, which ONNX cannot express, is quantized as AIMET does (:meth:`_quantize_shifted`)."""
        from qlinear.core import quantize_linear

        x = np.asarray(x)
        if self.shifted:
            return self._quantize_shifted(x, **kw)
        p = self.onnx_params(x.shape)
        return quantize_linear(x, p["scale"], p["zero_point"], axis=p["axis"], block_size=p["block_size"],
                               output_dtype=p["output_dtype"], **kw)

    def dequantize(self, q: Any, **kw: Any) -> np.ndarray:
        """``dequantize_linear(q)`` with this encoding's parameters."""
        from qlinear.core import dequantize_linear

        shape = q.shape if hasattr(q, "shape") else np.shape(q)
        if self.shifted:
            return self._dequantize_shifted(q, **kw)
        p = self.onnx_params(tuple(shape))
        return dequantize_linear(q, p["scale"], p["zero_point"], axis=p["axis"], block_size=p["block_size"], **kw)

    def fake_quantize(self, x: Any) -> np.ndarray:
        """Quantize then dequantize (float32)."""
        return self.dequantize(self.quantize(x))

    # --- the 2-bit shifted grid (AIMET zero_point_shift; no ONNX equivalent) -----------------------------
    def _refuse_options(self, kw: dict[str, Any]) -> None:
        if kw:
            from qlinear.errors import UnsupportedError

            raise UnsupportedError(f"{self.name}: option(s) {', '.join(sorted(kw))} do not apply to the shifted "
                                   f"{self.dtype} grid (AIMET's arithmetic, not a QuantizeLinear); call without them")

    def _shifted_grid(self, x_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The float32 scale and float64 zero point of every element of a tensor of ``x_shape`` (broadcastable)."""
        self._need_resolved("its shifted grid")
        s, z = self.scale, self.zero_point
        if isinstance(self.grain, gr.PerTensor):
            s, z = s.reshape(()), z.reshape(())
        if self.block_size:
            s = expand_block_scale(s, x_shape, self.axis, self.block_size)
            z = expand_block_scale(z, x_shape, self.axis, self.block_size)
        g = gr.resolve(x_shape, s.shape, 1 if self.axis is None else self.axis, self.block_size)
        return gr.expand(s.astype(np.float32), x_shape, g), gr.expand(z, x_shape, g)

    def _quantize_shifted(self, x: np.ndarray, **kw: Any) -> np.ndarray:
        """AIMET's quantizer (libpymo ``quantizeValueCpu``) on the shifted grid, in float32 as it computes:
        clamp x to ``[offset, offset + 2^bits - 1]·scale`` (C ``fmin``/``fmax``), ``v = x/scale - offset`` on the
        unsigned grid (``offset = -zero_point - 2^(bits-1)`` signed, ``-zero_point`` unsigned), round half away from
        zero. Returned on the type's own grid (``q - zero_point`` is then the half-integer grid value), so
        :meth:`dequantize` gives ``scale·(q - zero_point)`` = AIMET's ``delta·(q_u + offset)`` bit for bit."""
        self._refuse_options(kw)
        t = self.qtype
        s32, z = self._shifted_grid(x.shape)
        shift = 2.0 ** (t.bits - 1) if t.signed else 0.0
        off = -z - shift  # AIMET's unsigned-grid offset (half-integer, exact in float32)
        n = 2.0 ** t.bits - 1
        s64 = s32.astype(np.float64)
        lo, hi = (off * s64).astype(np.float32), ((off + n) * s64).astype(np.float32)
        xc = np.fmax(np.fmin(np.asarray(x, np.float32), hi), lo)
        v = (xc / s32 - off.astype(np.float32)).astype(np.float32)
        r = np.trunc(v)
        r = np.where(np.abs(v - r) >= 0.5, r + np.sign(v), r)  # C round(): half away from zero, exactly
        r = np.clip(np.nan_to_num(r, nan=0.0), 0, n)
        return (r - shift).astype(t.storage)

    def _dequantize_shifted(self, q: Any, **kw: Any) -> np.ndarray:
        self._refuse_options(kw)
        q = np.asarray(q)
        s32, z = self._shifted_grid(q.shape)
        return (s32 * (q.astype(np.float32) - z.astype(np.float32))).astype(np.float32)


def expand_block_scale(s: np.ndarray, x_shape: tuple[int, ...], axis: int | None, block_size: int) -> np.ndarray:
    """Repeat size-1 dims of a blocked scale so it has the ONNX blocked shape (``x_shape`` with
    ``ceil(D/B)`` on the block axis)."""
    rank = len(x_shape)
    if s.ndim != rank:
        raise EncodingError(f"a blocked scale of shape {s.shape} does not have the tensor's rank {rank}")
    ax = axis % rank
    target = tuple(math.ceil(d / block_size) if i == ax else d for i, d in enumerate(x_shape))
    try:
        return np.ascontiguousarray(np.broadcast_to(s, target))
    except ValueError:
        raise EncodingError(f"a blocked scale of shape {s.shape} does not fit a tensor of shape {x_shape} "
                            f"with block_size {block_size} on axis {axis} (expected {target})") from None


@dataclass(frozen=True)
class Style:
    """How a file was (or will be) laid out, so that re-saving reproduces it byte for byte.

    ``aimet-onnx`` writes ``json.dump(sort_keys=True, indent=4)`` with float offsets (ints for LPBQ in 1.0.0);
    aimet-torch's ``sim.onnx.export`` writes ``indent=2`` in insertion order with int offsets.
    """

    indent: int | str | None = 4
    sort_keys: bool = True
    int_offsets: bool = False


AIMET_ONNX = Style()
AIMET_TORCH = Style(indent=2, sort_keys=False, int_offsets=True)


@dataclass(frozen=True, eq=False)
class EncodingSet:
    """Encodings by tensor name (insertion order kept), with the file-level fields.

    Construct with a list of :class:`Encoding`; duplicate names are an error.
    """

    encodings: tuple[Encoding, ...] = ()
    quantizer_args: Mapping[str, Any] | None = None
    excluded_layers: tuple[str, ...] | None = None
    producer: Mapping[str, Any] | None = None
    version: str | None = None
    style: Style = field(default=AIMET_ONNX)
    layout: Any = field(default=None, compare=False, repr=False)  # the file's layout as read (encodings._layout)
    _by_name: dict[str, Encoding] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        encs = tuple(self.encodings.values()) if isinstance(self.encodings, Mapping) else tuple(self.encodings)
        by: dict[str, Encoding] = {}
        for i, e in enumerate(encs):
            if not isinstance(e, Encoding):
                raise EncodingError(f"encodings[{i}]: expected an Encoding, got {type(e).__name__}")
            if e.name in by:
                raise EncodingError(f"duplicate encoding for tensor {e.name!r} (entries {list(by).index(e.name)} "
                                    f"and {i}); each tensor may have one encoding")
            by[e.name] = e
        object.__setattr__(self, "encodings", encs)
        object.__setattr__(self, "_by_name", by)
        if self.excluded_layers is not None:
            object.__setattr__(self, "excluded_layers", tuple(self.excluded_layers))

    def __len__(self) -> int:
        return len(self.encodings)

    def __iter__(self) -> Iterator[Encoding]:
        return iter(self.encodings)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    def __getitem__(self, name: str) -> Encoding:
        """The encoding of tensor ``name``; :class:`~qlinear.errors.EncodingKeyError` (a ``KeyError``) if none."""
        if not isinstance(name, str):
            raise EncodingKeyError(f"EncodingSet[{name!r}]: keys are tensor names (str), got {type(name).__name__}; "
                                   "use es.encodings[i] for the i-th encoding, es.names() for the names")
        e = self._by_name.get(name)
        if e is None:
            near = ", ".join(repr(n) for n in list(self._by_name)[:5]) or "none"
            more = ", ..." if len(self._by_name) > 5 else ""
            raise EncodingKeyError(f"EncodingSet[{name!r}]: no encoding for tensor {name!r} ({len(self)} encodings: "
                                   f"{near}{more}); use es.get(name) to get None instead")
        return e

    def get(self, name: str, default: Encoding | None = None) -> Encoding | None:
        return self._by_name.get(name, default) if isinstance(name, str) else default

    def names(self) -> list[str]:
        return list(self._by_name)

    @property
    def params(self) -> list[Encoding]:
        return [e for e in self.encodings if e.role == "param"]

    @property
    def activations(self) -> list[Encoding]:
        return [e for e in self.encodings if e.role == "activation"]

    def replace(self, **changes: Any) -> "EncodingSet":
        return replace(self, **changes)

    def with_encodings(self, encodings: Iterable[Encoding]) -> "EncodingSet":
        return replace(self, encodings=tuple(encodings))

    def __eq__(self, other: object) -> bool:
        """Same encodings (in any order) and the same file-level fields (version and style excluded)."""
        if not isinstance(other, EncodingSet):
            return NotImplemented
        return (self._by_name.keys() == other._by_name.keys()
                and all(self._by_name[k] == other._by_name[k] for k in self._by_name)
                and _norm(self.quantizer_args) == _norm(other.quantizer_args)
                and tuple(self.excluded_layers or ()) == tuple(other.excluded_layers or ()))

    __hash__ = None  # type: ignore[assignment]

    def same_parameters(self, other: "EncodingSet") -> bool:
        """Every tensor of ``self`` and ``other`` has the same parameters (file-level fields ignored)."""
        return self._by_name.keys() == other._by_name.keys() and all(
            self._by_name[k] == other._by_name[k] for k in self._by_name)

    def resolve(self, model: Any) -> "EncodingSet":
        """Refused: resolving axes and roles against a model belongs to the graph layer,
        ``qlinear.graph.resolve(es, model)``; :mod:`qlinear.encodings` never loads ONNX."""
        raise EncodingError(f"EncodingSet.resolve(model): moved to the graph layer; use "
                            f"qlinear.graph.resolve(es, model) (got model={type(model).__name__})")


def _norm(d: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(d or {})
