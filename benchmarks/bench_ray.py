"""Calibration statistics on Ray actors: wall time of ``workers`` 1 vs 2 (same bytes), and the per-layer costs the
README's 8B/70B estimate uses (the float32 ``X^T X`` update of one linear's input per 1,000 tokens).

    PYTHONPATH=src python benchmarks/bench_ray.py [--effnet ../shared/models/efficientnet-lite0.onnx
                                                   --images ../shared/data/imagenet-dev]

Ray starts once (``ray.init(num_cpus=2)``, its start-up timed separately); each run's ``timings['calibration']``
is the statistics pass (actors created, model sent, batches reduced and merged), the total is ``qlinear.quantize``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))

import qlinear  # noqa: E402
from qlinear.examples import DATA, MODEL  # noqa: E402


def _run(name: str, model, data, cfg: dict) -> None:
    for w in (1, 2):
        t0 = time.perf_counter()
        qm = qlinear.quantize(model, data, {**cfg, "workers": w})
        total = time.perf_counter() - t0
        print(f"{name:34s} workers {w}: statistics pass {qm.timings.get('calibration', float('nan')):6.2f} s, "
              f"quantize {total:6.2f} s", flush=True)


def _gram_cost() -> None:
    rng = np.random.default_rng(0)
    for k in (4096, 8192, 14336):
        x = rng.standard_normal((1000, k), dtype=np.float32)
        m = x.T @ x
        t0 = time.perf_counter()
        m += x.T @ x
        print(f"X^T X update, K={k:5d}, 1000 tokens: {time.perf_counter() - t0:6.3f} s "
              f"(matrix {k * k * 4 / 2**20:.0f} MiB)", flush=True)


def main() -> None:
    import ray
    from tiny_models import lm_data, tiny_lm

    ap = argparse.ArgumentParser()
    ap.add_argument("--effnet", type=Path)
    ap.add_argument("--images", type=Path)
    a = ap.parse_args()
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    print(f"ray.init(num_cpus=2): {time.perf_counter() - t0:.2f} s", flush=True)
    _run("example CNN W8A8 (20 samples)", MODEL, DATA, {"calibration_samples": 20, "evaluation_samples": 0})
    m, d = tiny_lm(d=256, ff=1024, vocab=512), lm_data(n=64, seq=64, vocab=512)
    _run("tiny LM GPTQ int4 (64 x 64 tokens)", m, d, {"activation_type": "float", "weight_type": "int4",
                                                     "weights": "per-block", "weight_method": "gptq",
                                                     "calibration_samples": 64, "evaluation_samples": 0})
    if a.effnet and a.images:
        _run("EfficientNet-Lite0 W8A8 (100 images)", a.effnet, a.images,
             {"calibration_samples": 100, "evaluation_samples": 0})
    _gram_cost()
    ray.shutdown()


if __name__ == "__main__":
    main()
