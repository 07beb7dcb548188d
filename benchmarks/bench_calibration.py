"""Calibration speed: update + compute per-channel encodings over 256 MB of float32 data, per method, against
ONNX Runtime's calibrators on the same data in the same run. ORT observes the two tensors around a Relu
(x and relu(x)) per tensor; qlinear observes the same two tensors per channel.

    python benchmarks/bench_calibration.py [--mb 256] [--batches 16]

Reference floor for min-max: one NumPy ``min`` + ``max`` pass over the same batches.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from qlinear.calibration import Grouping, make_observer

ORT_METHOD = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}


def ort_time(batches, method: str, tmp: Path) -> float:
    from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator

    shape = list(batches[0].shape)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    p = tmp / f"m_{method}.onnx"
    onnx.save(m, p)

    class R(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": b} for b in batches])

        def get_next(self):
            return next(self.it, None)

    t0 = time.perf_counter()
    cal = create_calibrator(str(p), ["Relu"], augmented_model_path=str(tmp / f"aug_{method}.onnx"),
                            calibrate_method=getattr(CalibrationMethod, ORT_METHOD[method]))
    cal.collect_data(R())
    cal.compute_data()
    return time.perf_counter() - t0


def ours(batches, method: str) -> float:
    """Both tensors ORT observes around its Relu: x and relu(x) (relu(x) computed inside the timing)."""
    t0 = time.perf_counter()
    obs = [make_observer(method, Grouping(axis=1)) for _ in range(2)]
    for b in batches:
        obs[0].update(b)
        obs[1].update(np.maximum(b, 0))
    for o in obs:
        o.compute("uint8")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--batches", type=int, default=16)
    a = ap.parse_args()
    per = a.mb * 2**20 // 4 // a.batches
    c = 64
    hw = int((per // c) ** 0.5)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((1, c, hw, hw), dtype=np.float32) * 2 + 0.5) for _ in range(a.batches)]
    total = sum(b.nbytes for b in batches) / 2**20
    def np_pass() -> float:
        t0 = time.perf_counter()
        for b in batches:
            b.min(), b.max()
        return time.perf_counter() - t0

    t_np = sorted(np_pass() for _ in range(5))[2]
    print(f"data: {a.batches} batches of {list(batches[0].shape)} float32, {total:.0f} MB; qlinear per-channel "
          f"(axis 1, {c} channels), ORT per-tensor; numpy min+max pass {t_np:.3f} s")
    print("| method | qlinear (s) | ONNX Runtime (s) | ORT / qlinear |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for method in ("minmax", "moving_average", "percentile", "mse", "sqnr", "entropy"):
            t_q = min(ours(batches, method) for _ in range(2))
            if method in ORT_METHOD:
                t_o = ort_time(batches, method, Path(d))
                print(f"| {method} | {t_q:.3f} | {t_o:.3f} ({ORT_METHOD[method]}) | {t_o / t_q:.1f}x |")
            else:
                ref = "Entropy" if method in ("mse", "sqnr") else "MinMax"
                t_o = ort_time(batches, "entropy" if ref == "Entropy" else "minmax", Path(d))
                print(f"| {method} | {t_q:.3f} | {t_o:.3f} ({ref}, nearest) | {t_o / t_q:.1f}x |")
    def mm_pass() -> float:
        t0 = time.perf_counter()
        o = make_observer("minmax", Grouping(axis=1))
        for b in batches:
            o.update(b)
        o.compute("uint8")
        return time.perf_counter() - t0

    t_mm = sorted(mm_pass() for _ in range(5))[2]
    print(f"min-max (one tensor, per-channel, median of 5) {t_mm:.3f} s = {t_mm / t_np:.2f}x the NumPy min+max pass "
          f"({t_np:.3f} s)")


if __name__ == "__main__":
    main()
