"""Issue 21 on the zoo's YOLOv8 detector (nudenet-320n): its ``output0`` joins box coordinates (0..320) and sigmoid
class scores (0..1) in one Concat. Prints each variant's det_f1 (zoo.fidelity) and the SQNR of the boxes and of the
scores against the float model, on the held-out samples of ``bench_zoo.py``'s data folder (run that first, or pass
``--build``).

    PYTHONPATH=src python benchmarks/bench_mixed.py [--src OTHER/src ...] [-- extra qlinear options]

``--src`` runs ``qlinear quantize`` from another checkout too (main, to compare); ORT's ``quantize_static`` output of
``bench_zoo.py`` is scored when present."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).parent))
import zoo  # noqa: E402

N_CAL, N_EVAL = 16, 32


def _run(path: Path, samples: list[dict]) -> list[list[np.ndarray]]:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [s.run(None, x) for x in samples]


def _sqnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(a ** 2) / np.sum((a - b) ** 2)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", action="append", default=[])
    ap.add_argument("--build", action="store_true")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    e = zoo.by_name("nudenet-320n")
    work = zoo.ZOO / "work" / e.name
    if args.build:
        cal, ev = zoo.build_data(e, N_CAL, N_EVAL)
        zoo.write_folder(cal + ev, work / "data")
    files = sorted((work / "data").glob("*.npz"))
    ev = [dict(np.load(f)) for f in files[N_CAL:N_CAL + N_EVAL]]
    ref = _run(e.file, ev)
    a = np.concatenate([r[0] for r in ref]).astype(np.float64)

    def score(label: str, path: Path) -> None:
        got = _run(path, ev)
        b = np.concatenate([g[0] for g in got]).astype(np.float64)
        print(f"{label:24s} det_f1 {zoo.fidelity(e, ref, got):.4f}  boxes {_sqnr(a[:, :4], b[:, :4]):5.1f} dB  "
              f"scores {_sqnr(a[:, 4:], b[:, 4:]):5.1f} dB  whole {_sqnr(a, b):5.1f} dB", flush=True)

    if (work / "ort.qdq.onnx").exists():
        score("ORT quantize_static", work / "ort.qdq.onnx")
    here = str(Path(__file__).parents[1] / "src")
    for i, src in enumerate([here] + args.src):
        out = work / f"mixed{i}"
        cmd = [sys.executable, "-m", "qlinear", "quantize", str(e.file), "--data", str(work / "data"),
               "--calibration-samples", str(N_CAL), "--evaluation-samples", str(N_EVAL), "-o", str(out),
               "--no-report"] + args.extra
        r = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=src), capture_output=True, text=True)
        if r.returncode:
            print(f"{src}: failed: {r.stderr.strip().splitlines()[-1:]}")
            continue
        score(f"qlinear ({Path(src).parent.name})", out / "model.qdq.onnx")


if __name__ == "__main__":
    main()
