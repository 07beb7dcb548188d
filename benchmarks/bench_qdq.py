#!/usr/bin/env python3
"""QuantizeLinear / DequantizeLinear throughput: qlinear vs ONNX Runtime vs naive NumPy, in one run.

Input: 2^k float32 elements (default k = 26, 256 MiB) viewed as [4096, 2^k / 4096].
Rows (issue 3):
  q_u8_tensor   per-tensor uint8 (zero point 128)        dq_u8_tensor   inverse
  q_i8_tensor   per-tensor int8 (zero point 0)            dq_i8_tensor
  q_i8_axis0    per-axis int8 on axis 0 (4096 scales)     dq_i8_axis0
  q_i4_block32  blocked int4, block 32 on axis 1, packed  dq_i4_block32  (packed int4 input)
Engines, same data, same process:
  qlinear  threads 1 and 2, preallocated output (``out=``), like ORT's IOBinding
  ORT      single-node opset-25 model, optimizations off, IOBinding with a preallocated output,
           intra_op_num_threads 1 and 2; idle pool threads do not spin (--ort-spin: they do, ORT's default),
           which on 2 cores would take CPU from the engine timed next
  numpy    the naive expression ``clip(rint(x / s) + zp)`` / ``(q - zp) * s`` (int4 left unpacked)
Metric: best of --reps (15) interleaved rounds (each round runs every engine and thread count once, after one
warm-up call each), GB/s of the *input* read (4 B/elem for Q, 1 B/elem for 8-bit DQ, 0.5 B/elem for packed
int4). Every qlinear output is checked bit-exact against ORT first. The memory limit: ``np.copyto`` of the same
number of float32 (split over the threads) gives the bytes moved (read + write) per second; "of copy" is a row's
input + output bytes per second as a share of it. The CPU's SIMD flags and qlinear's kernel entry are printed.

Usage: python benchmarks/bench_qdq.py [--log2n 26] [--reps 15] [--only ROW ...] [--no-numpy] [--simd avx2]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import ml_dtypes
import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper

import qlinear
from qlinear.core import native

CLOCK = time.perf_counter


def best_interleaved(fns: dict[str, object], reps: int) -> dict[str, float]:
    """Best (minimum) time of each function over ``reps`` rounds; each round calls every function once, in turn,
    so that a noisy neighbour or a frequency change hits all engines alike. One warm-up call each first."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = CLOCK()
            fn()
            best[k] = min(best[k], CLOCK() - t0)
    return best


class Copier:
    """``np.copyto`` of n float32 split over ``threads`` (NumPy releases the GIL while copying): the machine's practical
    limit for a streaming kernel. ``gbs(t)`` = bytes moved (read + write) per second for a call that took t seconds."""

    def __init__(self, n: int, threads: int, pool: ThreadPoolExecutor, src: np.ndarray, dst: np.ndarray):
        self.bounds = np.linspace(0, n, threads + 1).astype(int)
        self.pool, self.src, self.dst = pool, src, dst

    def __call__(self):
        if len(self.bounds) == 2:
            np.copyto(self.dst, self.src)
        else:
            list(self.pool.map(self._part, self.bounds[:-1], self.bounds[1:]))

    def _part(self, a: int, b: int):
        np.copyto(self.dst[a:b], self.src[a:b])

    def gbs(self, t: float) -> float:
        return 2 * self.src.nbytes / t / 1e9


def cpu_description() -> str:
    """Model name and the SIMD flags that matter here (from /proc/cpuinfo on Linux)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model in ("", platform.machine()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    keep = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni",
            "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_int8"]
    return f"{model}; flags: {' '.join(f for f in keep if f in flags) or 'n/a'}"


def model(op, xt, yt, shape, sshape, zt=None, **attrs):
    ins = ["x", "s"] + (["z"] if zt else [])
    vis = [helper.make_tensor_value_info("x", xt, shape), helper.make_tensor_value_info("s", T.FLOAT, sshape)]
    if zt:
        vis.append(helper.make_tensor_value_info("z", zt, sshape))
    g = helper.make_graph([helper.make_node(op, ins, ["y"], **attrs)], "b", vis,
                          [helper.make_tensor_value_info("y", yt, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    m.ir_version = 13
    return m.SerializeToString()


class OrtRunner:
    """IOBinding with inputs and a preallocated output bound once; run() only executes."""

    def __init__(self, m: bytes, feeds: dict[str, tuple[np.ndarray, int]], out_shape, out_type, threads: int,
                 spin: bool = False):
        so = ort.SessionOptions()
        if not spin:  # an idle spinning pool thread would take a core from the next engine timed on 2 cores
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 4
        self.sess = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
        self.bind = self.sess.io_binding()
        self.keep = []
        for name, (arr, t) in feeds.items():
            ov = self._ov(arr, t)
            self.bind.bind_ortvalue_input(name, ov)
        self.out = ort.OrtValue.ortvalue_from_shape_and_type(list(out_shape), out_type, "cpu", 0)
        self.bind.bind_ortvalue_output("y", self.out)

    def _ov(self, a, t):
        if t in (T.INT4, T.UINT4):
            ov = ort.OrtValue.ortvalue_from_shape_and_type(list(a.shape), t, "cpu", 0)
            packed = qlinear.pack(a).data
            ctypes.memmove(ov.data_ptr(), packed.ctypes.data, packed.size)
            self.keep.append(packed)
            return ov
        self.keep.append(a)
        return ort.OrtValue.ortvalue_from_numpy(a)

    def __call__(self):
        self.sess.run_with_iobinding(self.bind)

    def result_bytes(self) -> bytes:
        return ctypes.string_at(self.out.data_ptr(), self.out.tensor_size_in_bytes())


def configs(n: int):
    rows, cols = 4096, n // 4096
    shape = (rows, cols)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape, dtype=np.float32) * 3).astype(np.float32)
    s0 = np.array(0.02, np.float32)
    s_ax = rng.uniform(0.01, 0.05, rows).astype(np.float32)
    s_bk = rng.uniform(0.1, 0.5, (rows, cols // 32)).astype(np.float32)
    u8 = rng.integers(0, 256, shape, dtype=np.uint8)
    i8 = rng.integers(-128, 128, shape, dtype=np.int8)
    i4 = rng.integers(-8, 8, shape, dtype=np.int8).astype(ml_dtypes.int4)
    i4p = qlinear.pack(i4)
    z128, z0 = np.array(128, np.uint8), np.array(0, np.int8)
    zax = np.zeros(rows, np.int8)
    C = []
    # name, bytes read, qlinear fn(threads, out), ort (model, feeds, out type), out alloc, numpy fn
    C.append(("q_u8_tensor", 4 * x.size,
              lambda th, out: qlinear.quantize_linear(x, s0, z128, out=out, threads=th), np.empty(shape, np.uint8),
              (model("QuantizeLinear", T.FLOAT, T.UINT8, shape, [], T.UINT8), {"x": (x, T.FLOAT), "s": (s0, T.FLOAT), "z": (z128, T.UINT8)}, shape, T.UINT8),
              lambda: np.clip(np.rint(x / s0) + 128, 0, 255).astype(np.uint8)))
    C.append(("q_i8_tensor", 4 * x.size,
              lambda th, out: qlinear.quantize_linear(x, s0, z0, out=out, threads=th), np.empty(shape, np.int8),
              (model("QuantizeLinear", T.FLOAT, T.INT8, shape, [], T.INT8), {"x": (x, T.FLOAT), "s": (s0, T.FLOAT), "z": (z0, T.INT8)}, shape, T.INT8),
              lambda: np.clip(np.rint(x / s0), -128, 127).astype(np.int8)))
    C.append(("q_i8_axis0", 4 * x.size,
              lambda th, out: qlinear.quantize_linear(x, s_ax, zax, axis=0, out=out, threads=th), np.empty(shape, np.int8),
              (model("QuantizeLinear", T.FLOAT, T.INT8, shape, [rows], T.INT8, axis=0), {"x": (x, T.FLOAT), "s": (s_ax, T.FLOAT), "z": (zax, T.INT8)}, shape, T.INT8),
              lambda: np.clip(np.rint(x / s_ax[:, None]), -128, 127).astype(np.int8)))
    C.append(("q_i4_block32", 4 * x.size,
              lambda th, out: qlinear.quantize_linear(x, s_bk, axis=1, block_size=32, output_dtype="int4", packed=True,
                                                      out=out, threads=th), np.empty(x.size // 2, np.uint8),
              (model("QuantizeLinear", T.FLOAT, T.INT4, shape, [rows, cols // 32], axis=1, block_size=32, output_dtype=T.INT4),
               {"x": (x, T.FLOAT), "s": (s_bk, T.FLOAT)}, shape, T.INT4),
              lambda: np.clip(np.rint(x.reshape(rows, -1, 32) / s_bk[:, :, None]), -8, 7).astype(np.int8)))
    C.append(("dq_u8_tensor", u8.size,
              lambda th, out: qlinear.dequantize_linear(u8, s0, z128, out=out, threads=th), np.empty(shape, np.float32),
              (model("DequantizeLinear", T.UINT8, T.FLOAT, shape, [], T.UINT8), {"x": (u8, T.UINT8), "s": (s0, T.FLOAT), "z": (z128, T.UINT8)}, shape, T.FLOAT),
              lambda: (u8.astype(np.float32) - 128) * s0))
    C.append(("dq_i8_tensor", i8.size,
              lambda th, out: qlinear.dequantize_linear(i8, s0, z0, out=out, threads=th), np.empty(shape, np.float32),
              (model("DequantizeLinear", T.INT8, T.FLOAT, shape, [], T.INT8), {"x": (i8, T.INT8), "s": (s0, T.FLOAT), "z": (z0, T.INT8)}, shape, T.FLOAT),
              lambda: i8.astype(np.float32) * s0))
    C.append(("dq_i8_axis0", i8.size,
              lambda th, out: qlinear.dequantize_linear(i8, s_ax, zax, axis=0, out=out, threads=th), np.empty(shape, np.float32),
              (model("DequantizeLinear", T.INT8, T.FLOAT, shape, [rows], T.INT8, axis=0), {"x": (i8, T.INT8), "s": (s_ax, T.FLOAT), "z": (zax, T.INT8)}, shape, T.FLOAT),
              lambda: i8.astype(np.float32) * s_ax[:, None]))
    C.append(("dq_i4_block32", i4.size // 2,
              lambda th, out: qlinear.dequantize_linear(i4p, s_bk, axis=1, block_size=32, out=out, threads=th), np.empty(shape, np.float32),
              (model("DequantizeLinear", T.INT4, T.FLOAT, shape, [rows, cols // 32], axis=1, block_size=32), {"x": (i4, T.INT4), "s": (s_bk, T.FLOAT)}, shape, T.FLOAT),
              lambda: (i4.astype(np.int8).reshape(rows, -1, 32).astype(np.float32) * s_bk[:, :, None])))
    return C


def measure(row, args, copiers) -> dict:
    """Best times of one row: qlinear, ORT and np.copyto at every thread count in the same rounds, then NumPy."""
    name, nbytes, qfn, out, (m, feeds, oshape, otype), npfn = row
    fns = {}
    for th in args.threads:
        r = OrtRunner(m, feeds, oshape, otype, th, args.ort_spin)
        r()
        ours = qfn(th, out)
        ours_bytes = (ours.data if isinstance(ours, qlinear.PackedTensor) else ours).tobytes()
        assert ours_bytes == r.result_bytes(), f"{name}: qlinear output differs from ORT"
        fns[("q", th)] = partial(qfn, th, out)
        fns[("o", th)] = r
        fns[("c", th)] = copiers[th]
    best = best_interleaved(fns, args.reps)
    if not args.no_numpy:
        best["np"] = best_interleaved({"np": npfn}, max(1, args.reps // 5))["np"]
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log2n", type=int, default=26)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--only", nargs="*", help="row names to run")
    ap.add_argument("--no-numpy", action="store_true")
    ap.add_argument("--simd", default="auto", help="qlinear kernel entry: auto (the CPU's best), avx512, avx2, scalar")
    ap.add_argument("--ort-spin", action="store_true", help="let ORT's idle pool threads spin (its default)")
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall",
                    help="thread: CPU time of the calling thread (--threads 1 only; time taken by other processes on a "
                         "busy machine is not counted, memory contention still is)")
    args = ap.parse_args()
    if args.clock == "thread":
        if args.threads != [1]:
            ap.error("--clock thread measures the calling thread only: use it with --threads 1")
        global CLOCK
        CLOCK = time.thread_time
    n = 1 << args.log2n
    native.set_simd(args.simd)
    load0 = open("/proc/loadavg").read().split()[:3]
    pool = ThreadPoolExecutor(max(args.threads))
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    copiers = {th: Copier(n, th, pool, src, dst) for th in args.threads}
    rows = []
    for row in configs(n):
        if not args.only or row[0] in args.only:
            rows.append((row[0], row[1] + row[3].nbytes, row[1], measure(row, args, copiers)))
            print(f"# measured {row[0]}", file=sys.stderr, flush=True)
    copy = {t: max(copiers[t].gbs(b[("c", t)]) for *_, b in rows) for t in args.threads}
    print(f"# qlinear {qlinear.__version__} (kernel entry: {native.simd()}), onnxruntime {ort.__version__} "
          f"(idle threads {'spin' if args.ort_spin else 'do not spin'}), numpy {np.__version__}; {os.cpu_count()} cores; "
          f"N = 2^{args.log2n}; {args.clock} clock; loadavg before {load0}, after {open('/proc/loadavg').read().split()[:3]}")
    print(f"# CPU: {cpu_description()}")
    print("# memory limit: np.copyto of N float32, read + write, best over all rounds: "
          + ", ".join(f"{t}t {copy[t]:.1f} GB/s" for t in args.threads))
    print(f"# best of {args.reps} interleaved rounds; GB/s of the input read (ms per call); ratio = ORT time / qlinear "
          f"time (> 1: qlinear faster); 'of copy' = qlinear's input + output bytes per second / the copy figure")
    heads = [f"qlinear {t}t" for t in args.threads] + [f"ORT {t}t" for t in args.threads] + ([] if args.no_numpy else ["numpy"])
    heads += [f"ratio {t}t" for t in args.threads] + [f"of copy {t}t" for t in args.threads]
    print("| config | " + " | ".join(heads) + " |")
    print("|---|" + "---|" * len(heads))
    for name, moved, nbytes, best in rows:
        cells = [f"{nbytes / best[(k, t)] / 1e9:.2f} ({best[(k, t)] * 1e3:.1f} ms)" for k in "qo" for t in args.threads]
        if not args.no_numpy:
            cells.append(f"{nbytes / best['np'] / 1e9:.2f}")
        cells += [f"{best[('o', t)] / best[('q', t)]:.2f}x" for t in args.threads]
        cells += [f"{moved / best[('q', t)] / 1e9 / copy[t]:.0%}" for t in args.threads]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("# outputs bit-identical with ORT (checked before timing)")


if __name__ == "__main__":
    main()
