"""AIMET encoding format 1.0.0 (spec ``aimet-encoding-format.txt`` §2; notes ``aimet.md`` §3.3).

Lists of entries ``{name, dtype "INT"|"FLOAT", enc_type, bw, is_sym, scale[], offset[]}`` with flat arrays; offsets
on the unsigned grid. PER_BLOCK adds ``block_size``; LPBQ stores ``bw`` = decompressed width, ``compressed_bw``,
``scale`` = per-channel float scale, ``per_block_int_scale`` and offsets ``-2^(bw-1)`` (as JSON ints, even from
aimet-onnx). The int2 shifted grid is ``offset -2.0`` plus ``zero_point_shift [0.5]``.

Block arrays are flattened in (output channel, block) order: AIMET transposes the scales of encodings whose channel
axis comes after the block axis (Gemm transB=0, MatMul) before flattening. No axes are stored: per-channel and
per-block encodings load unresolved until ``qlinear.graph.resolve`` gives them the model's axes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core.types import Kind, qtype
from qlinear.encodings import _doc as d
from qlinear.encodings.legacy import int_dtype, offset_from_zero_point, zero_point_from_offset
from qlinear.encodings.model import Encoding, EncodingSet, Role, Style
from qlinear.errors import EncodingError, QlinearError

VERSION = "1.0.0"
_SECTIONS: tuple[tuple[str, Role], ...] = (("activation_encodings", "activation"), ("param_encodings", "param"))
_KEYS = {"scale": "scale", "zero_point": "offset", "int_scale": "per_block_int_scale", "block_size": "block_size",
         "decompressed_bits": "bw", "dtype": "bw"}
_ENC_TYPES = ("PER_TENSOR", "PER_CHANNEL", "PER_BLOCK", "LPBQ")


def read(ctx: d.Ctx, doc: dict) -> tuple[list[Encoding], bool, list[str] | None]:
    out: list[Encoding] = []
    int_offsets = False
    first_keys: list[str] | None = None
    for section, role in _SECTIONS:
        if section not in doc:
            continue
        for i, raw in enumerate(d.lst(ctx, doc[section], section)):
            where = f"{section}[{i}]"
            e = d.obj(ctx, raw, where)
            if first_keys is None:
                first_keys = list(e)
            enc, io = _entry(ctx, e, role, where)
            int_offsets |= io
            out.append(enc)
    return out, int_offsets, first_keys


def _entry(ctx: d.Ctx, e: dict, role: Role, where: str) -> tuple[Encoding, bool]:
    name = d.string(ctx, d.need(ctx, e, "name", where), f"{where}.name")
    kind = d.string(ctx, e.get("dtype", "INT"), f"{where}.dtype").upper()
    bw = d.integer(ctx, d.need(ctx, e, "bw", where), f"{where}.bw", lo=1, hi=64)
    enc_type = d.string(ctx, e.get("enc_type", "PER_TENSOR"), f"{where}.enc_type").upper()
    if enc_type not in _ENC_TYPES:
        raise ctx.error(f"{where}.enc_type", f"unknown enc_type {enc_type!r}; expected one of {', '.join(_ENC_TYPES)}")
    if kind == "FLOAT":
        if bw not in (16, 32) or "scale" in e:
            raise ctx.error(f"{where}.bw", f"a FLOAT encoding in 1.0.0 is a {bw}-bit cast; only 16 and 32 bits "
                                           "without scale are defined (scaled float8 needs 2.0.0)")
        return d.build(ctx, where, _KEYS, name=name, dtype=f"float{bw}", role=role), False
    if kind != "INT":
        raise ctx.error(f"{where}.dtype", f"unknown dtype {kind!r}; expected \"INT\" or \"FLOAT\"")
    sym = d.boolean(ctx, e.get("is_sym", False), f"{where}.is_sym")
    scale = d.numbers(ctx, d.need(ctx, e, "scale", where), f"{where}.scale").reshape(-1)
    raw_off = d.need(ctx, e, "offset", where)
    offset = d.numbers(ctx, raw_off, f"{where}.offset").reshape(-1)
    int_offsets = enc_type != "LPBQ" and isinstance(raw_off, list) and any(
        isinstance(v, int) and not isinstance(v, bool) for v in raw_off)
    if offset.shape != scale.shape:
        raise ctx.error(f"{where}.offset", f"has {offset.size} values but scale has {scale.size}")
    if "zero_point_shift" in e:
        offset = offset + _shift(ctx, e["zero_point_shift"], f"{where}.zero_point_shift", bw, enc_type, offset.size)
    kw: dict[str, Any] = {"name": name, "role": role}
    try:
        if enc_type == "LPBQ":
            cbw = d.integer(ctx, d.need(ctx, e, "compressed_bw", where), f"{where}.compressed_bw", lo=1, hi=32)
            dtype = int_dtype(cbw, True, name=name)
            ints = d.numbers(ctx, d.need(ctx, e, "per_block_int_scale", where),
                             f"{where}.per_block_int_scale").reshape(-1)
            expected = -(2.0 ** (bw - 1))
            bad = offset != expected
            if bad.any():
                k = int(np.argmax(bad))
                raise ctx.error(f"{where}.offset[{k}]", f"LPBQ offsets must be {int(expected)} (symmetric, "
                                                        f"bw {bw}), got {offset[k]:g}")
            kw.update(dtype=dtype, scale=scale, int_scale=ints, decompressed_bits=bw,
                      block_size=d.integer(ctx, d.need(ctx, e, "block_size", where), f"{where}.block_size", lo=1))
        else:
            dtype = int_dtype(bw, sym, name=name)
            zp = zero_point_from_offset(offset, qtype(dtype))
            kw.update(dtype=dtype, scale=scale, zero_point=zp)
            if enc_type == "PER_TENSOR":
                if scale.size != 1:
                    raise ctx.error(f"{where}.scale", f"PER_TENSOR needs one scale, got {scale.size}")
            elif enc_type == "PER_BLOCK":
                kw["block_size"] = d.integer(ctx, d.need(ctx, e, "block_size", where), f"{where}.block_size", lo=1)
    except QlinearError as err:
        if isinstance(err, EncodingError) and err.path == ctx.path and err.where:
            raise
        raise ctx.error(where, str(err)) from None
    return d.build(ctx, where, _KEYS, **kw), int_offsets


def _shift(ctx: d.Ctx, raw: Any, where: str, bw: int, enc_type: str, n: int) -> np.ndarray:
    """The ``zero_point_shift`` array (AIMET: ``offset % 1.0`` of the int2 shifted grid, written only when non-zero):
    one value or one per offset, each 0 or 0.5, on a 2-bit non-LPBQ encoding."""
    shift = d.numbers(ctx, raw, where).reshape(-1)
    if shift.size not in (1, n):
        raise ctx.error(where, f"has {shift.size} values but offset has {n}")
    if not shift.any():
        return shift
    if enc_type == "LPBQ":
        raise ctx.error(where, "a zero-point shift on an LPBQ encoding is not defined (AIMET refuses it: zero-point "
                               "shift is not supported with quantized scales); remove the field")
    if bw != 2:
        raise ctx.error(where, f"a zero-point shift is defined for 2-bit encodings only (AIMET's int2 grid "
                               f"{{-1.5, -0.5, 0.5, 1.5}}), got bw {bw}; remove the field or set bw 2")
    bad = (shift != 0.0) & (shift != 0.5)
    if bad.any():
        k = int(np.argmax(bad))
        raise ctx.error(f"{where}[{k}]", f"{shift[k]:g} is not a zero-point shift AIMET writes (0 or 0.5, the "
                                         "half-step of the int2 shifted grid)")
    return shift


def write(es: EncodingSet, style: Style, **_: Any) -> dict:
    doc: dict[str, Any] = {}
    for section, role in _SECTIONS:
        doc[section] = [_write_entry(e, style) for e in es.encodings if e.role == role]
    return d.legacy_tail(doc, es, VERSION)


def oc_major(a: np.ndarray, block_axis: int | None) -> np.ndarray:
    """Flatten a block-shaped array in (output channel, block) order, as AIMET 1.0.0 does."""
    if block_axis is None or a.ndim < 2:
        return a.reshape(-1)
    b = block_axis % a.ndim
    others = [i for i in range(a.ndim) if i != b]
    ch = next((i for i in others if a.shape[i] > 1), others[0])
    order = [ch, b] + [i for i in others if i != ch]
    return a.transpose(order).reshape(-1)


def _check_two_axes(e: Encoding, grid: np.ndarray) -> None:
    """Refuse a block grid that varies along more than its channel and block axes (a Conv whose kernel is larger
    than 1x1, blocked at each kernel position as ONNX blocks): 1.0.0 stores (channel, block) values only, which
    AIMET 2.42 reshapes to ``(O, I/B, 1, 1)`` and ``qlinear.graph.resolve`` to (channels x blocks); both refuse the
    longer list. 2.0.0 stores the grid with its shape."""
    if grid.ndim < 3 or e.axis is None:
        return
    b = e.axis % grid.ndim
    sizes = sorted((grid.shape[i] for i in range(grid.ndim) if i != b), reverse=True)
    if sizes[1] > 1:
        why, to = CANNOT_HOLD["kernel_blocks"]
        raise EncodingError(f"{e.name}: its blocks (scale shape {list(grid.shape)}, block axis {e.axis}) also vary "
                            f"along a third axis (a Conv kernel larger than 1x1), which 1.0.0 cannot hold ({why}); "
                            f"write {to}")


#: what 1.0.0 cannot hold (:func:`qlinear.encodings.io.cannot_hold`): kind -> (why, the versions that can);
#: ``kernel_blocks``: the blocks of a Conv weight whose kernel is larger than 1x1 (one block grid per position)
CANNOT_HOLD = {"float": ("its FLOAT entries have no scale", "2.0.0"),
               "kernel_blocks": ("it stores one value per channel and block; AIMET reads them as (O, I/B, 1, 1)",
                                 "2.0.0")}


def _write_entry(e: Encoding, style: Style) -> dict:
    t = e.qtype
    if t.kind is Kind.REAL:
        return {"name": e.name, "dtype": "FLOAT", "bw": t.bits, "enc_type": "PER_TENSOR"}
    if t.kind is Kind.FLOAT:
        why, to = CANNOT_HOLD["float"]
        raise EncodingError(f"{e.name}: {t.name} encodings cannot be expressed in 1.0.0 ({why}); write {to}")
    g = e.granularity
    out: dict[str, Any] = {"name": e.name, "dtype": "INT"}
    if g in ("lpbq", "per_block"):
        _check_two_axes(e, e.int_scale if g == "lpbq" else e.scale)
    if g == "lpbq":
        bw = e.decompressed_bits
        c = e.scale.size
        out.update(bw=bw, is_sym=True, scale=e.scale.reshape(-1).tolist(), offset=[-(2 ** (bw - 1))] * c,
                   enc_type="LPBQ", block_size=e.block_size, compressed_bw=t.bits,
                   per_block_int_scale=oc_major(e.int_scale, e.axis).tolist())
        return out
    off = offset_from_zero_point(e.zero_point_or_zeros, t)
    if g == "per_block":
        sc, off = oc_major(e.scale, e.axis), oc_major(off, e.axis)
    else:
        sc, off = e.scale.reshape(-1), off.reshape(-1)
    shift = None
    if e.shifted:
        shift = (off % 1.0).tolist()
        off = off // 1.0
    out.update(bw=t.bits, is_sym=bool(t.signed), scale=sc.tolist(),
               offset=[d.offset_value(o, style) for o in off.tolist()],
               enc_type={"per_tensor": "PER_TENSOR", "per_channel": "PER_CHANNEL", "per_block": "PER_BLOCK"}[g])
    if g == "per_block":
        out["block_size"] = e.block_size
    if shift is not None:
        out["zero_point_shift"] = shift
    return out
