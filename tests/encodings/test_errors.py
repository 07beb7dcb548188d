"""Bad input: every problem is a QlinearError naming the file, the JSON path and the problem; a fuzz test feeds
mutated golden files to the loaders."""

from __future__ import annotations

import copy
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlinear import encodings as E
from qlinear.encodings import io as eio
from qlinear.errors import EncodingError, QlinearError


def _golden(shared_dir, suffix):
    return next((shared_dir / "aimet-golden").glob(f"*{suffix}"))


def _mutate(doc, path, value):
    d = copy.deepcopy(doc)
    o = d
    for k in path[:-1]:
        o = o[k]
    if value is KeyError:
        del o[path[-1]]
    else:
        o[path[-1]] = value
    return d


@pytest.mark.parametrize("suffix, path, value, where, msg", [
    ("per_channel_tf_v1.0.0.encodings", ["param_encodings", 0, "scale", 7], float("nan"), "param_encodings[0].scale[7]", "finite"),
    ("per_channel_tf_v1.0.0.encodings", ["param_encodings", 2, "scale", 1], -0.5, "param_encodings[2].scale[1]", "> 0"),
    ("per_channel_tf_v1.0.0.encodings", ["param_encodings", 0, "scale", 2], "0.1", "param_encodings[0].scale[2]", "expected a number"),
    ("per_channel_tf_v1.0.0.encodings", ["activation_encodings", 0, "name"], KeyError, "activation_encodings[0]", "missing mandatory field 'name'"),
    ("per_channel_tf_v1.0.0.encodings", ["activation_encodings", 0, "bw"], "8", "activation_encodings[0].bw", "integer"),
    ("per_channel_tf_v1.0.0.encodings", ["activation_encodings", 0, "offset", 0], -300.0, "activation_encodings[0].offset", "outside the uint8 range"),
    ("per_channel_tf_v1.0.0.encodings", ["activation_encodings", 0, "dtype"], "COMPLEX", "activation_encodings[0].dtype", "unknown dtype"),
    ("per_tensor_tf_v2.0.0.encodings", ["encodings", 2, "output_dtype"], "int7", "encodings[2].output_dtype", "unknown output_dtype"),
    ("per_tensor_tf_v2.0.0.encodings", ["encodings", 5, "y_zero_point"], 999, "encodings[5].y_zero_point", "outside"),
    ("per_tensor_tf_v2.0.0.encodings", ["encodings", 1, "name"], "x", "x", "duplicate"),
    ("per_tensor_tf_v0.6.1.encodings", ["activation_encodings", "x", 0, "is_symmetric"], "maybe", "activation_encodings.x[0].is_symmetric", "True"),
    ("per_tensor_tf_v0.6.1.encodings", ["activation_encodings", "x", 0, "bitwidth"], 12, "activation_encodings.x[0].bitwidth", "12-bit"),
    ("lpbq_tf_v2.0.0.encodings", ["encodings", 2, "per_block_int_scale", 3, 1], 17, "encodings[2].per_block_int_scale[3][1]", "[1, 16]"),
    ("blockwise_tf_v2.0.0.encodings", ["encodings", 2, "y_scale", 5], [0.1], "encodings[2].y_scale", "ragged"),
])
def test_bad_fields_name_file_path_and_problem(shared_dir, suffix, path, value, where, msg):
    f = _golden(shared_dir, suffix)
    doc = _mutate(json.loads(f.read_text()), path, value)
    with pytest.raises(EncodingError) as ei:
        E.loads(json.dumps(doc), path=str(f))
    text = str(ei.value)
    assert str(f) in text and where in text and msg in text, text


def test_truncated_and_invalid_json(shared_dir, tmp_path):
    f = _golden(shared_dir, "per_tensor_tf_v1.0.0.encodings")
    p = tmp_path / "cut.encodings"
    p.write_text(f.read_text()[:500])
    with pytest.raises(EncodingError, match=r"cut\.encodings.*invalid JSON at line"):
        E.load(p)
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(EncodingError, match="UTF-8"):
        E.load(p)
    with pytest.raises(EncodingError, match="not found"):
        E.load(tmp_path / "missing.encodings")
    with pytest.raises(EncodingError, match="not an encodings file"):
        E.loads('{"foo": 1}')
    with pytest.raises(EncodingError, match="says '2.0.0'"):
        E.loads('{"version": "2.0.0", "activation_encodings": {}, "param_encodings": {}}')


def test_hand_written_override_files():
    """QNN/SNPE override style: no version, tabs, int offsets, min/max only, one section empty, excluded_layers."""
    text = ('{\n\t"activation_encodings": {\n\t\t"det/sigmoid": [{"bitwidth": 16, "dtype": "int", '
            '"is_symmetric": "False", "max": 1.0, "min": 0.0, "offset": 0, "scale": 0.0000152590218966964}],\n'
            '\t\t"out": [{"bitwidth": 8, "max": 2.0, "min": -2.0}]\n\t},\n\t"param_encodings": {},\n'
            '\t"excluded_layers": ["head"], "producer": {"package": "me", "version": "1", "extra": true}\n}')
    es = E.loads(text)
    assert es.version is None and es.excluded_layers == ("head",)
    s = es["det/sigmoid"]
    assert s.dtype == "uint16" and int(s.zero_point) == 0 and float(s.scale) == 0.0000152590218966964
    o = es["out"]
    assert o.dtype == "uint8" and float(o.scale) == 4.0 / 255 and int(o.zero_point) == 128
    assert es.style.indent == "\t" and es.style.int_offsets
    assert E.loads(E.dumps(es, "1.0.0")).same_parameters(es)
    assert E.loads(E.dumps(es, "2.0.0")).same_parameters(es)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=True) | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=8)


def _paths(o, prefix=()):
    yield prefix
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _paths(v, prefix + (i,))


@settings(max_examples=300)
@given(st.data())
def test_fuzz_only_qlinear_errors_escape(shared_dir, data):
    files = sorted((shared_dir / "aimet-golden").glob("*.encodings"))
    f = data.draw(st.sampled_from(files))
    text = f.read_text()
    action = data.draw(st.sampled_from(["replace", "delete", "truncate", "bytes", "number"]))
    if action in ("replace", "delete"):
        doc = json.loads(text)
        paths = [p for p in _paths(doc) if p]
        p = data.draw(st.sampled_from(paths))
        doc = _mutate(doc, list(p), KeyError if action == "delete" else data.draw(_JSON))
        text = json.dumps(doc, indent=data.draw(st.sampled_from([None, 4, "\t"])))
    elif action == "truncate":
        text = text[: data.draw(st.integers(0, len(text)))]
    elif action == "number":  # edit the number text itself (what the fast reader's C scanner parses)
        digits = [i for i, c in enumerate(text) if c in "0123456789.eE-"]
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.sampled_from(digits))
            text = text[:i] + data.draw(st.sampled_from(list("0123456789.eE+-,[] ") + ["", "00", "e999"])) + text[i + 1:]
            digits = [j for j in digits if j < len(text)]
    else:
        b = bytearray(text.encode())
        for _ in range(data.draw(st.integers(1, 5))):
            b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
        text = bytes(b).decode("latin-1")
    fast = eio._loads_lifted(text, f.name)  # the fast reader takes a file only when the plain one agrees
    if fast is not None:
        slow = eio._loads_parsed(text, f.name)
        assert fast == slow and fast.style == slow.style and fast.version == slow.version
    try:
        es = E.loads(text, path=f.name)
    except QlinearError:
        return
    for v in E.VERSIONS:  # whatever loaded must also save or fail cleanly
        try:
            E.dumps(es, v)
        except QlinearError:
            pass
    E.load(io.StringIO(text))


def test_null_axis_is_refused_by_both_readers(shared_dir):
    """"axis": null is an error (the fast reader once took it for an absent axis; found by the fuzz test above)."""
    f = shared_dir / "aimet-golden" / "aimet-onnx-2.42.0_fp8_weight_v2.0.0.encodings"
    doc = json.loads(f.read_text())
    doc["encodings"][3]["axis"] = None
    text = json.dumps(doc)
    assert eio._loads_lifted(text, f.name) is None
    with pytest.raises(EncodingError, match=r"encodings\[3\]\.axis"):
        E.loads(text, path=f.name)
