"""EfficientNet-Lite0 exported to .tflite and run by LiteRT 2.3.0 against qlinear's integer simulation, on all 300
dev images: for each resolver (BUILTIN_REF, the default AUTO/XNNPACK, and the optimized builtins), how many images
and output bytes differ from ``run_integer`` in the matching profile; top-1 of the .tflite against float on the 200
held-out images; wall time per image of each.

    python benchmarks/bench_tflite.py [--shared ../shared] [--images 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import cpu_flags  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    ap.add_argument("--images", type=int, default=300)
    a = ap.parse_args()
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    import qlinear
    from qlinear.kernels.run import IntegerModel
    from qlinear.ptq import load_dataset
    from qlinear.ptq.data import model_inputs

    model = Path(a.shared) / "models" / "efficientnet-lite0.onnx"
    import onnx

    ds = load_dataset(Path(a.shared) / "data" / "imagenet-dev", model_inputs(onnx.load(model)))
    n = min(a.images, len(ds))
    x = np.concatenate([ds.sample(i)["input"] for i in range(n)])
    labels = np.array(ds.labels[:n])
    qm = qlinear.quantize(model, {"input": x[:100], "labels": labels[:100]},
                          dict(calibration_samples=100, evaluation_samples=0, target="tflite"))
    data = qlinear.tflite.export(qm.model)
    print(f"CPU flags: {cpu_flags()}; {n} images; .tflite {len(data) / 1e6:.2f} MB")
    fl = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    f = np.concatenate([fl.run(None, {"input": x[i:i + 25]})[0] for i in range(0, n, 25)])
    rows = []
    for rname, r, mode in (("BUILTIN_REF", OpResolverType.BUILTIN_REF, "litert_ref"),
                           ("AUTO (default, XNNPACK)", OpResolverType.AUTO, "litert_xnnpack"),
                           ("BUILTIN_WITHOUT_DEFAULT_DELEGATES", OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                            "ruy_x86")):
        it = Interpreter(model_content=data, experimental_op_resolver_type=r, num_threads=2)
        it.allocate_tensors()
        ys = []
        t0 = time.perf_counter()
        for i in range(n):
            it.set_tensor(it.get_input_details()[0]["index"], x[i:i + 1].transpose(0, 2, 3, 1))
            it.invoke()
            ys.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
        t_lit = (time.perf_counter() - t0) / n
        y = np.concatenate(ys)
        im = IntegerModel(qm.model, mode)
        t0 = time.perf_counter()
        z = np.concatenate([im.run({"input": x[i:i + 8]})["logits"] for i in range(0, n, 8)])
        t_q = (time.perf_counter() - t0) / n
        diff_img = int((y != z).any(1).sum())
        top = float(np.mean(y[100:].argmax(1) == labels[100:])) if n > 100 else float("nan")
        rows.append((rname, mode, diff_img, int((y != z).sum()), top, t_lit * 1e3, t_q * 1e3))
    ftop = float(np.mean(f[100:].argmax(1) == labels[100:])) if n > 100 else float("nan")
    print(f"float top-1 on held-out images {ftop:.3f}")
    print("| LiteRT resolver | run_integer mode | images that differ | output values that differ | top-1 of the "
          ".tflite (held out) | LiteRT ms/image | run_integer ms/image |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | `{r[1]}` | {r[2]} / {n} | {r[3]} / {n * 1000} | {r[4]:.3f} | {r[5]:.1f} | {r[6]:.1f} |")


if __name__ == "__main__":
    main()
