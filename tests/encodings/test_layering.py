"""The encodings layer stands alone: no import of ``qlinear.graph`` (nor ``onnx``) anywhere under
``qlinear/encodings`` (inside functions included), no import circle among its modules, and what needs a model is
refused with the graph layer's name. Also the errors of ``EncodingSet[...]``, ``save``/``load`` on bad targets,
and ``save`` into binary file objects."""

from __future__ import annotations

import ast
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import qlinear.encodings as E
from qlinear.errors import EncodingError, EncodingKeyError, QlinearError

PKG = Path(E.__file__).parent
ROOT = PKG.parents[1]  # the src folder


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every module a file imports (module level, functions, TYPE_CHECKING blocks; relative imports made absolute;
    ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name), with its line."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module_name(path, root)
    pkg = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]  # `from pkg import submodule`
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if fname in ("import_module", "__import__"):
                out.append((node.lineno, node.args[0].value))
    return out


FILES = sorted(PKG.rglob("*.py"))


def test_the_walker_sees_lazy_relative_and_dynamic_imports(tmp_path):
    pkg = tmp_path / "qlinear" / "encodings"
    pkg.mkdir(parents=True)
    f = pkg / "probe.py"
    f.write_text("def f():\n    from ..graph import bridge\n    import importlib\n"
                 "    importlib.import_module('qlinear.graph.axes')\n    from qlinear.graph.axes import resolve_set\n")
    mods = [m for _, m in _imports(f, tmp_path)]
    assert "qlinear.graph" in mods and "qlinear.graph.axes" in mods and mods.count("qlinear.graph.axes") == 2


def test_no_graph_or_onnx_import_under_encodings():
    assert len(FILES) >= 10
    bad = [f"{f.relative_to(ROOT)}:{line}: {mod}" for f in FILES for line, mod in _imports(f)
           if mod == "qlinear.graph" or mod.startswith(("qlinear.graph.", "onnx", "qlinear.ptq", "qlinear.cli",
                                                        "qlinear.calibration", "qlinear.kernels", "qlinear.tflite"))]
    assert bad == []


def test_no_import_circle_among_encodings_modules():
    names = {_module_name(f): f for f in FILES}
    edges: dict[str, set[str]] = {}
    for m, f in names.items():
        by_line: dict[int, set[str]] = {}
        for line, d in _imports(f):
            by_line.setdefault(line, set()).add(d)
        edges[m] = set()
        for mods in by_line.values():
            subs = {d for d in mods if d in names and d != "qlinear.encodings"}
            edges[m] |= subs
            # `from qlinear.encodings import Name` (not a submodule) runs the package __init__ for that name
            if "qlinear.encodings" in mods and not subs:
                edges[m].add("qlinear.encodings")
        edges[m].discard(m)
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(names):
        if m not in state:
            visit(m, [m])
    assert cycles == []
    assert "qlinear.encodings.v2_1_0" not in edges["qlinear.encodings.v2_0_0"]


def test_reading_and_writing_loads_neither_graph_nor_onnx(shared_dir, tmp_path):
    f = shared_dir / "aimet-golden" / "aimet-onnx-2.42.0_lpbq_tf_v2.0.0.encodings"  # LPBQ: 2.1.0 meta scales
    code = ("import sys, qlinear.encodings as E\n"
            f"es = E.load({str(f)!r}); E.save(es, {str(tmp_path / 'o.encodings')!r}, version='2.1.0')\n"
            "E.loads(E.dumps(es, '1.0.0'))\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('qlinear.graph', 'onnx')) or m == 'onnx')\n"
            "print(bad)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _set() -> E.EncodingSet:
    return E.EncodingSet([E.Encoding("x", "uint8", scale=0.5, zero_point=3),
                          E.Encoding("w", "int8", scale=np.array([0.1, 0.2]), axis=0, role="param")])


def test_missing_name_is_an_encoding_key_error_naming_the_tensor():
    es = _set()
    with pytest.raises(EncodingKeyError, match=r"no encoding for tensor 'y'") as ei:
        es["y"]
    assert isinstance(ei.value, QlinearError) and isinstance(ei.value, KeyError)
    assert str(ei.value).startswith("EncodingSet['y']")  # the message as written, not KeyError's quoted repr
    with pytest.raises(KeyError):  # code written against the old KeyError keeps working
        es["y"]
    assert es["x"].zero_point == 3


@pytest.mark.parametrize("key", [0, -1, slice(0, 1), 1.5, None, ("x",)])
def test_non_string_key_says_keys_are_tensor_names(key):
    es = _set()
    with pytest.raises(EncodingKeyError, match=r"keys are tensor names.*es\.encodings\[i\].*es\.names\(\)"):
        es[key]
    assert es.get(key) is None and es.get(key, es.encodings[0]) is es.encodings[0]
    if not isinstance(key, slice):
        assert key not in es


def test_contains_with_unhashable_key_is_false():
    assert ["x"] not in _set()


@pytest.mark.parametrize("kind", ["bytesio", "wb", "w", "stringio", "bytes_only"])
def test_save_to_file_objects_writes_the_same_bytes_as_to_a_path(kind, tmp_path):
    es = _set()
    ref = tmp_path / "ref.encodings"
    E.save(es, ref, version="2.0.0")

    class BytesOnly:  # a binary sink of its own kind: not an io class, write() takes bytes only
        def __init__(self) -> None:
            self.data = b""

        def write(self, b: bytes) -> int:
            if not isinstance(b, bytes):
                raise TypeError("a bytes-like object is required")
            self.data += b
            return len(b)

    p = tmp_path / "out.encodings"
    if kind == "bytesio":
        f = io.BytesIO()
        E.save(es, f, version="2.0.0")
        got = f.getvalue()
    elif kind == "stringio":
        f = io.StringIO()
        E.save(es, f, version="2.0.0")
        got = f.getvalue().encode("utf-8")
    elif kind == "bytes_only":
        f = BytesOnly()
        E.save(es, f, version="2.0.0")
        got = f.data
    else:
        with open(p, kind, **({} if kind == "wb" else {"encoding": "utf-8"})) as f:
            E.save(es, f, version="2.0.0")
        got = p.read_bytes()
    assert got == ref.read_bytes()
    assert E.load(io.BytesIO(got)).same_parameters(es)
    assert E.load(io.StringIO(got.decode("utf-8"))).same_parameters(es)


def test_non_ascii_names_through_binary_file_objects():
    es = E.EncodingSet([E.Encoding("größe/ü", "uint8", scale=0.25)])
    f = io.BytesIO()
    E.save(es, f, version="2.0.0")
    assert E.load(io.BytesIO(f.getvalue())).same_parameters(es)
    assert E.loads(f.getvalue()) == E.loads(f.getvalue().decode("utf-8"))


def test_save_to_a_sink_that_takes_nothing_is_refused():
    class Neither:
        def write(self, x: object) -> int:
            raise TypeError("no")

    with pytest.raises(EncodingError, match=r"save\(es, Neither\).*neither text nor bytes"):
        E.save(_set(), Neither())


@pytest.mark.parametrize("target", [123, None, 1.5, object()])
def test_save_and_load_bad_targets_are_qlinear_errors(target):
    with pytest.raises(EncodingError, match="expected a path or an open file"):
        E.save(_set(), target)
    with pytest.raises(EncodingError, match="expected a path or an open file"):
        E.load(target)
    with pytest.raises(EncodingError, match="expected the text"):
        E.loads(target)


def test_loads_takes_bytearray_and_memoryview():
    text = E.dumps(_set(), "2.0.0").encode()
    assert E.loads(bytearray(text)) == E.loads(memoryview(text)) == E.loads(text)


def test_model_keyword_is_refused_with_the_graph_layer_named(tmp_path):
    p = tmp_path / "a.encodings"
    E.save(_set(), p)
    for call in (lambda: E.load(p, model="m.onnx"), lambda: E.loads(p.read_text(), model="m.onnx")):
        with pytest.raises(EncodingError, match=r"qlinear\.graph\.resolve.*qlinear\.graph\.load_encodings"):
            call()
    with pytest.raises(EncodingError, match=r"unknown keyword argument\(s\) bogus"):
        E.load(p, bogus=1)
    with pytest.raises(EncodingError, match=r"qlinear\.graph\.resolve\(es, model\)"):
        _set().resolve("m.onnx")


def test_moved_functions_name_their_new_home():
    for name in ("apply", "validate", "extract", "resolve"):
        with pytest.raises(AttributeError, match=rf"qlinear\.graph\.{name}"):
            getattr(E, name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        E.nope  # noqa: B018


def test_unresolved_axes_error_points_at_graph_resolve():
    es = E.loads(E.dumps(_set(), "1.0.0"))
    assert not es["w"].resolved
    with pytest.raises(EncodingError, match=r"w: .*qlinear\.graph\.resolve"):
        E.dumps(es, "2.0.0")
    with pytest.raises(EncodingError, match=r"w: .*qlinear\.graph\.resolve"):
        es["w"].quantize(np.ones((2, 3), np.float32))
