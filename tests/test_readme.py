"""The README's commands and Python snippets run as written.

The README is parsed, not copied: every fenced block and every inline code span that is a ``qlinear`` command is
found anew on each run, so the test follows README edits. Each block runs in a fresh temporary folder holding
stand-in files with the README's file names (built once per session, :func:`standins`):

==================  ============================================================================================
``model.onnx``      the bundled example CNN (:data:`qlinear.examples.MODEL`) as qlinear's ``model.float.onnx`` of
                    it (BatchNorm folded), its first Conv weight named ``conv.weight`` as in the README
``model.encodings`` qlinear's encodings of that model (they name its tensors, so they load, validate and apply)
``calib.npz``       24 samples for every stand-in model: ``input`` (the example's images), ``input_ids`` and
                    ``attention_mask`` (the transformers')
``images/``         6 PNGs, label as the leading number of the file name
``smollm2.onnx``    a tiny tied-embedding decoder (``tiny_models.tiny_lm``, d = 64)
``minilm.onnx``     a tiny BERT-like encoder (``tiny_models.tiny_encoder``)
==================  ============================================================================================

Names a Python snippet uses without defining them (``batches``, ``w``, ``qdq_model``...) are stand-ins too, given
per README section (:data:`FREE_NAMES`); a snippet using a name no stand-in provides fails and says so.

Shell lines (rules, in order):

1. ``#`` starts a comment; a line ending in ``\\`` or starting with whitespace continues the previous one (the
   usage synopsis is laid out that way);
2. ``A && B``: each part on its own; ``pip ...`` (installation) and ``python -m pytest`` (this suite) are not run;
3. only ``qlinear ...`` and ``python -m qlinear ...`` are run, as ``python -m qlinear ...`` (the ``qlinear``
   script is that module's ``main``) with this checkout's ``qlinear`` importable;
4. ``[...]`` groups are optional parts of a usage synopsis and are dropped;
5. what then still holds ``|`` (alternatives), ``...``/``…`` (elision) or an all-capitals word (a placeholder:
   ``MODEL``, ``OUTDIR``) is illustrative syntax and is not run.

Inline code spans holding a ``qlinear`` command with arguments (a bare "qlinear" span names the command) follow
the same rules; each distinct one runs once, in its own folder, unless a fenced block already runs the same command.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import qlinear
from qlinear.examples import DATA, MODEL

README = Path(__file__).resolve().parents[1] / "README.md"
TIMEOUT_S = 120  # per command or snippet (a shared 2-core machine; each takes a few seconds)


# ------------------------------------------------------------------------------------------------ parsing
@dataclass(frozen=True)
class Snippet:
    line: int       # 1-based README line of the first line of code
    kind: str       # "python" or "shell"
    section: str    # the enclosing "## " heading
    code: str


def fenced_blocks(text: str) -> list[Snippet]:
    """Every fenced block: ```` ```python ```` blocks are Python, blocks without a language are shell."""
    out: list[Snippet] = []
    section, lang, start, buf = "", None, 0, []
    for i, line in enumerate(text.splitlines(), 1):
        if lang is None and line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("```"):
            if lang is None:
                lang, start, buf = line[3:].strip(), i + 1, []
            else:
                if lang in ("python", ""):
                    out.append(Snippet(start, "python" if lang == "python" else "shell", section, "\n".join(buf)))
                lang = None
            continue
        if lang is not None:
            buf.append(line)
    return out


def _logical_lines(code: str, first: int) -> list[tuple[int, str]]:
    """Rule 1: comments off, continuation lines joined."""
    lines: list[tuple[int, str]] = []
    cont = False
    for k, raw in enumerate(code.splitlines()):
        text = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        joins = cont or (raw[:1].isspace() and lines)
        cont = text.endswith("\\")
        text = text.rstrip("\\").strip()
        if joins:
            lines[-1] = (lines[-1][0], f"{lines[-1][1]} {text}".strip())
        elif text:
            lines.append((first + k, text))
    return lines


def _runnable(part: str) -> list[str] | None:
    """Rules 2-5 for one ``&&`` part: the argv after ``qlinear``, or None when it is not run."""
    part = part.strip()
    m = re.match(r"^(qlinear|python -m qlinear)(\s|$)", part)
    if not m:
        return None  # pip install, python -m pytest, anything else
    part = re.sub(r"\[[^\[\]]*\]", "", part)  # optional synopsis groups (never nested in the README)
    if "|" in part or "..." in part or "…" in part or re.search(r"\b[A-Z][A-Z_]{2,}\b", part):
        return None
    return shlex.split(part)[1 if m.group(1) == "qlinear" else 3:]


def shell_commands(snippet: Snippet) -> list[tuple[int, list[str]]]:
    return [(line, argv) for line, text in _logical_lines(snippet.code, snippet.line)
            for argv in (_runnable(p) for p in text.split("&&")) if argv is not None]


def inline_commands(text: str) -> list[tuple[int, list[str]]]:
    seen: set[tuple[str, ...]] = set()
    out = []
    in_fence = False
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for span in re.findall(r"`((?:qlinear|python -m qlinear)\s[^`]+)`", line):  # bare `qlinear` names it
            argv = _runnable(span)
            if argv is not None and tuple(argv) not in seen:
                seen.add(tuple(argv))
                out.append((i, argv))
    return out


TEXT = README.read_text(encoding="utf-8")
BLOCKS = fenced_blocks(TEXT)
PYTHON = [b for b in BLOCKS if b.kind == "python"]
SHELL = [b for b in BLOCKS if b.kind == "shell" and shell_commands(b)]
_IN_BLOCKS = {tuple(a) for b in SHELL for _, a in shell_commands(b)}
INLINE = [(line, argv) for line, argv in inline_commands(TEXT) if tuple(argv) not in _IN_BLOCKS]


# ------------------------------------------------------------------------------------------------ stand-ins
def _build_standins(root: Path) -> None:
    from PIL import Image
    from tiny_models import tiny_encoder, tiny_lm

    m = onnx.load(MODEL)
    for init in m.graph.initializer:
        if init.name == "stem.weight":
            init.name = "conv.weight"
    for node in m.graph.node:
        node.input[:] = ["conv.weight" if n == "stem.weight" else n for n in node.input]
    rng = np.random.default_rng(0)
    x = np.load(DATA)["input"][:24]
    data = {"input": x, "input_ids": rng.integers(0, 40, (24, 16)).astype(np.int64),
            "attention_mask": np.ones((24, 16), np.int64)}
    np.savez(root / "calib.npz", **data)
    # model.onnx: the example with BatchNorm folded (qlinear's model.float.onnx), so that the encodings qlinear
    # writes for it name its own tensors
    qm = qlinear.quantize(m, {"input": x}, qlinear.QuantizeConfig(weights="per-channel", bias_correction=False))
    work = root / ".build"
    qm.save(work, report=False)
    shutil.copy(work / "model.float.onnx", root / "model.onnx")
    shutil.copy(work / "model.encodings", root / "model.encodings")
    shutil.copy(work / "model.qdq.onnx", root / ".qdq.onnx")  # for the `qdq_model` stand-in
    shutil.rmtree(work)
    (root / "images").mkdir()
    for i in range(6):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / "images" / f"{i % 3}_{i}.png")
    onnx.save(tiny_lm(d=64, ff=128), root / "smollm2.onnx")
    onnx.save(tiny_encoder(), root / "minilm.onnx")


def _kernels_names(root: Path) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    c = 3  # the example's input channels: `x` is both the depthwise conv's input and the model's input
    return {"x": rng.integers(-128, 128, (2, c, 24, 24)).astype(np.float32),
            "w": rng.integers(-127, 128, (c, 1, 3, 3)).astype(np.int8),
            "bias": rng.integers(-500, 500, c).astype(np.int32), "zx": 3, "sx": 0.05,
            "sw": np.full(c, 0.01, np.float32), "so": 0.2, "zo": -2, "c": c,
            "qdq_model": onnx.load(root / ".qdq.onnx")}


def _encodings_names(root: Path) -> dict[str, Any]:
    m = onnx.load(root / "model.onnx")
    return {"w": next(numpy_helper.to_array(i) for i in m.graph.initializer if i.name == "conv.weight")}


def _calibration_names(root: Path) -> dict[str, Any]:
    rng = np.random.default_rng(2)
    return {"batches": [rng.standard_normal((4, 64)).astype(np.float32) for _ in range(3)]}


#: free names of the Python snippets, by README section (the start of its "## " heading)
FREE_NAMES: dict[str, Callable[[Path], dict[str, Any]]] = {
    "Encodings": _encodings_names,
    "Calibration": _calibration_names,
    "Integer kernels": _kernels_names,
}


@pytest.fixture(scope="session")
def standins(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("readme-standins")
    _build_standins(root)
    return root


@pytest.fixture()
def folder(standins, tmp_path, monkeypatch) -> Path:
    work = tmp_path / "work"
    shutil.copytree(standins, work, ignore=shutil.ignore_patterns(".qdq.onnx"))
    monkeypatch.chdir(work)
    return work


# ------------------------------------------------------------------------------------------------ running
def _env() -> dict[str, str]:
    src = str(Path(qlinear.__file__).resolve().parents[1])  # this checkout's qlinear, not an installed one
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}


def _run_command(argv: list[str], cwd: Path) -> str | None:
    """None on exit status 0, else what went wrong."""
    try:
        r = subprocess.run([sys.executable, "-m", "qlinear", *argv], cwd=cwd, env=_env(), capture_output=True,
                           text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"timed out after {TIMEOUT_S} s"
    if r.returncode == 0:
        return None
    tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-3:]
    return f"exit status {r.returncode}: " + " / ".join(tail)


def _fail_all(failures: list[str]) -> None:
    if failures:
        pytest.fail("README lines that do not run as written:\n" + "\n".join(failures), pytrace=False)


@pytest.mark.parametrize("block", SHELL, ids=[f"README.md:{b.line}" for b in SHELL])
def test_shell_block_runs(block: Snippet, folder: Path):
    failures = []
    for line, argv in shell_commands(block):
        err = _run_command(argv, folder)
        if err:
            failures.append(f"README.md:{line}: qlinear {shlex.join(argv)}\n    {err}")
    _fail_all(failures)


@pytest.mark.parametrize("line,argv", INLINE, ids=[f"README.md:{ln}" for ln, _ in INLINE])
def test_inline_command_runs(line: int, argv: list[str], folder: Path):
    err = _run_command(argv, folder)
    _fail_all([f"README.md:{line}: qlinear {shlex.join(argv)}\n    {err}"] if err else [])


def _alarm(signum, frame):
    raise TimeoutError(f"snippet still running after {TIMEOUT_S} s")


@pytest.mark.parametrize("snippet", PYTHON, ids=[f"README.md:{s.line}" for s in PYTHON])
def test_python_snippet_runs(snippet: Snippet, folder: Path, standins: Path):
    names: dict[str, Any] = {"__name__": "__readme__"}
    for prefix, make in FREE_NAMES.items():
        if snippet.section.startswith(prefix):
            names.update(make(standins))
    code = compile("\n" * (snippet.line - 1) + snippet.code, str(README), "exec")  # tracebacks name README lines
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
    try:
        exec(code, names)  # noqa: S102 (the README's own code)
    except NameError as e:
        pytest.fail(f"README.md:{snippet.line} ({snippet.section}): {e}; a name the snippet does not define needs "
                    "a stand-in in FREE_NAMES", pytrace=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------------------------ the rules
def test_parser_follows_the_rules():
    synopsis = Snippet(1, "shell", "", "qlinear quantize m.onnx -o out [--weights a|b] [--x 1]\n"
                                        "        [--no-report]\n"
                                        "qlinear check out/m.onnx          # a comment\n"
                                        "python -m qlinear ...             # the same\n"
                                        "qlinear check MODEL\n"
                                        "qlinear quantize a.onnx --x 1 \\\n    --y 2 -o o\n"
                                        "pip install . && qlinear quantize && python -m pytest")
    assert shell_commands(synopsis) == [(1, ["quantize", "m.onnx", "-o", "out"]), (3, ["check", "out/m.onnx"]),
                                        (6, ["quantize", "a.onnx", "--x", "1", "--y", "2", "-o", "o"]),
                                        (8, ["quantize"])]
    assert inline_commands("run `qlinear quantize` or `qlinear encodings a|b` or `qlinear quantize ... -x`,\n"
                           "`qlinear check MODEL`, `qlinear quantize` again, `python -m qlinear check m.onnx`, the `qlinear` "
                           "command") == [
        (1, ["quantize"]), (2, ["check", "m.onnx"])]
    # the README has snippets of each kind (a parser that finds nothing would pass vacuously)
    assert len(PYTHON) >= 5 and len(SHELL) >= 2
    assert any(a[:1] == ["check"] for b in SHELL for _, a in shell_commands(b))
