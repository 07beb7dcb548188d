"""Behaviour hashes: sha256 of every output file of a fixed, deterministic set of quantization runs.

Record them before moving code and compare after: the same runs must give byte-identical files, except where a
deliberate fix changes them (list those in the change's closing note).

    PYTHONPATH=src python benchmarks/output_hashes.py --write benchmarks/output_hashes_base.json
    PYTHONPATH=src python benchmarks/output_hashes.py --compare benchmarks/output_hashes_base.json
    PYTHONPATH=src python benchmarks/output_hashes.py --only 'example/*' --compare benchmarks/output_hashes_base.json
    PYTHONPATH=src python benchmarks/output_hashes.py --slow --compare ...   # also the slow runs (EfficientNet AdaRound)

Every run goes through the public API the README documents: ``qlinear.quantize(model, data, config)`` then
``.save(outdir, report=False)`` (``report.*`` hold timings, so they are never hashed). A run that raises (an API
renamed on a later branch, a new error) is recorded as ``{"__error__": "..."}`` and the others still run.
Models: the bundled example (``qlinear.examples``), EfficientNet-Lite0 from the shared folder with a few ImageNet
images (skipped, and reported so, when absent), and two small transformer graphs built here with ``onnx.helper``
(a copy of ``tests/helpers/tiny_models.py`` frozen at the baseline, so that test changes cannot move the hashes).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHARED = Path(os.environ.get("QLINEAR_SHARED", "/work/shared"))
EFFNET = SHARED / "models" / "efficientnet-lite0.onnx"
IMAGES = SHARED / "data" / "imagenet-dev"
N_IMAGES = 12
ERROR = "__error__"
SKIPPED = "__skipped__"


# ---------------------------------------------------------------------------------------------------------------
# Synthetic transformer graphs (deterministic; frozen copy of tests/helpers/tiny_models.py at the baseline)
# ---------------------------------------------------------------------------------------------------------------

def tiny_lm(d: int = 72, ff: int = 96, vocab: int = 40, *, seed: int = 0) -> onnx.ModelProto:
    """Decoder-like: ``input_ids`` -> Gather(E) -> MLP (MatMul, SiLU, MatMul) + residual -> MatMul -> tied lm_head
    MatMul(h, Transpose(E)) -> ``logits``."""
    rng = np.random.default_rng(seed)
    f = np.float32
    E = (rng.standard_normal((vocab, d)) * 0.5).astype(f)
    W1 = (rng.standard_normal((d, ff)) / np.sqrt(d)).astype(f)
    W2 = (rng.standard_normal((ff, d)) / np.sqrt(ff)).astype(f)
    W3 = (rng.standard_normal((d, d)) / np.sqrt(d)).astype(f)
    N = helper.make_node
    nodes = [
        N("Gather", ["embed.weight", "input_ids"], ["h0"], name="embedding"),
        N("MatMul", ["h0", "mlp.up.weight"], ["u"], name="up_proj"),
        N("Sigmoid", ["u"], ["sig"], name="sig"),
        N("Mul", ["u", "sig"], ["act"], name="silu"),
        N("MatMul", ["act", "mlp.down.weight"], ["dn"], name="down_proj"),
        N("Add", ["h0", "dn"], ["h1"], name="residual"),
        N("MatMul", ["h1", "attn.o.weight"], ["h2"], name="o_proj"),
        N("Transpose", ["embed.weight"], ["embed_T"], name="lm_head_T", perm=[1, 0]),
        N("MatMul", ["h2", "embed_T"], ["logits"], name="lm_head"),
    ]
    g = helper.make_graph(
        nodes, "tiny_lm",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "S", vocab])],
        [numpy_helper.from_array(E, "embed.weight"), numpy_helper.from_array(W1, "mlp.up.weight"),
         numpy_helper.from_array(W2, "mlp.down.weight"), numpy_helper.from_array(W3, "attn.o.weight")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def lm_data(n: int = 16, seq: int = 12, vocab: int = 40, seed: int = 2) -> dict[str, np.ndarray]:
    return {"input_ids": np.random.default_rng(seed).integers(0, vocab, (n, seq)).astype(np.int64)}


def _encoder_inits(d: int, ff: int, vocab: int, seed: int) -> dict[str, onnx.TensorProto]:
    rng = np.random.default_rng(seed)
    f = np.float32
    inits: dict[str, onnx.TensorProto] = {}

    def c(name: str, a: Any) -> None:
        inits[name] = numpy_helper.from_array(np.asarray(a), name)

    c("word", (rng.standard_normal((vocab, d)) * 0.5).astype(f))
    c("pos", (rng.standard_normal((64, d)) * 0.1).astype(f))
    gamma = np.ones(d, f)
    gamma[[3, 17]] = 12.0  # outlier channels (SmoothQuant moves them into the weights)
    c("ln1.g", gamma)
    c("ln1.b", np.zeros(d, f))
    c("ln2.g", gamma)
    c("ln2.b", (rng.standard_normal(d) * 0.1).astype(f))
    for nm, shp in (("Wq", (d, d)), ("Wk", (d, d)), ("Wv", (d, d)), ("Wo", (d, d)), ("W1", (d, ff)), ("W2", (ff, d))):
        c(nm, (rng.standard_normal(shp) / np.sqrt(shp[0])).astype(f))
    for nm, k in (("bo", d), ("b1", ff), ("b2", d)):
        c(nm, (rng.standard_normal(k) * 0.1).astype(f))
    for nm, v in (("zero_i", np.array(0, np.int64)), ("one_i", np.array(1, np.int64)),
                  ("axis1", np.array([1], np.int64)), ("scale", np.array(1 / np.sqrt(d), f)),
                  ("neg", np.array(-3.4e38, f)), ("zf", np.array(0.0, f)), ("half", np.array(0.5, f)),
                  ("onef", np.array(1.0, f)), ("rsqrt2", np.array(1 / np.sqrt(2), f))):
        c(nm, v)
    c("g3", (1 + rng.random(d)).astype(f))
    c("b3", np.zeros(d, f))
    return inits


def tiny_encoder(d: int = 32, ff: int = 64, vocab: int = 50, *, seed: int = 0) -> onnx.ModelProto:
    """One BERT-like encoder layer: embeddings (position ids from Shape -> Range), LayerNormalization with outlier
    channels, attention with an additive mask before Softmax, residuals, Erf-Gelu FFN, final LayerNormalization."""
    inits = _encoder_inits(d, ff, vocab, seed)
    N = helper.make_node
    nodes = [
        N("Gather", ["word", "input_ids"], ["we"], name="word_emb"),
        N("Shape", ["input_ids"], ["shp"], name="shape"),
        N("Gather", ["shp", "one_i"], ["seq"], name="seq_len"),
        N("Range", ["zero_i", "seq", "one_i"], ["pos_ids"], name="range"),
        N("Gather", ["pos", "pos_ids"], ["pe"], name="pos_emb"),
        N("Add", ["we", "pe"], ["emb"], name="emb_add"),
        N("LayerNormalization", ["emb", "ln1.g", "ln1.b"], ["h"], name="ln1", axis=-1, epsilon=1e-12),
        N("Equal", ["attention_mask", "zero_i"], ["is_pad"], name="mask_eq"),
        N("Unsqueeze", ["is_pad", "axis1"], ["is_pad3"], name="mask_unsq"),
        N("Where", ["is_pad3", "neg", "zf"], ["mask_add"], name="mask_where"),
        N("MatMul", ["h", "Wq"], ["q"], name="q_proj"),
        N("MatMul", ["h", "Wk"], ["k"], name="k_proj"),
        N("MatMul", ["h", "Wv"], ["v"], name="v_proj"),
        N("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
        N("Mul", ["q", "scale"], ["qs"], name="q_scale"),
        N("MatMul", ["qs", "kt"], ["scores"], name="qk"),
        N("Add", ["scores", "mask_add"], ["scores_m"], name="mask_apply"),
        N("Softmax", ["scores_m"], ["probs"], name="softmax", axis=-1),
        N("MatMul", ["probs", "v"], ["ctx"], name="pv"),
        N("MatMul", ["ctx", "Wo"], ["o0"], name="o_proj"),
        N("Add", ["bo", "o0"], ["o"], name="o_bias"),
        N("Add", ["o", "h"], ["r1"], name="res1"),
        N("LayerNormalization", ["r1", "ln2.g", "ln2.b"], ["h2"], name="ln2", axis=-1, epsilon=1e-12),
        N("MatMul", ["h2", "W1"], ["f0"], name="ffn1"),
        N("Add", ["b1", "f0"], ["f1"], name="ffn1_bias"),
        N("Mul", ["f1", "rsqrt2"], ["g0"], name="gelu_div"),
        N("Erf", ["g0"], ["g1"], name="gelu_erf"),
        N("Add", ["g1", "onef"], ["g2"], name="gelu_add"),
        N("Mul", ["f1", "g2"], ["g3m"], name="gelu_mul"),
        N("Mul", ["g3m", "half"], ["gelu"], name="gelu_half"),
        N("MatMul", ["gelu", "W2"], ["f2"], name="ffn2"),
        N("Add", ["b2", "f2"], ["f3"], name="ffn2_bias"),
        N("Add", ["f3", "h2"], ["r2"], name="res2"),
        N("LayerNormalization", ["r2", "g3", "b3"], ["last_hidden_state"], name="ln3", axis=-1, epsilon=1e-12),
    ]
    g = helper.make_graph(nodes, "tiny_encoder",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "S"]),
                           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["B", "S"])],
                          [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["B", "S", d])],
                          list(inits.values()))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def encoder_data(n: int = 64, seq: int = 16, vocab: int = 50, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (n, seq)).astype(np.int64)
    lens = rng.integers(4, seq + 1, n)
    mask = (np.arange(seq)[None, :] < lens[:, None]).astype(np.int64)
    return {"input_ids": ids * mask, "attention_mask": mask}


# ---------------------------------------------------------------------------------------------------------------
# Models and data
# ---------------------------------------------------------------------------------------------------------------

def _example() -> tuple[Any, Any]:
    from qlinear.examples import DATA, MODEL

    return MODEL, DATA  # paths, as a user passes them (40 samples of 3x24x24)


def _effnet(tmp: Path) -> tuple[Any, Any] | None:
    images = sorted(p for p in IMAGES.glob("*.jpg"))[:N_IMAGES] if IMAGES.is_dir() else []
    if not EFFNET.is_file() or len(images) < N_IMAGES:
        return None
    folder = tmp / "effnet-images"  # a folder of images, as a user passes it (labels from the file names)
    folder.mkdir(exist_ok=True)
    for p in images:
        if not (folder / p.name).exists():
            shutil.copyfile(p, folder / p.name)
    return EFFNET, folder


MODELS: dict[str, Callable[[Path], tuple[Any, Any] | None]] = {
    "example": lambda tmp: _example(),
    "effnet": _effnet,
    "encoder": lambda tmp: (tiny_encoder(), encoder_data(n=48)),
    "lm": lambda tmp: (tiny_lm(), lm_data(n=16)),
}


# ---------------------------------------------------------------------------------------------------------------
# Runs: name -> (model, config, save options). Every config explicit.
# ---------------------------------------------------------------------------------------------------------------

EX = {"calibration_samples": 32, "evaluation_samples": 8}  # the example has 40 samples
EFF = {"calibration_samples": N_IMAGES, "evaluation_samples": 0}
ENC = {"calibration_samples": 40, "evaluation_samples": 8}
WO = {"activation_type": "float", "calibration_samples": 12, "evaluation_samples": 4}

RUNS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # W8A8 targets x granularities on the bundled example
    "example/ort-per-channel": ("example", {**EX, "target": "ort", "weights": "per-channel"}, {}),
    "example/ort-per-tensor": ("example", {**EX, "target": "ort", "weights": "per-tensor"}, {}),
    "example/ort-per-block": ("example", {**EX, "target": "ort", "weights": "per-block", "block_size": 8}, {}),
    "example/tflite-per-channel": ("example", {**EX, "target": "tflite", "weights": "per-channel"}, {}),
    "example/tflite-per-tensor": ("example", {**EX, "target": "tflite", "weights": "per-tensor"}, {}),
    "example/tflite-per-tensor-no-equalize": ("example", {**EX, "target": "tflite", "weights": "per-tensor",
                                                          "equalize": False}, {}),
    "example/tflite-int16-activations": ("example", {**EX, "target": "tflite", "activation_type": "int16"}, {}),
    "example/qnn-per-channel": ("example", {**EX, "target": "qnn", "weights": "per-channel"}, {}),
    "example/qnn-per-tensor": ("example", {**EX, "target": "qnn", "weights": "per-tensor"}, {}),
    "example/qnn-lpbq-int4": ("example", {**EX, "target": "qnn", "weights": "lpbq", "weight_type": "int4",
                                          "block_size": 8}, {}),
    "example/ort-int4-weights": ("example", {**EX, "weight_type": "int4"}, {}),
    "example/ort-int16-activations": ("example", {**EX, "activation_type": "int16"}, {}),
    "example/ort-uint16-activations-asym-weights": ("example", {**EX, "activation_type": "uint16",
                                                                "weight_symmetric": False}, {}),
    "example/ort-sqnr-mse-no-bias-correction": ("example", {**EX, "weight_method": "sqnr", "activation_method": "mse",
                                                            "bias_correction": False}, {}),
    "example/ort-per-tensor-no-equalize": ("example", {**EX, "weights": "per-tensor", "equalize": False}, {}),
    "example/ort-overrides": ("example", {**EX, "overrides": [{"op_type": "Gemm", "role": "weight", "type": "int4"},
                                                               {"name": "dw.weight", "type": "float"}]}, {}),
    "example/ort-adaround": ("example", {**EX, "weight_type": "int4", "weight_method": "adaround",
                                         "adaround_iterations": 20}, {}),
    "example/ort-seqmse": ("example", {**EX, "weight_type": "int4", "weight_method": "seqmse"}, {}),
    "example/ort-repair": ("example", {**EX, "weight_type": "int4", "repair_samples": 10,
                                       "accuracy_target": "top1_agreement>=0.99"}, {}),
    "example/ort-repair-raises-two": ("example", {**EX, "weight_type": "int4", "repair_samples": 10,
                                                  "accuracy_target": "sqnr_db>=35"}, {}),
    "example/ort-repair-unmet": ("example", {**EX, "weight_type": "int4", "repair_samples": 10,
                                             "accuracy_target": "sqnr_db>=60"}, {}),
    "example/ort-repair-to-float": ("example", {**EX, "activation_type": "int16", "repair_samples": 10,
                                                "accuracy_target": "sqnr_db>=90"}, {}),
    "example/ort-repair-adaround": ("example", {**EX, "weight_type": "int4", "weight_method": "adaround",
                                                "adaround_iterations": 20, "repair_samples": 10,
                                                "accuracy_target": "sqnr_db>=40"}, {}),
    "example/qnn-repair-seqmse": ("example", {**EX, "target": "qnn", "weight_type": "int4", "weight_method": "seqmse",
                                              "repair_samples": 10, "accuracy_target": "cosine_mean>=0.999"}, {}),
    "example/ort-encodings-1.0.0": ("example", {**EX}, {"encodings_version": "1.0.0"}),
    "example/qnn-encodings-0.6.1": ("example", {**EX, "target": "qnn"}, {"encodings_version": "0.6.1"}),
    # EfficientNet-Lite0 (shared model, a few images)
    "effnet/ort-per-channel": ("effnet", {**EFF, "weights": "per-channel"}, {}),
    "effnet/ort-per-tensor": ("effnet", {**EFF, "weights": "per-tensor"}, {}),
    "effnet/tflite-per-channel": ("effnet", {**EFF, "target": "tflite", "weights": "per-channel"}, {}),
    "effnet/ort-int4-adaround": ("effnet", {**EFF, "weight_type": "int4", "weight_method": "adaround",
                                            "adaround_iterations": 20}, {"slow": True}),
    # transformer encoder W8A8 placement (auto = matmul on target ort, smoothing) and variants
    "encoder/w8a8-auto": ("encoder", {**ENC}, {}),
    "encoder/w8a8-all": ("encoder", {**ENC, "placement": "all"}, {}),
    "encoder/w8a16": ("encoder", {**ENC, "activation_type": "uint16"}, {}),
    "encoder/w8a8-no-smoothing-per-tensor": ("encoder", {**ENC, "smoothing": False, "weights": "per-tensor"}, {}),
    "encoder/qnn-lpbq": ("encoder", {**ENC, "target": "qnn", "weights": "lpbq", "weight_type": "int4",
                                     "block_size": 16}, {}),
    # weight-only on the decoder-like graph
    "lm/wo-rtn-int8-per-channel": ("lm", {**WO, "weight_type": "int8", "weights": "per-channel",
                                          "weight_method": "minmax"}, {}),
    "lm/wo-rtn-int4-per-block": ("lm", {**WO, "weight_type": "int4", "weights": "per-block", "block_size": 32,
                                        "weight_method": "minmax"}, {}),
    "lm/wo-rtn-uint4-asym-per-block": ("lm", {**WO, "weight_type": "uint4", "weights": "per-block", "block_size": 16,
                                              "weight_symmetric": False, "weight_method": "minmax"}, {}),
    "lm/wo-rtn-int4-lpbq": ("lm", {**WO, "weight_type": "int4", "weights": "lpbq", "block_size": 16,
                                   "weight_method": "minmax"}, {}),
    "lm/wo-rtn-int4-qnn": ("lm", {**WO, "target": "qnn", "weight_type": "int4", "weights": "per-block",
                                  "block_size": 32, "weight_method": "minmax"}, {}),
    "lm/wo-rtn-int2-per-block": ("lm", {**WO, "weight_type": "int2", "weights": "per-block", "block_size": 16,
                                        "weight_method": "minmax"}, {}),
    "lm/wo-mse-int4-per-block": ("lm", {**WO, "weight_type": "int4", "weights": "per-block", "block_size": 32,
                                        "weight_method": "mse"}, {}),
    "lm/wo-gptq-int4-per-block": ("lm", {**WO, "weight_type": "int4", "weights": "per-block", "block_size": 32,
                                         "weight_method": "gptq"}, {}),
    "lm/wo-gptq-int4-per-channel-no-act-order": ("lm", {**WO, "weight_type": "int4", "weights": "per-channel",
                                                        "weight_method": "gptq", "gptq_act_order": False}, {}),
    "lm/wo-rtn-int4-matmulnbits": ("lm", {**WO, "weight_type": "int4", "weights": "per-block", "block_size": 32,
                                          "weight_method": "minmax", "output_format": "matmulnbits"}, {}),
    "lm/wo-gptq-int8-matmulnbits": ("lm", {**WO, "weight_type": "int8", "weights": "per-block", "block_size": 16,
                                           "weight_method": "gptq", "output_format": "matmulnbits"}, {}),
    "lm/wo-rtn-no-data-excluded-head": ("lm", {"activation_type": "float", "weight_type": "int4",
                                               "weights": "per-block", "block_size": 32, "weight_method": "minmax",
                                               "exclude_nodes": ["lm_head"]}, {"no_data": True}),
    "encoder/wo-rtn-int4-per-block": ("encoder", {**WO, "weight_type": "int4", "weights": "per-block",
                                                  "block_size": 16, "weight_method": "minmax"}, {}),
    # the command line (``python -m qlinear quantize``): config {} and the options in ``cli``
    "cli/example-default": ("example", {}, {"cli": ["--calibration-samples", "32", "--evaluation-samples", "8"]}),
    "cli/example-tflite-mse-1.0.0": ("example", {}, {"cli": [
        "--target", "tflite", "--weights", "per-channel", "--calibration", "mse", "--encodings-version", "1.0.0",
        "--calibration-samples", "32", "--evaluation-samples", "8"]}),
    "cli/lm-weight-only-gptq-matmulnbits": ("lm", {}, {"cli": [
        "--activation-type", "float", "--weight-type", "int4", "--weights", "per-block", "--block-size", "32",
        "--weight-method", "gptq", "--format", "matmulnbits", "--calibration-samples", "12",
        "--evaluation-samples", "4"]}),
    "cli/lm-weight-only-no-data": ("lm", {}, {"no_data": True, "cli": [
        "--activation-type", "float", "--weight-type", "int4", "--weights", "lpbq", "--block-size", "16"]}),
}


# ---------------------------------------------------------------------------------------------------------------
# Running and hashing
# ---------------------------------------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def hash_folder(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (relative names), except ``report.*``."""
    return {str(p.relative_to(folder)): _sha256(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith("report.")}


class CliError(Exception):
    pass


def _run_cli(key: str, model: Any, data: Any, args: list[str], out: Path, tmp: Path) -> None:
    """``python -m qlinear quantize MODEL [--data DATA] -o OUT --no-report ARGS`` in a fresh process."""
    if isinstance(model, onnx.ModelProto):
        path = tmp / f"{key}.onnx"
        onnx.save(model, path)
        model = path
    cmd = [sys.executable, "-m", "qlinear", "quantize", str(model), "-o", str(out), "--no-report", *args]
    if data is not None:
        if isinstance(data, dict):
            path = tmp / f"{key}.npz"
            np.savez(path, **data)
            data = path
        cmd += ["--data", str(data)]
    # the qlinear this process imported, not whichever is installed: a relative PYTHONPATH (src) does not hold in
    # cwd=tmp, and the CLI runs then measured the installed package (another checkout's, after its CI install)
    import qlinear

    src = str(Path(qlinear.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env)
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or [""]
        raise CliError(f"exit status {r.returncode}: {last[0]}")


def run_one(name: str, tmp: Path, cache: dict[str, Any]) -> dict[str, str]:
    """Quantize and save one run; its file hashes, or ``{__error__: ...}`` / ``{__skipped__: ...}``."""
    import qlinear

    model_key, config, save_opts = RUNS[name]
    if model_key not in cache:
        cache[model_key] = MODELS[model_key](tmp)
    src = cache[model_key]
    if src is None:
        return {SKIPPED: f"{model_key}: model or data not found under {SHARED}"}
    model, data = src
    opts = dict(save_opts)
    opts.pop("slow", None)
    if opts.pop("no_data", False):
        data = None
    out = tmp / "out" / name.replace("/", "__")
    try:
        if "cli" in opts:
            _run_cli(model_key, model, data, opts["cli"], out, tmp)
        else:
            qm = qlinear.quantize(model, data, dict(config))
            qm.save(out, report=False, **opts)
    except Exception as e:  # noqa: BLE001 - a failing run is a result, not a crash
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print(f"        {name}: raised at {tb.filename}:{tb.lineno}", file=sys.stderr)
        return {ERROR: f"{type(e).__name__}: {e}"}  # no line number: moving code must not count as a change
    return hash_folder(out)


def run_all(pattern: str, slow: bool = False) -> dict[str, dict[str, str]]:
    names = [n for n in RUNS if fnmatch.fnmatch(n, pattern) and (slow or not RUNS[n][2].get("slow"))]
    results: dict[str, dict[str, str]] = {}
    cache: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="qlinear-hashes-") as d:
        for name in names:
            t0 = time.perf_counter()
            results[name] = run_one(name, Path(d), cache)
            status = next((k for k in (ERROR, SKIPPED) if k in results[name]), f"{len(results[name])} files")
            extra = f": {results[name][status]}" if status in (ERROR, SKIPPED) else ""
            print(f"{time.perf_counter() - t0:6.1f} s  {name}  {status}{extra}", file=sys.stderr, flush=True)
    return results


def compare(base: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> list[str]:
    """One line per run or file that differs (only the runs present in ``now``)."""
    lines = []
    for name, files in now.items():
        old = base.get(name)
        if old is None:
            lines.append(f"{name}: not in the baseline")
            continue
        for k in sorted(set(old) | set(files)):
            if old.get(k) != files.get(k):
                a = old.get(k, "(absent)")
                b = files.get(k, "(absent)")
                lines.append(f"{name}: {k}: {a[:16] if k not in (ERROR, SKIPPED) else a} -> "
                             f"{b[:16] if k not in (ERROR, SKIPPED) else b}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", metavar="FILE", help="write the hashes to FILE (JSON)")
    ap.add_argument("--compare", metavar="FILE", help="compare with FILE; exit 1 if any run/file differs")
    ap.add_argument("--only", default="*", metavar="GLOB", help="only the runs whose name matches (e.g. 'lm/*')")
    ap.add_argument("--slow", action="store_true", help="also the slow runs (EfficientNet AdaRound, ~1 min)")
    ap.add_argument("--list", action="store_true", help="list the runs and their configs")
    a = ap.parse_args(argv)
    if a.list:
        for n, (m, cfg, opts) in RUNS.items():
            print(f"{n}: {m} {json.dumps(cfg)} {json.dumps(opts) if opts else ''}")
        return 0
    t0 = time.perf_counter()
    now = run_all(a.only, a.slow)
    print(f"{len(now)} runs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    text = json.dumps(now, indent=1, sort_keys=True) + "\n"
    if a.write:
        Path(a.write).write_text(text)
    if not a.write and not a.compare:
        sys.stdout.write(text)
    if a.compare:
        diff = compare(json.loads(Path(a.compare).read_text()), now)
        for line in diff:
            print(line)
        print(f"{len(diff)} differences in {len(now)} runs" if diff else f"all {len(now)} runs identical")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
