"""Load/save speed of large AIMET 2.0.0 encoding files.

The file: N per-block int4 weight encodings (blocks of 32) whose shapes are a 1B-parameter decoder's linear layers
scaled down so the file has exactly N entries (default 100,000 entries, 64x256 weights: 512 block scales each,
51.2M scales in total is beyond any JSON tool; see --scales-per-entry). Compared in the same run with the stdlib
``json`` module alone and with ``orjson`` alone (parse / dump of the same document to plain Python objects, without
building or checking any encoding; orjson cannot write ``indent=4`` with ``repr`` floats, so its dump is compact).

qlinear's reader lifts the number arrays out of the text in C (``_jsonfast.c``) and parses only the skeleton; its
writer formats numbers in bulk with orjson and streams the indented layout from C (``qlinear/encodings/_json.py``).

    python benchmarks/bench_encodings.py [--entries 100000] [--scales-per-entry 16]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

try:
    import orjson
except ImportError:  # pragma: no cover
    orjson = None

from qlinear import encodings as E


def build(n: int, per: int) -> E.EncodingSet:
    rng = np.random.default_rng(0)
    rows = max(1, per // 2)
    encs = []
    for i in range(n):
        s = (rng.random((rows, 2), dtype=np.float32) * 0.01 + 1e-4).astype(np.float64)
        encs.append(E.Encoding(f"model.layers.{i // 7}.proj{i % 7}.weight", "int4", scale=s, axis=1, block_size=32,
                               role="param"))
    return E.EncodingSet(tuple(encs), producer={"package": "aimet-onnx", "version": "2.42.0"}, version="2.0.0")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--scales-per-entry", type=int, default=16)
    a = ap.parse_args()
    es = build(a.entries, a.scales_per_entry)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "big.encodings")
        def timed(f):
            t0 = time.perf_counter()
            r = f()
            return r, time.perf_counter() - t0

        _, t_save = timed(lambda: E.save(es, p))
        size = os.path.getsize(p)
        es2, t_load = timed(lambda: E.load(p))
        assert es2.same_parameters(es)
        text = open(p).read()
        doc, t_jl = timed(lambda: json.loads(text))
        _, t_jd = timed(lambda: json.dumps(doc, indent=4, sort_keys=True))
        t_ol = t_od = float("nan")
        if orjson is not None:
            raw = text.encode()
            doc, t_ol = timed(lambda: orjson.loads(raw))
            _, t_od = timed(lambda: orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
    n_scales = a.entries * a.scales_per_entry
    print(f"{a.entries} per-block entries, {n_scales} scales, file {size / 1e6:.1f} MB")
    print("| step | qlinear (s) | stdlib json alone (s) | ratio | orjson alone (s) | ratio |")
    print("|---|---|---|---|---|---|")
    print(f"| load | {t_load:.2f} | {t_jl:.2f} | {t_load / t_jl:.2f}x | {t_ol:.2f} | {t_load / t_ol:.2f}x |")
    print(f"| save | {t_save:.2f} | {t_jd:.2f} | {t_save / t_jd:.2f}x | {t_od:.2f} | {t_save / t_od:.2f}x |")


if __name__ == "__main__":
    main()
