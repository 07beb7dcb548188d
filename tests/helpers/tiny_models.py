"""Small synthetic transformer graphs built with onnx.helper (no torch): a tied-embedding LM and a BERT-like
encoder block, with the shapes and operator patterns of the exported models (MatMul weights [K, N], a lm_head
through Transpose of the embedding, LayerNormalization or its decomposed form, Gelu via Erf, attention with a
mask added before Softmax, int64 shape subgraphs); and luscinia in small (:func:`lgbm_classifier`)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, inits: dict[str, np.ndarray], opset: int = 18) -> onnx.ModelProto:
    """A checked opset-``opset`` model of ``nodes`` with initializers ``inits`` (name -> array)."""
    g = helper.make_graph(nodes, "t", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def tiny_lm(d: int = 72, ff: int = 96, vocab: int = 40, *, seed: int = 0, dtype=np.float32,
            opset: int = 20) -> onnx.ModelProto:
    """``input_ids [B, S]`` -> Gather(E) -> MLP (MatMul W1 [d, ff], x*Sigmoid(x), MatMul W2 [ff, d]) + residual
    -> Gemm-free head: MatMul(h, Transpose(E)) -> ``logits [B, S, vocab]``. d=72 is not a multiple of 32."""
    rng = np.random.default_rng(seed)
    E = (rng.standard_normal((vocab, d)) * 0.5).astype(dtype)
    W1 = (rng.standard_normal((d, ff)) / np.sqrt(d)).astype(dtype)
    W2 = (rng.standard_normal((ff, d)) / np.sqrt(ff)).astype(dtype)
    W3 = (rng.standard_normal((d, d)) / np.sqrt(d)).astype(dtype)
    ft = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    nodes = [
        helper.make_node("Gather", ["embed.weight", "input_ids"], ["h0"], name="embedding"),
        helper.make_node("MatMul", ["h0", "mlp.up.weight"], ["u"], name="up_proj"),
        helper.make_node("Sigmoid", ["u"], ["sig"], name="sig"),
        helper.make_node("Mul", ["u", "sig"], ["act"], name="silu"),
        helper.make_node("MatMul", ["act", "mlp.down.weight"], ["dn"], name="down_proj"),
        helper.make_node("Add", ["h0", "dn"], ["h1"], name="residual"),
        helper.make_node("MatMul", ["h1", "attn.o.weight"], ["h2"], name="o_proj"),
        helper.make_node("Transpose", ["embed.weight"], ["embed_T"], name="lm_head_T", perm=[1, 0]),
        helper.make_node("MatMul", ["h2", "embed_T"], ["logits"], name="lm_head"),
    ]
    g = helper.make_graph(
        nodes, "tiny_lm",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("logits", ft, ["B", "S", vocab])],
        [numpy_helper.from_array(E, "embed.weight"), numpy_helper.from_array(W1, "mlp.up.weight"),
         numpy_helper.from_array(W2, "mlp.down.weight"), numpy_helper.from_array(W3, "attn.o.weight")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def tiny_gemm(k: int = 48, n: int = 24, *, trans_b: int = 1, seed: int = 1) -> onnx.ModelProto:
    """``x [B, k]`` -> Gemm(W, bias) -> Relu -> ``y``."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["g"], name="fc", transB=trans_b),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "tiny_gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", n])],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def lm_data(n: int = 16, seq: int = 12, vocab: int = 40, seed: int = 2) -> dict[str, np.ndarray]:
    return {"input_ids": np.random.default_rng(seed).integers(0, vocab, (n, seq)).astype(np.int64)}


def tiny_encoder(d: int = 32, ff: int = 64, vocab: int = 50, *, seed: int = 0, outliers: float = 12.0,
                 decomposed_ln: bool = False) -> onnx.ModelProto:
    """A one-layer BERT-like encoder as the legacy exporter writes it: ``input_ids``/``attention_mask [B, S]`` ->
    word + position embeddings (position ids from ``Shape -> Range``) -> LayerNormalization (two outlier channels in
    gamma) -> attention (scores + ``Where(mask == 0, -3.4e38, 0)`` -> Softmax) -> residual -> LayerNormalization ->
    FFN with Erf-Gelu -> residual -> a final normalization (decomposed ReduceMean/Sub/Pow/Sqrt/Div form with
    ``decomposed_ln``) -> ``last_hidden_state [B, S, d]``."""
    rng = np.random.default_rng(seed)
    f = np.float32
    inits = {}

    def c(name, a):
        inits[name] = numpy_helper.from_array(np.asarray(a, dtype=np.asarray(a).dtype), name)
        return name

    c("word", (rng.standard_normal((vocab, d)) * 0.5).astype(f))
    c("pos", (rng.standard_normal((64, d)) * 0.1).astype(f))
    gamma = np.ones(d, f)
    gamma[[3, 17]] = outliers
    c("ln1.g", gamma), c("ln1.b", np.zeros(d, f)), c("ln2.g", gamma), c("ln2.b", (rng.standard_normal(d) * 0.1).astype(f))
    for nm, shp in (("Wq", (d, d)), ("Wk", (d, d)), ("Wv", (d, d)), ("Wo", (d, d)), ("W1", (d, ff)), ("W2", (ff, d))):
        c(nm, (rng.standard_normal(shp) / np.sqrt(shp[0])).astype(f))
    for nm, k in (("bo", d), ("b1", ff), ("b2", d)):
        c(nm, (rng.standard_normal(k) * 0.1).astype(f))
    c("zero_i", np.array(0, np.int64)), c("one_i", np.array(1, np.int64)), c("axis1", np.array([1], np.int64))
    c("scale", np.array(1 / np.sqrt(d), f)), c("neg", np.array(-3.4e38, f)), c("zf", np.array(0.0, f))
    c("half", np.array(0.5, f)), c("onef", np.array(1.0, f)), c("rsqrt2", np.array(1 / np.sqrt(2), f))
    c("g3", (1 + rng.random(d)).astype(f)), c("b3", np.zeros(d, f))
    if decomposed_ln:
        c("two", np.array(2.0, f)), c("eps", np.array(1e-12, f)), c("ax_last", np.array([-1], np.int64))
    N = helper.make_node
    nodes = [
        N("Gather", ["word", "input_ids"], ["we"], name="word_emb"),
        N("Shape", ["input_ids"], ["shp"], name="shape"),
        N("Gather", ["shp", "one_i"], ["seq"], name="seq_len"),
        N("Range", ["zero_i", "seq", "one_i"], ["pos_ids"], name="range"),
        N("Gather", ["pos", "pos_ids"], ["pe"], name="pos_emb"),
        N("Add", ["we", "pe"], ["emb"], name="emb_add"),
        N("LayerNormalization", ["emb", "ln1.g", "ln1.b"], ["h"], name="ln1", axis=-1, epsilon=1e-12),
        # mask: [B, S] int -> bool -> additive [B, 1, S]
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
    ]
    if decomposed_ln:
        nodes += [
            N("ReduceMean", ["r2", "ax_last"], ["mu"], name="ln3_mean"),
            N("Sub", ["r2", "mu"], ["xc"], name="ln3_sub"),
            N("Pow", ["xc", "two"], ["sq"], name="ln3_pow"),
            N("ReduceMean", ["sq", "ax_last"], ["var"], name="ln3_var"),
            N("Add", ["var", "eps"], ["ve"], name="ln3_eps"),
            N("Sqrt", ["ve"], ["sd"], name="ln3_sqrt"),
            N("Div", ["xc", "sd"], ["xn"], name="ln3_div"),
            N("Mul", ["xn", "g3"], ["xg"], name="ln3_gamma"),
            N("Add", ["xg", "b3"], ["last_hidden_state"], name="ln3_beta"),
        ]
    else:
        nodes.append(N("LayerNormalization", ["r2", "g3", "b3"], ["last_hidden_state"], name="ln3", axis=-1,
                       epsilon=1e-12))
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


def lgbm_classifier() -> onnx.ModelProto:
    """luscinia in small: onnxmltools' LightGBM classifier at opset 9 + ai.onnx.ml 1 (qlinear upgrades it to 13), a
    ``TreeEnsembleClassifier`` of two trees over ``x [N, 3]`` whose label goes through Identity and Cast and whose
    probabilities through Identity and ZipMap (a sequence of maps): nothing in it that qlinear quantizes."""
    trees = dict(nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2],
                 nodes_featureids=[0, 0, 0, 1, 0, 0], nodes_values=[0.0, 0.0, 0.0, 0.5, 0.0, 0.0],
                 nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 2, nodes_truenodeids=[1, 0, 0, 1, 0, 0],
                 nodes_falsenodeids=[2, 0, 0, 2, 0, 0], nodes_hitrates=[1.0] * 6,
                 nodes_missing_value_tracks_true=[0] * 6,
                 class_treeids=[0, 0, 0, 1, 1, 1], class_nodeids=[1, 2, 2, 1, 1, 2], class_ids=[0, 1, 2, 1, 2, 0],
                 class_weights=[0.7, 0.4, 0.2, 0.5, 0.3, 0.6])
    nodes = [helper.make_node("TreeEnsembleClassifier", ["x"], ["label_tensor", "probability_tensor"],
                              domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2], post_transform="NONE", **trees),
             helper.make_node("Identity", ["label_tensor"], ["lab"]),
             helper.make_node("Identity", ["probability_tensor"], ["prob"]),
             helper.make_node("Cast", ["lab"], ["label"], to=TensorProto.INT64),
             helper.make_node("ZipMap", ["prob"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2])]
    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    g = helper.make_graph(nodes, "lgbm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                          [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                           helper.make_value_info("probabilities", seq)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 4
    return m
