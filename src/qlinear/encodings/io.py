"""``load`` / ``save`` of AIMET encoding files, with version detection (notes ``aimet.md`` §3.4 "Version
inference": list sections -> 1.0.0, dict sections -> 0.6.1, ``encodings`` -> 2.x)."""

from __future__ import annotations

import io
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Union

from qlinear._atomic import atomic_open
from qlinear.encodings import _doc as d
from qlinear.encodings import _json, _layout, _scan, v0_6_1, v1_0_0, v2_0_0, v2_1_0
from qlinear.encodings.model import AIMET_ONNX, EncodingSet, Style, aimet_refusal
from qlinear.errors import EncodingError, QlinearError

VERSIONS = ("0.6.1", "1.0.0", "2.0.0", "2.1.0")
_MODULES = {"0.6.1": v0_6_1, "1.0.0": v1_0_0, "2.0.0": v2_0_0, "2.1.0": v2_1_0}
Source = Union[str, os.PathLike, IO[str], IO[bytes]]
#: Versions AIMET users name that no AIMET release writes (benchmarks/aimet_format_probe.py): what to use instead.
_NOT_AIMET = {"0.6.2": "AIMET 2.42 neither writes nor reads a '0.6.2' format (its export raises 'Unsupported "
                       "encoding_version'); the legacy layout QNN's custom I/O takes is 0.6.1: use version 0.6.1"}


def cannot_hold(version: str, kinds: Any) -> str | None:
    """Why ``version`` cannot hold encodings of ``kinds`` (``"float"`` for scaled float types, a granularity such
    as ``"per_block"``), as its writer would say at the end of a run; None when it can."""
    refuses = getattr(_MODULES.get(version), "CANNOT_HOLD", {})
    k = next((k for k in kinds if k in refuses), None)
    if k is None:
        return None
    why, to = refuses[k]
    return f"{version} cannot hold {k.replace('_', '-')} encodings ({why}); write {to}"


def _unsupported(v: str, verb: str) -> str:
    return f"unsupported version {v!r}; " + _NOT_AIMET.get(v, f"qlinear {verb} {', '.join(VERSIONS)}")


def detect_version(doc: Any, *, path: str | None = None) -> str:
    """The format of a parsed document: its ``version`` key checked against its structure, or the structure alone."""
    ctx = d.Ctx(path)
    d.obj(ctx, doc, "$")
    v = doc.get("version")
    if v is not None:
        v = d.string(ctx, v, "version")
    if "encodings" in doc:
        if isinstance(doc["encodings"], list):
            meta = any(isinstance(e, dict) and isinstance(e.get("y_scale"), dict) for e in doc["encodings"])
            structural = "2.1.0" if meta else "2.0.0"
        else:
            raise ctx.error("encodings", f"expected a list, got {d.type_name(doc['encodings'])}")
        allowed = ("2.0.0", "2.1.0")
    elif "activation_encodings" in doc or "param_encodings" in doc:
        sec = doc.get("activation_encodings", doc.get("param_encodings"))
        if isinstance(sec, dict):
            structural, allowed = "0.6.1", ("0.6.1",)
        elif isinstance(sec, list):
            structural, allowed = "1.0.0", ("1.0.0",)
        else:
            key = "activation_encodings" if "activation_encodings" in doc else "param_encodings"
            raise ctx.error(key, f"expected an object (0.6.1) or a list (1.0.0), got {d.type_name(sec)}")
    else:
        raise ctx.error("$", "not an encodings file: none of 'encodings', 'activation_encodings', "
                             "'param_encodings' is present")
    if v is None:
        return structural
    if v not in VERSIONS:
        raise ctx.error("version", _unsupported(v, "reads"))
    if v not in allowed:
        raise ctx.error("version", f"says {v!r} but the entries have the {structural} layout")
    return v


def _read_data(src: Source) -> tuple[bytes | str, str | None]:
    if isinstance(src, (str, os.PathLike)):
        p = Path(src)
        if p.is_dir():
            raise EncodingError("is a folder, not an encodings file", path=str(p))
        try:
            return p.read_bytes(), str(p)
        except FileNotFoundError:
            raise EncodingError("file not found", path=str(p)) from None
        except OSError as e:
            raise EncodingError(f"cannot read: {e.strerror}", path=str(p)) from None
    if not callable(getattr(src, "read", None)):
        raise EncodingError(f"expected a path or an open file to read encodings from, got {type(src).__name__}")
    name = getattr(src, "name", None)
    data = src.read()
    if not isinstance(data, (str, bytes, bytearray)):
        raise EncodingError(f"the file object's read() returned {type(data).__name__}, not text or bytes")
    return data, str(name) if name is not None else None


def _head_text(data: bytes | str, path: str | None) -> str:
    """The start of the file as text (enough to see its indentation); the whole must be UTF-8."""
    if isinstance(data, str):
        return data[:65536]
    try:
        head = data[:65536].decode("utf-8-sig", errors="strict")
    except UnicodeDecodeError as e:
        if e.start < 65536 - 4:
            raise EncodingError(f"not UTF-8 text (byte {e.start})", path=path) from None
        head = data[:e.start].decode("utf-8-sig")
    return head


def loads(text: str | bytes, *, path: str | None = None, **refused: Any) -> EncodingSet:
    """Parse the text (or UTF-8 bytes) of an encodings file (any version). Axes and roles against a model:
    ``qlinear.graph.resolve(es, model)``."""
    _refuse(refused, "loads")
    if not isinstance(text, (str, bytes, bytearray, memoryview)):
        raise EncodingError(f"loads(text): expected the text (str) or UTF-8 bytes of an encodings file, got "
                            f"{type(text).__name__}; use load(path_or_file) for paths and open files")
    if isinstance(text, (bytearray, memoryview)):
        text = bytes(text)
    with _json.gc_paused():
        es = _loads_lifted(text, path)
        if es is None:
            es = _loads_parsed(text, path)
    return es


def _refuse(kw: dict[str, Any], fn: str) -> None:
    """``model=`` (and any other unknown keyword) is refused before reading: resolving is the graph layer's."""
    if "model" in kw:
        raise EncodingError(f"{fn}(..., model=): qlinear.encodings does not read models; resolve axes and roles with "
                            f"qlinear.graph.resolve(qlinear.encodings.{fn}(...), model), or load a file with "
                            "qlinear.graph.load_encodings(path, model)")
    if kw:
        raise EncodingError(f"{fn}(): unknown keyword argument(s) {', '.join(sorted(kw))}")


def _loads_lifted(text: str | bytes, path: str | None) -> EncodingSet | None:
    """The fast reading of large 2.x files (:mod:`._scan`): number arrays lifted out before parsing. None for
    anything it does not take whole, errors included: :func:`_loads_parsed` then reads, and words, everything."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    lifted = _scan.extract(data)
    if lifted is None:
        return None
    skeleton, arrays = lifted
    try:
        doc = _json.parse(skeleton)
        if not isinstance(doc, dict) or detect_version(doc, path=path) not in ("2.0.0", "2.1.0"):
            return None
        got = v2_0_0.read_lifted(doc, arrays)
        if got is None:
            return None
        encs, first_keys = got
        es = _assemble(d.Ctx(path, bools=False), doc, encs, False, first_keys, _head_text(data, path))
        return replace(es, layout=_layout.record(doc, detect_version(doc, path=path), es, keep_values=False))
    except (QlinearError, ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError):
        return None


def _loads_parsed(text: str | bytes, path: str | None) -> EncodingSet:
    try:
        doc = _json.parse(text)
    except UnicodeDecodeError as e:
        raise EncodingError(f"not UTF-8 text (byte {e.start})", path=path) from None
    except json.JSONDecodeError as e:
        raise EncodingError(f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}", path=path) from None
    except (RecursionError, ValueError) as e:
        raise EncodingError(f"invalid JSON: {e}", path=path) from None
    bools = (b"true" in text or b"false" in text) if isinstance(text, bytes) else ("true" in text or "false" in text)
    try:
        return from_document(doc, path=path, text=_head_text(text, path), bools=bools)
    except QlinearError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, IndexError, KeyError, AttributeError) as e:
        raise EncodingError(f"malformed encodings file ({type(e).__name__}: {e})", path=path) from None


def load(src: Source, **refused: Any) -> EncodingSet:
    """Read an AIMET encodings file (0.6.1, 1.0.0, 2.0.0, 2.1.0 or without a version key).

    Args:
        src: path or open file (text or binary).

    0.6.1/1.0.0 files store no axes and 2.x files do not tell params from activations: resolve both against the
    ONNX model with ``qlinear.graph.resolve(es, model)`` (or load with ``qlinear.graph.load_encodings``).
    """
    _refuse(refused, "load")
    data, name = _read_data(src)
    return loads(data, path=name)


def from_document(doc: Any, *, path: str | None = None, text: str | None = None, bools: bool = True) -> EncodingSet:
    """The :class:`EncodingSet` of a parsed document; ``text`` (its start suffices) gives the layout to keep;
    ``bools=False`` promises the document holds no JSON booleans (number lists are not scanned for them)."""
    ctx = d.Ctx(path, bools=bools)
    version = detect_version(doc, path=path)
    encs, int_offsets, first_keys = _MODULES[version].read(ctx, doc)
    es = _assemble(ctx, doc, encs, int_offsets, first_keys, text)
    return replace(es, layout=_layout.record(doc, version, es))


def _assemble(ctx: d.Ctx, doc: dict, encs: list, int_offsets: bool, first_keys: list[str] | None,
              text: str | None) -> EncodingSet:
    """The file-level fields around the entries, and the set."""
    qa = doc.get("quantizer_args")
    if qa is not None:
        qa = d.obj(ctx, qa, "quantizer_args")
    ex = doc.get("excluded_layers")
    if ex is not None:
        for i, n in enumerate(d.lst(ctx, ex, "excluded_layers")):
            d.string(ctx, n, f"excluded_layers[{i}]")
    prod = doc.get("producer")
    if prod is not None:
        prod = d.obj(ctx, prod, "producer")
    style = d.detect_style(text, list(doc), first_keys, int_offsets) if text is not None else AIMET_ONNX
    names = [e.name for e in encs]
    if len(set(names)) != len(names):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ctx.error(name, f"duplicate encoding for tensor {name!r}: each tensor may have one encoding")
            seen.add(name)
    return EncodingSet(tuple(encs), quantizer_args=qa, excluded_layers=ex, producer=prod,
                       version=doc.get("version"), style=style)


def to_document(es: EncodingSet, version: str, *, style: Style | None = None, drop_float: bool = False) -> dict:
    """The JSON document (plain dicts, lists and numbers) of ``es`` in ``version``."""
    return _json.plain(_document(es, version, style=style, drop_float=drop_float))


def _document(es: EncodingSet, version: str, *, style: Style | None = None, drop_float: bool = False) -> dict:
    if not isinstance(es, EncodingSet):
        raise EncodingError(f"expected an EncodingSet, got {type(es).__name__} (build one with "
                            "EncodingSet([Encoding(...), ...]))")
    if version not in _MODULES:
        raise EncodingError(_unsupported(version, "writes"))
    for e in es:
        why = aimet_refusal(e.name, e.qtype)
        if why is not None:
            raise EncodingError(why)
    doc = _MODULES[version].write(es, style or es.style, drop_float=drop_float)
    lay = es.layout
    if lay is not None and lay.version == version:  # re-saving in the version read: keep the file's layout
        doc = _layout.restore(doc, lay, es)
    return doc


def dumps(es: EncodingSet, version: str | None = None, *, style: Style | None = None, drop_float: bool = False) -> str:
    """The text of ``es`` in ``version`` (default: the version it was read from, else 2.0.0)."""
    version = version or getattr(es, "version", None) or "2.0.0"
    st = style or getattr(es, "style", AIMET_ONNX)
    return d.dumps(_document(es, version, style=st, drop_float=drop_float), st)


def save(es: EncodingSet, path: str | os.PathLike | IO[str] | IO[bytes], version: str | None = None, *,
         style: Style | None = None, drop_float: bool = False) -> None:
    """Write ``es`` as an AIMET encodings file of ``version`` (atomically when given a path).

    Conversions keep every parameter the target can express; what it cannot (per-block/LPBQ/float8 in 0.6.1,
    float8 in 1.0.0, fp16 in 2.x without ``drop_float``, unresolved axes in 2.x) raises an ``EncodingError`` naming
    the tensor.
    """
    to_path = isinstance(path, (str, os.PathLike))
    if not to_path and not callable(getattr(path, "write", None)):
        raise EncodingError(f"save(es, {type(path).__name__}): expected a path or an open file (text or binary) to "
                            "write encodings to")
    version = version or getattr(es, "version", None) or "2.0.0"
    st = style or getattr(es, "style", AIMET_ONNX)
    doc = _document(es, version, style=st, drop_float=drop_float)
    if to_path:
        with atomic_open(path, "wb") as f:
            _json.write(doc, st.indent, st.sort_keys, f)
    else:
        _write_to_file_object(path, _json.dumps(doc, st.indent, st.sort_keys))


def _write_to_file_object(f: Any, text: str) -> None:
    """Text files get ``text``; binary files (``open(..., "wb")``, ``io.BytesIO``) its UTF-8 bytes."""
    if isinstance(f, io.TextIOBase):
        f.write(text)
        return
    if isinstance(f, (io.RawIOBase, io.BufferedIOBase)) or "b" in str(getattr(f, "mode", "")):
        f.write(text.encode("utf-8"))
        return
    try:
        f.write(text)
    except TypeError:  # a binary file object of its own kind: it refuses str before writing anything
        try:
            f.write(text.encode("utf-8"))
        except TypeError:
            raise EncodingError(f"save(es, {type(f).__name__}): its write() takes neither text nor bytes; pass a "
                                "path or an open file") from None


__all__ = ["VERSIONS", "cannot_hold", "detect_version", "dumps", "from_document", "load", "loads", "save", "to_document",
           "io"]
