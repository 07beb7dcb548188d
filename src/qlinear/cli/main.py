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
    rich_markup_mode=None,
    # -h everywhere: click's sub-contexts inherit help_option_names from this root context
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        import qlinear

        typer.echo(f"qlinear {qlinear.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print 'qlinear VERSION' and exit."),
) -> None:
    """qlinear: quantize ONNX models, convert AIMET encodings, reproduce runtimes' integer arithmetic."""


@app.command("version")
def version() -> None:
    """Print the qlinear version (as ``qlinear --version``)."""
    _print_version(True)


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
    ("qlinear.cli.check", "check", "check"),
    ("qlinear.cli.debug", "debug", "debug"),
]


#: exit statuses of the ``qlinear`` command (README "Exit status")
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _tune_malloc() -> None:
    """Keep freed memory in this process (glibc): allocations up to 32 MB from the heap, no trimming. A quantization
    run allocates and frees the same large buffers batch after batch (ONNX Runtime outputs, NumPy temporaries); on
    VMs where first-touch page faults are costly this saves ~15 % of the run. Only the command does this, never the
    library."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (glibc's maximum)
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD
        libc.mallopt(-2, 64 << 20)  # M_TOP_PAD
    except (OSError, AttributeError):
        pass


def _tune_gc() -> None:
    """The program's cyclic garbage collector runs every 20,000 net allocations instead of Python's 700: the
    imports and the graph passes create hundreds of thousands of long-lived objects, and the collections that
    traverse them again and again took 30-40 ms of a small model's 0.55 s run (silero-vad; gen 2 rarer as well).
    Cycles are still collected (onnx_ir graphs hold them), a little later."""
    import gc

    gc.set_threshold(20_000, 50, 100)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit status: 0 success; 1 a check (``encodings validate``, ``check``) found
    problems; 2 a usage error (unknown option, bad argument: click's status); 3 a :class:`QlinearError` (bad input
    file, data or config, a run that cannot complete), printed as one red line, never a traceback; 130 interrupted."""
    _register()
    _tune_malloc()
    try:
        app(args=argv, prog_name="qlinear")
    except QlinearError as e:
        _error(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _error("interrupted; earlier outputs are unchanged")
        return EXIT_INTERRUPTED
    except SystemExit as e:  # click: 0 after --help, 2 for usage errors; typer.Exit(n) from the commands
        if isinstance(e.code, str):
            _error(e.code)
            return EXIT_ERROR
        return int(e.code or 0)
    return EXIT_OK


def run() -> None:
    """The program (the ``qlinear`` console script and ``python -m qlinear``): :func:`main`, then the process ends
    at once. The exit hooks run (logging's flush, temporary files' finalizers) and the streams are flushed, but not
    the interpreter's teardown of every module and of ONNX Runtime's sessions and thread pools, which took 0.1-0.15 s
    of a small model's 0.5-0.8 s run (magika, silero-vad). With Ray imported the ordinary exit stays: Ray stops its
    local instance in its own hook, and its workers must see the driver go; so does a run under a profiler or a
    tracer (``python -m cProfile``, coverage), which writes its results after the program returns."""
    _tune_gc()
    code = main()
    if "ray" in sys.modules or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    import atexit
    import os

    run_hooks = getattr(atexit, "_run_exitfuncs", None)  # CPython's: what the ordinary exit runs first
    if run_hooks is not None:
        run_hooks()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _error(msg: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
