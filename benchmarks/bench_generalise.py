"""Do the data-driven weight methods generalise? EfficientNet-Lite0 with 300 labelled images: calibration on images
0..99 (the only images any method fits or chooses on), judged on 100..299, also split into its two halves (100..199,
200..299) to show the spread of the sample; the last columns judge on the calibration images themselves, so that the
gap to the held-out columns shows overfitting. Each row is judged in two ONNX Runtime sessions: ``basic`` (basic graph
optimizations: Q/DQ stay DequantizeLinear -> float op -> QuantizeLinear, the ONNX definition) and ``default`` (ORT's
default session options: all optimizations, Q/DQ fused into its int8 kernels).

    python benchmarks/bench_generalise.py [--shared ../shared] [--rows w8,w4ada,w4seq] [--set key=value ...]
    python benchmarks/bench_generalise.py --folds [--fused] [--rows w4ada,w8,budget] [--set key=value ...]

``--folds``: three-fold cross-validation instead. Each row is calibrated three times, on images 0..99, 100..199 and
200..299 in turn (the calibration samples are the first 100 of the reordered set), and judged each time on the other
200 images (ORT basic session; ``--fused``: ORT's default session, its fused int8 kernels): top-1, float's top-1 on
the same images, the gap, agreement, and the agreement on the calibration fold itself; the last line is the mean over the three folds (600 judgements by three different fits).
One split of 200 images decides little: at W4A8 a change as small as 10 AdaRound iterations moves one split's top-1
by several points, so compare settings by the mean gap.

Times: wall and CPU time (all threads) of ``qlinear.quantize``; on a shared machine compare the CPU times.
``--set`` passes extra :class:`qlinear.ptq.QuantizeConfig` fields to every qlinear row (e.g. ``--set
adaround_holdout=0``).
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path

import numpy as np

import qlinear
from qlinear.ptq import QuantizeConfig, load_dataset

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import cpu_flags  # noqa: E402
from bench_ptq import run  # noqa: E402

ROWS = {
    "w8": ("W8A8 per-channel (default)", {}),
    "w8ada": ("W8A8 per-channel AdaRound", {"weight_method": "adaround"}),
    "w4ada": ("W4A8 per-channel AdaRound", {"weight_type": "int4", "weight_method": "adaround"}),
    "w4seq": ("W4A8 per-channel SeqMSE", {"weight_type": "int4", "weight_method": "seqmse"}),
    "w8nobc": ("W8A8 per-channel, no bias correction", {"bias_correction": False}),
    "w4": ("W4A8 per-channel min-max", {"weight_type": "int4"}),
    "w4nobc": ("W4A8 per-channel min-max, no bias correction", {"weight_type": "int4", "bias_correction": False}),
    "budget": ("--size-budget 0.2", {"size_budget": 0.2}),
}
HALVES = {"100..299": slice(100, 300), "100..199": slice(100, 200), "200..299": slice(200, 300),
          "0..99 (calibration)": slice(0, 100)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    ap.add_argument("--rows", default="w8,w4ada")
    ap.add_argument("--set", action="append", default=[], help="extra QuantizeConfig field for every row, key=value")
    ap.add_argument("--folds", action="store_true", help="three-fold cross-validation (module docstring)")
    ap.add_argument("--fused", action="store_true", help="--folds: judge in ORT's default session (fused kernels)")
    a = ap.parse_args()
    extra = {k: ast.literal_eval(v) if v[:1].isdigit() or v in ("True", "False", "None") else v
             for k, v in (s.split("=", 1) for s in a.set)}
    model = Path(a.shared) / "models" / "efficientnet-lite0.onnx"
    ds = load_dataset(Path(a.shared) / "data" / "imagenet-dev", {"input": ("N", 3, 224, 224)})
    x = np.concatenate([ds.sample(i)["input"] for i in range(len(ds))])
    labels = np.array(ds.labels)
    arrays = {"input": x, "labels": labels}
    mb = model.read_bytes()
    if a.folds:
        return folds(model, x, labels, a.rows.split(","), extra, a.fused)
    ftop = {s: run(mb, x, "input", fused=(s == "default")).argmax(1) for s in ("basic", "default")}
    print(f"EfficientNet-Lite0; calibration images 0..99, judged on 100..299 (and its halves); CPU flags: "
          f"{cpu_flags()}; extra config: {extra or 'none'}")
    print("| row | session | " + " | ".join(f"top-1 {h} | agreement {h}" for h in HALVES) + " | wall time (s) | CPU time (s) |")
    print("|---|---|" + "---|---|" * len(HALVES) + "---|---|")
    for s in ("basic", "default"):
        _line("float", s, ftop[s], ftop[s], labels, (0.0, 0.0))
    qlinear.quantize(model, arrays, QuantizeConfig(calibration_samples=2, evaluation_samples=0))  # warm-up
    for key in a.rows.split(","):
        label, kw = ROWS[key]
        cfg = QuantizeConfig(calibration_samples=100, evaluation_samples=0, **kw, **extra)
        t0, c0 = time.perf_counter(), time.process_time()
        qm = qlinear.quantize(model, arrays, cfg)
        t = (time.perf_counter() - t0, time.process_time() - c0)
        b = qm.model.SerializeToString()
        for s in ("basic", "default"):
            _line(label, s, run(b, x, "input", fused=(s == "default")).argmax(1), ftop[s], labels, t)


def folds(model: Path, x: np.ndarray, labels: np.ndarray, rows: list[str], extra: dict, fused: bool = False) -> None:
    """Three-fold cross-validation of each row (module docstring)."""
    f = run(model.read_bytes(), x, "input", fused=fused).argmax(1)
    print(f"EfficientNet-Lite0, three folds of 100 calibration images, each judged on the other 200 (ORT "
          f"{'default' if fused else 'basic'} session); CPU flags: {cpu_flags()}; extra config: {extra or 'none'}")
    print("| row | calibration | top-1 | float top-1 | gap (points) | agreement | agreement on calibration | CPU time (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for key in rows:
        label, kw = ROWS[key]
        gaps, agree = [], []
        for k in range(3):
            cal = np.arange(100 * k, 100 * k + 100)
            ev = np.setdiff1d(np.arange(len(x)), cal)
            order = np.r_[cal, ev]
            c0 = time.process_time()
            qm = qlinear.quantize(model, {"input": x[order], "labels": labels[order]},
                                  QuantizeConfig(calibration_samples=100, evaluation_samples=0, **kw, **extra))
            c = time.process_time() - c0
            q = run(qm.model.SerializeToString(), x, "input", fused=fused).argmax(1)
            gaps.append(np.mean(f[ev] == labels[ev]) - np.mean(q[ev] == labels[ev]))
            agree.append(np.mean(q[ev] == f[ev]))
            print(f"| {label} | {cal[0]}..{cal[-1]} | {np.mean(q[ev] == labels[ev]):.3f} | "
                  f"{np.mean(f[ev] == labels[ev]):.3f} | {100 * gaps[-1]:.1f} | {agree[-1]:.3f} | "
                  f"{np.mean(q[cal] == f[cal]):.3f} | {c:.0f} |", flush=True)
        print(f"| **{label}** | **mean of 3** | | | **{100 * np.mean(gaps):.2f}** | **{np.mean(agree):.4f}** | | |",
              flush=True)


def _line(label: str, session: str, q: np.ndarray, f: np.ndarray, y: np.ndarray, t: tuple[float, float]) -> None:
    cells = []
    for sl in HALVES.values():
        cells += [f"{np.mean(q[sl] == y[sl]):.3f}", f"{np.mean(q[sl] == f[sl]):.3f}"]
    print(f"| {label} | {session} | " + " | ".join(cells) + f" | {t[0]:.1f} | {t[1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
