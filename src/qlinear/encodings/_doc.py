"""Reading JSON documents with errors that name the file and the JSON path (``param_encodings[3].scale[7]``),
and writing them in a producer's layout. Shared by the per-version serializers."""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.encodings import _json
from qlinear.encodings.model import Encoding, Style
from qlinear.errors import EncodingError, QlinearError


class Ctx:
    """Where we are while reading: the file name (for messages), and whether the text may hold JSON booleans.

    NumPy reads ``[true, 0.5]`` as ``[1.0, 0.5]``; number lists are scanned for booleans unless the text is
    known to have none (``bools=False``).
    """

    def __init__(self, path: str | None, *, bools: bool = True) -> None:
        self.path = path
        self.bools = bools

    def error(self, where: str, message: str) -> EncodingError:
        return EncodingError(message, path=self.path, where=where)


def type_name(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def obj(ctx: Ctx, v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise ctx.error(where, f"expected an object, got {type_name(v)}")
    return v


def lst(ctx: Ctx, v: Any, where: str) -> list:
    if not isinstance(v, list):
        raise ctx.error(where, f"expected a list, got {type_name(v)}")
    return v


def need(ctx: Ctx, d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise ctx.error(where, f"missing mandatory field {key!r}")
    return d[key]


def string(ctx: Ctx, v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise ctx.error(where, f"expected a string, got {type_name(v)}")
    return v


def integer(ctx: Ctx, v: Any, where: str, *, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise ctx.error(where, f"expected an integer, got {v!r}")
    i = int(v)
    if (lo is not None and i < lo) or (hi is not None and i > hi):
        raise ctx.error(where, f"{i} is out of range [{lo}, {hi}]")
    return i


def number(ctx: Ctx, v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ctx.error(where, f"expected a number, got {type_name(v)} {v!r}")
    return float(v)


def boolean(ctx: Ctx, v: Any, where: str) -> bool:
    """JSON boolean, or the strings "True"/"False" (0.6.1 writes strings)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ctx.error(where, f"expected true/false or \"True\"/\"False\", got {v!r}")


def numbers(ctx: Ctx, v: Any, where: str, *, scalar_ok: bool = True) -> np.ndarray:
    """A number or (nested, rectangular) list of numbers as a float64 array; strings, booleans, nulls and ragged
    lists are errors naming the first bad element."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if not scalar_ok:
            raise ctx.error(where, "expected a list of numbers, got a single number")
        return np.array(float(v))
    if not isinstance(v, list):
        raise ctx.error(where, f"expected a number or a list of numbers, got {type_name(v)}")
    try:
        a = np.array(v)
    except (ValueError, OverflowError):
        a = None
    if a is not None and a.dtype.kind in "iuf" and a.size:
        if ctx.bools:
            _find_bad(ctx, v, where)
        return a.astype(np.float64, copy=False)
    if a is not None and a.dtype.kind == "f":
        return a
    _find_bad(ctx, v, where)
    raise ctx.error(where, "expected a non-empty rectangular list of numbers")


def _find_bad(ctx: Ctx, v: Any, where: str, depth: int | None = None) -> None:
    if isinstance(v, list):
        if not v:
            raise ctx.error(where, "empty list")
        kinds = {isinstance(x, list) for x in v}
        if len(kinds) > 1:
            raise ctx.error(where, "mixes numbers and lists")
        lens = {len(x) for x in v if isinstance(x, list)}
        if len(lens) > 1:
            raise ctx.error(where, f"ragged nested list (row lengths {sorted(lens)})")
        for i, x in enumerate(v):
            _find_bad(ctx, x, f"{where}[{i}]")
    elif isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ctx.error(where, f"expected a number, got {type_name(v)} {v!r}")


def build(ctx: Ctx, where: str, keys: dict[str, str], **kw: Any) -> Encoding:
    """``Encoding(**kw)``, with validation errors re-raised at the JSON path (``keys`` maps model fields to the
    file's field names)."""
    try:
        return Encoding(**kw)
    except EncodingError as e:
        sub = e.where or ""
        head, sep, tail = sub.partition("[")
        key = keys.get(head, head)
        loc = f"{where}.{key}{sep}{tail}" if key else where
        msg = str(e)
        if e.where and msg.startswith(f"{e.where}: "):
            msg = msg[len(e.where) + 2:]
        raise ctx.error(loc, msg) from None
    except QlinearError as e:
        raise ctx.error(where, str(e)) from None


def offset_value(v: float, style: Style) -> int | float:
    """An offset as the producer writes it (aimet-onnx: JSON float ``-128.0``; aimet-torch: int)."""
    if style.int_offsets and float(v).is_integer():
        return int(v)
    return float(v)


def detect_style(text: str, top_keys: list[str], first_entry_keys: list[str] | None, int_offsets: bool) -> Style:
    indent: int | str | None = None
    nl = text.find("\n")
    if 0 <= nl < len(text) - 1:
        rest = text[nl + 1:]
        ws = rest[: len(rest) - len(rest.lstrip(" \t"))]
        indent = ws if "\t" in ws else (len(ws) or None)
    sorted_keys = top_keys == sorted(top_keys) and (first_entry_keys is None or first_entry_keys == sorted(first_entry_keys))
    return Style(indent=indent, sort_keys=sorted_keys, int_offsets=int_offsets)


def legacy_tail(doc: dict[str, Any], es: Any, version: str) -> dict[str, Any]:
    """The file-level fields after the sections of a 0.6.1 / 1.0.0 document (AIMET's order when unsorted)."""
    if es.excluded_layers is not None:
        doc["excluded_layers"] = list(es.excluded_layers)
    if es.producer is not None:
        doc["producer"] = dict(es.producer)
    if es.quantizer_args is not None:
        doc["quantizer_args"] = dict(es.quantizer_args)
    doc["version"] = version
    return doc


def dumps(doc: Any, style: Style) -> str:
    """Serialize exactly like Python's ``json.dump(doc, indent=..., sort_keys=...)`` (float ``repr``), fast; numeric
    arrays may be NumPy arrays (see :mod:`qlinear.encodings._json`)."""
    return _json.dumps(doc, style.indent, style.sort_keys)
