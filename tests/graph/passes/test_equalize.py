"""Equalize on its own: Conv -> ReLU / Clip / nothing -> Conv (regular and depthwise) computes the same in ONNX
Runtime and onnx.reference after the pass, and both Convs' per-channel weight ranges become equal."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx_peers import run_ort, run_reference

from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.equalize import Equalize

RNG = np.random.default_rng(1)
X = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)


def conv_act_conv(act: str, depthwise: bool = False) -> onnx.ModelProto:
    """x -> Conv(W1, B1) -> act -> Conv(W2, B2) -> y; channels scaled unevenly so that equalizing matters."""
    c = 4
    w1 = (RNG.standard_normal((c, 3, 3, 3)) * np.array([0.1, 1, 5, 20]).reshape(c, 1, 1, 1)).astype(np.float32)
    w2 = RNG.standard_normal((c, 1, 3, 3) if depthwise else (5, c, 3, 3)).astype(np.float32)
    inits = {"W1": w1, "B1": RNG.standard_normal(c).astype(np.float32), "W2": w2,
             "B2": RNG.standard_normal(w2.shape[0]).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1])]
    mid = "c1"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c1"], ["a"], name="act"))
        mid = "a"
    elif act == "clip":
        inits.update(lo=np.array(0, np.float32), hi=np.array(6, np.float32))
        nodes.append(helper.make_node("Clip", ["c1", "lo", "hi"], ["a"], name="act"))
        mid = "a"
    nodes.append(helper.make_node("Conv", [mid, "W2", "B2"], ["y"], name="conv2", pads=[1, 1, 1, 1],
                                  group=c if depthwise else 1))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, w2.shape[0], 6, 6])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def equalize(m: onnx.ModelProto, **kw) -> tuple[onnx.ModelProto, int]:
    model = to_ir(m)
    p = Equalize(**kw)
    p(model)
    out = to_proto(model)
    onnx.checker.check_model(out)
    return out, p.pairs


def ranges(m: onnx.ModelProto, depthwise: bool) -> tuple[np.ndarray, np.ndarray]:
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    r1 = np.abs(w["W1"]).reshape(4, -1).max(1)
    w2 = w["W2"] if depthwise else np.moveaxis(w["W2"], 1, 0)
    return r1, np.abs(w2).reshape(4, -1).max(1)


@pytest.mark.parametrize("act", ["none", "relu", "clip"])
@pytest.mark.parametrize("depthwise", [False, True])
def test_same_function_and_equal_ranges(act, depthwise):
    m = conv_act_conv(act, depthwise)
    out, n = equalize(m)
    assert n == 1
    r1, r2 = ranges(out, depthwise)
    np.testing.assert_allclose(r1, r2, rtol=1e-5)
    before = ranges(m, depthwise)
    assert np.ptp(r1) < np.ptp(before[0])
    if act == "clip":  # Clip(0, 6) became Max/Min with per-channel bounds
        ops = [x.op_type for x in out.graph.node]
        assert ops == ["Conv", "Max", "Min", "Conv"] and out.graph.node[2].output[0] == "a"
    want = run_ort(m, {"x": X})[0]
    np.testing.assert_allclose(run_ort(out, {"x": X})[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(run_reference(out, {"x": X})[0], want, rtol=1e-4, atol=1e-4)


def test_clips_false_leaves_clip_pairs_alone():
    m = conv_act_conv("clip")
    out, n = equalize(m, clips=False)
    assert n == 0 and out.SerializeToString() == m.SerializeToString()
    out, n = equalize(conv_act_conv("relu"), clips=False)
    assert n == 1


def test_chain_converges_over_passes():
    """expand -> depthwise -> project: both pairs found; more passes bring the middle Conv's ranges closer."""
    c = 4
    w = [RNG.standard_normal((c, 3, 1, 1)) * np.array([0.1, 1, 5, 20]).reshape(c, 1, 1, 1),
         RNG.standard_normal((c, 1, 3, 3)), RNG.standard_normal((2, c, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "W0"], ["a"], name="expand"), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "W1"], ["b"], name="dw", group=c, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["br"]), helper.make_node("Conv", ["br", "W2"], ["y"], name="project")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 2, 6, 6])],
                          [numpy_helper.from_array(v.astype(np.float32), f"W{i}") for i, v in enumerate(w)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    out, n = equalize(m)
    assert n == 2
    np.testing.assert_allclose(run_ort(out, {"x": X})[0], run_ort(m, {"x": X})[0], rtol=1e-4, atol=1e-4)
