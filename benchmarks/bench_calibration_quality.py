"""Calibration quality on a real model: SQNR of quantize-dequantize for every activation and weight tensor of
EfficientNet-Lite0 on ImageNet images, per method, at 8 and 4 bits (activations per-tensor asymmetric, weights
per-channel symmetric), median over tensors.

    python benchmarks/bench_calibration_quality.py [--shared ../shared] [--images 32]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx

from qlinear.calibration import Grouping, make_observer
from qlinear.graph.model import GraphIndex
from qlinear.graph.plan import make_plan
from qlinear.ptq.data import load_dataset
from qlinear.ptq.stats.collect import session

METHODS = ("minmax", "percentile", "mse", "sqnr", "entropy")


def sqnr(x: np.ndarray, y: np.ndarray) -> float:
    x = x.astype(np.float64)
    n = float(np.sum((x - y.astype(np.float64)) ** 2))
    return float(10 * np.log10(float(np.sum(x * x)) / n)) if n > 0 else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    ap.add_argument("--images", type=int, default=32)
    a = ap.parse_args()
    m = onnx.load(Path(a.shared) / "models" / "efficientnet-lite0.onnx")
    ds = load_dataset(Path(a.shared) / "data" / "imagenet-dev", {"input": ("N", 3, 224, 224)})
    plan = make_plan(m)
    acts = plan.activations
    sess = session(m, [t for t in acts if t != "input"])
    feed = next(ds.batches(0, a.images, a.images))
    vals = dict(zip([t for t in acts if t != "input"], sess.run([t for t in acts if t != "input"], feed)))
    vals["input"] = feed["input"]
    g = GraphIndex.build(m, infer_shapes=False)
    weights = {w.name: (g.array(w.name), w.channel_axis) for w in plan.weights}
    print(f"EfficientNet-Lite0, {a.images} images: {len(acts)} activation tensors (per-tensor, asymmetric), "
          f"{len(weights)} weight tensors (per-channel, symmetric)")
    print("| bits | method | median activation SQNR (dB) | median weight SQNR (dB) | median of all tensors (dB) | "
          "tensors better than min-max |")
    print("|---|---|---|---|---|---|")
    base: dict[int, list[float]] = {}
    for bits in (8, 4):
        at, wt = f"uint{bits}", f"int{bits}"
        for meth in METHODS:
            sa, sw = [], []
            for t in acts:
                x = vals[t]
                o = make_observer(meth, Grouping())
                o.update(x)
                e = o.compute(at)
                sa.append(sqnr(x, e.fake_quantize(x)))
            for w, ax in weights.values():
                o = make_observer(meth, Grouping(axis=ax))
                o.update(w)
                e = o.compute(wt, symmetric=True)
                sw.append(sqnr(w, e.fake_quantize(w)))
            allv = sa + sw
            if meth == "minmax":
                base[bits] = allv
            better = sum(x > y + 1e-9 for x, y in zip(allv, base[bits]))
            print(f"| {bits} | {meth} | {np.median(sa):.2f} | {np.median(sw):.2f} | {np.median(allv):.2f} | "
                  f"{better}/{len(allv)} |")


if __name__ == "__main__":
    main()
