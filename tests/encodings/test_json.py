"""The JSON layer of large encodings files (``_json``, ``_scan`` and the compiled ``_jsonfast``) against the stdlib
``json`` module, the peer whose output AIMET files are: the writer must produce ``json.dumps``'s bytes, the number
scanner ``float()``'s doubles, and the fast reader the same ``EncodingSet`` as the plain parse."""

from __future__ import annotations

import contextlib
import json
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlinear import encodings as E
from qlinear.encodings import _json, _scan
from qlinear.encodings import io as eio
from qlinear.errors import EncodingError

HAVE_C = _json._clib() is not None
needs_c = pytest.mark.skipif(not HAVE_C, reason="compiled helper qlinear.encodings._jsonfast not built")


PATHS = pytest.mark.parametrize("kind", [pytest.param("compiled", marks=needs_c), "python"])


def _through(kind: str):
    """The compiled helper as it is, or (``"python"``) hidden so that the pure-Python fallback runs."""
    return contextlib.nullcontext() if kind == "compiled" else mock.patch.object(_json, "_clib", lambda: None)


# --- numbers -------------------------------------------------------------------------------------------------
_BITS = st.integers(0, 2**64 - 1).map(lambda b: float(np.array(b, np.uint64).view(np.float64)))
_SCALES = st.floats(min_value=1e-12, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(_BITS | _SCALES | st.sampled_from([0.0, -0.0, 1e-4, 1e16, 1e-5, 5e-324]), min_size=1, max_size=40))
def test_float_formatting_is_repr(xs):
    """Bulk formatting (orjson + repr fix-ups) is ``json.dumps``'s text for every bit pattern."""
    assert _json.format_floats(np.array(xs)) == [json.dumps(x) for x in xs]
    if _json.orjson is not None:  # the bulk path itself, not only whichever path the self-check picked
        assert _json._floats_orjson(np.array(xs)) == [json.dumps(x) for x in xs]


@pytest.mark.skipif(_json.orjson is None, reason="orjson not installed")
def test_bulk_float_formatting_is_in_use():
    _json.format_floats(np.zeros(1))
    assert _json._FORMAT is _json._floats_orjson


@needs_c
@given(st.lists(_BITS.filter(math.isfinite) | _SCALES | st.integers(-2**53, 2**53), min_size=1, max_size=30),
       st.sampled_from([None, 0, 2, "\t"]))
def test_scanner_numbers_are_float_of_the_text(xs, indent):
    """Every number lifted by the C scanner is the double ``float()`` gives for its text (also exponents, ints)."""
    text = json.dumps({"a": xs, "b": [xs, xs]}, indent=indent).encode()
    skel, arrays = _scan.extract(text)
    doc = json.loads(skel)
    a, b = arrays.index(doc["a"]), arrays.index(doc["b"])
    want = np.array([float(x) for x in xs])
    assert arrays.floats(a).tobytes() == want.tobytes()
    assert arrays.floats(b).shape == (2, len(xs)) and arrays.floats(b)[1].tobytes() == want.tobytes()
    assert arrays.positive[a] == bool(np.all(want > 0)) and arrays.lo[a] == want.min() and arrays.hi[a] == want.max()


@needs_c
@pytest.mark.parametrize("text", [
    b'{"a": [1, 2], "s": "[1, 2] \\" [3]", "e": [], "r": [[1, 2], [3]], "m": [1, "x"], "n": [[[1.5e3]]]}',
    b'{"a": [ -0.0 , 1E2,2e-2 ],"b":[true, 1], "c": [null], "d": [[], []], "k": {"[": [7]}}',
])
def test_scanner_skeleton_keeps_everything_else(text):
    """Only rectangular numeric arrays are lifted; strings, ragged/mixed/empty arrays and keys stay as they are."""
    skel, arrays = _scan.extract(text)

    def back(o):
        if isinstance(o, dict):
            return {k: back(v) for k, v in o.items()}
        if isinstance(o, list):
            return [back(v) for v in o]
        k = arrays.index(o)
        return o if k is None else arrays.floats(k).tolist()

    assert back(json.loads(skel)) == json.loads(text)


@needs_c
@pytest.mark.parametrize("bad", [b'{"a": [1, 2', b'{"a": [01]}', b'{"a": [1.]}', b'{"a": [.5]}', b'{"a": [1e]}',
                                 b'{"a": [+1]}', b'{"a": [1 2]}', b'{"a": [NaN]}', b'{"a": [12345678901234567890]}'])
def test_scanner_refuses_what_is_not_a_plain_number(bad):
    """Whatever the scanner does not take exactly is left in the skeleton for the JSON parser to judge."""
    got = _scan.extract(bad)
    if got is not None:
        skel, arrays = got
        assert arrays.count == 0


# --- layout --------------------------------------------------------------------------------------------------
def _array(draw, kind: str) -> np.ndarray:
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=4)))
    n = math.prod(shape)
    if kind == "i":
        return np.array(draw(st.lists(st.integers(-2**40, 2**40), min_size=n, max_size=n)), np.int64).reshape(shape)
    vals = draw(st.lists(_SCALES | st.sampled_from([1e-7, 2.5e-5, 0.1, 1.0, 1e17]), min_size=n, max_size=n))
    return np.array(vals, np.float64).reshape(shape)


@st.composite
def _docs(draw):
    """Documents shaped like encodings files: lists of same-keyed entries (with runs of different key sets),
    NumPy arrays of every rank, flat Python number lists, odd keys."""
    shape_pool = draw(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=3))
    entries = []
    for i in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["plain", "block", "lpbq", "flat"]))
        e = {"name": f"t{i}%s", "output_dtype": draw(st.sampled_from(["int4", "uint8"]))}
        if kind == "block":
            e["y_scale"] = np.random.default_rng(i).random(draw(st.sampled_from(shape_pool))) + 1e-3
            e["block_size"] = 32
        elif kind == "lpbq":
            e["y_scale"] = np.array([0.5, 1e-6]) if i % 2 else np.array([0.25, 3.0])
            e["per_block_int_scale"] = np.arange(6, dtype=np.int64).reshape(2, 3) + 1
        elif kind == "flat":
            e["y_scale"] = draw(st.lists(_SCALES, min_size=1, max_size=3))
        else:
            e["y_scale"] = draw(_SCALES)
            e["y_zero_point"] = draw(st.integers(-8, 7))
        entries.append(e)
    return {"version": "2.0.0", "encodings": entries, "excluded_layers": draw(st.lists(st.text(max_size=4), max_size=2)),
            "weird %s key": draw(st.builds(_array, st.just(draw), st.sampled_from("fi"))),
            "nested": [[1, 2.5], {"x": None, "y": True}, []], "producer": {"version": "1.2", "extra": {}}}


@PATHS
@settings(max_examples=60)
@given(doc=_docs(), indent=st.sampled_from([4, 2, 1, "\t", "  ", 0]), sort=st.booleans())
def test_writer_equals_json_dumps(kind, doc, indent, sort):
    """``_json.dumps`` (NumPy arrays, bulk layout) gives ``json.dumps``'s exact text."""
    want = json.dumps(_json.plain(doc), indent=indent, sort_keys=sort)
    with _through(kind):
        assert _json.dumps(doc, indent, sort) == want


@PATHS
def test_streamed_write_equals_dumps(kind, tmp_path):
    rng = np.random.default_rng(1)
    doc = {"encodings": [{"name": f"w{i}", "y_scale": rng.random((40, 3)) * 10.0 ** -rng.integers(0, 8)}
                         for i in range(300)]}
    p = tmp_path / "out.json"
    with _through(kind), open(p, "wb") as f:
        _json.write(doc, 4, True, f)
    assert p.read_text() == json.dumps(_json.plain(doc), indent=4, sort_keys=True)


@settings(max_examples=60)
@given(doc=_docs(), indent=st.sampled_from([4, 2, 1, "\t", "  ", 0]), sort=st.booleans(),
       numbers=st.sampled_from([0, 1, 2, 5]))
def test_write_of_large_arrays_in_slabs_equals_json_dumps(tmp_path_factory, doc, indent, sort, numbers):
    """A document with an array above ``STREAM_NUMBERS`` numbers is written piece by piece, each large array in
    slabs along its first axis (the block scales of a large weight): still ``json.dumps``'s exact text."""
    p = tmp_path_factory.mktemp("w") / "out.json"
    with mock.patch.object(_json, "STREAM_NUMBERS", numbers), open(p, "wb") as f:
        _json.write(doc, indent, sort, f)
    assert p.read_text() == json.dumps(_json.plain(doc), indent=indent, sort_keys=sort)


# --- fast reader ---------------------------------------------------------------------------------------------
def _goldens(shared_dir):
    return sorted((shared_dir / "aimet-golden").glob("*.encodings"))


@needs_c
def test_lifted_reader_is_taken_and_agrees_on_goldens(shared_dir):
    """Every golden file reads the same through both readers; the 2.0.0 integer files take the fast one."""
    taken = []
    for f in _goldens(shared_dir):
        data = f.read_bytes()
        fast = eio._loads_lifted(data, str(f))
        slow = eio._loads_parsed(data, str(f))
        if fast is not None:
            taken.append(f.name)
            assert fast == slow and fast.style == slow.style and fast.version == slow.version, f.name
            for a, b in zip(fast, slow):
                assert a.dtype == b.dtype and np.array_equal(a.scale, b.scale), a.name
    assert {n.split("_", 1)[1] for n in taken} >= {"per_tensor_tf_v2.0.0.encodings", "per_channel_tf_v2.0.0.encodings",
                                                   "blockwise_tf_v2.0.0.encodings", "lpbq_tf_v2.0.0.encodings"}


@needs_c
def test_lifted_reader_on_a_large_file_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    encs = [E.Encoding(f"l{i}.weight", "int4", scale=rng.random((8, 2)) + 1e-5, axis=1, block_size=32, role="param")
            for i in range(2000)]
    encs.append(E.Encoding("x", "uint8", scale=0.02, zero_point=128))
    es = E.EncodingSet(tuple(encs), version="2.0.0")
    p = tmp_path / "big.encodings"
    E.save(es, p)
    data = p.read_bytes()
    fast = eio._loads_lifted(data, str(p))
    assert fast is not None and fast.same_parameters(es) and fast == eio._loads_parsed(data, str(p))
    assert E.dumps(fast) == data.decode()


@needs_c
@pytest.mark.parametrize("edit, match", [
    (lambda t: t.replace("0.5", "true", 1), r"y_scale\[0\]\[0\].*expected a number"),
    (lambda t: t.replace("0.5", "-1.0", 1), r"y_scale\[0\]\[0\].*> 0"),
    (lambda t: t.replace("0.5", "1e999", 1), r"y_scale\[0\]\[0\].*finite"),
    (lambda t: t.replace("0.5", "[0.5]", 1), r"y_scale.*ragged|y_scale.*mixes"),
    (lambda t: t.replace('"block_size": 32', '"block_size": 0', 1), "block"),
])
def test_bad_large_files_get_the_plain_readers_errors(tmp_path, edit, match):
    """A fast-path refusal is never the last word: the plain reader reads the file again and names the problem."""
    encs = [E.Encoding(f"l{i}.weight", "int4", scale=np.full((4, 2), 0.5), axis=1, block_size=32, role="param")
            for i in range(50)]
    text = E.dumps(E.EncodingSet(tuple(encs), version="2.0.0"))
    with pytest.raises(EncodingError, match=match) as ei:
        E.loads(edit(text), path="big.encodings")
    assert "big.encodings" in str(ei.value) and "encodings[0]" in str(ei.value)


def test_save_failure_leaves_the_old_file(tmp_path, monkeypatch):
    es = E.EncodingSet((E.Encoding("x", "uint8", scale=0.5, zero_point=3),), version="2.0.0")
    p = tmp_path / "keep.encodings"
    E.save(es, p)
    before = p.read_bytes()

    def boom(doc, indent, sort_keys, f):
        f.write(b'{"half": ')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_json, "write", boom)
    with pytest.raises(OSError):
        E.save(es, p, "1.0.0")
    assert p.read_bytes() == before and [x.name for x in tmp_path.iterdir()] == ["keep.encodings"]
