"""Every SIMD entry of the compiled kernel (issue 24: AVX-512, AVX2, baseline) computes the same bits.

The kernel picks its entry from the CPU once; ``native.set_simd`` / ``QLINEAR_SIMD`` force a lower one, so each
test below runs every entry this machine has and compares it with the baseline entry, with the NumPy path and
with the peers (ONNX Runtime for every value, onnx.reference where its float-to-int cast is defined).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx_peers import run_ort, run_reference, single_node_model

import qlinear
from qlinear.core import dequantize as dqm
from qlinear.core import granularity as gr
from qlinear.core import native
from qlinear.core import quantize as qm
from qlinear.core.types import qtype

PATHS = [p for p, lvl in native.SIMD_LEVELS.items() if lvl <= native.SIMD_LEVELS[native.simd_supported()]]
INT_OUT = ["uint8", "int8", "uint16", "int16", "uint4", "int4", "uint2", "int2"]
F32 = np.float32


def _on_every_path(fn, *args, **kwargs):
    """{path: bytes of fn(*args, **kwargs)} for every SIMD entry of this CPU, the entry in use restored afterwards."""
    prev = native.simd()
    out = {}
    try:
        for p in PATHS:
            native.set_simd(p)
            out[p] = fn(*args, **kwargs).tobytes()
    finally:
        native.set_simd(prev)
    return out


def _special_inputs() -> np.ndarray:
    """NaN (both signs, a payload), infinities, signed zeros, subnormals, float32 extremes, 2^24 / 2^31 edges, every
    half-way tie k + 0.5 for |k| <= 70000 in steps (exact for scale 0.25) and both float32 neighbours of each."""
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38,
                        3.4028235e38, -3.4028235e38, 2**24, 2**24 + 2, -(2**24) - 2, 2**31, -(2**31), 2**31 + 256,
                        8388607.5, -8388607.5, 4194304.5], F32)
    special = np.concatenate([special, np.array([0x7FC12345, 0xFFA00001], np.uint32).view(F32)])
    k = np.concatenate([np.arange(-300, 301), np.arange(-70000, 70001, 997)]).astype(np.float64)
    ties = ((k + 0.5) * 0.25).astype(F32)
    ties = np.concatenate([ties, np.nextafter(ties, F32(np.inf)), np.nextafter(ties, F32(-np.inf))])
    rng = np.random.default_rng(24)
    bits = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32).view(F32)  # every exponent, NaN payloads
    return np.concatenate([special, ties, bits, (rng.standard_normal(3000) * 400).astype(F32)])


SPECIAL = _special_inputs()
SCALES = [F32(0.25), F32(1.0), F32(0.37), F32(3e-39), F32(7e30)]


@pytest.mark.parametrize("out", INT_OUT)
def test_special_values_equal_baseline_and_onnxruntime(out):
    t = qtype(out)
    zps = sorted({t.qmin, t.qmax, (t.qmin + t.qmax) // 2 + 1, 0 if t.qmin < 0 else 1})
    for s in SCALES:
        for zp in zps:
            z = np.array(zp).astype(t.storage)
            for start in (0, 1, 5):  # unaligned starts reach the masked / scalar heads and tails
                x = SPECIAL[start:]
                got = _on_every_path(qlinear.quantize_linear, x, s, z, output_dtype=out)
                assert len(set(got.values())) == 1, f"{out} s={s} zp={zp}: paths differ: {list(got)}"
            feeds = {"x": SPECIAL, "s": s, "z": z}
            m = single_node_model("QuantizeLinear", feeds, t.onnx_type, [SPECIAL.size])
            ours = qlinear.quantize_linear(SPECIAL, s, z, output_dtype=out)
            assert np.array_equal(ours, run_ort(m, feeds)[0]), f"{out} s={s} zp={zp}: differs from ONNX Runtime"
            with np.errstate(all="ignore"):
                defined = np.isfinite(SPECIAL) & (np.abs(SPECIAL.astype(np.float64) / s) < 2.0**30)
            ref = run_reference(m, feeds)[0]
            assert np.array_equal(ours[defined], ref[defined]), f"{out} s={s} zp={zp}: differs from onnx.reference"
            assert np.all(ours[np.isnan(SPECIAL)] == t.qmin)  # NaN -> the type minimum, as ONNX Runtime


@pytest.mark.parametrize("out", INT_OUT)
def test_special_values_every_granularity(out):
    """Per-axis along rows (one scale per run), along the row (a scale per element) and blocked, zero point or not."""
    t = qtype(out)
    rng = np.random.default_rng(7)
    x = SPECIAL[: (SPECIAL.size // 96) * 96].reshape(-1, 96)
    rows = x.shape[0]
    cases = [
        (rng.choice(SCALES, rows).astype(F32), rng.integers(t.qmin, t.qmax + 1, rows).astype(t.storage), 0, 0),
        (rng.choice(SCALES, 96).astype(F32), rng.integers(t.qmin, t.qmax + 1, 96).astype(t.storage), 1, 0),
        (rng.choice(SCALES, 96).astype(F32), None, 1, 0),
        (rng.choice(SCALES, (rows, 3)).astype(F32), rng.integers(t.qmin, t.qmax + 1, (rows, 3)).astype(t.storage), 1, 32),
        (rng.choice(SCALES, (rows, 14)).astype(F32), None, 1, 7),
    ]
    for s, z, axis, bs in cases:
        g = gr.resolve(x.shape, s.shape, axis, bs)
        ref = qm._quantize_numpy(x, s, z, t, g, np.dtype(F32), True)
        for packed in (False, True) if t.is_subbyte else (False,):
            got = _on_every_path(qlinear.quantize_linear, x, s, z, axis=axis, block_size=bs, output_dtype=out,
                                 packed=packed, threads=2)
            want = qlinear.pack(ref).tobytes() if packed else ref.tobytes()
            for p, v in got.items():
                assert v == want, f"{p}: {out} axis={axis} block={bs} packed={packed}"


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(0, 40), st.sampled_from(INT_OUT), st.booleans(), st.integers(1, 3),
       st.integers(0, 2**32 - 1))
def test_random_runs_equal_numpy_path(n, start, out, stream, threads, seed):
    """Odd lengths and offsets (heads, tails, masks), streaming stores forced on, 1-3 threads; also dequantize."""
    rng = np.random.default_rng(seed)
    t = qtype(out)
    x = ((rng.standard_normal(n + start) * 2.0 ** rng.integers(-3, 12)) + rng.choice([0, 0.5], n + start)).astype(F32)
    x[rng.integers(0, x.size, 2)] = [np.nan, -np.inf]
    x = x[start:]
    s = F32(2.0 ** rng.integers(-4, 3) * rng.choice([1.0, 0.3]))
    z = np.array(rng.integers(t.qmin, t.qmax + 1)).astype(t.storage)
    g = gr.resolve(x.shape, (), 0, 0)
    ref = qm._quantize_numpy(x, s, z, t, g, np.dtype(F32), True)
    ref_dq = dqm._dequantize_numpy(ref, t, s, z, g, qtype("float32"))
    old_q, old_dq = native.set_quantize_stream_min(0 if stream else 1 << 22), native.STREAM_MIN_BYTES
    native.STREAM_MIN_BYTES = 0 if stream else old_dq
    try:
        got_q = _on_every_path(qlinear.quantize_linear, x, s, z, output_dtype=out, threads=threads)
        got_dq = _on_every_path(qlinear.dequantize_linear, ref, s, z, threads=threads)
    finally:
        native.set_quantize_stream_min(old_q)
        native.STREAM_MIN_BYTES = old_dq
    for p in PATHS:
        assert got_q[p] == ref.tobytes(), f"{p}: quantize {out} n={n} start={start}"
        assert got_dq[p] == ref_dq.tobytes(), f"{p}: dequantize {out} n={n} start={start}"


@pytest.mark.parametrize("itype", INT_OUT)
def test_dequantize_every_granularity(itype):
    t = qtype(itype)
    rng = np.random.default_rng(3)
    x = rng.integers(t.qmin, t.qmax + 1, (37, 70)).astype(t.storage)
    cases = [((), 0, 0), ((37,), 0, 0), ((70,), 1, 0), ((37, 3), 1, 32), ((37, 10), 1, 7)]
    for sshape, axis, bs in cases:
        s = rng.uniform(0.01, 3, sshape).astype(F32)
        s.ravel()[:1] = [np.inf]
        for z in (None, rng.integers(t.qmin, t.qmax + 1, sshape).astype(t.storage)):
            g = gr.resolve(x.shape, s.shape, axis, bs)
            ref = dqm._dequantize_numpy(x, t, s, z, g, qtype("float32"))
            for inp in ([x, qlinear.pack(x)] if t.is_subbyte else [x]):
                for stream in (False, True):
                    old = native.STREAM_MIN_BYTES
                    native.STREAM_MIN_BYTES = 0 if stream else old
                    try:
                        got = _on_every_path(qlinear.dequantize_linear, inp, s, z, axis=axis, block_size=bs, threads=2)
                    finally:
                        native.STREAM_MIN_BYTES = old
                    assert set(got.values()) == {ref.tobytes()}, f"{itype} {sshape} block={bs} stream={stream}"


def test_default_entry_is_the_best_the_cpu_has():
    if os.environ.get(native.SIMD_ENV, "auto") == "auto":
        assert native.simd() == native.simd_supported()
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if " avx512bw " in flags and " avx512vl " in flags and " avx512dq " in flags:
        assert native.simd_supported() == "avx512"
    elif " avx2 " in flags and " fma " in flags:
        assert native.simd_supported() == "avx2"


def _run_with_env(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{native.SIMD_ENV: value})
    code = "import numpy as np, qlinear; from qlinear.core import native; " \
           "qlinear.quantize_linear(np.ones(3, np.float32), np.float32(1)); print(native.simd())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_environment_variable_forces_a_path():
    for p in PATHS:
        r = _run_with_env(p)
        assert r.returncode == 0 and r.stdout.strip() == p, r.stderr


def test_environment_variable_refused_when_unknown():
    r = _run_with_env("sse9")
    assert r.returncode != 0
    assert "ConfigError" in r.stderr and "QLINEAR_SIMD='sse9'" in r.stderr and "auto, scalar, avx2, avx512" in r.stderr


def test_set_simd_refuses_unknown_and_unsupported():
    with pytest.raises(qlinear.QlinearError, match="unknown SIMD path"):
        native.set_simd("neon")
    prev = native.simd()
    assert native.set_simd("scalar") == prev
    try:
        assert native.simd() == "scalar"
        if native.simd_supported() != "avx512":
            with pytest.raises(qlinear.QlinearError, match="this CPU supports at most"):
                native.set_simd("avx512")
    finally:
        native.set_simd(prev)
    assert native.set_simd("auto") == prev and native.simd() == native.simd_supported()
    native.set_simd(prev)


@pytest.mark.parametrize("n,threads,align", [(8 << 20, 2, 2), ((8 << 20) + 3, 2, 4), ((8 << 20) - 1, 2, 1), (1000, 3, 2)])
def test_parallel_ranges_cover_each_element_once(n, threads, align):
    """Large inputs go out in PIECES_PER_THREAD pieces per thread, small ones in one range per thread."""
    seen = []
    native.parallel_ranges(lambda a, b: seen.append((a, b)), n, threads, align)
    seen.sort()
    assert seen[0][0] == 0 and seen[-1][1] == n
    assert all(b0 == a1 for (_, b0), (a1, _) in zip(seen, seen[1:]))
    assert all(a % align == 0 for a, _ in seen)
    big = n >= threads * native.PIECES_PER_THREAD * native.PIECE_MIN
    assert len(seen) == (threads * native.PIECES_PER_THREAD if big else threads)
