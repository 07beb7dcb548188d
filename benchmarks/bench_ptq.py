"""End-to-end PTQ on EfficientNet-Lite0 (ImageNet-trained) with 300 labelled images: 100 for calibration, 200 held
out. In one run: float top-1; qlinear W8A8 per-channel and per-tensor (min-max, AdaRound); W4A8 per-channel (min-max,
SQNR, SeqMSE, AdaRound, with symmetric and asymmetric int4 weights, and with precision repair); ONNX Runtime
``quantize_static`` (MinMax, QDQ, uint8 activations / int8 or int4 weights); AIMET-style min-max (AIMET's rules, no
bias correction, no equalization). Columns: top-1, top-1 agreement with float, output SQNR, wall time of the whole
quantization (images are decoded once, before timing, for every tool), agreement in ONNX Runtime's default session
(its fused int8 kernels), and the written model's latency there: one image per call, every model (the float one
too) timed in turns, medians of 7 rounds of 20 calls, after every row is built.

    python benchmarks/bench_ptq.py [--shared ../shared] [--group w8|w4|all]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import qlinear
from qlinear.ptq import QuantizeConfig, load_dataset

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import cpu_flags  # noqa: E402


def run(model_bytes: bytes, x: np.ndarray, name: str, fused: bool = False) -> np.ndarray:
    """Run with ORT. ``fused=False``: basic graph optimizations only, so Q/DQ stay DequantizeLinear -> float op ->
    QuantizeLinear (the ONNX semantics of the Q/DQ model). ``fused=True``: ORT's default optimizations fuse them into
    its int8 kernels, whose u8s8 GEMM saturates on AVX2 CPUs without VNNI (like this one)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not fused:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {name: x[i:i + 25]})[0] for i in range(0, len(x), 25)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    ap.add_argument("--histogram", action="store_true",
                    help="only the histogram calibrators: qlinear SQNR/entropy vs ORT Entropy/Percentile")
    ap.add_argument("--group", default="all", choices=("w8", "w4", "all"), help="W8A8 rows, W4A8 rows, or both")
    a = ap.parse_args()
    model = Path(a.shared) / "models" / "efficientnet-lite0.onnx"
    images = Path(a.shared) / "data" / "imagenet-dev"
    ds = load_dataset(images, {"input": ("N", 3, 224, 224)})
    x = np.concatenate([ds.sample(i)["input"] for i in range(len(ds))])
    labels = np.array(ds.labels)
    ev = slice(100, 300)  # the first 100 calibrate
    arrays = {"input": x, "labels": labels}
    mb = model.read_bytes()
    f = run(mb, x[ev], "input")
    ftop = f.argmax(1)
    rows = [("float", float(np.mean(ftop == labels[ev])), 1.0, 0.0, 1.0, float("inf"))]
    written = {"float": mb}   # label -> model bytes, timed at the end (latency)

    def ours(label: str, **kw) -> None:
        cfg = QuantizeConfig(calibration_samples=100, evaluation_samples=200, **kw)
        t0 = time.perf_counter()
        qm = qlinear.quantize(model, arrays, cfg)
        t = time.perf_counter() - t0
        b = qm.model.SerializeToString()
        qo = run(b, x[ev], "input")
        q = qo.argmax(1)
        qf = run(b, x[ev], "input", fused=True).argmax(1)
        rows.append((label, float(np.mean(q == labels[ev])), float(np.mean(q == ftop)), t, float(np.mean(qf == ftop)),
                     _sqnr(f, qo)))
        written[label] = b

    def ort_static(label: str, per_channel: bool, method: str = "MinMax", weight_type: str = "QInt8") -> None:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        class R(CalibrationDataReader):
            def __init__(self):
                self.it = iter([{"input": x[i:i + 1]} for i in range(100)])

            def get_next(self):
                return next(self.it, None)

        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "q.onnx"
            t0 = time.perf_counter()
            from onnxruntime.quantization import CalibrationMethod

            try:
                quantize_static(str(model), str(out), R(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                                activation_type=QuantType.QUInt8, weight_type=getattr(QuantType, weight_type),
                                calibrate_method=getattr(CalibrationMethod, method))
            except Exception as e:  # noqa: BLE001 - report what the peer does not support
                print(f"{label}: ONNX Runtime failed: {str(e).splitlines()[0][:200]}")
                return
            t = time.perf_counter() - t0
            b = out.read_bytes()
            qo = run(b, x[ev], "input")
            q = qo.argmax(1)
            qf = run(b, x[ev], "input", fused=True).argmax(1)
        rows.append((label, float(np.mean(q == labels[ev])), float(np.mean(q == ftop)), t, float(np.mean(qf == ftop)),
                     _sqnr(f, qo)))
        written[label] = b

    qlinear.quantize(model, arrays, QuantizeConfig(calibration_samples=2, evaluation_samples=0))  # warm-up, untimed
    if a.histogram:
        ours("qlinear W8A8 per-channel, SQNR-search activations", activation_method="sqnr")
        ours("qlinear W8A8 per-channel, entropy activations", activation_method="entropy")
        ours("qlinear W8A8 per-channel, percentile activations", activation_method="percentile")
        ort_static("ORT quantize_static Entropy per-channel", True, "Entropy")
        ort_static("ORT quantize_static Percentile per-channel", True, "Percentile")
        _table(ds, rows, latency(written, x[ev][:1]))
        return
    if a.group in ("w8", "all"):
        ours("qlinear W8A8 per-channel (default)")
        ours("qlinear W8A8 per-channel, AdaRound", weight_method="adaround")
        ours("qlinear W8A8 per-tensor (CLE + bias correction)", weights="per-tensor")
        ours("qlinear W8A8 per-tensor, CLE + AdaRound", weights="per-tensor", weight_method="adaround")
        ort_static("ORT quantize_static MinMax per-channel", True)
        ort_static("ORT quantize_static MinMax per-tensor", False)
        ours("AIMET-style min-max per-channel (no bias correction)", bias_correction=False)
        ours("AIMET-style min-max per-tensor (no CLE, no bias correction)", weights="per-tensor",
             bias_correction=False, equalize=False, weight_method="minmax")
    if a.group in ("w4", "all"):
        w4 = dict(weight_type="int4")
        ours("qlinear W4A8 per-channel min-max", **w4)
        ours("qlinear W4A8 per-channel SQNR", **w4, weight_method="sqnr")
        ours("qlinear W4A8 per-channel SeqMSE", **w4, weight_method="seqmse")
        ours("qlinear W4A8 per-channel AdaRound", **w4, weight_method="adaround")
        ours("qlinear W4A8 per-channel min-max, asymmetric weights", **w4, weight_symmetric=False)
        ours("qlinear W4A8 per-channel SeqMSE, asymmetric weights", **w4, weight_symmetric=False,
             weight_method="seqmse")
        ours("qlinear W4A8 per-channel AdaRound, asymmetric weights", **w4, weight_symmetric=False,
             weight_method="adaround")
        ours("qlinear W4A8 AdaRound + repair (top1_agreement>=0.98)", **w4, weight_method="adaround",
             accuracy_target="top1_agreement>=0.98")
        ours("qlinear W4A8 SeqMSE + repair (top1_agreement>=0.98)", **w4, weight_method="seqmse",
             accuracy_target="top1_agreement>=0.98")
        ort_static("ORT quantize_static MinMax per-channel, int4 weights", True, weight_type="QInt4")
        ours("AIMET-style min-max W4A8 per-channel (no bias correction)", **w4, bias_correction=False)
    _table(ds, rows, latency(written, x[ev][:1]))


def latency(written: dict[str, bytes], x: np.ndarray, rounds: int = 7, calls: int = 20) -> dict[str, float]:
    """Milliseconds per call of each model in ONNX Runtime's default session (one image), the models timed in
    turns, round by round: the median of ``rounds`` rounds of ``calls`` calls."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sessions = {k: ort.InferenceSession(b, so, providers=["CPUExecutionProvider"]) for k, b in written.items()}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(rounds):
        for k, s in sessions.items():
            for _ in range(3):
                s.run(None, {"input": x})
            t0 = time.perf_counter()
            for _ in range(calls):
                s.run(None, {"input": x})
            times[k].append((time.perf_counter() - t0) / calls * 1000)
    return {k: float(np.median(v)) for k, v in times.items()}


def _sqnr(f: np.ndarray, q: np.ndarray) -> float:
    f, q = f.astype(np.float64), q.astype(np.float64)
    return float(10 * np.log10(np.sum(f ** 2) / max(np.sum((f - q) ** 2), 1e-300)))


def _table(ds, rows, ms: dict[str, float]) -> None:  # noqa: ANN001
    print(f"EfficientNet-Lite0, {len(ds)} images: 100 calibration, 200 held out; ORT {ort.__version__}; "
          f"CPU flags: {cpu_flags()}")
    print("| method | top-1 | agreement with float | output SQNR (dB) | wall time (s) | agreement, ORT fused kernels | "
          "ms per image, ORT default session |")
    print("|---|---|---|---|---|---|---|")
    for label, top1, agree, t, fused, sq in rows:
        lat = f"{ms[label]:.2f}" if label in ms else "-"
        print(f"| {label} | {top1:.3f} | {agree:.3f} | {sq:.1f} | {t:.1f} | {fused:.3f} | {lat} |" if t else
              f"| {label} | {top1:.3f} | - | - | - | - | {lat} |")


if __name__ == "__main__":
    main()
