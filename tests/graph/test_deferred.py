"""``onnx_ir`` is imported with ``sympy`` deferred (:mod:`qlinear.graph.deferred`): a quantization never imports it,
symbolic dimensions still compute with it on demand, and a later ``import sympy`` is the ordinary module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import qlinear

CHECK = """
import sys, types
import qlinear
from qlinear.examples import DATA, MODEL
qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=4, evaluation_samples=4))
qm.report()
assert "sympy" not in sys.modules, "a quantization imported sympy"
import onnx_ir as ir
d = ir.SymbolicDim("floor(h/2) + 1")
assert str(d + 1) == "floor(h/2) + 2", str(d + 1)
import sympy
assert type(sympy) is types.ModuleType and sys.modules["sympy"] is sympy
assert isinstance(d._expr, sympy.Expr)
print("ok")
"""


def _run(code: str) -> subprocess.CompletedProcess:
    src = str(Path(qlinear.__file__).resolve().parents[1])  # this checkout's qlinear, not an installed one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env)


def test_sympy_deferred_until_used() -> None:
    r = _run(CHECK)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_sympy_first_is_the_ordinary_import() -> None:
    code = ("import sympy, sys, types; import qlinear.graph, onnx_ir; "
            "assert type(onnx_ir._core.sympy) is types.ModuleType and onnx_ir._core.sympy is sympy; print('ok')")
    r = _run(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
