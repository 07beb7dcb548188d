"""Structure of src/qlinear, read with ``ast`` (imports at module level and inside functions alike):

(a) no import cycle between modules (Tarjan's strongly connected components; a package's ``__init__`` is a module);
(b) nothing under ``qlinear.encodings`` imports ``qlinear.graph``;
(c) no private name (leading underscore) imported from a module of another subpackage (``qlinear.X`` importing
    from ``qlinear.Y``; the top-level helper modules ``qlinear._atomic`` and ``qlinear._ext`` are shared by all);
(d) no function or method longer than 80 lines;
(e) the layers: a subpackage imports only subpackages below it in ``LAYERS`` (the import-linter contract).

``.ci/run`` also runs ``lint-imports`` (the layer contracts in pyproject.toml) and ``ruff``; these tests give the
module-level detail (which modules form each cycle, which function is too long). The checkers themselves are tested
on small synthetic sources first, so a checker that finds nothing is known to be able to find something.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_FUNCTION_LINES = 80
SHARED_PRIVATE_MODULES = {"qlinear._atomic", "qlinear._ext"}
#: top first; subpackages on one line are independent (neither imports the other). pyproject [tool.importlinter]
LAYERS = (("cli",), ("ptq",), ("kernels", "tflite"), ("graph",), ("calibration",), ("encodings",), ("core",))


@dataclass(frozen=True)
class Import:
    importer: str      # module doing the import
    module: str        # module imported (``from M import n``: M, or M.n when that is a module)
    names: tuple[str, ...]  # names imported from ``module`` (empty for ``import M``)
    line: int
    type_only: bool    # under ``if TYPE_CHECKING:``


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for n in ast.walk(sub):
                    if hasattr(n, "lineno"):
                        lines.add(n.lineno)
    return lines


def imports_of(source: str, importer: str, is_package: bool, modules: set[str]) -> list[Import]:
    """Every import statement in ``source`` (anywhere in it), resolved to absolute module names."""
    tree = ast.parse(source)
    type_only = _type_checking_lines(tree)
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out.append(Import(importer, a.name, (), node.lineno, node.lineno in type_only))
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(importer, is_package, node)
            plain = []
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if sub in modules:  # ``from pkg import submodule``
                    out.append(Import(importer, sub, (), node.lineno, node.lineno in type_only))
                else:
                    plain.append(a.name)
            if plain:
                out.append(Import(importer, mod, tuple(plain), node.lineno, node.lineno in type_only))
    return out


def scan(root: Path = SRC) -> tuple[dict[str, Path], list[Import]]:
    files = {module_name(p, root): p for p in sorted((root / "qlinear").rglob("*.py"))}
    modules = set(files)
    found: list[Import] = []
    for name, path in files.items():
        found += imports_of(path.read_text(), name, path.name == "__init__.py", modules)
    return files, found


def _owner(module: str, modules: set[str]) -> str | None:
    """The module of ``modules`` that ``module`` names (itself or its nearest parent), or None (external)."""
    while module and module not in modules:
        module = module.rpartition(".")[0]
    return module or None


def import_graph(modules: set[str], found: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in found:
        target = _owner(imp.module, modules)
        if target is not None and target != imp.importer and not imp.type_only:
            graph[imp.importer].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); the components with more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    result.append(sorted(comp))
    return sorted(result)


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def private_imports(found: list[Import], modules: set[str]) -> list[str]:
    """``importer:line imports name from module`` for private names crossing subpackages."""
    bad = []
    for imp in found:
        if not imp.module.startswith("qlinear.") or _subpackage(imp.module) == _subpackage(imp.importer):
            continue
        if _subpackage(imp.module) in SHARED_PRIVATE_MODULES:
            continue
        path = imp.module.split(".")[1:]
        private = [p for p in path if p.startswith("_") and not p.startswith("__")]
        private += [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        if private:
            bad.append(f"{imp.importer}:{imp.line} imports {', '.join(private)} from {imp.module}")
    return bad


def layer_violations(found: list[Import]) -> list[str]:
    """``importer:line imports module`` for imports upward (or sideways within a layer) in :data:`LAYERS`."""
    rank = {f"qlinear.{p}": i for i, layer in enumerate(LAYERS) for p in layer}
    bad = []
    for imp in found:
        a, b = rank.get(_subpackage(imp.importer)), rank.get(_subpackage(imp.module))
        if a is not None and b is not None and _subpackage(imp.importer) != _subpackage(imp.module) and b <= a:
            bad.append(f"{imp.importer}:{imp.line} imports {imp.module}")
    return bad


def long_functions(source: str, where: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str]]:
    """``(lines, "where:line name")`` for every function or method (nested ones too) longer than ``limit``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                out.append((n, f"{where}:{node.lineno} {node.name}"))
    return out


# ---------------------------------------------------------------------------------------------------------------
# The checkers on synthetic sources (they can find what they look for)
# ---------------------------------------------------------------------------------------------------------------

def test_checkers_find_cycles_private_names_and_long_functions():
    mods = {"qlinear", "qlinear.a", "qlinear.a.x", "qlinear.a.y", "qlinear.b", "qlinear.b.z", "qlinear._atomic"}
    src = {
        "qlinear.a.x": ("from qlinear.a.y import f\nfrom qlinear._atomic import _w\n", False),
        "qlinear.a.y": ("def g():\n    from . import x\n    from qlinear.b.z import _h\n", False),
        "qlinear.b": ("from .z import k\nimport qlinear.a._p\nfrom typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from qlinear.a.x import T\n", True),
        "qlinear.b.z": ("from qlinear.b import thing\n", False),
        "qlinear.a": ("", True), "qlinear": ("", True), "qlinear._atomic": ("", False),
    }
    found = [i for m, (s, pkg) in src.items() for i in imports_of(s, m, pkg, mods)]
    graph = import_graph(mods, found)
    assert graph["qlinear.a.y"] == {"qlinear.a.x", "qlinear.b.z"}   # the function-level and relative imports
    assert "qlinear.a.x" not in graph["qlinear.b"]                   # TYPE_CHECKING imports do not run
    assert strongly_connected(graph) == [["qlinear.a.x", "qlinear.a.y"], ["qlinear.b", "qlinear.b.z"]]
    assert private_imports(found, mods) == ["qlinear.a.y:3 imports _h from qlinear.b.z",
                                            "qlinear.b:2 imports _p from qlinear.a._p"]
    assert layer_violations(imports_of("from qlinear.ptq.x import y\nfrom qlinear.core import q\n"
                                       "import qlinear.kernels\n", "qlinear.tflite.e", False, set())) == [
        "qlinear.tflite.e:1 imports qlinear.ptq.x", "qlinear.tflite.e:3 imports qlinear.kernels"]
    body = "def f():\n" + "    x = 1\n" * 80 + "\n\nclass C:\n    def m(self):\n" + "        pass\n" * 79
    assert long_functions(body, "m.py") == [(81, "m.py:1 f")]


def test_tarjan_on_a_long_ring_and_self_loops():
    ring = {f"m{i}": {f"m{(i + 1) % 500}"} for i in range(500)}
    assert strongly_connected(ring) == [sorted(ring)]
    assert strongly_connected({"a": {"a"}, "b": set()}) == []


# ---------------------------------------------------------------------------------------------------------------
# The real tree
# ---------------------------------------------------------------------------------------------------------------

class Tree(tuple):
    """``(files, imports)`` of src/qlinear, with a short repr for failure reports."""

    def __repr__(self) -> str:
        return f"<{len(self[0])} modules, {len(self[1])} imports under {SRC}>"


@pytest.fixture(scope="module")
def tree():
    files, found = scan()
    assert len(files) > 50 and "qlinear.ptq.pipeline" in files
    return Tree((files, found))


def test_no_import_cycles(tree):
    files, found = tree
    cycles = strongly_connected(import_graph(set(files), found))
    assert not cycles, "import cycles (each a set of modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_encodings_never_imports_graph(tree):
    _, found = tree
    bad = [f"{i.importer}:{i.line} imports {i.module}" for i in found
           if _subpackage(i.importer) == "qlinear.encodings" and _subpackage(i.module) == "qlinear.graph"]
    assert not bad, "\n".join(bad)


def test_layers(tree):
    _, found = tree
    bad = layer_violations(found)
    assert not bad, "imports against the layers " + " > ".join(" | ".join(x) for x in LAYERS) + ":\n" + "\n".join(bad)


def test_no_private_names_across_subpackages(tree):
    files, found = tree
    bad = private_imports(found, set(files))
    assert not bad, "\n".join(bad)


def test_no_function_longer_than_80_lines(tree):
    files, _ = tree
    bad = sorted((lf for m, p in files.items() for lf in long_functions(p.read_text(), str(p.relative_to(SRC)))),
                 reverse=True)
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(f"{n:4d} {w}" for n, w in bad)
