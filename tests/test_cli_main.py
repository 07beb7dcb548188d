"""The ``qlinear`` command itself: ``--version``, ``-h`` on every (sub)command, exit statuses, ``qlinear check``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import typer
from tiny_models import tiny_lm

import qlinear
from qlinear.cli import main as cli
from qlinear.cli.main import EXIT_ERROR, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, main
from qlinear.examples import DATA, MODEL


def _command_paths() -> list[list[str]]:
    """Every command of the tree, as the argument list that reaches it (the root is ``[]``)."""
    cli._register()
    paths: list[list[str]] = []

    def walk(cmd, path: list[str]) -> None:
        paths.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():  # a group
            walk(sub, [*path, name])

    walk(typer.main.get_command(cli.app), [])
    return paths


def test_version_option_prints_the_package_version(capsys):
    assert main(["--version"]) == EXIT_OK
    assert capsys.readouterr().out == f"qlinear {qlinear.__version__}\n"
    assert qlinear.__version__ == "0.1.0"


def test_version_through_python_m():
    src = str(Path(qlinear.__file__).resolve().parents[1])  # this checkout's qlinear
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-m", "qlinear", "--version"], capture_output=True, text=True, env=env,
                         check=False)
    assert out.returncode == 0 and out.stdout == f"qlinear {qlinear.__version__}\n"


def test_dash_h_is_help_on_every_command(capsys):
    paths = _command_paths()
    assert ["quantize"] in paths and ["check"] in paths and ["encodings", "convert"] in paths
    for path in paths:
        assert main([*path, "-h"]) == EXIT_OK, path
        short = capsys.readouterr().out
        assert main([*path, "--help"]) == EXIT_OK, path
        assert capsys.readouterr().out == short
        assert short.startswith("Usage: qlinear" + "".join(" " + p for p in path)), short[:80]


def test_usage_errors_exit_2(capsys):
    assert main(["--no-such-option"]) == EXIT_USAGE
    assert main(["no-such-command"]) == EXIT_USAGE
    assert main(["check"]) == EXIT_USAGE  # missing argument
    assert main(["check", "a.onnx", "b.onnx"]) == EXIT_USAGE  # an extra argument
    err = capsys.readouterr().err
    assert "Try 'qlinear check -h' for help" in err or "Try 'qlinear check --help' for help" in err


def test_bad_input_file_exits_3_with_one_line(tmp_path, capsys):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a protobuf")
    assert main(["check", str(bad)]) == EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert "broken.onnx" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_check_float_model_has_no_integer_layer(capsys):
    assert main(["check", str(MODEL)]) == EXIT_PROBLEMS
    out = capsys.readouterr().out
    assert "no integer layer to check" in out


def test_check_weight_only_model_has_no_integer_layer(tmp_path, capsys):
    src = tmp_path / "lm.onnx"
    onnx.save(tiny_lm(), str(src))
    assert main(["quantize", str(src), "--activation-type", "float", "--weight-type", "int4", "--weights",
                 "per-block", "--block-size", "32", "-o", str(tmp_path / "o")]) == EXIT_OK
    capsys.readouterr()
    assert main(["check", str(tmp_path / "o" / "model.qdq.onnx")]) == EXIT_PROBLEMS
    out = capsys.readouterr().out
    assert "no integer layer to check" in out
    assert "weight-only" in out  # the table lists the float-accumulating layers


def test_check_quantized_model_passes(tmp_path, capsys):
    d = np.load(DATA)
    qm = qlinear.quantize(str(MODEL), {"input": d["input"][:8]}, qlinear.QuantizeConfig(weights="per-channel"))
    path = tmp_path / "q.onnx"
    qm.save_onnx(str(path))
    assert main(["check", str(path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "no accumulator can overflow" in out and "no integer layer" not in out


@pytest.mark.parametrize("argv", [["check", "-h"], ["-h"]])
def test_help_does_not_run_the_command(argv, capsys):
    assert main(argv) == EXIT_OK
    assert "Usage:" in capsys.readouterr().out


def test_the_program_exits_at_once_with_its_status_and_all_its_output(tmp_path):
    """``python -m qlinear`` ends without the interpreter's teardown (``run``): the status of ``main`` (0, a bad
    input's 3 with its one red line on stderr), the whole of stdout, and a temporary file a library registered for
    removal at exit removed (the exit hooks run)."""
    from qlinear.cli.main import EXIT_ERROR
    from qlinear.examples import DATA, MODEL

    src = str(Path(qlinear.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-m", "qlinear", "quantize", str(MODEL), "--data", str(DATA),
                          "--calibration-samples", "8", "--evaluation-samples", "8", "-o", str(tmp_path / "o")],
                         capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert "wrote" in out.stdout and (tmp_path / "o" / "model.qdq.onnx").is_file()
    bad = subprocess.run([sys.executable, "-m", "qlinear", "quantize", str(tmp_path / "missing.onnx"), "--data",
                          str(DATA), "-o", str(tmp_path / "o2")], capture_output=True, text=True, env=env, check=False)
    assert bad.returncode == EXIT_ERROR and "missing.onnx" in bad.stderr and "Traceback" not in bad.stderr
    hook = tmp_path / "hook.py"
    marker = tmp_path / "tmpdir.txt"
    hook.write_text("import sys, tempfile\nfrom qlinear.cli.main import run\n"
                    f"d = tempfile.TemporaryDirectory()\nopen({str(marker)!r}, 'w').write(d.name)\n"
                    "sys.argv = ['qlinear', '--version']\nrun()\n")
    v = subprocess.run([sys.executable, str(hook)], capture_output=True, text=True, env=env, check=False)
    assert v.returncode == 0 and v.stdout == f"qlinear {qlinear.__version__}\n"
    assert not Path(marker.read_text()).exists()       # the finalizer of the temporary directory ran


def test_a_profiled_run_still_writes_its_profile(tmp_path):
    """Under a profiler (``python -m cProfile -m qlinear``) the program exits the ordinary way, so the profiler
    writes its results after it returns."""
    src = str(Path(qlinear.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    prof = tmp_path / "run.prof"
    out = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "qlinear", "--version"],
                         capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0 and out.stdout == f"qlinear {qlinear.__version__}\n"
    assert prof.is_file() and prof.stat().st_size > 0


def test_result_title_names_the_granularity_used():
    """--weights per-block on MiniLM: every weight went per-channel (a note says why) while the title said
    "int8 weights per-block (block 32)"; the title now names what the encodings hold."""
    from qlinear.cli.quantize import title_of
    from qlinear.ptq import QuantizeConfig

    cfg = QuantizeConfig(weights="per-block", block_size=32)
    assert "weights per-block (block 32)," in title_of("m", cfg, {"per_block", "per_channel"})
    assert "weights per-channel (per-block asked: see the notes)," in title_of("m", cfg, {"per_channel"})
