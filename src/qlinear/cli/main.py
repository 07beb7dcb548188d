"""Entry point of the ``qlinear`` command. Sub-commands live in their own modules and only call the API."""

from __future__ import annotations

import sys

import typer

from qlinear.errors import QlinearError

app = typer.Typer(
    name="qlinear",
    help="Linear quantization exact to ONNX QuantizeLinear/DequantizeLinear, AIMET encodings, calibration and "
         "integer kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """qlinear: quantize ONNX models, convert AIMET encodings, reproduce runtimes' integer arithmetic."""


@app.command("version")
def version() -> None:
    """Print the qlinear version."""
    import qlinear

    typer.echo(qlinear.__version__)


def _register() -> None:
    """Attach the sub-command groups (imported lazily so ``qlinear --help`` stays fast)."""
    import importlib

    for mod, attr, name in _GROUPS:
        try:
            sub = getattr(importlib.import_module(mod), attr)
        except ModuleNotFoundError as e:  # a sub-package not present in this build
            if e.name and e.name.startswith("qlinear"):
                continue
            raise
        if isinstance(sub, typer.Typer):
            app.add_typer(sub, name=name)
        else:
            app.command(name)(sub)


_GROUPS: list[tuple[str, str, str]] = [
    ("qlinear.cli.encodings", "app", "encodings"),
    ("qlinear.cli.quantize", "quantize", "quantize"),
]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a QlinearError becomes one red line and exit status 2, never a traceback."""
    _register()
    try:
        app(args=argv, prog_name="qlinear")
    except QlinearError as e:
        from rich.console import Console

        from rich.markup import escape

        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 2
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
