"""Integer kernels: int8 GEMM (M=N=K=1024) against ONNX Runtime's MatMulInteger, and a MobileNet Conv2D layer
(1x1 pointwise, 1x96x56x56 -> 24 channels, and 3x3 depthwise 1x144x56x56) against QLinearConv; same thread count
for both (numpy's BLAS and ORT both limited to N threads), ratio printed. Every output is checked equal first.
With ``../shared`` present, a whole-model row: ``run_integer`` (``ort_fused`` profile, compiled once) on the Q/DQ
EfficientNet-Lite0 against ONNX Runtime running the same model with its fused int8 kernels, batch 8, outputs compared.

    python benchmarks/bench_kernels.py [--threads 1] [--shared ../shared]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import cpu_flags  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
    a = ap.parse_args()
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[v] = str(a.threads)
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from qlinear import kernels as K
    from qlinear.kernels import native

    native.set_threads(a.threads)

    def sess(node, inputs, out_type):
        vis = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
               for k, v in inputs.items()]
        m = helper.make_model(helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", out_type, None)]),
                              opset_imports=[helper.make_opsetid("", 21)])
        m.ir_version = 10
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def best(fn, n=7):
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[len(ts) // 2]

    rng = np.random.default_rng(0)
    rows = []
    # GEMM 1024^3: MatMulInteger (uint8 x int8 -> int32 accumulators), weights in [-64, 63] (no AVX2 saturation)
    x = rng.integers(0, 256, (1024, 1024)).astype(np.uint8)
    w = rng.integers(-64, 64, (1024, 1024)).astype(np.int8)
    zx = np.array(128, np.uint8)
    s = sess(helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"]), {"a": x, "b": w, "az": zx},
             TensorProto.INT32)
    feeds = {"a": x, "b": w, "az": zx}
    pw = K.PreparedWeights.prepare(w.T, 0, int(zx))  # once per weight tensor
    assert np.array_equal(pw.accumulate(x), s.run(None, feeds)[0])
    rows.append(("int8 GEMM 1024x1024x1024 (MatMulInteger)", best(lambda: pw.accumulate(x)),
                 best(lambda: s.run(None, feeds))))
    # MobileNet-v2 layers: QLinearConv, requantized in f32_rne
    for name, (c, o, k, g, hw) in {"pointwise 1x1 96->24 @56x56": (96, 24, 1, 1, 56),
                                   "depthwise 3x3 144 @56x56": (144, 144, 3, 144, 56)}.items():
        xc = rng.integers(0, 256, (1, c, hw, hw)).astype(np.uint8)
        wc = rng.integers(-64, 64, (o, c // g, k, k)).astype(np.int8)
        sw = rng.uniform(0.002, 0.02, o).astype(np.float32)
        ins = {"x": xc, "xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8), "w": wc, "ws": sw, "wz": np.zeros(o, np.int8),
               "ys": np.array(0.5, np.float32), "yz": np.array(128, np.uint8)}
        pads = [k // 2] * 4
        sc = sess(helper.make_node("QLinearConv", list(ins), ["y"], pads=pads, group=g), ins, TensorProto.UINT8)

        def ours(xc=xc, wc=wc, sw=sw, g=g, pads=pads):
            return K.conv2d(xc, wc, None, zp_x=120, s_x=np.float32(0.02), s_w=sw, s_out=np.float32(0.5), zp_out=128,
                            mode="f32_rne", pads=tuple(pads), groups=g, qmin=0, qmax=255)

        assert np.array_equal(ours(), sc.run(None, ins)[0])
        rows.append((f"Conv2D {name} (QLinearConv)", best(ours), best(lambda sc=sc, ins=ins: sc.run(None, ins))))
    model = os.path.join(a.shared, "models", "efficientnet-lite0.onnx")
    if os.path.exists(model):
        import qlinear
        from qlinear.kernels.run import IntegerModel

        x = rng.normal(0, 1, (40, 3, 224, 224)).astype(np.float32)
        qm = qlinear.quantize(model, {"input": x[:32]}, dict(calibration_samples=32, evaluation_samples=0))
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.log_severity_level = 3
        s = ort.InferenceSession(qm.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        im = IntegerModel(qm.model, "ort_fused")
        xb = x[32:40]
        assert np.array_equal(im.run({"input": xb})["logits"], s.run(None, {"input": xb})[0])
        rows.append(("EfficientNet-Lite0 W8A8 whole model, batch 8, per image (ORT fused int8)",
                     best(lambda: im.run({"input": xb}), 5) / 8, best(lambda: s.run(None, {"input": xb}), 5) / 8))
    flags = cpu_flags()
    print(f"threads: {a.threads}; numpy {np.__version__}, onnxruntime {ort.__version__}; CPU flags: {flags}")
    print("| kernel | qlinear (ms) | ONNX Runtime (ms) | qlinear / ORT |")
    print("|---|---|---|---|")
    for n, tq, to in rows:
        print(f"| {n} | {tq * 1e3:.2f} | {to * 1e3:.2f} | {tq / to:.2f}x |")


if __name__ == "__main__":
    main()
