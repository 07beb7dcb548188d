"""``qlinear debug``: compare a quantized model tensor by tensor with its float model, or qlinear's integer kernels
with a runtime (thin shell over :mod:`qlinear.ptq.report.debug`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer


def debug(
    first: Path = typer.Argument(..., help="FLOAT.onnx (with QUANT.onnx), or QUANT.onnx (with MODEL.tflite or "
                                 "--runtime)."),
    second: Optional[Path] = typer.Argument(None, help="QUANT.onnx: the Q/DQ model made from FLOAT.onnx (by qlinear: "
                                            "OUTDIR/model.qdq.onnx against the original model, whose SQNR the report "
                                            "gives, or against OUTDIR/model.float.onnx, which carries the run's "
                                            "corrected biases and equalized weights; or by another tool); or "
                                            "MODEL.tflite exported from QUANT.onnx."),
    data: Optional[Path] = typer.Option(None, "--data", "-d", help="Input samples (as for `qlinear quantize`); "
                                        "the first --samples are used."),
    runtime: Optional[str] = typer.Option(None, "--runtime", help="Compare run_integer with a runtime: litert "
                                          "(the .tflite by LiteRT's reference kernels, every tensor; default with a "
                                          ".tflite), litert_xnnpack (its default resolver: outputs only) or ort_fused "
                                          "(ONNX Runtime's default session of QUANT.onnx: outputs only)."),
    samples: int = typer.Option(16, "--samples", help="How many samples to run (from the first)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="run_integer mode or profile to compare with the runtime "
                                       "(default: the runtime's own, litert_ref or ort_fused)."),
    jump_db: float = typer.Option(15.0, "--jump-db", help="SQNR drop (dB) against a tensor's inputs that marks a "
                                  "jump."),
    excess_db: float = typer.Option(12.0, "--excess-db", help="Excess (dB) of a tensor's own quantization noise over "
                                    "a min-max grid of its bits that marks a jump."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """FLOAT.onnx QUANT.onnx --data X: run both on the samples and print each tensor's SQNR in graph order, marking
    the first tensor whose SQNR drops by more than --jump-db below its inputs' (or whose own quantization is more than
    --excess-db noisier than a min-max grid of its bits). QUANT.onnx MODEL.tflite (or QUANT.onnx
    --runtime ort_fused): run qlinear's integer kernels and the runtime, and name the first tensor that differs bit
    for bit. Exit status 1 when a jump or a difference is found."""
    from qlinear.errors import ConfigError
    from qlinear.ptq.report import debug as D

    if data is None:
        raise ConfigError("--data is required: the samples both models run on (an .npz or a folder of samples)")
    tfl = second is not None and second.suffix == ".tflite"
    if runtime is None and not tfl:
        if second is None:
            raise ConfigError("qlinear debug: give FLOAT.onnx QUANT.onnx, QUANT.onnx MODEL.tflite, or QUANT.onnx "
                              "--runtime ort_fused")
        res = D.compare_models(first, second, data, samples=samples, jump_db=jump_db, excess_db=excess_db)
        _print_models(res, first, second, as_json)
        if res.first_jump is not None:
            raise typer.Exit(1)
        return
    rt = runtime or "litert"
    if rt not in D.RUNTIMES:
        raise ConfigError(f"--runtime {rt!r}: expected one of {', '.join(D.RUNTIMES)}")
    if rt.startswith("litert") != tfl:
        raise ConfigError(f"--runtime {rt}: " + ("give the .tflite as the second argument" if rt.startswith("litert")
                                                 else "takes QUANT.onnx alone, without a second model"))
    rr = D.compare_runtime(first, data, runtime=rt, tflite=second if tfl else None, samples=samples, mode=mode)
    _print_runtime(rr, as_json)
    if rr.first_difference is not None:
        raise typer.Exit(1)


def _fmt(v: Optional[float]) -> str:
    if v is None:
        return ""
    return "inf" if math.isinf(v) and v > 0 else ("-inf" if math.isinf(v) else f"{v:.2f}")


def _console():
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _print_models(res, first: Path, second: Path, as_json: bool) -> None:
    from qlinear.ptq.report.debug import to_json

    if as_json:
        typer.echo(to_json(res))
        return
    from rich.table import Table

    t = Table(title=f"{second.name} against {first.name}: SQNR per tensor on {res.samples} samples, graph order")
    for c in ("tensor", "role", "op", "quantized as", "SQNR dB", "own quantization dB", "drop dB", "excess dB", ""):
        t.add_column(c, overflow="fold")
    for d in res.tensors:
        t.add_row(d.tensor, d.role, d.op, d.quant_tensor if d.quant_tensor != d.tensor else "", _fmt(d.sqnr_db),
                  _fmt(d.local_db), _fmt(d.drop_db), _fmt(d.excess_db), "<- first jump" if d.jump else "",
                  style="bold red" if d.jump else "")
    con = _console()
    con.print(t)
    for note in res.notes:
        con.print(note, highlight=False)
    if res.unmatched:
        con.print(f"not compared (not observable in the quantized model, fused away, unless a reason is given): "
                  f"{', '.join(res.unmatched)}", highlight=False)
    if res.first_jump is None:
        con.print(f"no tensor loses more than {res.jump_db:g} dB against its inputs or is more than "
                  f"{res.excess_db:g} dB noisier than a min-max grid", highlight=False)
    else:
        d = next(x for x in res.tensors if x.tensor == res.first_jump)
        below = {"weight": "what weights of its bits typically reach", "input": "a min-max grid of its bits"}.get(
            d.role, "its inputs")
        con.print(f"first jump: {d.tensor} ({d.role} of {d.op} {d.node}): {_fmt(d.sqnr_db)} dB, {_fmt(d.drop_db)} dB "
                  f"below {below}" + (f"; its own quantization alone {_fmt(d.local_db)} dB, {_fmt(d.excess_db)} dB noisier "
                               "than a min-max grid" if d.local_db is not None else ""),
                  highlight=False)


def _print_runtime(rr, as_json: bool) -> None:
    from qlinear.ptq.report.debug import to_json

    if as_json:
        typer.echo(to_json(rr))
        return
    from rich.table import Table

    t = Table(title=f"run_integer ({rr.mode}) against {rr.runtime} on {rr.samples} samples, graph order")
    for c in ("tensor", "op", "node", "dtype", "differing", "max |diff| (steps)", ""):
        t.add_column(c, overflow="fold")
    for d in rr.tensors:
        first = d.tensor == rr.first_difference
        t.add_row(d.tensor, d.op, d.node, d.dtype, f"{d.differing}/{d.size}", str(d.max_diff),
                  "<- first difference" if first else ("float rounding" if d.rounding else
                                                        "carried" if d.propagated else
                                                        f"made here too ({d.own_differing} on the runtime's inputs)"
                                                        if d.differing and d.own_differing else ""),
                  style="bold red" if first else "")
    con = _console()
    con.print(t)
    for n in rr.notes:
        con.print(n, highlight=False, markup=False)
    if not rr.tensors:
        con.print("nothing compared: no quantized tensor is read from both (with --runtime ort_fused only the graph "
                  "outputs are, and a float output is not compared)", highlight=False)
    elif rr.first_difference is None:
        rounding = [d for d in rr.tensors if d.rounding]
        for d in rounding:
            con.print(f"{d.tensor}: {d.differing} of {d.size} values 1 step apart; {d.formula}", highlight=False,
                      markup=False)
        carried = sum(d.propagated for d in rr.tensors)
        con.print((f"no difference beyond float rounding ({len(rr.tensors)} tensors"
                   + (f"; {carried} carry it on, up to {max(d.max_diff for d in rr.tensors)} steps)" if carried
                      else ")")) if rounding else
                  f"every compared tensor is equal bit for bit ({len(rr.tensors)} tensors)", highlight=False)
    else:
        d = next(x for x in rr.tensors if x.tensor == rr.first_difference)
        con.print(f"first difference: {d.tensor} ({d.op} {d.node}): {d.differing} of {d.size} values, up to "
                  f"{d.max_diff} integer steps" + (f"; {d.formula}" if d.formula else ""), highlight=False,
                  markup=False)
