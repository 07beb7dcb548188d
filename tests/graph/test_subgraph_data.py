"""An ``If`` whose branches compute from outer float data gives data, whatever decides it: silero-vad's decoder state
goes through an ``If`` decided by a shape, and the plan took its output for a mask ("computed from integer inputs,
shapes or constants only"), so the decoder Conv's input stayed float (silero-vad-op15: 6 tensors, akiki-vad 3)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.graph.plan import make_plan


def _model():
    rng = np.random.default_rng(0)
    branch = lambda name, scale: helper.make_graph(   # noqa: E731 - reads the outer float input "h"
        [helper.make_node("Mul", ["h", f"{name}_k"], [f"{name}_out"])], name, [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(scale, np.float32), f"{name}_k")])
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="conv1"),
             helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
             helper.make_node("Greater", ["n", "zero64"], ["cond"]),
             helper.make_node("If", ["cond"], ["s"], then_branch=branch("t", 1.0), else_branch=branch("e", 2.0)),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    inits = [numpy_helper.from_array(rng.normal(size=(4, 3, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(size=(2, 4, 1, 1)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(0, np.int64), "zero64")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 4, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_if_computing_from_outer_data_gives_data():
    m = _model()
    for target in ("ort", "qnn"):
        plan = make_plan(m, placement="all", target=target)
        assert "r" in plan.activations or "s" in plan.activations, (target, plan.skipped.get("r"))
        assert "mask" not in plan.skipped.get("s", "") and "mask" not in plan.skipped.get("r", "")
    x = np.random.default_rng(1).normal(size=(16, 3, 4, 4)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=12, evaluation_samples=4))
    dq_in = {n.input[0] for n in qm.model.graph.node if n.op_type == "Conv" and n.name == "conv2"}
    producers = {o: n.op_type for n in qm.model.graph.node for o in n.output}
    assert [producers[i] for i in dq_in] == ["DequantizeLinear"]   # conv2 reads a quantized input
