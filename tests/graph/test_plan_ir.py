"""The plan on ``onnx_ir`` (def-use chains, one shape inference) gives the plan the ``GraphIndex`` version gave
(tests/helpers/legacy_plan.py, the code as it was), on protos and on the ir model a pipeline holds."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from legacy_plan import activation_fn_output as legacy_fn_output
from legacy_plan import make_plan as legacy_plan
from onnx import TensorProto, helper
from tiny_models import encoder_data, make_model, tiny_encoder, tiny_gemm, tiny_lm

import qlinear
from qlinear.examples import MODEL as EXAMPLE_MODEL
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.model import GraphIndex
from qlinear.graph.passes.equalize import Equalize
from qlinear.graph.passes.fold_batchnorm import FoldBatchNorm
from qlinear.graph.plan import activation_fn_output, make_plan

OPTIONS = [dict(placement=p, target=t, **kw) for p in ("all", "matmul") for t in ("tflite", "ort")
           for kw in ({}, {"quantize_outputs": False}, {"exclude_op_types": ("Add", "Relu")})]


def _encoder(layers: int, seed: int = 0) -> onnx.ModelProto:
    """A stack of BERT-like layers (LayerNormalization, Q/K/V MatMul+Add, Transpose, scores MatMul, Mul, Softmax,
    context MatMul, output MatMul+Add, residual, LayerNormalization, FFN MatMul+Add, Gelu, MatMul+Add, residual),
    hidden 16, FFN 32, sequence 8, opset 20."""
    rng = np.random.default_rng(seed)
    h, f = 16, 32
    inits: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def w(name, *shape):
        inits[name] = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        return name

    def node(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], name=f"{out}_{op}", **kw))
        return out

    x = "x"
    for i in range(layers):
        p = f"l{i}_"
        ln = node("LayerNormalization", [x, w(p + "g", h), w(p + "b", h)], p + "ln", axis=-1)
        qkv = [node("Add", [node("MatMul", [ln, w(p + k + "w", h, h)], p + k + "mm"), w(p + k + "bias", h)], p + k)
               for k in "qkv"]
        kt = node("Transpose", [qkv[1]], p + "kt", perm=[0, 2, 1])
        s = node("Mul", [node("MatMul", [qkv[0], kt], p + "s0"), w(p + "scale", 1)], p + "s")
        ctx = node("MatMul", [node("Softmax", [s], p + "pr", axis=-1), qkv[2]], p + "ctx")
        o = node("Add", [node("MatMul", [ctx, w(p + "ow", h, h)], p + "omm"), w(p + "ob", h)], p + "o")
        r = node("Add", [x, o], p + "r")
        ln2 = node("LayerNormalization", [r, w(p + "g2", h), w(p + "b2", h)], p + "ln2", axis=-1)
        f1 = node("Gelu", [node("Add", [node("MatMul", [ln2, w(p + "f1", h, f)], p + "f1mm"), w(p + "f1b", f)],
                                p + "f1a")], p + "gelu")
        f2 = node("Add", [node("MatMul", [f1, w(p + "f2", f, h)], p + "f2mm"), w(p + "f2b", h)], p + "f2a")
        x = node("Add", [r, f2], p + "out")
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, h])],
                      [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, h])], inits, opset=20)


def _models(shared_dir):
    out = {"example": onnx.load(str(EXAMPLE_MODEL)), "encoder": _encoder(3), "tiny_encoder": tiny_encoder(),
           "tiny_encoder_decomposed": tiny_encoder(decomposed_ln=True), "tiny_lm": tiny_lm(), "gemm": tiny_gemm()}
    eff = shared_dir / "models" / "efficientnet-lite0.onnx"
    out["efficientnet"] = onnx.load(str(eff))
    return out


def _with_norm_rule(old, m: onnx.ModelProto, target: str):
    """The legacy plan with the rule added since: a decomposed normalization's statistics stay float (ort, tflite)."""
    from qlinear.graph.norm_stats import norm_statistics

    stats = norm_statistics(list(to_ir(m).graph)) if target in ("ort", "tflite") else set()
    new = dataclasses.replace(old, activations=[t for t in old.activations if t not in stats],
                              skipped=dict(old.skipped))
    for t in stats:   # decided before the placement, after the other reasons
        if t in old.activations or old.skipped.get(t, "").startswith("placement matmul"):
            new.skipped[t] = "a normalization's statistic (mean, variance, square root): left in float"
    return new


def test_ir_plan_equals_the_graphindex_plan(shared_dir):
    for name, m in _models(shared_dir).items():
        model = to_ir(m)
        for kw in OPTIONS:
            old = _with_norm_rule(legacy_plan(m, **kw), m, kw["target"])   # (the legacy plan had no float chains)
            assert make_plan(m, **kw, float_chains=False) == old, (name, kw)
            assert make_plan(model, **kw, float_chains=False) == old, (name, kw)
        assert old.activations or old.weights, name
        names = [o for n in m.graph.node for o in n.output]
        g = GraphIndex.build(m, infer_shapes=False)
        assert [activation_fn_output(model, t) for t in names] == [legacy_fn_output(g, t) for t in names], name


def test_ir_plan_after_passes_equals_the_plan_of_their_proto(shared_dir):
    """The pipeline plans the ir model its passes rewrote (uses added by the passes come last in ``Value.uses()``):
    the same plan as the proto written from it."""
    m = onnx.load(str(shared_dir / "models" / "efficientnet-lite0.onnx"))
    model = to_ir(m)
    FoldBatchNorm()(model)
    assert Equalize(clips=True)(model).modified
    proto = to_proto(model)
    for kw in OPTIONS[:3]:   # target tflite: on ort, the per-channel clips CLE writes no longer fuse (the legacy plan
        # fused them; tests/graph/test_unfused_clamps.py)
        assert make_plan(model, **kw, float_chains=False) == legacy_plan(proto, **kw)


def test_plan_builds_no_graphindex(monkeypatch, shared_dir):
    def refuse(*a, **k):
        raise AssertionError("GraphIndex.build called")

    m = tiny_encoder()
    monkeypatch.setattr(GraphIndex, "build", classmethod(refuse))
    assert make_plan(m, placement="matmul").activations
    assert make_plan(to_ir(m), placement="matmul").activations
    assert activation_fn_output(to_ir(m), "gelu")


def test_subgraph_uses_do_not_count_as_consumers():
    """A Conv output read by Relu and, as an outer-scope name, inside an If branch: one main-graph consumer, fused
    with the Relu (as before: the main graph's consumers only)."""
    then_out = helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 3, 4, 4])
    then_g = helper.make_graph([helper.make_node("Identity", ["c"], ["t"])], "then", [], [then_out])
    else_g = helper.make_graph([helper.make_node("Identity", ["r"], ["t"])], "else", [], [then_out])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceSum", ["r"], ["s"], name="sum", keepdims=0),
             helper.make_node("Cast", ["s"], ["b"], name="cast", to=TensorProto.BOOL),
             helper.make_node("If", ["b"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    m = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])],
                   {"w": np.ones((3, 2, 1, 1), np.float32)})
    old, new = legacy_plan(m), make_plan(to_ir(m))
    assert new == old and new.skipped["c"] == "fused with the following Relu"


def test_pipeline_plan_is_the_graphindex_plan():
    """``quantize`` plans the ir model its rewrites (smoothing here) left: the plan of the reference model it writes."""
    qm = qlinear.quantize(tiny_encoder(), encoder_data(n=8), {"target": "ort", "calibration_samples": 8})
    assert any(n.startswith("smoothed") for n in qm.notes)
    got = dataclasses.replace(qm.plan, concats=[dataclasses.replace(c, ranges=[]) for c in qm.plan.concats])
    assert got == legacy_plan(qm.reference_model, placement="matmul", target="ort")


@pytest.mark.parametrize("raw", [False, True])
def test_weight_axes_follow_the_first_consumer_in_node_order(raw):
    """A weight read by a Gemm (transB=1: channel axis 0) then a MatMul (axis 1): the Gemm, first in node order,
    decides, also when a rewrite added the Gemm's use last."""
    nodes = [helper.make_node("Gemm", ["x", "w"], ["a"], name="gemm", transB=1),
             helper.make_node("MatMul", ["x", "w"], ["b"], name="mm"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    m = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                   {"w": np.arange(16, dtype=np.float32).reshape(4, 4)})
    model = to_ir(m)
    if raw:  # the Gemm's use of w re-added after the MatMul's
        gemm = next(n for n in model.graph if n.name == "gemm")
        w = gemm.inputs[1]
        gemm.replace_input_with(1, None)
        gemm.replace_input_with(1, w)
    spec = [s for s in make_plan(model).weights if s.node == "gemm"][0]
    assert (spec.channel_axis, spec.block_axis) == (0, 1) == tuple(
        (s.channel_axis, s.block_axis) for s in legacy_plan(m).weights if s.node == "gemm")[0]


def _one_hot_classifier() -> onnx.ModelProto:
    """``bytes [batch, 8]`` (int64) -> one-hot ``[batch, 8, 16]`` (Equal against 0..15, Cast), times ``W`` -> Relu
    -> plus an additive mask made from the same bytes (``(bytes == 0) * -1e4``) -> times ``W2``: magika's shape
    (jax2tf's one_hot), where everything after the first layer used to read as a mask and stayed float."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Unsqueeze", ["bytes", "ax"], ["b3"]),
             helper.make_node("Equal", ["b3", "classes"], ["eq"]),
             helper.make_node("Cast", ["eq"], ["one_hot"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["one_hot", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Equal", ["b3", "zero"], ["pad"]), helper.make_node("Cast", ["pad"], ["padf"],
                                                                              to=TensorProto.FLOAT),
             helper.make_node("Mul", ["padf", "neg"], ["mask"]), helper.make_node("Add", ["r", "mask"], ["rm"]),
             helper.make_node("MatMul", ["rm", "W2"], ["logits"])]
    return make_model(nodes, [helper.make_tensor_value_info("bytes", TensorProto.INT64, ["batch", 8])],
                      [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 8, 4])],
                      {"ax": np.array([2], np.int64), "classes": np.arange(16, dtype=np.int64),
                       "zero": np.array([0], np.int64), "neg": np.array(-1e4, np.float32),
                       "W": (rng.standard_normal((16, 12)) / 2).astype(np.float32),
                       "W2": (rng.standard_normal((12, 4)) / 2).astype(np.float32)})


def test_a_weighted_layer_over_a_one_hot_input_makes_data():
    m = _one_hot_classifier()
    plan = make_plan(m, placement="all", target="ort")
    assert "h" in plan.activations or "r" in plan.activations   # the first layer's output is data (fused Relu)
    assert "mask" in plan.skipped["mask"]                      # the mask itself stays float, as before
    assert "attention mask" in plan.skipped["rm"]              # and the sum it goes into, as before
    assert "one_hot" not in plan.activations                   # a 0/1 encoding computed from integers
    x = np.random.default_rng(4).integers(0, 16, (40, 8))
    qm = qlinear.quantize(m, {"bytes": x}, dict(calibration_samples=24, evaluation_samples=16))
    assert sum(n.op_type == "QuantizeLinear" for n in qm.model.graph.node) >= 2
    assert "logits" in qm.plan.activations and "mask" not in qm.plan.activations


def test_a_plan_without_activations_says_so():
    """Integer activations asked for and none quantized (every float tensor left float for a reason: here all are
    excluded) is said in a note, with the reasons, not left to the header's "uint8 activations"."""
    m = _one_hot_classifier()
    x = np.random.default_rng(4).integers(0, 16, (40, 8))
    qm = qlinear.quantize(m, {"bytes": x}, dict(calibration_samples=24, evaluation_samples=0,
                                                exclude_op_types=("Relu", "Add"), quantize_outputs=False))
    assert not qm.plan.activations
    (note,) = [n for n in qm.notes if n.startswith("no activation is quantized")]
    assert "excluded" in note
    # on target ort every layer then reads a float input and computes in float: the weights keep their float values
    assert not qm.plan.weights and any("keep their float values" in n for n in qm.notes)
    ok = qlinear.quantize(m, {"bytes": x}, dict(calibration_samples=24, evaluation_samples=0))
    assert not any(n.startswith("no activation is quantized") for n in ok.notes)
