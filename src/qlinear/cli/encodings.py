"""``qlinear encodings …``: inspect, convert, validate, apply and extract AIMET encodings (thin shell over
:mod:`qlinear.encodings` for files and :mod:`qlinear.graph` for what needs a model; ``onnx`` loads only then)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

if TYPE_CHECKING:
    from qlinear.encodings import EncodingSet

EXIT_PROBLEMS = 1  # qlinear.cli.main: a check found problems

app = typer.Typer(help="Read, convert, validate and apply AIMET encoding files (0.6.1, 1.0.0, 2.0.0, 2.1.0).",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)

_VERSION_HELP = "Target version: 0.6.1, 1.0.0, 2.0.0 or 2.1.0."


def _load(file: Path, model: Path | None) -> EncodingSet:
    """The encodings of ``file``, resolved against ``model`` when given (the graph layer loads only then)."""
    from qlinear import encodings as E

    if model is None:
        return E.load(file)
    from qlinear import graph as G

    return G.load_encodings(file, model)


def _fmt(a) -> str:  # noqa: ANN001
    import numpy as np

    a = np.asarray(a)
    if a.size == 1:
        return f"{float(a.reshape(-1)[0]):.6g}"
    return f"{a.min():.4g} … {a.max():.4g}"


@app.command()
def inspect(file: Path = typer.Argument(..., help="Encodings file."),
            model: Optional[Path] = typer.Option(None, "--model", "-m", help="ONNX model to resolve axes.")) -> None:
    """Show a table: tensor, type, granularity, scale shape, scale range, zero points."""
    from rich.console import Console
    from rich.table import Table

    es = _load(file, model)
    t = Table(title=f"{file}  (version {es.version or 'none'}, {len(es)} encodings)")
    for c in ("tensor", "role", "type", "granularity", "axis", "block", "scale shape", "scale", "zero point"):
        t.add_column(c, overflow="fold")
    for e in es:
        if e.scale is None:
            t.add_row(e.name, e.role, e.dtype, "cast", "", "", "", "", "")
            continue
        zp = "-" if e.zero_point is None else _fmt(e.zero_point)
        gran = e.granularity + ("" if e.resolved else " (axis unresolved)")
        t.add_row(e.name, e.role, e.dtype, gran, "" if e.axis is None else str(e.axis),
                  str(e.block_size or ""), str(list(e.scale.shape)), _fmt(e.effective_scale if e.resolved else e.scale),
                  zp)
    import sys

    Console(width=None if sys.stdout.isatty() else 200).print(t)


@app.command()
def convert(src: Path = typer.Argument(..., help="Input encodings file."),
            dst: Path = typer.Argument(..., help="Output file (written atomically)."),
            to: str = typer.Option(..., "--to", help=_VERSION_HELP),
            model: Optional[Path] = typer.Option(None, "--model", "-m",
                                                 help="ONNX model: resolves the axes 0.6.1/1.0.0 do not store."),
            drop_float: bool = typer.Option(False, "--drop-float", help="Leave fp16 entries out of 2.x files.")) -> None:
    """Convert between versions (every parameter kept, or a clear error)."""
    from qlinear import encodings as E

    es = _load(src, model)
    E.save(es, dst, version=to, drop_float=drop_float)
    typer.echo(f"wrote {dst} (version {to}, {len(es)} encodings)")


@app.command()
def validate(file: Path = typer.Argument(..., help="Encodings file."),
             model: Path = typer.Option(..., "--model", "-m", help="ONNX model.")) -> None:
    """Check every encoding against the model; exit status 1 and a list of problems if any."""
    from rich.console import Console

    from qlinear import encodings as E
    from qlinear import graph as G

    es = E.load(file)
    rep = G.validate(es, model)
    con = Console()
    if rep.ok:
        con.print(f"[green]ok[/]: {rep.checked} encodings valid against {model}")
        return
    from rich.markup import escape

    con.print(f"[red]{len(rep.problems)} problem(s)[/] in {rep.checked} encodings:")
    for p in rep.problems:
        con.print(f"  {escape(str(p))}", highlight=False)
    hint = _float_model_hint(es, file, model)
    if hint:
        con.print(escape(hint), highlight=False)
    raise typer.Exit(EXIT_PROBLEMS)


def _float_model_hint(es: EncodingSet, file: Path, model: Path) -> str | None:
    """When ``file`` sits beside the ``model.float.onnx`` that ``qlinear quantize`` wrote (its float model after
    rewrites: Constant weights made initializers, BatchNorm folded, opset upgraded) and the encodings fit that model
    but not ``model``: a line saying to pass it."""
    from qlinear import graph as G

    cand = file.parent / "model.float.onnx"
    try:
        if not cand.is_file() or cand.resolve() == model.resolve() or not G.validate(es, cand).ok:
            return None
    except Exception:  # noqa: BLE001 - a hint only: a model that does not even load gives none
        return None
    return (f"these encodings fit {cand}, the float model `qlinear quantize` wrote beside them (the model as "
            f"given, rewritten: weights stored as Constant nodes made initializers, BatchNorm folded into its "
            f"convolution, an old opset upgraded); pass it as the model instead of {model}")


@app.command("apply")
def apply_cmd(file: Path = typer.Argument(..., help="Encodings file."),
              model: Path = typer.Argument(..., help="Float ONNX model."),
              output: Path = typer.Option(..., "--output", "-o", help="Q/DQ ONNX model to write (atomically).")) -> None:
    """Write a Q/DQ ONNX model carrying the encodings."""
    from qlinear import graph as G
    from qlinear.errors import QlinearError
    from qlinear.graph.save import save_model

    try:
        qdq = G.apply(G.load_encodings(file, model), model)
    except QlinearError as e:
        from qlinear import encodings as E

        hint = _float_model_hint(E.load(file), file, model)
        if hint is None:
            raise
        raise type(e)(f"{e}\n{hint}") from None
    save_model(qdq, output)
    typer.echo(f"wrote {output}")


@app.command()
def extract(model: Path = typer.Argument(..., help="Q/DQ ONNX model."),
            output: Path = typer.Option(..., "--output", "-o", help="Encodings file to write (atomically)."),
            version: str = typer.Option("2.0.0", "--version", "-v", help=_VERSION_HELP)) -> None:
    """Read the encodings back from a Q/DQ ONNX model."""
    from qlinear import encodings as E
    from qlinear import graph as G

    es = G.extract(model)
    E.save(es, output, version=version)
    typer.echo(f"wrote {output} (version {version}, {len(es)} encodings)")
    if not len(es):
        _no_qdq_note(model)


def _no_qdq_note(model: Path) -> None:
    """Why a model gave no encodings: ONNX Runtime's integer operators (a dynamic or QOperator model) or nothing."""
    import onnx

    from qlinear.graph.ops import ORT_INTEGER_OPS

    found = [n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node
             if n.op_type in ORT_INTEGER_OPS]
    kinds = ", ".join(f"{found.count(k)} {k}" for k in dict.fromkeys(found))
    typer.echo(f"no QuantizeLinear/DequantizeLinear pair in {model.name}: " + (
        f"its {kinds} (ONNX Runtime's integer operators) keep their parameters as operator inputs, which encodings "
        "do not describe" if found else "a float model has no encodings"), err=True)
