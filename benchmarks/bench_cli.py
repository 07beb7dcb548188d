"""Wall time of the main job as a user runs it: ``qlinear quantize`` on EfficientNet-Lite0 (100 calibration images,
report on 200 held-out images, and ``--no-report``) against ONNX Runtime's ``quantize_static`` (MinMax, QDQ,
per-channel) on the same data, alone and followed by its own evaluation of the same held-out images (float and
quantized runs, top-1 agreement). Every command is a fresh process reading the same ``.npz``; best of ``--repeat``.

    python benchmarks/bench_cli.py [--shared ../shared] [--repeat 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import cpu_flags  # noqa: E402

ORT_SCRIPT = r"""
import sys, numpy as np, onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
model, data, out, evaluate = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
d = np.load(data)
x = d["input"]
class R(CalibrationDataReader):
    def __init__(self):
        self.it = iter([{"input": x[i:i + 1]} for i in range(100)])
    def get_next(self):
        return next(self.it, None)
quantize_static(model, out, R(), quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
if evaluate:
    ev = x[100:300]
    f = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
    a = np.concatenate([f.run(None, {"input": ev[i:i + 25]})[0] for i in range(0, len(ev), 25)]).argmax(1)
    b = np.concatenate([q.run(None, {"input": ev[i:i + 25]})[0] for i in range(0, len(ev), 25)]).argmax(1)
    print("agreement", float(np.mean(a == b)))
"""


def timed(cmd: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[:4])} failed ({r.returncode}): {r.stderr[-800:]}")
        best = min(best, dt)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from qlinear.ptq import load_dataset

    model = Path(a.shared) / "models" / "efficientnet-lite0.onnx"
    ds = load_dataset(Path(a.shared) / "data" / "imagenet-dev", {"input": ("N", 3, 224, 224)})
    x = np.concatenate([ds.sample(i)["input"] for i in range(len(ds))])
    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "data.npz"
        np.savez(data, input=x, labels=np.array(ds.labels))
        script = Path(d) / "ort_quantize.py"
        script.write_text(ORT_SCRIPT)
        py = sys.executable
        q = [py, "-m", "qlinear", "quantize", str(model), "--data", str(data), "-o", str(Path(d) / "out")]
        rows = [
            ("qlinear quantize (report on 200 held-out images)", timed(q, a.repeat)),
            ("qlinear quantize --no-report", timed(q + ["--no-report"], a.repeat)),
            ("ORT quantize_static + its evaluation of the 200 images",
             timed([py, str(script), str(model), str(data), str(Path(d) / "q.onnx"), "1"], a.repeat)),
            ("ORT quantize_static alone", timed([py, str(script), str(model), str(data), str(Path(d) / "q.onnx"),
                                                 "0"], a.repeat)),
        ]
    print(f"EfficientNet-Lite0, 100 calibration + 200 held-out images from one .npz; fresh processes, best of "
          f"{a.repeat}; CPU flags: {cpu_flags()}")
    print("| command | wall time (s) |")
    print("|---|---|")
    for label, t in rows:
        print(f"| {label} | {t:.2f} |")


if __name__ == "__main__":
    main()
