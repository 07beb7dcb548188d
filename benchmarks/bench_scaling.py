#!/usr/bin/env python3
"""How W8A8 quantization scales with graph size (issue 20): qlinear vs ONNX Runtime's ``quantize_static``.

Models: synthetic BERT-like encoders (per layer: LayerNormalization, Q/K/V MatMul+Add, Transpose, MatMul, Mul,
Softmax, MatMul, output MatMul+Add, residual Add, LayerNormalization, FFN MatMul+Add, Gelu, MatMul+Add, residual
Add; 22 nodes), hidden 64, FFN 128, sequence 16, opset 20, at ~960, 1,920, 3,840 and 15,360 nodes. Calibration data:
``--samples`` random inputs in an .npz, the same for both tools.

Rows, each tool in its own process (wall time of the whole process, model and data already on disk):
  qlinear  ``python -m qlinear quantize MODEL -d DATA.npz --no-report --calibration-samples N`` (W8A8 per-channel,
           uint8 activations, min-max)
  ORT      ``quantize_static(QDQ, per_channel=True, QUInt8 activations, QInt8 weights, MinMax)`` fed the same
           samples one by one
  ORT init ``onnxruntime.InferenceSession`` of the Q/DQ model qlinear wrote, at ONNX Runtime's default optimization
           level (what qlinear's load check of the written model builds), in its own process: ONNX Runtime's own
           share of qlinear's curve (``--no-init`` skips it)
Printed: CPU flags, the wall times (and qlinear's CPU time, user + system of its process: much steadier than wall time
on a machine shared with other jobs), qlinear/ORT and the ratios at 4x the nodes of qlinear's wall and CPU time and of
the bare session's CPU time. ORT runs past ``--ort-timeout`` are stopped and printed as ``inf``.
``--profile N``: also run qlinear in-process at N nodes under cProfile and print the top functions.

Usage: python benchmarks/bench_scaling.py [--nodes 960 1920 3840 15360] [--samples 16] [--profile 3840]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import cpu_flags  # noqa: E402

HIDDEN, FFN, SEQ, PER_LAYER = 64, 128, 16, 22


def encoder(layers: int, seed: int = 0) -> onnx.ModelProto:
    """A BERT-like encoder of ``layers`` layers (22 nodes each)."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def w(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name))
        return name

    def b(name: str, n: int, value: float | None = None) -> str:
        arr = np.full(n, value, np.float32) if value is not None else (0.1 * rng.standard_normal(n)).astype(np.float32)
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(op: str, ins: list[str], out: str, **kw: object) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=f"{out}_{op}", **kw))
        return out

    inits.append(numpy_helper.from_array(np.array(1 / np.sqrt(HIDDEN), np.float32), "att_scale"))
    x = "x"
    for i in range(layers):
        p = f"l{i}"
        h = node("LayerNormalization", [x, b(f"{p}.ln1.g", HIDDEN, 1.0), b(f"{p}.ln1.b", HIDDEN)], f"{p}.ln1",
                 axis=-1)
        qkv = [node("Add", [node("MatMul", [h, w(f"{p}.{k}.w", HIDDEN, HIDDEN)], f"{p}.{k}.mm"), b(f"{p}.{k}.b", HIDDEN)],
                    f"{p}.{k}") for k in "qkv"]
        kt = node("Transpose", [qkv[1]], f"{p}.kt", perm=[0, 2, 1])
        s = node("Mul", [node("MatMul", [qkv[0], kt], f"{p}.qk"), "att_scale"], f"{p}.scores")
        a = node("MatMul", [node("Softmax", [s], f"{p}.probs", axis=-1), qkv[2]], f"{p}.ctx")
        o = node("Add", [node("MatMul", [a, w(f"{p}.o.w", HIDDEN, HIDDEN)], f"{p}.o.mm"), b(f"{p}.o.b", HIDDEN)],
                 f"{p}.o")
        r1 = node("Add", [x, o], f"{p}.res1")
        h2 = node("LayerNormalization", [r1, b(f"{p}.ln2.g", HIDDEN, 1.0), b(f"{p}.ln2.b", HIDDEN)], f"{p}.ln2",
                  axis=-1)
        f1 = node("Add", [node("MatMul", [h2, w(f"{p}.f1.w", HIDDEN, FFN)], f"{p}.f1.mm"), b(f"{p}.f1.b", FFN)],
                  f"{p}.f1")
        f2 = node("Add", [node("MatMul", [node("Gelu", [f1], f"{p}.gelu"), w(f"{p}.f2.w", FFN, HIDDEN)], f"{p}.f2.mm"),
                          b(f"{p}.f2.b", HIDDEN)], f"{p}.f2")
        x = node("Add", [r1, f2], f"{p}.out")
    g = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, SEQ, HIDDEN])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    return m


ORT_SCRIPT = """
import sys, numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static, CalibrationMethod
model, data, out = sys.argv[1:4]
x = np.load(data)["x"]
class R(CalibrationDataReader):
    def __init__(self):
        self.it = iter([{"x": x[i:i + 1]} for i in range(len(x))])
    def get_next(self):
        return next(self.it, None)
quantize_static(model, out, R(), quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
"""


INIT_SCRIPT = """
import sys, time, onnxruntime as ort
so = ort.SessionOptions()  # ONNX Runtime's defaults: graph optimization level ORT_ENABLE_ALL
t0, c0 = time.perf_counter(), time.process_time()
ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def init_time(model: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of a bare ``InferenceSession`` of ``model`` at ONNX Runtime's default level (its own
    process)."""
    r = subprocess.run([sys.executable, "-c", INIT_SCRIPT, str(model)], env=env, capture_output=True, text=True,
                       check=False)
    if r.returncode:
        raise SystemExit(f"ONNX Runtime cannot load {model}:\n{r.stderr}")
    wall, cpu = r.stdout.split()[-2:]
    return float(wall), float(cpu)


def timed(cmd: list[str], env: dict[str, str], timeout: float | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system, all threads) of ``cmd`` in its own process; ``inf`` when it runs past
    ``timeout`` seconds (then killed). CPU time moves much less than wall time when other jobs load the machine."""
    t0 = time.perf_counter()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return float("inf"), float("inf")
    t = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return t, (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)


def fmt(t: float, timeout: float) -> str:
    return f"> {timeout:.0f}" if t == float("inf") else f"{t:.2f}"


def ratio(tq: float, to: float, timeout: float) -> str:
    return f"< {tq / timeout:.3f}" if to == float("inf") else f"{tq / to:.3f}"


def profile(model: Path, data: Path, outdir: Path, top: int) -> None:
    from qlinear.cli.main import main as cli  # the same code path as the command line

    pr = cProfile.Profile()
    pr.enable()
    rc = cli(["quantize", str(model), "-d", str(data), "-o", str(outdir), "--no-report",
              "--calibration-samples", str(len(np.load(data)["x"]))])
    pr.disable()
    if rc:
        raise SystemExit(f"qlinear quantize failed ({rc})")
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(top)
    print(s.getvalue())
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    print(s.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="*", default=[960, 1920, 3840, 15360])
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--no-ort", action="store_true", help="time qlinear only")
    ap.add_argument("--ort-timeout", type=float, default=900,
                    help="stop ORT's quantize_static after this many seconds (it grows much faster than linearly: "
                         "18 s at 968 nodes, 28 min at 3,850 on a loaded 2-core VM); printed as inf")
    ap.add_argument("--no-init", action="store_true", help="skip the bare ONNX Runtime session of the Q/DQ model")
    ap.add_argument("--profile", type=int, nargs="*", default=[], help="node counts to profile qlinear at")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    print(f"CPU flags: {cpu_flags()}")
    env = dict(os.environ)
    rows: dict[int, tuple[int, float, float, float | None, tuple[float, float] | None]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        rng = np.random.default_rng(1)
        data = d / "data.npz"
        np.savez(data, x=rng.standard_normal((a.samples, SEQ, HIDDEN)).astype(np.float32))
        for n in sorted(set(a.nodes) | set(a.profile)):
            m = encoder(max(1, round(n / PER_LAYER)))
            path = d / f"enc{n}.onnx"
            onnx.save(m, str(path))
            if n in a.profile:
                print(f"--- cProfile of qlinear quantize at {len(m.graph.node)} nodes")
                profile(path, data, d / f"prof{n}", a.top)
            if n not in a.nodes:
                continue
            tq, cq = timed([sys.executable, "-m", "qlinear", "quantize", str(path), "-d", str(data), "-o",
                        str(d / f"q{n}"), "--no-report", "--calibration-samples", str(a.samples)], env)
            to = None if a.no_ort else timed([sys.executable, "-c", ORT_SCRIPT, str(path), str(data),
                                               str(d / f"ort{n}.onnx")], env, a.ort_timeout)[0]
            ti = None if a.no_init else init_time(d / f"q{n}" / "model.qdq.onnx", env)
            rows[n] = (len(m.graph.node), tq, cq, to, ti)
            print(f"{len(m.graph.node):>6} nodes  qlinear {tq:7.2f} s (CPU {cq:.2f} s)" +
                  (f"  ORT quantize_static {fmt(to, a.ort_timeout)} s  qlinear/ORT {ratio(tq, to, a.ort_timeout)}"
                   if to else "") + (f"  ORT init of the Q/DQ model {ti[0]:.2f} s (CPU {ti[1]:.2f} s)"
                                     if ti is not None else ""),
                  flush=True)
    print("\n| nodes | qlinear s | ORT s | qlinear/ORT | qlinear t(4n)/t(n) | qlinear CPU s | CPU t(4n)/t(n) | "
          "ORT init of qlinear's Q/DQ model s (CPU s) | init CPU t(4n)/t(n) |\n|---|---|---|---|---|---|---|---|---|")
    for n, (k, tq, cq, to, ti) in rows.items():
        q = rows.get(n // 4)
        r4, c4 = (f"{tq / q[1]:.2f}", f"{cq / q[2]:.2f}") if q else ("", "")
        i4 = f"{ti[1] / q[4][1]:.2f}" if ti is not None and q else ""
        print(f"| {k} | {tq:.2f} | {fmt(to, a.ort_timeout) if to else ''} | "
              f"{ratio(tq, to, a.ort_timeout) if to else ''} | {r4} | {cq:.2f} | {c4} | "
              f"{'' if ti is None else f'{ti[0]:.2f} ({ti[1]:.2f})'} | {i4} |")


if __name__ == "__main__":
    main()
