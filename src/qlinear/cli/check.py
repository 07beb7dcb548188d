"""``qlinear check MODEL.qdq.onnx``: can any int32 accumulator of the model overflow? (thin shell over
:func:`qlinear.graph.check_integer`)."""

from __future__ import annotations

import math
from pathlib import Path

import typer


def check(model: Path = typer.Argument(..., help="Q/DQ ONNX model (e.g. OUTDIR/model.qdq.onnx).")) -> None:
    """Prove, layer by layer, that no Conv/ConvTranspose/Gemm/MatMul accumulator can overflow on an integer runtime
    (worst case over every input the activation type allows, with the model's own weights and biases); print the
    headroom in bits. Exit status 1 if some layer can overflow, or if the model has no integer layer to check (a float
    or weight-only model)."""
    import sys

    from rich.console import Console
    from rich.table import Table

    from qlinear.graph import check_integer

    res = check_integer(model)
    t = Table(title=f"{model}: worst-case accumulators")
    for c in ("layer", "op", "accumulator", "worst |acc|", "headroom (bits)", "note"):
        t.add_column(c, overflow="fold")
    for lc in res.layers:
        head = "" if lc.accumulator == "float" else ("inf" if math.isinf(lc.headroom_bits) else
                                                     f"{lc.headroom_bits:.2f}")
        style = "" if lc.ok else "bold red"
        t.add_row(lc.node, lc.op, lc.accumulator, "" if lc.accumulator == "float" else str(lc.bound), head, lc.note,
                  style=style)
    con = Console(width=None if sys.stdout.isatty() else 160)
    if res.layers:
        con.print(t)
    if not any(lc.accumulator != "float" for lc in res.layers):
        con.print(f"{model}: no integer layer to check (no Conv/ConvTranspose/Gemm/MatMul with quantized activations "
                  f"and weights: {_what_model(model)}); check the output of `qlinear quantize` with integer "
                  "activations", highlight=False, markup=False)
        raise typer.Exit(1)
    con.print(str(res), highlight=False)
    if not res.ok:
        raise typer.Exit(1)


def _what_model(model: Path) -> str:
    """A float or weight-only model, or one of ONNX Runtime's integer operators (which ``check`` does not read)."""
    import onnx

    from qlinear.graph.ops import ORT_INTEGER_OPS

    found = [n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node
             if n.op_type in ORT_INTEGER_OPS]
    if not found:
        return "a float or weight-only model"
    kinds = ", ".join(f"{found.count(k)} {k}" for k in dict.fromkeys(found))
    return f"its {kinds} are ONNX Runtime's integer operators, which check does not read: it reads Q/DQ models"
