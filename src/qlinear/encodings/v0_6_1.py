"""AIMET encoding format 0.6.1 (spec ``aimet-encoding-format.txt`` §3; notes ``aimet.md`` §3.2).

``activation_encodings`` / ``param_encodings`` map a tensor name to a list of per-channel dicts
``{bitwidth, dtype "int"|"float", is_symmetric "True"|"False", max, min, offset, scale}``; the offset is on the
unsigned grid and ``min = offset*scale``, ``max = (offset + 2^bw - 1)*scale`` (grid-exact). Float pass-through
entries are ``{bitwidth, dtype "float"}``. No axes are stored (per-channel encodings load unresolved).

The int2 shifted grid (zero point -0.5) is ``offset -1.5`` from aimet-onnx; aimet-torch writes the integer offset -2
with ``"zero_point_shift": 0.5`` in each dict (and min/max of the unshifted grid): both are read, and a file with
integer offsets (the aimet-torch style) is written that way.

The reader also takes hand-written QNN/SNPE override files: no ``version``, tabs, integer offsets, entries given by
``min``/``max`` only (scale = (max-min)/(2^bw-1), offset = round(min/scale)), a single dict instead of a list.
0.6.1 cannot express per-block, LPBQ or float8: writing them raises.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core.types import Kind
from qlinear.encodings import _doc as d
from qlinear.encodings.legacy import int_dtype, offset_from_zero_point, zero_point_from_offset
from qlinear.encodings.model import Encoding, EncodingSet, Role, Style
from qlinear.errors import EncodingError, QlinearError

VERSION = "0.6.1"
_KEYS = {"scale": "scale", "zero_point": "offset", "dtype": "dtype"}
_SECTIONS: tuple[tuple[str, Role], ...] = (("activation_encodings", "activation"), ("param_encodings", "param"))


def read(ctx: d.Ctx, doc: dict) -> tuple[list[Encoding], bool, list[str] | None]:
    """Encodings of a 0.6.1 document; also whether any offset was an integer, and the first entry's keys."""
    out: list[Encoding] = []
    int_offsets = False
    first_keys: list[str] | None = None
    for section, role in _SECTIONS:
        if section not in doc:
            continue
        sec = d.obj(ctx, doc[section], section)
        for name, entries in sec.items():
            where = f"{section}.{name}"
            if isinstance(entries, dict):
                entries = [entries]
            entries = d.lst(ctx, entries, where)
            if not entries:
                raise ctx.error(where, "empty list of encodings")
            if first_keys is None:
                first_keys = list(d.obj(ctx, entries[0], f"{where}[0]"))
            enc, io = _entry(ctx, name, role, entries, where)
            int_offsets |= io
            out.append(enc)
    return out, int_offsets, first_keys


def _entry(ctx: d.Ctx, name: str, role: Role, entries: list, where: str) -> tuple[Encoding, bool]:
    heads: list[tuple[str, int, bool]] = []
    scales: list[float] = []
    offsets: list[float] = []
    int_offsets = False
    for i, raw in enumerate(entries):
        w = f"{where}[{i}]"
        e = d.obj(ctx, raw, w)
        bw = d.integer(ctx, d.need(ctx, e, "bitwidth", w), f"{w}.bitwidth", lo=1, hi=64)
        has_affine = any(k in e for k in ("scale", "offset", "min", "max"))
        kind = e.get("dtype", "int" if has_affine else "float")
        kind = d.string(ctx, kind, f"{w}.dtype").lower()
        if kind not in ("int", "float"):
            raise ctx.error(f"{w}.dtype", f"unknown dtype {kind!r}; expected \"int\" or \"float\"")
        sym = d.boolean(ctx, e.get("is_symmetric", "False"), f"{w}.is_symmetric") if kind == "int" else False
        heads.append((kind, bw, sym))
        if kind == "float":
            continue
        if "scale" in e and "offset" in e:
            s = d.number(ctx, e["scale"], f"{w}.scale")
            o = d.number(ctx, e["offset"], f"{w}.offset")
            int_offsets |= isinstance(e["offset"], int) and not isinstance(e["offset"], bool)
        elif "min" in e and "max" in e:  # QNN override written with min/max only
            lo = d.number(ctx, e["min"], f"{w}.min")
            hi = d.number(ctx, e["max"], f"{w}.max")
            if not hi > lo:
                raise ctx.error(f"{w}.max", f"max {hi} must be greater than min {lo}")
            s = (hi - lo) / (2.0 ** bw - 1)
            o = float(np.round(lo / s))
        else:
            raise ctx.error(w, "an int encoding needs scale and offset (or min and max)")
        if "zero_point_shift" in e:  # aimet-torch: integer offset plus the int2 half-step, min/max unshifted
            o += shift_value(ctx, e["zero_point_shift"], f"{w}.zero_point_shift", bw)
        scales.append(s)
        offsets.append(o)
    if len(set(heads)) > 1:
        raise ctx.error(where, f"per-channel entries disagree on (dtype, bitwidth, is_symmetric): {sorted(set(heads))}")
    kind, bw, sym = heads[0]
    if kind == "float":
        if bw not in (16, 32) or len(entries) != 1:
            raise ctx.error(f"{where}[0].bitwidth", f"a float encoding in 0.6.1 must be 16 or 32 bits, got {bw}")
        return d.build(ctx, where, _KEYS, name=name, dtype=f"float{bw}", role=role), False
    try:
        dtype = int_dtype(bw, sym, name=name)
    except QlinearError as e:
        raise ctx.error(f"{where}[0].bitwidth", str(e)) from None
    from qlinear.core.types import qtype

    t = qtype(dtype)
    o = np.array(offsets)
    zp = zero_point_from_offset(o, t)
    scale: Any = np.array(scales)
    if len(entries) == 1:
        scale, zp = scale[0], zp[0]
    return d.build(ctx, where, _KEYS, name=name, dtype=dtype, scale=scale, zero_point=zp, role=role), int_offsets


def shift_value(ctx: d.Ctx, v: Any, where: str, bw: int) -> float:
    """A ``zero_point_shift`` (0 or 0.5, 2-bit encodings only: AIMET's int2 shifted grid)."""
    sh = d.number(ctx, v, where)
    if sh not in (0.0, 0.5):
        raise ctx.error(where, f"{sh:g} is not a zero-point shift AIMET writes (0 or 0.5, the half-step of the int2 "
                               "shifted grid)")
    if sh and bw != 2:
        raise ctx.error(where, f"a zero-point shift is defined for 2-bit encodings only (AIMET's int2 grid "
                               f"{{-1.5, -0.5, 0.5, 1.5}}), got bitwidth {bw}; remove the field or set bitwidth 2")
    return sh


def write(es: EncodingSet, style: Style, **_: Any) -> dict:
    doc: dict[str, Any] = {}
    for section, role in _SECTIONS:
        doc[section] = {e.name: _write_entry(e, style) for e in es.encodings if e.role == role}
    return d.legacy_tail(doc, es, VERSION)


#: what 0.6.1 cannot hold (:func:`qlinear.encodings.io.cannot_hold`): kind -> (why, the versions that can)
CANNOT_HOLD = {"float": ("it has no scaled float types", "2.0.0"), "per_block": ("it has no blocks", "1.0.0 or 2.0.0"),
               "lpbq": ("it has no blocks", "1.0.0 or 2.0.0")}


def _write_entry(e: Encoding, style: Style) -> list[dict]:
    t = e.qtype
    if t.kind is Kind.REAL:
        return [{"bitwidth": t.bits, "dtype": "float"}]
    g = e.granularity
    kind = "float" if t.kind is Kind.FLOAT else g
    if kind in CANNOT_HOLD:
        why, to = CANNOT_HOLD[kind]
        what = t.name if kind == "float" else g.replace("_", "-")
        raise EncodingError(f"{e.name}: {what} encodings cannot be expressed in 0.6.1 ({why}); write {to}")
    off = offset_from_zero_point(e.zero_point_or_zeros, t).reshape(-1)
    sc = e.scale.reshape(-1)
    n = 2.0 ** t.bits - 1
    sym = "True" if t.signed else "False"
    out = []
    for s, o in zip(sc.tolist(), off.tolist()):
        sh = o % 1.0 if style.int_offsets else 0.0  # aimet-torch states the int2 shift apart; aimet-onnx: -1.5
        o -= sh
        entry = {"bitwidth": t.bits, "dtype": "int", "is_symmetric": sym, "max": (o + n) * s, "min": o * s,
                 "offset": d.offset_value(o, style), "scale": s}
        if sh:
            entry["zero_point_shift"] = sh
        out.append(entry)
    return out
