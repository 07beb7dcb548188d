"""AIMET encoding format 2.0.0 (spec ``aimet-encoding-format.txt`` §1; notes ``aimet.md`` §3.4).

One list ``encodings`` mirroring ONNX QuantizeLinear: ``name``, ``output_dtype``, ``y_scale`` (number, 1-D or N-D
list), ``y_zero_point`` (omitted when 0; float -0.5 for the int2 shifted grid), ``axis`` (channel axis per-channel,
block axis per-block), ``block_size``; LPBQ replaces ``y_scale`` by ``per_block_int_scale`` and a keepdims
``per_channel_float_scale``. Float pass-through types (fp16) have no entry, and params and activations are not
separated: the reader marks as params the int32 (bias), per-channel, per-block and signed per-tensor entries (AIMET
writes activations unsigned by default); :meth:`EncodingSet.resolve` with the model makes it exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.core.types import Kind, qtype
from qlinear.encodings import _doc as d
from qlinear.encodings.model import Encoding, EncodingSet, Style
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
            from qlinear.encodings.v2_1_0 import read_meta_scale

            keys = LPBQ_KEYS
            kw.update(read_meta_scale(ctx, ys, f"{where}.y_scale", t, kw.get("axis")))
        else:
            kw["scale"] = d.numbers(ctx, ys, f"{where}.y_scale")
        if "y_zero_point" in e:
            kw["zero_point"] = d.numbers(ctx, e["y_zero_point"], f"{where}.y_zero_point")
    scale = kw.get("scale")
    if t.kind is Kind.REAL:
        raise ctx.error(f"{where}.output_dtype", f"{t.name} is not a quantized type (2.0.0 has no float "
                                                 "pass-through entries)")
    kw["role"] = guess_role(t.name, kw.get("axis"), kw.get("block_size", 0), scale, kw.get("zero_point"))
    return d.build(ctx, where, keys, **kw)


def guess_role(dtype: str, axis: int | None, block_size: int, scale: np.ndarray | None, zp: Any) -> str:
    """2.0.0 does not say which entries are params: int32 (bias), per-channel, per-block and signed entries are
    (AIMET forces activations unsigned); the model, when given, decides."""
    t = qtype(dtype)
    if t.name == "int32" or axis is not None or block_size or (scale is not None and scale.size > 1):
        return "param"
    return "param" if t.signed and t.is_int else "activation"


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
                            f"came from a file without axes), and {version} must state it; load the file with "
                            "model=MODEL.onnx (CLI: --model) or call EncodingSet.resolve(model)")
    t = e.qtype
    out: dict[str, Any] = {"name": e.name, "output_dtype": t.name}
    g = e.granularity
    if g == "lpbq":
        if version == "2.0.0":
            if e.decompressed_bits != 2 * t.bits:
                raise EncodingError(f"{e.name}: 2.0.0 LPBQ requires decompressed bits = 2 x {t.bits}, got "
                                    f"{e.decompressed_bits}; write 1.0.0")
            out["per_block_int_scale"] = e.int_scale.tolist()
            out["per_channel_float_scale"] = e.scale.tolist()
        else:
            from qlinear.encodings.v2_1_0 import write_meta_scale

            out["y_scale"] = write_meta_scale(e)
    else:
        out["y_scale"] = e.scale.tolist()
        if e.zero_point is not None and np.any(e.zero_point != 0):
            out["y_zero_point"] = e.zero_point.tolist()
    if e.axis is not None:
        out["axis"] = e.axis
    if e.block_size:
        out["block_size"] = e.block_size
    return out
