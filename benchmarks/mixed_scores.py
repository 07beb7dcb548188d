"""Issue 21, the detector's class scores: where their error comes from and what each remedy buys.

    PYTHONPATH=src python benchmarks/mixed_scores.py [--model nudenet-320n] [--cal 16] [--eval 32]

Data as ``bench_zoo.py`` builds it (``zoo.build_data``: the first ``--cal`` samples calibrate, the next ``--eval`` are
held out). Every model runs in ONNX Runtime's default CPU session on the held-out samples against the float model:
the plain SQNR of the scores part (``output0[:, 4:]``, every element) and of the boxes part, the entry's det_f1, ms per
sample (float and quantized measured in the same run: report the ratio) and the file size. Rows:

* ``qlinear`` (default, target ort: the activations the scores are computed from left in float, their weights
  quantized, ``qlinear.ptq.mixed``; ``qlinear --target qnn`` has them at 16 bits over twice their calibrated ranges), ``W8A8 throughout`` (an overrides rule setting every activation uint8, the scores' too: the
  default before that rule, which had the scores at 16 bits) and ``every activation uint16, min-max`` (an overrides rule: no headroom);
* ablations of the W8A8 model (its activation Q/DQ pairs removed, weights kept): the head (``/model.22/``), the
  first layers (``/model.0-4/``), every activation: which activations the scores' error comes from;
* ``W8A8, /model.0-2/ uint16``: the first three layers (the heaviest-tailed activations) at 16 bits.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402

import qlinear  # noqa: E402

ort.set_default_logger_severity(3)


def run(path: Path, samples: list[dict]) -> tuple[list, float]:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    s.run(None, samples[0])
    t = time.perf_counter()
    out = [s.run(None, x) for x in samples]
    return out, (time.perf_counter() - t) * 1000 / len(samples)


def sqnr(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(10 * np.log10(np.sum(a ** 2) / np.sum((a - b) ** 2)))


def without_qdq(src: Path, dst: Path, keep_float) -> None:  # noqa: ANN001
    """``src`` with the activation Q/DQ pairs of the tensors ``keep_float(name)`` selects removed."""
    m = onnx.load(str(src))
    inits = {t.name for t in m.graph.initializer}
    nodes = list(m.graph.node)
    quant = {n.output[0]: n.input[0] for n in nodes
             if n.op_type == "QuantizeLinear" and n.input[0] not in inits and keep_float(n.input[0])}
    ren = {n.output[0]: quant[n.input[0]] for n in nodes if n.op_type == "DequantizeLinear" and n.input[0] in quant}
    keep = [n for n in nodes if not (n.op_type == "QuantizeLinear" and n.output[0] in quant)
            and not (n.op_type == "DequantizeLinear" and n.output[0] in ren)]
    for n in keep:
        for i, x in enumerate(n.input):
            n.input[i] = ren.get(x, x)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    onnx.save(m, str(dst))


def layers(lo: int, hi: int):  # noqa: ANN201
    def pick(t: str) -> bool:
        g = re.match(r"/model\.(\d+)/", t)
        return bool(g) and lo <= int(g.group(1)) <= hi
    return pick


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="nudenet-320n")
    ap.add_argument("--cal", type=int, default=16)
    ap.add_argument("--eval", type=int, default=32)
    a = ap.parse_args()
    e = zoo.by_name(a.model)
    cal, ev = zoo.build_data(e, a.cal, a.eval)
    work = Path(tempfile.mkdtemp(prefix="mixed_scores_"))
    data = {k: np.concatenate([s[k] for s in cal + ev]) for k in cal[0]}
    models = {}
    every = [{"name": "*", "role": "activation"}]
    for label, extra in (("qlinear", {}), ("qlinear --target qnn (16 bits)", {"target": "qnn"}),
                         ("W8A8 throughout", {"overrides": [dict(every[0], type="uint8")]}),
                         ("every activation uint16, min-max", {"overrides": [dict(every[0], type="uint16")]}),
                         ("W8A8, /model.0-2/ uint16", {"overrides": [dict(every[0], type="uint8"), {
                             "name": "/model.[0-2]/*", "role": "activation", "type": "uint16"}]})):
        qm = qlinear.quantize(str(e.file), data, dict(calibration_samples=a.cal, evaluation_samples=0, **extra))
        models[label] = work / f"{len(models)}.onnx"
        onnx.save(qm.model, str(models[label]))
    base = models["W8A8 throughout"]
    for label, pick in (("W8A8, head (/model.22/) activations float", layers(22, 22)),
                        ("W8A8, /model.0-4/ activations float", layers(0, 4)),
                        ("W8A8, every activation float", lambda t: True)):
        models[label] = work / f"{len(models)}.onnx"
        without_qdq(base, models[label], pick)
    ref, ms_f = run(e.file, ev)
    f = np.concatenate([r[0] for r in ref])
    print(f"{e.name}: {a.cal} calibration / {a.eval} held-out samples; float {ms_f:.1f} ms/sample")
    print(f"{'model':44s} {'scores dB':>9s} {'boxes dB':>9s} {'det_f1':>7s} {'ms/float':>8s} {'MB':>6s}")
    for label, p in models.items():
        got, ms = run(p, ev)
        q = np.concatenate([g[0] for g in got])
        print(f"{label:44s} {sqnr(f[:, 4:], q[:, 4:]):9.2f} {sqnr(f[:, :4], q[:, :4]):9.2f} "
              f"{zoo.fidelity(e, ref, got):7.4f} {ms / ms_f:8.2f} {p.stat().st_size / 1e6:6.2f}")


if __name__ == "__main__":
    main()
