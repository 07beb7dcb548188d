"""UnshareBiases: a bias initializer several layers read (tf2onnx deduplicates equal constants: basic-pitch's 18 Conv
nodes read one) becomes one copy per layer, so each int32 bias encoding is at its own layer's
``input_scale * weight_scale``; before, the last layer planned set the one encoding and the others read their bias
at its scale (found auditing ``--target qnn`` on basic-pitch: 23 of its biases off their layer's scale)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx_peers import run_ort

import qlinear
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.unshare_biases import UnshareBiases
from qlinear.ptq import QuantizeConfig

RNG = np.random.default_rng(0)
X = RNG.standard_normal((24, 3, 8, 8)).astype(np.float32)


def model(extra_reader: bool = False) -> onnx.ModelProto:
    """Two Convs reading one bias B, the second on its input times 20 (another input scale); ``extra_reader``: an
    Add reads B too."""
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "W1"),
             numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.01, "W2"),
             numpy_helper.from_array(np.array([1.0, -2.0, 0.5, 3.0], np.float32), "B"),
             numpy_helper.from_array(np.float32(20.0), "k")]
    nodes = [helper.make_node("Conv", ["x", "W1", "B"], ["y1"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["x", "k"], ["x2"], name="mul"),
             helper.make_node("Conv", ["x2", "W2", "B"], ["y2"], name="conv_b", pads=[1, 1, 1, 1])]
    outs = [helper.make_tensor_value_info(n, T.FLOAT, [None, 4, 8, 8]) for n in ("y1", "y2")]
    if extra_reader:
        nodes.append(helper.make_node("Add", ["B", "B"], ["y3"], name="plus_b"))
        outs.append(helper.make_tensor_value_info("y3", T.FLOAT, [4]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [None, 3, 8, 8])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("extra_reader", [False, True])
def test_each_layer_gets_its_own_bias_and_computes_the_same(extra_reader):
    m = model(extra_reader)
    ir_model = to_ir(m)
    p = UnshareBiases()
    assert p(ir_model).modified and p.copied == {"B": 2}
    out = to_proto(ir_model)
    biases = [n.input[2] for n in out.graph.node if n.op_type == "Conv"]
    assert len(set(biases)) == 2 and ("B" in biases) is not extra_reader   # the Add keeps the original
    for ref, got in zip(run_ort(m, {"x": X[:2]}), run_ort(out, {"x": X[:2]})):
        np.testing.assert_array_equal(ref, got)


def test_a_bias_one_layer_reads_is_left_alone():
    m = model()
    m.graph.node[2].input[2] = ""
    p = UnshareBiases()
    assert not p(to_ir(m)).modified and p.copied == {}


@pytest.mark.parametrize("target", ["qnn", "ort"])
def test_each_int32_bias_is_at_its_layers_scales(target):
    q = qlinear.quantize(model(), {"x": X}, QuantizeConfig(target=target, calibration_samples=16,
                                                           evaluation_samples=8))
    enc = {e.name: e for e in q.encodings}
    convs = [n for n in q.encoded_model.graph.node if n.op_type == "Conv"]
    assert len({n.input[2] for n in convs}) == 2
    for n in convs:
        x, w, b = n.input
        assert enc[b].dtype == "int32"
        np.testing.assert_allclose(np.asarray(enc[b].scale, np.float64).ravel(),
                                   (np.asarray(enc[x].scale, np.float64) * np.asarray(enc[w].scale)).ravel(),
                                   rtol=1e-6)
    assert any("bias(es) read by several layers were copied" in n for n in q.notes)
