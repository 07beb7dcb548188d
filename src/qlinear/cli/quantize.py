"""``qlinear quantize``: post-training quantization of an ONNX model (thin shell over :func:`qlinear.quantize`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from qlinear.core.granularity import PerBlock

_HELP = {  # the help text of each option
    "input_shape": ("NAME=D0,D1,...: fix the dynamic dimensions of model input NAME (e.g. x=1,3,480,480; a .tflite "
                     "needs static shapes); repeatable."),
    "fix_input": ("NAME=V or NAME=V1,V2,...: make model input NAME a constant of that value (e.g. sr=16000): the "
                  "written model no longer takes it, and an If it decides is replaced by the branch taken, whose "
                  "layers are then quantized; repeatable."),
    "output_kind": ("NAME=KIND: how the report reads graph output NAME (classifier, sequence, probability, "
                    "regression, map, embedding, state or generic), which it otherwise infers from the float values "
                    "(an embedding with negative values reads as classifier logits); repeatable."),
    "full_integer": ("Target tflite: refuse operators the TFLite export cannot write in integers instead of "
                      "running them as float islands (DEQUANTIZE -> float builtin -> QUANTIZE)."),
    "model": 'Float ONNX model. Omitted: the bundled example CNN.',
    "data": ('Calibration and evaluation data: an .npz (input name -> array with the samples on the '
             "first axis, optional 'labels'), or a folder of .npy/.npz files, of images, or of "
             'test_data_set_* folders.'),
    "output": 'Output folder (replaced as a whole at the end of a successful run; a failed run leaves it unchanged).',
    "weights": ('per-channel (default), per-tensor, per-block or lpbq (4-bit blocks, integer block '
                'scales under a per-channel scale).'),
    "weight_type": 'int8 (default), uint8, int4, uint4, int2, int16 or float8e4m3fn.',
    "activation_type": ('uint8 (default), int8, uint16, int16, float8e4m3fn, or float: weight-only '
                        '(W4A16/W8A16: only MatMul/Gemm weights are quantized; no data needed for '
                        'minmax/mse).'),
    "block_size": 'Block size of per-block weights (default 32).',
    "calibration": 'Activation method: minmax (default), sqnr, mse, percentile, entropy or moving_average.',
    "weight_method": ('Weight method: minmax (default; sqnr with per-tensor weights or a size budget), sqnr, mse, percentile, seqmse (ranges by the '
                      "layer's output error) or adaround (learned rounding; uses the calibration "
                      'data); weight-only: minmax (round to nearest), mse, or with data gptq, awq, aag '
                      '(activation-aware grid) and their + combinations (awq+gptq); the weight-only '
                      'default for per-block weights is mse without data (blocks up to 32, minmax above) '
                      'and aag+gptq with data (a note names it), minmax otherwise.'),
    "output_format": ('Weight-only output: qdq (default: blocked DequantizeLinear, which ONNX Runtime '
                      'fuses into MatMulNBits) or matmulnbits (com.microsoft.MatMulNBits written '
                      'directly).'),
    "accuracy_target": ('METRIC>=VALUE, e.g. top1_agreement>=0.99, sequence_agreement>=0.95 (softmax rows '
                        '[N, positions, classes]: every position\'s top class agrees) or sqnr_db>=20: raise the '
                        'precision of the tensors that hurt most until it holds on calibration samples.'),
    "lm_head_type": ("Weight-only: the tied embedding / lm_head (the MatMul producing the logits): int8 per-channel "
                     "(default with 4-bit weights), int4 (follow the weights) or float."),
    "size_budget": "FRACTION of the float .onnx file's bytes that the written model.qdq.onnx may take: per-layer "
                   "int4/int8 weights chosen from their sensitivity to fit it.",
    "average_bits": "B (4..8) bits per quantized weight: per-layer int4/int8 weights chosen from their sensitivity.",
    "target": 'ort (default), tflite or qnn.',
    "config": 'JSON/TOML file of QuantizeConfig options; command-line options override it.',
    "calibration_samples": 'Default 100.',
    "evaluation_samples": 'Default 200 (held out).',
    "encodings_version": 'AIMET encodings version to write: 0.6.1, 1.0.0, 2.0.0 or 2.1.0.',
    "image_mean": 'Image preprocessing: (x - mean) / std.',
    "image_std": 'Image preprocessing: (x - mean) / std.',
    "batch_axis": ('NAME=AXIS: the batch axis of model input NAME (default: its first dynamic dimension), or '
                   'NAME=none: it has none, each sample is the whole input; repeatable.'),
    "workers": 'Statistics pass on N Ray actors (qlinear[ray]); byte-identical outputs.',
    "ray_address": 'Ray cluster HOST:PORT for the actors.',
    "report": ('Evaluate on the held-out samples and write report.json and report.html (--no-report: '
               'only the model and encodings).'),
    "latency": ("Target ort: time the written model against the float model in ONNX Runtime's default CPU session "
                "(8 held-out samples, up to 2 s more) in the report, with a note when it runs slower than float."),
    "sensitivity": ('Add to the report the output metric with only each tensor quantized / left float '
                    '(4 held-out samples, 2 runs per tensor).'),
}


def quantize(
    model: Optional[Path] = typer.Argument(None, help=_HELP["model"]),
    data: Optional[Path] = typer.Option(None, '--data', '-d', help=_HELP["data"]),
    output: Path = typer.Option(Path('qlinear-out'), '--output', '-o', help=_HELP["output"]),
    weights: Optional[str] = typer.Option(None, '--weights', help=_HELP["weights"]),
    weight_type: Optional[str] = typer.Option(None, '--weight-type', help=_HELP["weight_type"]),
    activation_type: Optional[str] = typer.Option(None, '--activation-type', help=_HELP["activation_type"]),
    block_size: Optional[int] = typer.Option(None, '--block-size', help=_HELP["block_size"]),
    calibration: Optional[str] = typer.Option(None, '--calibration', help=_HELP["calibration"]),
    weight_method: Optional[str] = typer.Option(None, '--weight-method', help=_HELP["weight_method"]),
    output_format: Optional[str] = typer.Option(None, '--format', help=_HELP["output_format"]),
    lm_head_type: Optional[str] = typer.Option(None, '--lm-head-type', help=_HELP["lm_head_type"]),
    accuracy_target: Optional[str] = typer.Option(None, '--accuracy-target', help=_HELP["accuracy_target"]),
    size_budget: Optional[float] = typer.Option(None, '--size-budget', help=_HELP["size_budget"]),
    average_bits: Optional[float] = typer.Option(None, '--average-bits', help=_HELP["average_bits"]),
    target: Optional[str] = typer.Option(None, '--target', help=_HELP["target"]),
    config: Optional[Path] = typer.Option(None, '--config', help=_HELP["config"]),
    calibration_samples: Optional[int] = typer.Option(None, '--calibration-samples', help=_HELP["calibration_samples"]),
    evaluation_samples: Optional[int] = typer.Option(None, '--evaluation-samples', help=_HELP["evaluation_samples"]),
    encodings_version: str = typer.Option('2.0.0', '--encodings-version', help=_HELP["encodings_version"]),
    image_mean: float = typer.Option(127.0, '--image-mean', help=_HELP["image_mean"]),
    image_std: float = typer.Option(128.0, '--image-std', help=_HELP["image_std"]),
    batch_axis: Optional[list[str]] = typer.Option(None, '--batch-axis', help=_HELP["batch_axis"]),
    input_shape: Optional[list[str]] = typer.Option(None, '--input-shape', help=_HELP["input_shape"]),
    fix_input: Optional[list[str]] = typer.Option(None, '--fix-input', help=_HELP["fix_input"]),
    output_kind: Optional[list[str]] = typer.Option(None, '--output-kind', help=_HELP["output_kind"]),
    full_integer: bool = typer.Option(False, '--full-integer', help=_HELP["full_integer"]),
    workers: Optional[int] = typer.Option(None, '--workers', help=_HELP["workers"]),
    ray_address: Optional[str] = typer.Option(None, '--ray-address', help=_HELP["ray_address"]),
    report: bool = typer.Option(True, '--report/--no-report', help=_HELP["report"]),
    sensitivity: bool = typer.Option(False, '--sensitivity', help=_HELP["sensitivity"]),
    latency: bool = typer.Option(False, '--latency', help=_HELP["latency"]),
) -> None:
    """Calibrate, then write OUTDIR/model.qdq.onnx, model.encodings (and model.float.onnx when BatchNorm folding or
    equalization changed the float model), report.html and report.json, and print the accuracy."""
    from rich.console import Console

    from qlinear.encodings import VERSIONS
    from qlinear.errors import ConfigError
    from qlinear.outdir import OutputFolder

    con = Console(stderr=True)
    if model is None:
        model, data, calibration_samples, evaluation_samples = _example(con, data, calibration_samples,
                                                                        evaluation_samples)
    if encodings_version not in VERSIONS:
        raise ConfigError(f"--encodings-version {encodings_version!r}: expected one of {', '.join(VERSIONS)}")
    over = {"weights": weights, "weight_type": weight_type, "activation_type": activation_type,
            "block_size": block_size, "activation_method": calibration, "weight_method": weight_method,
            "target": target, "calibration_samples": calibration_samples, "evaluation_samples": evaluation_samples,
            "accuracy_target": accuracy_target, "output_format": output_format, "lm_head_type": lm_head_type,
            "size_budget": size_budget, "average_bits": average_bits,
            "batch_axes": _batch_axes(batch_axis), "input_shapes": _input_shapes(input_shape),
            "fix_inputs": _fixed_inputs(fix_input), "output_kinds": _output_kinds(output_kind),
            "full_integer": full_integer or None, "workers": workers, "ray_address": ray_address}
    cfg = settled_config(model, config, over)
    _check_encodings_version(cfg, encodings_version)
    _check_kernel_blocks(cfg, encodings_version, model)
    if data is None and not (cfg.weight_only and cfg.w_method in ("minmax", "mse")):
        raise ConfigError("--data is required with a model (an .npz file or a folder of samples); only weight-only "
                          "round to nearest (--activation-type float, --weight-method minmax or mse) runs without it")
    report = report and data is not None  # a weight-only run without data has nothing to evaluate on
    n_sensitivity = _sensitivity_samples(sensitivity, cfg, report)
    if latency and (not report or cfg.target != "ort" or cfg.weight_only):
        raise ConfigError("--latency: times the Q/DQ model of target ort in the report; " + (
            "drop --no-report and give --data" if not report else "not for weight-only or other targets"))
    folder = OutputFolder(output)
    folder.check()  # before any work: a folder that cannot be written fails now, not after calibration
    qm, files = _run(model, data, cfg, folder, con, report=report, encodings_version=encodings_version,
                     image_mean=image_mean, image_std=image_std, sensitivity=n_sensitivity, latency=latency)
    _print_result(qm, Path(model).name, files, output, report)
    if any(n.startswith("WARNING: accuracy target") for n in qm.notes):
        raise typer.Exit(1)  # EXIT_PROBLEMS: written, but the asked accuracy is not reached


def _example(con, data: Optional[Path], n_cal: Optional[int], n_eval: Optional[int]):  # noqa: ANN001, ANN202
    """No model given: the bundled example CNN and its data (half of its 40 samples held out by default)."""
    from qlinear.examples import DATA, MODEL

    if n_cal is None and n_eval is None:
        n_cal, n_eval = 20, 20
    from rich.markup import escape

    data = data or DATA
    con.print(f"[dim]no model given: quantizing the bundled example {MODEL.name} on {escape(data.name)}[/]",
              highlight=False)
    return MODEL, data, n_cal, n_eval


def settled_config(model: Path, config: Optional[Path], over: dict):
    """The run's configuration, settled for the model before any data is read (:func:`qlinear.ptq.settle.settle`:
    a refused combination fails here, within a second): the config file's options, then the command line's."""
    from qlinear.ptq import QuantizeConfig
    from qlinear.ptq.pipeline import fixed_model, load_checked
    from qlinear.ptq.settle import settle

    base = QuantizeConfig.from_file(config).to_dict(requested_only=True) if config else {}
    base.update({k: v for k, v in over.items() if v is not None})
    cfg = QuantizeConfig.from_dict(base, source=str(config) if config else "command line")
    if cfg.weight_only:
        return cfg
    # refuses now; quantize settles again and records the notes (on the checked model kept here: not read twice, and
    # left as it is for quantize)
    settle(cfg, fixed_model(load_checked(model, keep=True)[0], cfg, str(model), [], in_place=False)[0])
    return cfg


def _check_encodings_version(cfg, version: str) -> None:
    """Refuse before any work an encodings version that cannot hold the encodings asked for (its writer would refuse
    them at the end, after calibration and evaluation)."""
    from qlinear.core.types import Kind
    from qlinear.encodings.io import cannot_hold
    from qlinear.errors import ConfigError

    float8 = sorted({t.name for t in (cfg.weight_qtype, cfg.activation_qtype) if t.kind is Kind.FLOAT})
    if float8 and cannot_hold(version, ["float"]):
        raise ConfigError(f"--encodings-version {version} cannot hold {', '.join(float8)} encodings (AIMET writes "
                          "scaled float types from 2.0.0); use --encodings-version 2.0.0 (the default) or 2.1.0")
    if cannot_hold(version, [cfg.weights.replace("-", "_")]):
        raise ConfigError(f"--encodings-version {version} has no blocks, so it cannot hold {cfg.weights} weights; use "
                          "--encodings-version 1.0.0 or 2.0.0 (the default), or --weights per-channel")


def _check_kernel_blocks(cfg, version: str, model: Path) -> None:
    """Refuse before any work a version that cannot hold the block grid of a Conv weight whose kernel is larger than
    1x1 (blocked at each kernel position; target qnn blocks over the whole kernel instead), when the run blocks Conv
    weights (its writer would refuse at the end)."""
    import numpy as np

    from qlinear.encodings.io import cannot_hold
    from qlinear.errors import ConfigError
    from qlinear.ptq.encode import KERNEL_BLOCK_TARGETS
    from qlinear.ptq.pipeline import load_checked
    from qlinear.ptq.settle import CONV_OPS, per_channel_instead, settle

    why = cannot_hold(version, ["kernel_blocks"])
    if why is None or cfg.weight_only or cfg.weights not in ("per-block", "lpbq") or cfg.target in KERNEL_BLOCK_TARGETS:
        return   # (target qnn blocks a Conv over its whole kernel, as AIMET: one value per channel and block)
    cfg = settle(cfg)[0]   # LPBQ settles to int4 weights, target tflite to per-channel
    if cfg.weights not in ("per-block", "lpbq") or per_channel_instead(cfg, "Conv"):
        return
    m = load_checked(model, keep=True)[0]
    inits = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:
        w = inits.get(n.input[1]) if n.op_type in CONV_OPS and len(n.input) > 1 else None
        if w is not None and len(w.dims) > 2 and int(np.prod(w.dims[2:])) > 1:
            raise ConfigError(f"--encodings-version {version}: {cfg.weights} weights block Conv weight {w.name!r} "
                              f"{list(w.dims)} at each of its kernel positions; {why} (--encodings-version, 2.0.0 "
                              "by default), or use --weights per-channel")


SENSITIVITY_SAMPLES = 4  #: held-out samples ``--sensitivity`` runs on


def _sensitivity_samples(sensitivity: bool, cfg, report: bool) -> int:
    """How many held-out samples ``--sensitivity`` runs on (0: not asked); refused before any work where there is no
    report to put it in."""
    from qlinear.errors import ConfigError

    if sensitivity and (cfg.weight_only or not report):
        raise ConfigError("--sensitivity: " + ("not available in weight-only mode (--activation-type float)"
                                               if cfg.weight_only else "it is part of the report; drop --no-report "
                                               "and give --data"))
    return SENSITIVITY_SAMPLES if sensitivity else 0


def _run(model, data, cfg, folder, con, *, report, encodings_version, image_mean, image_std, sensitivity=0,
         latency=False):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import qlinear
    from qlinear.ptq import ImagePreprocess

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con, transient=False) as prog:
        def bar(task: str, total: int):
            t = prog.add_task(task, total=total)
            return lambda n: prog.advance(t, n)

        qm = qlinear.quantize(model, data, cfg, progress=bar, report_ahead=report,
                              preprocess=ImagePreprocess(mean=image_mean, std=image_std))
        start, stop = qm.held_out()
        if report and start == 0 and qm.fitted:  # weight-only round to nearest never sees the data
            qm.notes.append("no held-out samples: the report evaluates on the calibration samples")
        if report and sensitivity:  # computed (and cached) before save writes the report
            qm.report(progress=bar("evaluating", stop - start), sensitivity=sensitivity, sensitivity_progress=bar)
        files = qm.save(folder, encodings_version=encodings_version, report=report, latency=latency,
                        progress=bar("evaluating", stop - start) if report and not sensitivity else None)
    return qm, files


def title_of(name: str, cfg, used: set | None = None) -> str:
    """The result table's title: the settings actually used (the settled configuration; ``used``: the weight
    granularities the encodings hold, when none is the configured one: every blocked weight went per-channel)."""
    if cfg.weight_only:
        blk = f" (block {cfg.block_size})" if isinstance(cfg.weight_granularity, PerBlock) else ""
        return (f"{name}: weight-only {cfg.weight_type} {cfg.weights}{blk}, {cfg.w_method} weights, "
                f"float activations, {cfg.output_format}, target {cfg.target}")
    blk = f" (block {cfg.block_size})" if isinstance(cfg.weight_granularity, PerBlock) else ""
    grain = f"{cfg.weights}{blk}"
    if used and cfg.weights.replace("-", "_") not in used and isinstance(cfg.weight_granularity, PerBlock):
        grain = f"{'/'.join(sorted(g.replace('_', '-') for g in used))} ({cfg.weights} asked: see the notes)"
    return (f"{name}: {cfg.weight_type} weights {grain}, {cfg.activation_type} activations, "
            f"{cfg.a_method} activations / {cfg.w_method} weights, target {cfg.target}")


def _print_result(qm, name: str, files: list, output: Path, report: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    cfg = qm.config
    out = Console()
    used = {e.granularity for e in qm.encodings if e.role == "param" and e.dtype not in ("int32", "int64")} \
        if not cfg.weight_only and qm.encodings is not None else None
    t = Table(title=title_of(name, cfg, used))
    t.add_column("output")
    t.add_column("metric")
    t.add_column("value", justify="right")
    if report:
        rep = qm.report()
        for o, r in rep.outputs.items():
            for k, v in r.items():
                t.add_row(o, k, f"{v:.4f}")
        for s in sorted(rep.tensors, key=lambda s: s.sqnr_db)[:3]:
            t.add_row(s.name, "SQNR dB (worst)", f"{s.sqnr_db:.2f}")
    if "calibration" in qm.timings:
        t.add_row("", "calibration time s", f"{qm.timings['calibration']:.2f}")
    if qm.unquantized:
        t.add_row("", "tensors quantized", "none (see the notes)")
    if cfg.weight_only:
        t.add_row("", "quantize + write time s", f"{qm.timings.get('total', 0) + qm.timings.get('write', 0):.2f}")
    for d in qm.decisions:
        t.add_row(d["tensor"], d["change"], "" if d.get("metric") is None else f"{d['metric']:.4f}")
    out.print(t)
    for n in qm.notes:
        out.print(f"[dim]{n}[/]", highlight=False)
    shown = [f for f in files if not f.startswith(".")]
    out.print(f"wrote {output}/: {', '.join(shown)}", highlight=False)


def _input_shapes(items: Optional[list[str]]) -> Optional[dict[str, list[int]]]:
    """``--input-shape NAME=D0,D1,...`` options as ``{NAME: [D0, D1, ...]}`` (None when not given)."""
    from qlinear.errors import ConfigError

    out = {}
    for it in items or ():
        name, _, dims = it.rpartition("=")
        try:
            out[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            name = ""
        if not name:
            raise ConfigError(f"--input-shape {it!r}: expected NAME=D0,D1,..., e.g. --input-shape x=1,3,480,480")
    return out or None


def _fixed_inputs(items: Optional[list[str]]) -> Optional[dict[str, object]]:
    """``--fix-input NAME=V[,V...]`` options as ``{NAME: V}`` (one value) or ``{NAME: [V, ...]}`` (None when not
    given)."""
    from qlinear.errors import ConfigError

    out: dict[str, object] = {}
    for it in items or ():
        name, _, text = it.rpartition("=")
        try:
            vals = [float(v) if any(c in v.lower() for c in ".en") else int(v) for v in text.split(",")]
        except ValueError:
            name = ""
        if not name:
            raise ConfigError(f"--fix-input {it!r}: expected NAME=VALUE or NAME=V1,V2,..., e.g. --fix-input sr=16000")
        out[name] = vals[0] if len(vals) == 1 else vals
    return out or None


def _output_kinds(items: Optional[list[str]]) -> Optional[dict[str, str]]:
    """``--output-kind NAME=KIND`` options as ``{NAME: KIND}`` (None when not given; the kinds checked by the
    config)."""
    from qlinear.errors import ConfigError

    out = {}
    for it in items or ():
        name, _, kind = it.rpartition("=")
        if not name or not kind:
            raise ConfigError(f"--output-kind {it!r}: expected NAME=KIND, e.g. --output-kind embedding=embedding")
        out[name] = kind
    return out or None


def _batch_axes(items: Optional[list[str]]) -> Optional[dict[str, Optional[int]]]:
    """``--batch-axis NAME=AXIS`` (or ``NAME=none``: no batch axis) options as ``{NAME: AXIS}`` (None when not
    given)."""
    from qlinear.errors import ConfigError

    out: dict[str, Optional[int]] = {}
    for it in items or ():
        name, _, axis = it.rpartition("=")
        try:
            out[name] = None if axis.lower() == "none" else int(axis)
        except ValueError:
            name = ""
        if not name:
            raise ConfigError(f"--batch-axis {it!r}: expected NAME=AXIS or NAME=none, e.g. --batch-axis state=1")
    return out or None
