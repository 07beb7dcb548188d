"""RaiseOpset on its own: the model it gives is what onnx's version converter writes (it is the converter, run once
across the proto boundary), computes the same in ONNX Runtime, and a model at the version is left untouched."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper, version_converter
from onnx_peers import run_ort

from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.raise_opset import RaiseOpset

RNG = np.random.default_rng(2)
X = RNG.standard_normal((2, 4)).astype(np.float32)


def model(opset: int) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("ReduceSum", ["h", "axes"], ["s"], name="sum", keepdims=1),
             helper.make_node("Clip", ["h", "lo", "hi"], ["c"], name="clip"),
             helper.make_node("Add", ["c", "s"], ["y"], name="add")]
    inits = {"W": RNG.standard_normal((4, 3)).astype(np.float32), "axes": np.array([1], np.int64),
             "lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)}
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def test_raises_like_the_version_converter():
    m = model(13)
    ir_model = to_ir(m)
    r = RaiseOpset(21)(ir_model)
    out = to_proto(ir_model)
    assert r.modified and r.model is ir_model and out.opset_import[0].version == 21
    assert out.SerializeToString() == version_converter.convert_version(m, 21).SerializeToString()
    onnx.checker.check_model(out)
    np.testing.assert_allclose(run_ort(out, {"x": X})[0], run_ort(m, {"x": X})[0], rtol=1e-6)


def test_model_at_the_version_is_untouched():
    m = model(21)
    ir_model = to_ir(m)
    assert not RaiseOpset(21)(ir_model).modified and not RaiseOpset(13)(ir_model).modified
    assert to_proto(ir_model).SerializeToString() == m.SerializeToString()
