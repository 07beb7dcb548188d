"""AIMET encoding format 2.0.0 (spec ``aimet-encoding-format.txt`` §1; notes ``aimet.md`` §3.4).

One list ``encodings`` mirroring ONNX QuantizeLinear: ``name``, ``output_dtype``, ``y_scale`` (number, 1-D or N-D
list), ``y_zero_point`` (omitted when 0; float -0.5 for the int2 shifted grid), ``axis`` (channel axis per-channel,
block axis per-block), ``block_size``; LPBQ replaces ``y_scale`` by ``per_block_int_scale`` and a keepdims
``per_channel_float_scale``. Float pass-through types (fp16) have no entry, and params and activations are not
separated: the reader marks as params the int32 (bias), per-channel, per-block and signed per-tensor entries (AIMET
writes activations unsigned by default); ``qlinear.graph.resolve`` with the model makes it exact.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from qlinear.core.types import Kind, QType, qtype
from qlinear.encodings import _doc as d
from qlinear.encodings import _scan
from qlinear.encodings._meta import read_meta_scale, write_meta_scale
from qlinear.encodings.model import Encoding, EncodingSet, Style, aimet_refusal
from qlinear.errors import EncodingError, QlinearError

VERSION = "2.0.0"
KEYS = {"scale": "y_scale", "zero_point": "y_zero_point", "int_scale": "per_block_int_scale",
        "dtype": "output_dtype", "axis": "axis", "block_size": "block_size"}
LPBQ_KEYS = dict(KEYS, scale="per_channel_float_scale")


def read(ctx: d.Ctx, doc: dict, *, meta_scales: bool = False) -> tuple[list[Encoding], bool, list[str] | None]:
    out: list[Encoding] = []
    raw = d.lst(ctx, d.need(ctx, doc, "encodings", "$"), "encodings")
    first_keys = list(raw[0]) if raw and isinstance(raw[0], dict) else None
    for i, r in enumerate(raw):
        where = f"encodings[{i}]"
        out.append(read_entry(ctx, d.obj(ctx, r, where), where, meta_scales=meta_scales))
    return out, False, first_keys


_BULK_KEYS = frozenset({"name", "output_dtype", "y_scale", "y_zero_point", "axis", "block_size"})
_BULK_LPBQ_KEYS = frozenset({"name", "output_dtype", "per_block_int_scale", "per_channel_float_scale", "axis",
                             "block_size"})
_QTYPES: dict[str, QType | None] = {}


def _bulk_qtype(name: str) -> QType | None:
    """The quantized type spelled exactly ``name`` (None for aliases, float pass-through and scale types)."""
    if name not in _QTYPES:
        try:
            t = qtype(name)
        except QlinearError:
            t = None
        ok = t is not None and t.name == name and t.kind in (Kind.INT, Kind.FLOAT) and aimet_refusal(name, t) is None
        _QTYPES[name] = t if ok else None
    return _QTYPES[name]


def read_lifted(doc: dict, arrays: _scan.Arrays) -> tuple[list[Encoding], list[str] | None] | None:
    """The entries of a scanned document (its number arrays lifted into ``arrays``, :mod:`._scan`), validated
    with the per-array statistics instead of value by value; None as soon as an entry is not plain (an error, a
    2.1.0 meta-encoding, an unusual field): :func:`read` on the parsed text then reads, and words, everything.
    For an entry both accept, both give the same :class:`Encoding`."""
    raw = doc.get("encodings")
    if type(raw) is not list:
        return None
    out: list[Encoding] = []
    plain, lpbq_keys, qtypes = _BULK_KEYS, _BULK_LPBQ_KEYS, _QTYPES
    idx, positive, integral, lo_, hi_ = arrays.index, arrays.positive, arrays.integral, arrays.lo, arrays.hi
    accepted: set[tuple] = set()  # (type, axis, block, shapes) of entries whose shape checks passed
    for r in raw:
        if type(r) is not dict:
            return None
        keys = r.keys()
        if keys <= plain and "y_scale" in r:
            lpbq, sv = False, r["y_scale"]
        elif keys <= lpbq_keys and "per_channel_float_scale" in r and "per_block_int_scale" in r:
            lpbq, sv = True, r["per_channel_float_scale"]
        else:
            return None
        name, dtype, axis, block = r.get("name"), r.get("output_dtype"), r.get("axis"), r.get("block_size", 0)
        if type(name) is not str or not name or type(dtype) is not str or type(block) is not int or \
                ("axis" in r and type(axis) is not int):
            return None
        t = qtypes[dtype] if dtype in qtypes else _bulk_qtype(dtype)
        if t is None or block < 0 or ("block_size" in r and block < 1) or (lpbq and (not t.is_int or not block)):
            return None
        k = idx(sv)
        if k is not None:
            if not positive[k]:
                return None
            s = arrays.floats(k)
        elif (type(sv) is float or type(sv) is int) and math.isfinite(sv) and sv > 0:
            s = np.array(float(sv))
            s.setflags(write=False)
        else:
            return None
        z = n = None
        if "y_zero_point" in r:
            z = _bulk_zero_point(r["y_zero_point"], t, arrays)
            if z is None:
                return None
        if lpbq:
            k = idx(r["per_block_int_scale"])
            if k is None or not (integral[k] and lo_[k] >= 1 and hi_[k] <= 2 ** t.bits):
                return None
            n = arrays.ints(k)
        role = guess_role(t, axis, block, s.size)
        key = (t.name, axis, block, s.shape, None if z is None else z.shape, None if n is None else n.shape)
        try:
            out.append(Encoding._checked(name, t, s, z, axis, block, role, n, 2 * t.bits if lpbq else None,
                                         shapes_checked=key in accepted))
        except QlinearError:
            return None
        accepted.add(key)
    if arrays.used != arrays.count:  # an array somewhere else (quantizer_args...): read the parsed text
        return None
    return out, (list(raw[0]) if raw and isinstance(raw[0], dict) else None)


def _bulk_zero_point(zv: Any, t: QType, arrays: _scan.Arrays) -> np.ndarray | None:
    """A ``y_zero_point`` for :func:`read_lifted`: integers in ``t``'s range, or the 2-bit shifted grid's odd halves;
    None for anything else (the plain reader then reads, and words, it)."""
    if not t.is_int:
        return None
    k = arrays.index(zv)
    if k is not None:
        if arrays.integral[k] and arrays.lo[k] >= t.qmin and arrays.hi[k] <= t.qmax:
            return arrays.ints(k)
        if t.bits == 2 and arrays.lo[k] >= t.qmin - 0.5 and arrays.hi[k] <= t.qmax:
            return _shifted(arrays.floats(k))
        return None
    if type(zv) is int and t.qmin <= zv <= t.qmax:
        z = np.array(zv, np.int64)
        z.setflags(write=False)
        return z
    if type(zv) is float and t.bits == 2 and t.qmin - 0.5 <= zv <= t.qmax:
        return _shifted(np.array(zv))
    return None


def _shifted(z: np.ndarray) -> np.ndarray | None:
    """A 2-bit shifted-grid zero point (AIMET ``y_zero_point -0.5``) for the bulk reader: every value an odd multiple
    of 0.5 (what AIMET writes, always as a JSON float, so a re-save writes the same text); None otherwise."""
    twice = z * 2
    if not np.all((twice == np.floor(twice)) & (np.abs(np.fmod(twice, 2)) == 1)):
        return None
    z = np.array(z, np.float64)
    z.setflags(write=False)
    return z


def read_entry(ctx: d.Ctx, e: dict, where: str, *, meta_scales: bool = False) -> Encoding:
    name = d.string(ctx, d.need(ctx, e, "name", where), f"{where}.name")
    if "bw" in e:
        raise ctx.error(f"{where}.bw", "\"bw\" is a 1.0.0 field and is not allowed in 2.x entries")
    dtype = d.string(ctx, d.need(ctx, e, "output_dtype", where), f"{where}.output_dtype")
    try:
        t = qtype(dtype)
    except QlinearError:
        raise ctx.error(f"{where}.output_dtype", f"unknown output_dtype {dtype!r}; expected an ONNX type name such "
                                                 "as uint8, int8, int4, int32 or float8e4m3fn") from None
    why = aimet_refusal(name, t)
    if why is not None:
        raise ctx.error(f"{where}.output_dtype", why)
    kw: dict[str, Any] = {"name": name, "dtype": t.name}
    if "axis" in e:
        kw["axis"] = d.integer(ctx, e["axis"], f"{where}.axis")
    if "block_size" in e:
        kw["block_size"] = d.integer(ctx, e["block_size"], f"{where}.block_size", lo=1)
    keys = KEYS
    if "per_block_int_scale" in e:
        keys = LPBQ_KEYS
        kw["int_scale"] = d.numbers(ctx, e["per_block_int_scale"], f"{where}.per_block_int_scale")
        kw["scale"] = d.numbers(ctx, d.need(ctx, e, "per_channel_float_scale", where),
                                f"{where}.per_channel_float_scale")
        kw["decompressed_bits"] = 2 * t.bits
        if "block_size" not in kw:
            raise ctx.error(where, "missing mandatory field 'block_size' (LPBQ)")
    else:
        ys = d.need(ctx, e, "y_scale", where)
        if isinstance(ys, dict):
            if not meta_scales:
                raise ctx.error(f"{where}.y_scale", "a meta-encoding y_scale (an object) needs version 2.1.0")
            meta = read_meta_scale(ctx, ys, f"{where}.y_scale", t, kw.get("axis"))
            keys = LPBQ_KEYS if "int_scale" in meta else dict(KEYS, scale="y_scale.x")
            kw.update(meta)
        else:
            kw["scale"] = d.numbers(ctx, ys, f"{where}.y_scale")
        if "y_zero_point" in e:
            kw["zero_point"] = d.numbers(ctx, e["y_zero_point"], f"{where}.y_zero_point")
    scale = kw.get("scale")
    if t.kind is Kind.REAL:
        raise ctx.error(f"{where}.output_dtype", f"{t.name} is not a quantized type (2.0.0 has no float "
                                                 "pass-through entries)")
    kw["role"] = guess_role(t, kw.get("axis"), kw.get("block_size", 0), 1 if scale is None else scale.size)
    return d.build(ctx, where, keys, **kw)


def guess_role(t: QType, axis: int | None, block_size: int, scale_size: int) -> str:
    """2.0.0 does not say which entries are params: int32 (bias), per-channel, per-block and signed entries are
    (AIMET forces activations unsigned); the model, when given, decides."""
    if axis is not None or block_size or scale_size > 1:
        return "param"
    return "param" if t.signed and t.is_int else "activation"  # int32 (bias) is signed


def write(es: EncodingSet, style: Style, *, drop_float: bool = False, version: str = VERSION) -> dict:
    entries = []
    for e in es.encodings:
        if e.qtype.kind is Kind.REAL:
            if drop_float:
                continue
            raise EncodingError(f"{e.name}: {e.dtype} pass-through encodings cannot be expressed in {version} (AIMET "
                                "omits them there); pass drop_float=True (CLI: --drop-float) to leave them out")
        entries.append(write_entry(e, version))
    if style.sort_keys:
        return {"encodings": entries, "producer": dict(es.producer or {}), "version": version} if es.producer \
            else {"encodings": entries, "version": version}
    doc: dict[str, Any] = {}
    if es.producer is not None:
        doc["producer"] = dict(es.producer)
    doc["version"] = version
    doc["encodings"] = entries
    return doc


def write_entry(e: Encoding, version: str = VERSION) -> dict:
    if not e.resolved:
        raise EncodingError(f"{e.name}: the axis of this {e.granularity.replace('_', '-')} encoding is unknown (it "
                            f"came from a file without axes), and {version} must state it; resolve it against the "
                            "model with qlinear.graph.resolve(es, MODEL.onnx) (CLI: --model)")
    t = e.qtype
    out: dict[str, Any] = {"name": e.name, "output_dtype": t.name}
    g = e.granularity
    if g == "lpbq":
        if version == "2.0.0":
            if e.decompressed_bits != 2 * t.bits:
                raise EncodingError(f"{e.name}: 2.0.0 LPBQ requires decompressed bits = 2 x {t.bits}, got "
                                    f"{e.decompressed_bits}; write 1.0.0")
            out["per_block_int_scale"] = _arr(e.int_scale)
            out["per_channel_float_scale"] = _arr(e.scale)
        else:
            out["y_scale"] = write_meta_scale(e)
    else:
        out["y_scale"] = _arr(e.scale)
        if e.zero_point is not None and e.zero_point.any():
            out["y_zero_point"] = _arr(e.zero_point)
    if e.axis is not None:
        out["axis"] = e.axis
    if e.block_size:
        out["block_size"] = e.block_size
    return out


def _arr(a: np.ndarray) -> Any:
    """An array for the document: NumPy arrays are written in bulk by the serializer; 0-d become numbers."""
    return a if a.ndim else a.item()
