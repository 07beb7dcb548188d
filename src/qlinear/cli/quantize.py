"""``qlinear quantize``: post-training quantization of an ONNX model (thin shell over :func:`qlinear.quantize`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def quantize(
    model: Optional[Path] = typer.Argument(None, help="Float ONNX model. Omitted: the bundled example CNN."),
    data: Optional[Path] = typer.Option(None, "--data", "-d", help=".npz (input name -> [samples, ...]), or a folder "
                                        "of .npy/.npz files, images, or test_data_set_* directories."),
    output: Path = typer.Option(Path("qlinear-out"), "--output", "-o", help="Output folder."),
    weights: Optional[str] = typer.Option(None, "--weights", help="per-channel (default), per-tensor or per-block."),
    calibration: Optional[str] = typer.Option(None, "--calibration", help="minmax (default), sqnr, mse, percentile, "
                                              "entropy or moving_average (activations)."),
    target: Optional[str] = typer.Option(None, "--target", help="ort (default), tflite or qnn."),
    config: Optional[Path] = typer.Option(None, "--config", help="JSON/TOML file of QuantizeConfig options; command-"
                                          "line options override it."),
    calibration_samples: Optional[int] = typer.Option(None, "--calibration-samples", help="Default 100."),
    evaluation_samples: Optional[int] = typer.Option(None, "--evaluation-samples", help="Default 200 (held out)."),
    encodings_version: str = typer.Option("2.0.0", "--encodings-version", help="AIMET encodings version to write."),
    image_mean: float = typer.Option(127.0, "--image-mean", help="Image preprocessing: (x - mean) / std."),
    image_std: float = typer.Option(128.0, "--image-std", help="Image preprocessing: (x - mean) / std."),
) -> None:
    """Calibrate, write OUTDIR/model.qdq.onnx, model.encodings, report.html and report.json, print the accuracy."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    import qlinear
    from qlinear._atomic import write_text
    from qlinear.errors import ConfigError
    from qlinear.ptq import ImagePreprocess, QuantizeConfig
    from qlinear.ptq.report import to_html, to_json

    con = Console(stderr=True)
    if model is None:
        from qlinear.examples import DATA, MODEL

        model, data = MODEL, data or DATA
        if calibration_samples is None and evaluation_samples is None:
            calibration_samples, evaluation_samples = 20, 20  # the example has 40 samples: half held out
        con.print(f"[dim]no model given: quantizing the bundled example {MODEL.name} on {DATA.name}[/]")
    if data is None:
        raise ConfigError("--data is required with a model (an .npz file or a folder of samples)")
    base = QuantizeConfig.from_file(config).to_dict() if config else {}
    over = {"weights": weights, "activation_method": calibration, "target": target,
            "calibration_samples": calibration_samples, "evaluation_samples": evaluation_samples}
    base.update({k: v for k, v in over.items() if v is not None})
    cfg = QuantizeConfig.from_dict(base, source=str(config) if config else "command line")
    if output.exists() and not output.is_dir():
        raise ConfigError(f"{output}: exists and is not a folder")

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con, transient=False) as prog:
        def bar(task: str, total: int):  # noqa: ANN202
            t = prog.add_task(task, total=total)
            return lambda n: prog.advance(t, n)

        qm = qlinear.quantize(model, data, cfg, progress=bar,
                              preprocess=ImagePreprocess(mean=image_mean, std=image_std))
        n_eval = max(0, min(cfg.evaluation_samples, len(qm.dataset) - min(cfg.calibration_samples, len(qm.dataset))))
        if n_eval == 0:
            n_eval = min(cfg.evaluation_samples, len(qm.dataset))
            qm.notes.append("no held-out samples: the report evaluates on the calibration samples")
        rep = qm.report(progress=bar("evaluating", n_eval))
    # everything computed: now write the outputs, each atomically
    output.mkdir(parents=True, exist_ok=True)
    qm.save_onnx(output / "model.qdq.onnx")
    qm.save_encodings(output / "model.encodings", version=encodings_version)
    write_text(output / "report.json", to_json(qm, rep))
    write_text(output / "report.html", to_html(qm, rep))
    out = Console()
    t = Table(title=f"{Path(model).name}: {cfg.weight_type} weights {cfg.weights}, {cfg.activation_type} activations, "
                    f"{cfg.a_method} activations / {cfg.w_method} weights, target {cfg.target}")
    t.add_column("output")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for o, r in rep.outputs.items():
        for k, v in r.items():
            t.add_row(o, k, f"{v:.4f}")
    worst = sorted(rep.tensors, key=lambda s: s.sqnr_db)[:3]
    for s in worst:
        t.add_row(s.name, "SQNR dB (worst)", f"{s.sqnr_db:.2f}")
    t.add_row("", "calibration time s", f"{qm.timings.get('calibration', 0):.2f}")
    out.print(t)
    for n in qm.notes:
        out.print(f"[dim]{n}[/]")
    out.print(f"wrote {output}/model.qdq.onnx, model.encodings, report.html, report.json")
