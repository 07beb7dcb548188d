"""JSON text of encodings files: parse fast, and write exactly what ``json.dump(doc, indent=..., sort_keys=...)``
writes (float ``repr`` and all) but with numeric arrays formatted in bulk.

A large encodings file is almost all numbers (a 1B-parameter int4 model has millions of block scales). Python's
own float parse and ``repr`` cost about 1 us per number here, and the cyclic garbage collector, triggered over and
over by the millions of lists a parse creates, costs more than the parse itself. So:

* :func:`parse` uses ``orjson`` (correctly rounded, like ``float()``) with the collector paused, and falls back
  to the stdlib for what orjson refuses (NaN/Infinity literals, integers beyond 64 bits, a BOM, deep nesting), so
  the stdlib keeps the last word on what is valid JSON and on the error message.
* :func:`dumps` takes documents whose numeric arrays are NumPy arrays, formats all of their numbers in one
  ``orjson`` call (shortest round-trip digits, as ``repr``), and lays each array out with a cached ``%`` template.
  orjson's digits equal ``repr``'s everywhere; its layout differs only for ``0 < |x| < 1e-4`` (``1e-7`` for
  ``1e-07``, ``0.00001`` for ``1e-05``), and those numbers are formatted by ``repr`` itself. A self-check at first
  use compares the two on tricky values and falls back to ``repr`` for everything if a future orjson differs.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import itertools
import json
import math
import os
from json.encoder import encode_basestring_ascii
from typing import Any, BinaryIO, Iterator

import numpy as np

from qlinear._ext import cdll

try:  # a declared dependency; the stdlib path keeps qlinear working where no orjson wheel exists
    import orjson
except ImportError:  # pragma: no cover
    orjson = None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic containers (restores its state)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse(data: bytes | str) -> Any:
    """``json.loads(data)`` (bytes are UTF-8, a BOM allowed); raises what ``json.loads`` raises."""
    if orjson is not None:
        try:
            with gc_paused():
                return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # not plain RFC 8259 JSON: the stdlib decides, and words the error
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data).decode("utf-8-sig")
    with gc_paused():
        return json.loads(data)


# --- numbers -------------------------------------------------------------------------------------------------
def _json_float(x: float) -> str:
    """One float as ``json.dumps`` writes it."""
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float.__repr__(x)


def _floats_repr(a: np.ndarray) -> list[str]:
    return [_json_float(x) for x in a.tolist()]


def _floats_orjson(a: np.ndarray) -> list[str]:
    """``[_json_float(x) for x in a]`` for a 1-D float64 array, in bulk."""
    if not a.size:
        return []
    parts = orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY).decode("ascii")[1:-1].split(",")
    mag = np.abs(a)
    odd = np.flatnonzero(((mag < 1e-4) & (mag > 0)) | ~np.isfinite(a))
    for i, x in zip(odd.tolist(), a[odd].tolist()):
        parts[i] = _json_float(x)
    return parts


_PROBE = np.array([0.0, -0.0, 1.0, 0.1, 1e-4, 9.999999999999999e-05, 2.5e-05, 1e-07, 5e-324, 2.2250738585072014e-308,
                   1e15, 9999999999999998.0, 1e16, 1.2345678901234568e+17, 1.7976931348623157e+308, -3.14159,
                   0.30000000000000004, 123456.789, 1e22, 1e21, 4.35, 0.007812500000000002, float("nan"),
                   float("inf")])
_FORMAT = None


def format_floats(a: np.ndarray) -> list[str]:
    """Each float of ``a`` (flattened, as float64) as ``json.dumps`` writes it."""
    global _FORMAT
    if _FORMAT is None:
        _FORMAT = _floats_repr
        if orjson is not None:
            with contextlib.suppress(Exception):
                if _floats_orjson(_PROBE) == _floats_repr(_PROBE):
                    _FORMAT = _floats_orjson
    return _FORMAT(np.ascontiguousarray(a, dtype=np.float64).reshape(-1))


def format_ints(a: np.ndarray) -> list[str]:
    a = np.ascontiguousarray(a).reshape(-1)
    if orjson is not None and a.size and a.dtype == np.int64:
        return orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY).decode("ascii")[1:-1].split(",")
    return [str(x) for x in a.tolist()]


# --- layout --------------------------------------------------------------------------------------------------
_TEMPLATES: dict[tuple, str] = {}


def _template(shape: tuple[int, ...], level: int, ind: str) -> str:
    """A ``%`` template laying out an array of ``shape`` as ``json.dump(indent=ind)`` would at ``level``."""
    key = (shape, level, ind)
    t = _TEMPLATES.get(key)
    if t is None:
        t = _layout(["%s"] * math.prod(shape), shape, level, ind.replace("%", "%%"))
        if len(_TEMPLATES) < 4096:
            _TEMPLATES[key] = t
    return t


def _layout(parts: list[str], shape: tuple[int, ...], level: int, ind: str) -> str:
    if not shape[0]:
        return "[]"
    i0, i1 = "\n" + ind * level, "\n" + ind * (level + 1)
    if len(shape) == 1:
        items = parts
    else:
        step = math.prod(shape[1:])
        items = [_layout(parts[k * step:(k + 1) * step], shape[1:], level + 1, ind) for k in range(shape[0])]
    return "[" + i1 + ("," + i1).join(items) + i0 + "]"


# --- documents -----------------------------------------------------------------------------------------------
_KEYS: dict[str, str] = {}


def _key(k: Any) -> str:
    s = _KEYS.get(k)
    if s is None:
        s = encode_basestring_ascii(str(k)) + ": "
        if len(_KEYS) < 4096:
            _KEYS[k] = s
    return s


def _scalar(o: Any) -> str:
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, str):
        return encode_basestring_ascii(o)
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _json_float(o)
    if isinstance(o, np.integer):
        return str(int(o))
    if isinstance(o, np.floating):
        return _json_float(float(o))
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


class _Writer:
    """Walks a document once, writing a NUL byte where each numeric array goes (keys and strings are escaped to
    ASCII, so no other NUL occurs); :meth:`render` lays the arrays out in bulk and fills the slots."""

    def __init__(self, ind: str, sort_keys: bool) -> None:
        self.ind, self.sort = ind, sort_keys
        self.out: list[str] = []
        self.slots: list[tuple[Any, int]] = []  # (array or flat list of Python numbers, level), in document order

    def emit(self, o: Any, level: int) -> None:
        out = self.out
        if isinstance(o, dict):
            if not o:
                out.append("{}")
                return
            inner = "\n" + self.ind * (level + 1)
            items = sorted(o.items()) if self.sort else o.items()
            lead = "{" + inner
            for k, v in items:
                t = type(v)  # scalars and arrays inline: most values of an encodings file are
                if t is str:
                    out.append(lead + _key(k) + encode_basestring_ascii(v))
                elif t is int:
                    out.append(lead + _key(k) + int.__repr__(v))
                elif t is np.ndarray and v.ndim and v.dtype.kind in "iuf":
                    out.append(lead + _key(k) + "\x00")
                    self.slots.append((v, level + 1))
                else:
                    out.append(lead + _key(k))
                    self.emit(v, level + 1)
                lead = "," + inner
            out.append("\n" + self.ind * level + "}")
        elif isinstance(o, np.ndarray):
            if o.ndim and o.dtype.kind in "iuf":
                out.append("\x00")
                self.slots.append((o, level))
            else:
                self.emit(o.tolist(), level)
        elif isinstance(o, (list, tuple)):
            if not o:
                out.append("[]")
                return
            if all(type(v) is float or type(v) is int for v in o):  # a flat list of numbers from a writer
                out.append("\x00")
                self.slots.append((o, level))
                return
            if all(type(v) is dict and v for v in o) and self._rows(o, level):
                return
            inner = "\n" + self.ind * (level + 1)
            lead = "[" + inner
            for v in o:
                out.append(lead)
                lead = "," + inner
                self.emit(v, level + 1)
            out.append("\n" + self.ind * level + "]")
        else:
            out.append(_scalar(o))

    def _rows(self, rows: list, level: int) -> bool:
        """A list of dicts whose values are strings, ints or numeric arrays (the entries of an encodings file):
        each run of rows with the same keys and value types is formatted column by column and laid out with one
        ``%`` of a repeated row template. False (nothing written) when the list is not such."""
        sigs = [(tuple(r), tuple(map(type, r.values()))) for r in rows]
        for _, types in set(sigs):
            if not all(t is str or t is int or t is np.ndarray for t in types):
                return False
        inner = "\n" + self.ind * (level + 1)
        texts: list[str] = []
        slots: list[tuple[Any, int]] = []
        pos = 0
        for (keys, types), run in itertools.groupby(sigs):
            m = sum(1 for _ in run)
            chunk = rows[pos:pos + m]
            pos += m
            order = sorted(range(len(keys)), key=keys.__getitem__) if self.sort else range(len(keys))
            cols = []
            arrays = []
            for i in order:
                col = [r[keys[i]] for r in chunk]
                if types[i] is str:
                    cols.append(list(map(encode_basestring_ascii, col)))
                elif types[i] is int:
                    cols.append(list(map(int.__repr__, col)))
                else:
                    if not all(a.ndim and a.dtype.kind in "iuf" for a in col):
                        return False
                    cols.append(["\x00"] * m)
                    arrays.append(col)
            slots.extend((a, level + 2) for a in itertools.chain.from_iterable(zip(*arrays)))
            i2 = inner + self.ind
            row = "{" + ",".join(i2.replace("%", "%%") + _key(keys[i]).replace("%", "%%") + "%s" for i in order) + \
                inner.replace("%", "%%") + "}"
            sep = "," + inner
            texts.append(((row + sep.replace("%", "%%")) * m % tuple(itertools.chain.from_iterable(zip(*cols))))
                         [:-len(sep)])
        self.slots.extend(slots)
        self.out.append("[" + inner + ("," + inner).join(texts) + "\n" + self.ind * level + "]")
        return True

    def _groups(self) -> dict[tuple, list[int]]:
        """Slots by (float?, shape, level) (arrays laid out together); flat Python lists under key None."""
        groups: dict[tuple, list[int]] = {}
        for p, (a, level) in enumerate(self.slots):
            key = None if isinstance(a, list) else (a.dtype.kind == "f", a.shape, level)
            groups.setdefault(key, []).append(p)
        return groups

    def _stack(self, positions: list[int], is_float: bool) -> np.ndarray:
        return np.stack([self.slots[p][0] for p in positions]).astype(np.float64 if is_float else np.int64,
                                                                       copy=False)

    def _list_texts(self, positions: list[int]) -> list[str]:
        return [_layout([_scalar(v) for v in self.slots[p][0]], (len(self.slots[p][0]),), self.slots[p][1], self.ind)
                for p in positions]

    def render(self, fd: int | None = None) -> str | np.ndarray | None:
        """The document as a ``str``, or (compiled helper available) an ASCII ``uint8`` array; with ``fd``, streamed
        to that file descriptor instead (returns None) when the compiled helper does it."""
        lit = "".join(self.out)
        lib = _clib()
        if not self.slots or lib is None or not self.ind.isascii() or "\x00" in self.ind:
            return self._render_py(lit)
        n = len(self.slots)
        slot_group, slot_index = np.empty(n, np.int64), np.empty(n, np.int64)
        groups: list[_Group] = []
        for key, pos in self._groups().items():
            g = None if key is None else _Group.compact(self._stack(pos, key[0]), key[2], self.ind, lib)
            if g is None:
                texts = self._list_texts(pos) if key is None else _group_texts(self._stack(pos, key[0]), key[2],
                                                                               self.ind)
                g = _Group.verbatim([t.encode("ascii") for t in texts])
            idx = np.asarray(pos)
            slot_group[idx], slot_index[idx] = len(groups), np.arange(len(pos))
            groups.append(g)
        raw = lit.encode("ascii")
        cuts = np.flatnonzero(np.frombuffer(raw, np.uint8) == 0)
        if len(cuts) != n:  # pragma: no cover - a NUL outside the slots cannot come from the emitter
            raise AssertionError("JSON writer: slot markers out of step")
        args = _Group.arguments(groups)

        def emit(fd_: int, dst: np.ndarray | None) -> int:
            return lib.ql_json_emit(raw, len(raw), cuts.ctypes.data, n, slot_group.ctypes.data,
                                    slot_index.ctypes.data, *args, fd_, None if dst is None else dst.ctypes.data,
                                    0 if dst is None else len(dst))

        if fd is not None:
            got = emit(fd, None)
            if got == -1:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
            if got < 0:  # pragma: no cover - the groups above are well formed
                raise AssertionError("JSON writer: malformed group")
            return None
        total = emit(-1, None)
        dst = np.empty(max(total, 0), np.uint8)
        if total < 0 or emit(-1, dst) != total:  # pragma: no cover
            raise AssertionError("JSON writer: emit failed")
        return dst

    def stream(self, f: BinaryIO) -> None:
        """Write the document to ``f`` piece by piece: the literal text between slots, and each array's text as it is
        formatted (a large array in slabs of about :data:`STREAM_NUMBERS` numbers: no document-sized text)."""
        pieces = "".join(self.out).split("\x00")
        if len(pieces) != len(self.slots) + 1:  # pragma: no cover - a NUL outside the slots cannot come from emit
            raise AssertionError("JSON writer: slot markers out of step")
        for piece, (a, level) in zip(pieces, self.slots):
            f.write(piece.encode("ascii"))
            for text in self._slot_texts(a, level):
                f.write(text.encode("ascii"))
        f.write(pieces[-1].encode("ascii"))

    def _slot_texts(self, a: Any, level: int) -> Iterator[str]:
        """The text of one slot (``json.dumps``'s layout), a large array's in slabs along its first axis."""
        if isinstance(a, list):
            yield _layout([_scalar(v) for v in a], (len(a),), level, self.ind)
            return
        dt = np.float64 if a.dtype.kind == "f" else np.int64
        if a.size <= STREAM_NUMBERS or not a.size:
            yield _group_texts(a[None].astype(dt), level, self.ind)[0]
            return
        i0, i1 = "\n" + self.ind * level, "\n" + self.ind * (level + 1)
        rows = max(1, STREAM_NUMBERS // max(1, math.prod(a.shape[1:])))
        yield "[" + i1
        for r0 in range(0, a.shape[0], rows):
            sub = a[r0:r0 + rows].astype(dt)
            if a.ndim == 1:
                texts = format_floats(sub) if dt is np.float64 else format_ints(sub)
            else:
                texts = _group_texts(sub, level + 1, self.ind)
            yield ("," + i1 if r0 else "") + ("," + i1).join(texts)
        yield i0 + "]"

    def _render_py(self, lit: str) -> str:
        texts: list[str] = [""] * len(self.slots)
        for key, pos in self._groups().items():
            got = self._list_texts(pos) if key is None else _group_texts(self._stack(pos, key[0]), key[2], self.ind)
            for p, t in zip(pos, got):
                texts[p] = t
        pieces = lit.split("\x00")
        return "".join(itertools.chain.from_iterable(zip(pieces, texts + [""])))


class _Group:
    """Arrays laid out by ``ql_json_emit``: orjson's compact text of a stack (``depth`` >= 1, re-laid with ``seps``,
    ``head``, ``tail``) or finished texts back to back (``depth`` 0); ``begin_end``: 2 offsets per array."""

    def __init__(self, src: bytes, begin_end: np.ndarray, depth: int, seps: list[bytes], head: bytes,
                 tail: bytes) -> None:
        self.src, self.begin_end, self.depth, self.seps, self.head, self.tail = src, begin_end, depth, seps, head, tail

    @classmethod
    def verbatim(cls, texts: list[bytes]) -> "_Group":
        ends = np.cumsum([len(t) for t in texts], dtype=np.int64)
        be = np.empty(2 * len(texts), np.int64)
        be[0::2], be[1::2] = ends - [len(t) for t in texts], ends
        return cls(b"".join(texts), be, 0, [], b"", b"")

    @classmethod
    def compact(cls, stack: np.ndarray, level: int, ind: str, lib: Any) -> "_Group | None":
        """None when orjson's numbers would not be ``repr``'s (``0 < |x| < 1e-4``, NaN/inf), a dimension is empty
        or the rank is above 8."""
        m, shape = stack.shape[0], stack.shape[1:]
        floats = stack.dtype.kind == "f"
        if floats:
            format_floats(stack[:0])  # settle the self-check
        if orjson is None or not m or not all(shape) or len(shape) > 8 or \
                (floats and _FORMAT is not _floats_orjson):
            return None
        if floats:
            mag = np.abs(stack)
            if (((mag < 1e-4) & (mag > 0)) | ~np.isfinite(stack)).any():
                return None
        dim = len(shape)
        nl = ["\n" + ind * (level + k) for k in range(dim + 1)]
        head = "".join(("[" if k == 0 else nl[k] + "[") for k in range(dim)) + nl[dim]
        tail = "".join(nl[k] + "]" for k in range(dim - 1, -1, -1))
        seps = ["," + nl[dim]]
        for j in range(1, dim):
            close = "".join(nl[dim - r] + "]" for r in range(1, j + 1))
            reopen = "".join(nl[dim - r] + "[" for r in range(j, 0, -1))
            seps.append(close + "," + reopen + nl[dim])
        src = orjson.dumps(np.ascontiguousarray(stack), option=orjson.OPT_SERIALIZE_NUMPY)
        be = np.empty(2 * m, np.int64)
        base = ctypes.cast(ctypes.c_char_p(src), ctypes.c_void_p).value
        got = lib.ql_json_index(base + 1, len(src) - 2, dim, be.ctypes.data, m)
        if got != m:  # pragma: no cover - orjson's text of a stack has m arrays
            return None
        be += 1  # offsets into src, whose first byte is the stack's bracket
        return cls(src, be, dim, [x.encode("ascii") for x in seps], head.encode("ascii"), tail.encode("ascii"))

    @staticmethod
    def arguments(groups: list["_Group"]) -> list[Any]:
        G = len(groups)
        seps = (ctypes.c_char_p * (8 * G))()
        lens = (ctypes.c_int64 * (8 * G))()
        for g, grp in enumerate(groups):
            for j, x in enumerate(grp.seps):
                seps[8 * g + j], lens[8 * g + j] = x, len(x)
        return [(ctypes.c_char_p * G)(*[g.src for g in groups]),
                (ctypes.c_void_p * G)(*[g.begin_end.ctypes.data for g in groups]),
                (ctypes.c_int32 * G)(*[g.depth for g in groups]), seps, lens,
                (ctypes.c_char_p * G)(*[g.head for g in groups]), (ctypes.c_int64 * G)(*[len(g.head) for g in groups]),
                (ctypes.c_char_p * G)(*[g.tail for g in groups]), (ctypes.c_int64 * G)(*[len(g.tail) for g in groups])]


def _group_texts(stack: np.ndarray, level: int, ind: str) -> list[str]:
    """``json.dumps`` layouts (at ``level``, indent ``ind``) of ``stack[0]``, ``stack[1]``, …: every number
    formatted (:func:`format_floats`) and ``%``-substituted into a cached template."""
    m, shape = stack.shape[0], stack.shape[1:]
    if not all(shape):
        return [_layout([], shape, level, ind)] * m
    parts = format_floats(stack) if stack.dtype.kind == "f" else format_ints(stack)
    tmpl, n = _template(shape, level, ind), math.prod(shape)
    return [tmpl % tuple(parts[k * n:(k + 1) * n]) for k in range(m)]


@functools.lru_cache(maxsize=1)
def _clib() -> Any:
    lib = cdll("qlinear.encodings._jsonfast")
    if lib is None:  # pragma: no cover - built by pip install; without a compiler the pure-Python path runs
        return None
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.ql_json_index.argtypes = [p, i64, ctypes.c_int32, p, i64]
    lib.ql_json_index.restype = i64
    lib.ql_json_emit.argtypes = [ctypes.c_char_p, i64, p, i64, p, p, p, p, p, p, p, p, p, p, p, ctypes.c_int, p, i64]
    lib.ql_json_emit.restype = i64
    lib.ql_json_extract.argtypes = [ctypes.c_char_p, i64, p, i64, p, p, i64, p, p, i64, p]
    lib.ql_json_extract.restype = ctypes.c_int
    return lib


def dumps(doc: Any, indent: int | str | None, sort_keys: bool) -> str:
    """``json.dumps(doc, indent=indent, sort_keys=sort_keys)`` for documents whose numeric arrays may be NumPy
    arrays (1-D or N-D, written as nested lists: float arrays as floats, integer arrays as integers)."""
    if indent is None:
        return json.dumps(doc, sort_keys=sort_keys, default=lambda o: o.tolist() if isinstance(o, np.ndarray)
                          else _not_serializable(o))
    w = _Writer(" " * indent if isinstance(indent, int) else str(indent), sort_keys)
    with gc_paused():
        w.emit(doc, 0)
        r = w.render()
    return r if isinstance(r, str) else str(r, "ascii")


#: :func:`write` formats an array of more numbers than this in slabs of about this many (its text written as formatted)
STREAM_NUMBERS = 1 << 20


def write(doc: Any, indent: int | str | None, sort_keys: bool, f: BinaryIO) -> None:
    """``f.write(dumps(doc, ...).encode())`` for a binary file with a descriptor, streamed by the compiled helper
    (no document-sized string); a document with an array of more than :data:`STREAM_NUMBERS` numbers (the block
    scales of a large weight) is written piece by piece as it is formatted (:meth:`_Writer.stream`: no text of a
    whole array either)."""
    if indent is None:
        f.write(dumps(doc, indent, sort_keys).encode("utf-8"))
        return
    w = _Writer(" " * indent if isinstance(indent, int) else str(indent), sort_keys)
    with gc_paused():
        w.emit(doc, 0)
        f.flush()
        if any(not isinstance(a, list) and a.size > STREAM_NUMBERS for a, _ in w.slots):
            w.stream(f)
            return
        r = w.render(fd=f.fileno())
    if r is not None:
        f.write(r.encode("utf-8") if isinstance(r, str) else memoryview(r))


def _not_serializable(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def plain(doc: Any) -> Any:
    """The document with NumPy arrays as nested lists (for callers that hand it to ``json``)."""
    if isinstance(doc, dict):
        return {k: plain(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [plain(v) for v in doc]
    if isinstance(doc, np.ndarray):
        return doc.tolist()
    return doc
