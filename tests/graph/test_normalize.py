"""The normalize pass (qlinear.graph.passes.normalize) and the pipeline on models as exporters ship them: weights in
Constant nodes, Identity/Cast of constant weights, opset 9/11 files, a weight read twice, an If with a Conv inside.
Numbers are checked against ONNX Runtime running the model as given (the peer)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_peers import run_ort

import qlinear
from qlinear.errors import GraphError
from qlinear.graph.passes.normalize import check_upgrade, normalize, upgrade

RNG = np.random.default_rng(7)
CAL = {"calibration_samples": 8, "evaluation_samples": 0}
INT_TYPES = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4, TensorProto.INT16)


def _const(name: str, a: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=f"const_{name}", value=numpy_helper.from_array(a))


def _model(nodes, inputs, outputs, inits=(), opset=13) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


def _f32(*shape, scale=0.3):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def constant_weights_model() -> onnx.ModelProto:
    """Conv -> Relu -> Flatten -> Gemm -> MatMul, every weight and bias a Constant node (paddle2onnx's layout)."""
    nodes = [_const("cw", _f32(4, 3, 3, 3)), _const("cb", _f32(4)),
             helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             _const("gw", _f32(16, 4 * 8 * 8, scale=0.05)), _const("gb", _f32(16)),
             helper.make_node("Gemm", ["f", "gw", "gb"], ["g"], name="gemm", transB=1),
             _const("mw", _f32(16, 8)),
             helper.make_node("MatMul", ["g", "mw"], ["y"], name="matmul")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])


def _data(m: onnx.ModelProto, n: int = 8) -> dict[str, np.ndarray]:
    out, inits = {}, {t.name for t in m.graph.initializer}
    for v in m.graph.input:
        if v.name in inits:
            continue
        dims = [d.dim_value or n for d in v.type.tensor_type.shape.dim]
        dims[0] = n
        out[v.name] = RNG.standard_normal(dims).astype(np.float32)
    return out


def _int_weight_dqs(qm: onnx.ModelProto) -> set[str]:
    """The names of the float tensors DequantizeLinear makes from integer initializers (the quantized weights)."""
    inits = {t.name: t for t in qm.graph.initializer}
    return {n.output[0] for n in qm.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
            and inits[n.input[0]].data_type in INT_TYPES}


def _close_to_peer(given: onnx.ModelProto, qm: onnx.ModelProto, data: dict[str, np.ndarray], min_cos: float) -> None:
    """The Q/DQ model's outputs against ONNX Runtime running the float model as given, sample by sample."""
    for i in range(len(next(iter(data.values())))):
        feed = {k: v[i:i + 1] for k, v in data.items()}
        ref = run_ort(given, feed)[0].ravel().astype(np.float64)
        got = run_ort(qm, feed)[0].ravel().astype(np.float64)
        cos = ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got) + 1e-12)
        assert cos > min_cos, (i, cos)


def test_constant_weights_become_initializers_and_are_quantized():
    m = constant_weights_model()
    n, notes = normalize(m)
    assert not [x for x in n.graph.node if x.op_type == "Constant"]
    assert {"cw", "cb", "gw", "gb", "mw"} <= {t.name for t in n.graph.initializer}
    assert any("5 Constant nodes became initializers" in s for s in notes)
    data = _data(m)
    feed = {"x": data["x"][:2]}
    np.testing.assert_array_equal(run_ort(m, feed)[0], run_ort(n, feed)[0])  # same model, exactly
    qm = qlinear.quantize(m, data, CAL)
    # every weight quantized (3 int weights; before normalizing the plan found none of them)
    assert len(_int_weight_dqs(qm.model)) == 3
    assert {s.name for s in qm.plan.weights} == {"cw", "gw", "mw"}
    assert any("Constant nodes became initializers" in s for s in qm.notes)
    assert qm.rewritten  # the encodings name the initializers of the normalized model, written as model.float.onnx
    _close_to_peer(m, qm.model, data, 0.99)


@pytest.mark.parametrize(("opset", "with_data"), [(13, False), (11, False), (11, True)])
def test_weight_only_finds_constant_weights(opset, with_data):
    nodes = [_const("w1", _f32(64, 64)), helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             _const("w2", _f32(64, 32)), helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 32])], opset=opset)
    wm = qlinear.quantize(m, _data(m) if with_data else None,
                          {"activation_type": "float", "weight_type": "int8", "weights": "per-block",
                           "block_size": 32})
    assert sorted(e.name for e in wm.encodings) == ["w1", "w2"]
    assert len(_int_weight_dqs(wm.model)) == 2
    assert any("Constant nodes became initializers" in s for s in wm.notes)
    checked = [s for s in wm.notes if "opset upgrade" in s]
    if opset == 13:
        assert not checked
    else:
        assert checked == ["the opset upgrade computes the original's outputs on the first 4 calibration sample(s) "
                           "(ONNX Runtime, within rtol 0.001)" if with_data else
                           "the opset upgrade was not checked against the original model (no data given)"]
    x = _data(m, 4)
    ref, got = run_ort(m, x)[0], run_ort(wm.model, x)[0]
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()


def test_identity_and_cast_of_constant_weights_fold_and_a_shared_weight_has_one_encoding():
    w16 = _f32(4, 3, 3, 3).astype(np.float16)
    wm = _f32(16, 16)
    nodes = [_const("w16", w16), helper.make_node("Cast", ["w16"], ["w32"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Conv", ["x", "w32"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
             helper.make_node("Identity", ["wm"], ["wm_a"], name="id_a"),
             helper.make_node("Identity", ["wm"], ["wm_b"], name="id_b"),
             helper.make_node("MatMul", ["r", "wm_a"], ["h"], name="mm_a"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("MatMul", ["hr", "wm_b"], ["y"], name="mm_b")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 16])],
               [numpy_helper.from_array(wm, "wm"), numpy_helper.from_array(np.array([-1, 4, 16]), "shape")])
    n, notes = normalize(m)
    ops = [x.op_type for x in n.graph.node]
    assert "Cast" not in ops and "Identity" not in ops and "Constant" not in ops
    inits = {t.name: t for t in n.graph.initializer}
    assert inits["w32"].data_type == TensorProto.FLOAT and "w16" not in inits
    np.testing.assert_array_equal(numpy_helper.to_array(inits["w32"]), w16.astype(np.float32))
    assert [x.input[1] for x in n.graph.node if x.op_type == "MatMul"] == ["wm", "wm"]  # one tensor, read twice
    assert any("3 Identity/Cast/Transpose/Reshape/... nodes of constants were folded" in s for s in notes)
    data = _data(m)
    qm = qlinear.quantize(m, data, CAL)
    params = [e.name for e in qm.encodings.params]
    assert params.count("wm") == 1 and "w32" in params
    assert len(_int_weight_dqs(qm.model)) == 2  # w32 and the shared wm, once
    _close_to_peer(m, qm.model, data, 0.99)


def opset9_model() -> onnx.ModelProto:
    """Opset 9: Clip with min/max attributes, Upsample, Constant weights; IR 3 (initializers are graph inputs)."""
    w1, w2 = _f32(4, 3, 3, 3), _f32(2, 4, 1, 1)
    nodes = [_const("w1", w1),
             helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c"], ["cl"], name="clip", min=0.0, max=0.5),
             helper.make_node("Upsample", ["cl", "scales"], ["u"], name="up", mode="nearest"),
             helper.make_node("Conv", ["u", "w2"], ["y"], name="conv2")]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6]),
                                       helper.make_tensor_value_info("w2", TensorProto.FLOAT, [2, 4, 1, 1]),
                                       helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 12, 12])],
                          [numpy_helper.from_array(w2, "w2"), scales])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 3
    onnx.checker.check_model(m)
    return m


def opset11_model() -> onnx.ModelProto:
    """Opset 11: Split with a ``split`` attribute, Squeeze/Unsqueeze axes attributes, ReduceSum axes, Resize with
    roi and scales, Clip min/max inputs."""
    nodes = [_const("w", _f32(4, 3, 3, 3)), _const("lo", np.array(0.0, np.float32)),
             _const("hi", np.array(6.0, np.float32)),
             helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["cl"], name="clip"),
             helper.make_node("Split", ["cl"], ["s0", "s1"], name="split", axis=1, split=[1, 3]),
             helper.make_node("ReduceSum", ["s1"], ["rs"], name="rsum", axes=[1], keepdims=1),
             helper.make_node("Add", ["s0", "rs"], ["a"], name="add"),
             helper.make_node("Squeeze", ["a"], ["sq"], name="squeeze", axes=[1]),
             helper.make_node("Unsqueeze", ["sq"], ["us"], name="unsqueeze", axes=[1]),
             helper.make_node("Resize", ["us", "roi", "scales"], ["y"], name="resize", mode="nearest")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 12, 12])],
                  [numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
                   numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")], opset=11)


@pytest.mark.parametrize(("make", "weights"), [(opset9_model, {"w1", "w2"}), (opset11_model, {"w"})])
def test_old_opset_is_upgraded_and_quantized_end_to_end(make, weights):
    m = make()
    given = m.opset_import[0].version
    n, notes = normalize(m)
    assert n.opset_import[0].version == 13 and any(f"opset {given} upgraded to 13" in s for s in notes)
    data = _data(m)
    check_upgrade(m, n, [{"x": data["x"][i:i + 1]} for i in range(4)])  # equal to the original
    qm = qlinear.quantize(m, data, CAL)
    assert any("the opset upgrade computes the original's outputs on the first 4" in s for s in qm.notes)
    assert {s.name for s in qm.plan.weights} == weights and len(_int_weight_dqs(qm.model)) == len(weights)
    _close_to_peer(m, qm.model, data, 0.98)


def test_check_upgrade_names_the_node_that_broke():
    m = opset11_model()
    n, _ = normalize(m)
    clip = next(x for x in n.graph.node if x.op_type == "Clip")
    hi = next(t for t in n.graph.initializer if t.name == clip.input[2])
    hi.CopyFrom(numpy_helper.from_array(np.array(0.1, np.float32), hi.name))  # a wrong upgrade of the Clip
    data = _data(m, 2)
    with pytest.raises(GraphError, match=r"tensor 'cl' \(Clip node 'clip'\) differs"):
        check_upgrade(m, n, [{"x": data["x"][i:i + 1]} for i in range(2)], "m.onnx")


def test_upgrade_check_on_samples_that_do_not_fit_the_declared_input_is_one_error():
    """An old-opset model whose declared batch dimension is 0 (a fuzz find): the upgrade check cannot run it on the
    samples, which is a GraphError naming the declared inputs, not ONNX Runtime's traceback."""
    m = opset11_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 0
    data = _data(opset11_model())
    with pytest.raises(GraphError, match=r"cannot run the model on the first calibration samples to check the opset "
                                         r"upgrade: .*declared inputs \(x \[0, 3, 6, 6\]\)"):
        qlinear.quantize(m, data, CAL)


def test_opset_outside_7_to_25_is_refused_with_the_fix():
    m = opset9_model()
    m.opset_import[0].version = 6
    with pytest.raises(GraphError, match="opset 6 is outside the supported range 7..25; re-export"):
        qlinear.quantize(m, _data(opset9_model()), CAL)


def test_if_with_a_conv_inside_is_left_float_with_a_note():
    def branch(name: str, scale: float) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Conv", ["r", f"{name}_w"], [f"{name}_y"], name=f"{name}_conv", pads=[1, 1, 1, 1])],
            name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, 4, 6, 6])],
            [numpy_helper.from_array(_f32(4, 4, 3, 3, scale=scale), f"{name}_w")])

    nodes = [_const("w", _f32(4, 3, 3, 3)),
             helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", keepdims=0),
             helper.make_node("Greater", ["mean", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="branchy", then_branch=branch("then", 0.3),
                              else_branch=branch("else", 0.2))]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
               [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    _, notes = normalize(m)
    note = next(s for s in notes if "If node 'branchy'" in s)
    assert "left in float" in note and "Conv 'then_conv'" in note and "Conv 'else_conv'" in note
    x = np.concatenate([np.abs(_f32(4, 3, 6, 6)), -np.abs(_f32(4, 3, 6, 6))])  # both branches taken
    data = {"x": x}
    qm = qlinear.quantize(m, data, CAL)
    assert any("If node 'branchy'" in s for s in qm.notes)
    assert [s.name for s in qm.plan.weights] == ["w"]  # the outer Conv is quantized
    _close_to_peer(m, qm.model, data, 0.98)


def test_transpose_of_a_constant_weight_folds_but_a_tied_embedding_is_not_stored_twice():
    from tiny_models import tiny_lm

    w = _f32(8, 16)  # stored [N, K], read through Transpose (paddle2onnx's MatMul weights)
    nodes = [_const("wt", w), helper.make_node("Transpose", ["wt"], ["w"], name="tr", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])
    n, _ = normalize(m)
    assert [x.op_type for x in n.graph.node] == ["MatMul"] and [t.name for t in n.graph.initializer] == ["w"]
    np.testing.assert_array_equal(numpy_helper.to_array(n.graph.initializer[0]), w.T)
    lm = tiny_lm()
    n, notes = normalize(lm)
    assert n.graph == lm.graph and notes == []  # Transpose(embed.weight) kept: the embedding is also gathered


def test_transformer_with_constant_weights_gets_the_transformer_placement():
    from tiny_models import encoder_data, tiny_encoder

    m = tiny_encoder()
    consts = [_const(t.name, numpy_helper.to_array(t)) for t in m.graph.initializer]  # paddle2onnx's layout
    nodes = consts + list(m.graph.node)
    del m.graph.initializer[:]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.checker.check_model(m)
    data = encoder_data(16)
    qm = qlinear.quantize(m, data, CAL)
    assert any("transformer placement" in s for s in qm.notes)
    ref = qlinear.quantize(tiny_encoder(), data, CAL)  # the same model with initializers: the same plan
    assert sorted(s.name for s in qm.plan.weights) == sorted(s.name for s in ref.plan.weights)
    assert len(qm.plan.weights) >= 4


def test_two_casts_of_one_float16_weight_become_one_initializer():
    w = _f32(16, 16).astype(np.float16)
    nodes = [_const("w16", w),
             helper.make_node("Cast", ["w16"], ["wa"], name="cast_a", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["w16"], ["wb"], name="cast_b", to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "wa"], ["h"], name="mm_a"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("MatMul", ["hr", "wb"], ["y"], name="mm_b")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])])
    n, _ = normalize(m)
    assert [t.name for t in n.graph.initializer] == ["wa"]
    assert [x.input[1] for x in n.graph.node if x.op_type == "MatMul"] == ["wa", "wa"]
    data = _data(m)
    qm = qlinear.quantize(m, data, CAL)
    assert [e.name for e in qm.encodings.params] == ["wa"] and len(_int_weight_dqs(qm.model)) == 1
    _close_to_peer(m, qm.model, data, 0.99)


def test_a_weight_computed_by_an_unfolded_node_is_named():
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], name="dq"),
             helper.make_node("Mul", ["w2a", "w2b"], ["w2"], name="mul"),
             helper.make_node("MatMul", ["x", "w"], ["h"], name="mm1"),
             helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
               [numpy_helper.from_array(np.ones((8, 8), np.int8), "wq"),
                numpy_helper.from_array(np.array(0.1, np.float32), "ws"),
                numpy_helper.from_array(_f32(8, 8), "w2a"), numpy_helper.from_array(_f32(8, 8), "w2b")])
    _, notes = normalize(m)
    assert notes == [("2 layer(s) whose weight is computed from constants by nodes qlinear does not fold stay "
                      "float: MatMul 'mm1', MatMul 'mm2'")]


def test_a_weight_reshaped_by_shape_arithmetic_of_itself_folds_and_is_quantized():
    """tf2onnx's Einsum lowering (g2p-id's BERT): Gemm(x, Reshape(W, Concat(c, ReduceProd(Gather(Shape(W), i)))))
    with W [1, 1, 8, 2, 4] stayed float ('computed from constants by nodes qlinear does not fold'); ORT's
    quantize_static quantized it."""
    w = _f32(1, 1, 8, 2, 4)
    nodes = [helper.make_node("Shape", ["w5"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "i"], ["g"], name="gather"),
             helper.make_node("ReduceProd", ["g"], ["p"], name="prod", keepdims=1),
             helper.make_node("Concat", ["c", "p"], ["sh"], name="concat", axis=0),
             helper.make_node("Reshape", ["w5", "sh"], ["w"], name="reshape"),
             helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm", transB=1)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
               [numpy_helper.from_array(w, "w5"), numpy_helper.from_array(np.array([3, 4], np.int64), "i"),
                numpy_helper.from_array(np.array([-1], np.int64), "c")])
    n, notes = normalize(m)
    assert [x.op_type for x in n.graph.node] == ["Gemm"] and not any("does not fold" in s for s in notes)
    (said,) = [s for s in notes if "nodes of constants were folded" in s]   # no "0 Constant nodes became ..."
    assert not said.startswith("0 ") and "Constant nodes became" not in said
    np.testing.assert_array_equal(numpy_helper.to_array(n.graph.initializer[0]), w.reshape(8, 8))
    data = _data(m)
    qm = qlinear.quantize(m, data, CAL)
    assert len(_int_weight_dqs(qm.model)) == 1 and not any("does not fold" in s for s in qm.notes)
    _close_to_peer(m, qm.model, data, 0.99)


def test_loop_with_a_conv_inside_is_left_float_with_a_note():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         helper.make_node("Conv", ["s_in", "loop_w"], ["s_conv"], name="loop_conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["s_conv"], ["s_out"], name="loop_relu")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(_f32(4, 4, 3, 3, scale=0.2), "loop_w")])
    nodes = [_const("w", _f32(4, 3, 3, 3)),
             helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Loop", ["trips", "yes", "c"], ["y"], name="looped", body=body)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
               [numpy_helper.from_array(np.array(2, np.int64), "trips"),
                numpy_helper.from_array(np.array(True), "yes")])
    _, notes = normalize(m)
    assert any("Loop node 'looped'" in s and "Conv 'loop_conv'" in s for s in notes)
    data = {"x": _f32(8, 3, 6, 6, scale=1.0)}
    qm = qlinear.quantize(m, data, CAL)
    assert [s.name for s in qm.plan.weights] == ["w"]
    _close_to_peer(m, qm.model, data, 0.98)


def test_an_upgrade_the_converter_cannot_do_names_the_node():
    node = helper.make_node("TopK", ["x"], ["v"], name="top", k=1)  # opset 10 moved k to an input
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("v", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    with pytest.raises(GraphError, match=r"m.onnx: cannot upgrade opset 9 to 13 .*TopK, node name: top.*re-export"):
        upgrade(m, "m.onnx")


def _with_bytes(m: onnx.ModelProto, marker: bytes, raw: bytes) -> onnx.ModelProto:
    """``m`` serialized with ``marker`` (a string value it holds) replaced by ``raw`` (not UTF-8), read back."""
    out = onnx.ModelProto()
    out.ParseFromString(m.SerializeToString().replace(marker, raw))
    return out


def test_text_that_is_not_utf8_is_repaired_in_metadata_and_refused_in_names():
    """A producer_name / doc_string that is not UTF-8 (kept as bytes, which onnx_ir cannot write back) is decoded
    with replacement characters and noted; a node name that is not UTF-8 is refused naming where it is."""
    from qlinear.examples import DATA, MODEL

    base = onnx.load(str(MODEL))
    base.producer_name, base.graph.doc_string = "PPPP", "DDDD"
    m = _with_bytes(_with_bytes(base, b"PPPP", b"\xff\xfePP"), b"DDDD", b"D\xc3(D")
    assert isinstance(m.producer_name, bytes)
    n, notes = normalize(m, "m.onnx")
    assert n.producer_name == "\ufffd\ufffdPP" and n.graph.doc_string == "D\ufffd(D"
    assert any("2 text field(s) that are not UTF-8" in x and "model.producer_name" in x for x in notes)
    qm = qlinear.quantize(m, np.load(DATA), dict(calibration_samples=8, evaluation_samples=4))
    assert any("not UTF-8" in x for x in qm.notes)
    named = onnx.load(str(MODEL))
    named.graph.node[2].name = "NNNN"
    with pytest.raises(GraphError, match=r"model\.graph\.node\[2\]\.name is not UTF-8"):
        normalize(_with_bytes(named, b"NNNN", b"\xff\xfeNN"), "m.onnx")
