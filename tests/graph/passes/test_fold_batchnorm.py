"""FoldBatchNorm on its own: the folded model computes what the Conv -> BatchNormalization model does in ONNX Runtime
(and onnx.reference), names and value info are kept, pairs that cannot fold are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx_peers import run_ort, run_reference

from qlinear.graph.fold import fold_batchnorm
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.fold_batchnorm import FoldBatchNorm

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)


def conv_bn(bias: bool = True, extra_use: bool = False, bn_is_output: bool = False) -> onnx.ModelProto:
    """x -> Conv(W[, B]) -> c -> BatchNormalization -> y -> Relu -> z (``extra_use``: c also feeds an Add)."""
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")]
    ins = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32), "B"))
        ins.append("B")
    for name, v in [("g", RNG.uniform(0.5, 2, 4)), ("be", RNG.standard_normal(4)), ("mu", RNG.standard_normal(4)),
                    ("var", RNG.uniform(0.5, 2, 4))]:
        inits.append(numpy_helper.from_array(v.astype(np.float32), name))
    nodes = [helper.make_node("Conv", ins, ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["y"], name="bn", epsilon=1e-3),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    outs = [helper.make_tensor_value_info("z", T.FLOAT, [2, 4, 8, 8])]
    if extra_use:
        nodes.append(helper.make_node("Add", ["c", "z"], ["e"], name="extra"))
        outs = [helper.make_tensor_value_info("e", T.FLOAT, [2, 4, 8, 8])]
    if bn_is_output:
        outs.append(helper.make_tensor_value_info("y", T.FLOAT, [2, 4, 8, 8]))
    vi = [] if bn_is_output else [helper.make_tensor_value_info("y", T.FLOAT, [2, 4, 8, 8])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 8, 8])], outs, inits,
                          value_info=vi)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def fold(m: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    model = to_ir(m)
    p = FoldBatchNorm()
    assert p(model).modified == bool(p.folded)
    out = to_proto(model)
    onnx.checker.check_model(out)
    return out, p.folded


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("bn_is_output", [False, True])
def test_folded_model_computes_the_same(bias, bn_is_output):
    m = conv_bn(bias, bn_is_output=bn_is_output)
    out, n = fold(m)
    assert n == 1 and [x.op_type for x in out.graph.node] == ["Conv", "Relu"]
    conv = out.graph.node[0]
    assert conv.output[0] == "y" and len(conv.input) == 3
    assert conv.input[2] == ("B" if bias else "W_bn_bias")
    assert {t.name for t in out.graph.initializer} == {"W", conv.input[2]}     # BN parameters dropped
    assert [o.name for o in out.graph.output] == [o.name for o in m.graph.output]
    if not bn_is_output:
        assert [v.name for v in out.graph.value_info] == ["y"]
    for a, b in zip(run_ort(m, {"x": X}), run_ort(out, {"x": X})):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run_reference(out, {"x": X})[0], run_reference(m, {"x": X})[0], rtol=1e-5,
                               atol=1e-5)


def test_conv_output_read_elsewhere_is_not_folded():
    m = conv_bn(extra_use=True)
    out, n = fold(m)
    assert n == 0 and out.SerializeToString() == m.SerializeToString()


def test_proto_wrapper_rewrites_in_place():
    m = conv_bn()
    want = run_ort(m, {"x": X})[0]
    assert fold_batchnorm(m) == 1 and [x.op_type for x in m.graph.node] == ["Conv", "Relu"]
    np.testing.assert_allclose(run_ort(m, {"x": X})[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group,bias", [(1, True), (1, False), (2, True)])
def test_conv_transpose_then_batchnorm_folds(group, bias):
    """CenterFace upsamples with ConvTranspose -> BatchNormalization: the BatchNorm scales the output channels, axis
    1 of the weight within each group; the folded model computes what ONNX Runtime computes for the pair."""
    cin, cout = 4, 6
    inits = [numpy_helper.from_array(RNG.standard_normal((cin, cout // group, 2, 2)).astype(np.float32), "W")]
    ins = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(cout).astype(np.float32), "B"))
        ins.append("B")
    for name, v in [("g", RNG.uniform(0.5, 2, cout)), ("be", RNG.standard_normal(cout)),
                    ("mu", RNG.standard_normal(cout)), ("var", RNG.uniform(0.5, 2, cout))]:
        inits.append(numpy_helper.from_array(v.astype(np.float32), name))
    nodes = [helper.make_node("ConvTranspose", ins, ["c"], strides=[2, 2], group=group),
             helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["y"], epsilon=1e-3)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, cin, 5, 5])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, cout, 10, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    out, n = fold(m)
    assert n == 1 and [x.op_type for x in out.graph.node] == ["ConvTranspose"]
    x = RNG.standard_normal((2, cin, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(run_ort(out, {"x": x})[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
