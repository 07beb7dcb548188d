"""Mixed precision under a size budget on EfficientNet-Lite0: the written ``model.qdq.onnx`` against the float
``.onnx`` file (bytes on disk), its initializers and its ``qlinear.encodings`` metadata, and top-1 on the held-out dev
images 100..299 in ONNX Runtime's default session, against float. Calibration (and every choice) on images 0..99.

    python benchmarks/bench_budget.py [--shared ../shared] [--budgets size_budget=0.2,average_bits=4.5] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx

import qlinear
from qlinear.ptq import QuantizeConfig, load_dataset

sys.path.insert(0, str(Path(__file__).parent))
from bench_ptq import run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    ap.add_argument("--budgets", default="size_budget=0.2,average_bits=4.5")
    ap.add_argument("--out", default="/tmp/bench_budget")
    ap.add_argument("--set", action="append", default=[], help="extra QuantizeConfig field, key=value")
    a = ap.parse_args()
    model = Path(a.shared) / "models" / "efficientnet-lite0.onnx"
    ds = load_dataset(Path(a.shared) / "data" / "imagenet-dev", {"input": ("N", 3, 224, 224)})
    x = np.concatenate([ds.sample(i)["input"] for i in range(len(ds))])
    labels = np.array(ds.labels)
    ev = slice(100, 300)
    fbytes = model.stat().st_size
    ftop = run(model.read_bytes(), x[ev], "input", fused=True).argmax(1)
    print(f"float: {fbytes} bytes, top-1 {np.mean(ftop == labels[ev]):.3f} on dev 100..299 (ORT default session)")
    print("| run | file bytes | file / float | initializers / float | metadata bytes | top-1 | float top-1 | agreement "
          "| time (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for item in a.budgets.split(","):
        key, val = item.split("=")
        extra = dict(kv.split("=", 1) for kv in a.set)
        cfg = QuantizeConfig(calibration_samples=100, evaluation_samples=0, **{key: float(val)}, **extra)
        t0 = time.perf_counter()
        qm = qlinear.quantize(model, {"input": x, "labels": labels}, cfg)
        t = time.perf_counter() - t0
        out = Path(a.out) / item
        qm.save(out, report=False)
        f = out / "model.qdq.onnx"
        m = onnx.load(str(f))
        init = sum(len(i.SerializeToString()) for i in m.graph.initializer)
        meta = sum(len(p.value) for p in m.metadata_props)
        q = run(f.read_bytes(), x[ev], "input", fused=True).argmax(1)
        print(f"| {key} {val} {' '.join(a.set)} | {f.stat().st_size} | {f.stat().st_size / fbytes:.4f} | {init / fbytes:.4f} | {meta} | "
              f"{np.mean(q == labels[ev]):.3f} | {np.mean(ftop == labels[ev]):.3f} | {np.mean(q == ftop):.3f} | "
              f"{t:.0f} |")
        for c in qm.budget:
            print(f"  candidate {c['candidate']}: {c['int4_weights']} int4, file {c['size_fraction']:.4f}, "
                  f"{c['average_bits']:.2f} bits, metric {c['metric']:.4f}, SQNR {c['sqnr_db']:.2f} dB"
                  f"{' (chosen)' if c['chosen'] else ''}")


if __name__ == "__main__":
    main()
