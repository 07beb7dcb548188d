"""A Max/Min against a constant that the integer grid before it already satisfies is dropped from the Q/DQ model, and
only such a clamp: the outputs of ONNX Runtime (both levels) and of the ONNX reference evaluator are bit-identical
before and after, and clamps that could change a value, a shape or a graph output stay."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.graph.satisfied_clamps import drop_satisfied_clamps

RNG = np.random.default_rng(0)
C = 4


def _qdq_clamps(zp: int = 0, lo=None, hi=None, zp_type=np.uint8, x_channels: int = C,
                clamp_is_output: bool = False) -> onnx.ModelProto:
    """x -> QuantizeLinear -> DequantizeLinear -> Max(lo) -> Min(hi) -> Relu -> y (and the Max's output ``m``)."""
    lo = np.zeros((1, C, 1, 1), np.float32) if lo is None else lo
    hi = RNG.uniform(0.5, 2.0, (1, C, 1, 1)).astype(np.float32) if hi is None else hi
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "s"),
             numpy_helper.from_array(np.array(zp, zp_type), "zp"),
             numpy_helper.from_array(lo, "lo"), numpy_helper.from_array(hi, "hi")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="dq"),
             helper.make_node("Max", ["xd", "lo"], ["m"], name="max"),
             helper.make_node("Min", ["m", "hi"], ["r"], name="min"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "c", 5, 5])]
    if clamp_is_output:
        outs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, ["N", "c", 5, 5]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", x_channels, 5, 5])],
                          outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _same_after_drop(m: onnx.ModelProto, x: np.ndarray, outputs) -> list[str]:
    want = outputs(m, {"x": x})
    dropped = drop_satisfied_clamps(m)
    onnx.checker.check_model(m, full_check=True)
    got = outputs(m, {"x": x})
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    return dropped


def test_a_max_against_zeros_after_a_grid_starting_at_zero_goes_the_min_below_the_top_stays(peer_outputs):
    m = _qdq_clamps()
    x = RNG.normal(0, 2, (3, C, 5, 5)).astype(np.float32)
    assert _same_after_drop(m, x, peer_outputs) == ["max"]
    assert [n.op_type for n in m.graph.node] == ["QuantizeLinear", "DequantizeLinear", "Min", "Relu"]
    assert "lo" not in {t.name for t in m.graph.initializer}   # its constant goes with it


def test_a_min_above_the_grid_top_goes_too(peer_outputs):
    top = np.float32(255) * np.float32(0.02)   # the uint8 grid's top as DequantizeLinear computes it
    m = _qdq_clamps(hi=np.full((1, C, 1, 1), top, np.float32))
    assert _same_after_drop(m, RNG.normal(0, 4, (2, C, 5, 5)).astype(np.float32), peer_outputs) == ["max", "min"]
    assert [n.op_type for n in m.graph.node] == ["QuantizeLinear", "DequantizeLinear", "Relu"]
    below = _qdq_clamps(hi=np.full((1, C, 1, 1), np.nextafter(top, np.float32(0)), np.float32))   # one ulp less
    assert _same_after_drop(below, RNG.normal(0, 4, (2, C, 5, 5)).astype(np.float32), peer_outputs) == ["max"]


@pytest.mark.parametrize("case", ["grid below zero", "bound above the grid's bottom", "shape would grow",
                                  "clamp is a graph output"])
def test_clamps_that_could_change_something_stay(case, peer_outputs):
    kw = {"grid below zero": dict(zp=10), "bound above the grid's bottom": dict(lo=np.full((1, C, 1, 1), 0.01,
                                                                                             np.float32)),
          "shape would grow": dict(x_channels=1), "clamp is a graph output": dict(clamp_is_output=True)}[case]
    m = _qdq_clamps(**kw)
    x = RNG.normal(0, 2, (2, kw.get("x_channels", C), 5, 5)).astype(np.float32)
    assert "max" not in _same_after_drop(m, x, peer_outputs)
    assert "Max" in [n.op_type for n in m.graph.node]


@settings(max_examples=25, deadline=None)
@given(zp=st.integers(-128, 127), bound=st.floats(-3.0, 3.0, width=32), op=st.sampled_from(["Max", "Min"]))
def test_dropped_only_when_no_value_of_the_int8_grid_crosses_the_bound(peer_outputs, zp, bound, op):
    """Every int8 value through DequantizeLinear and the clamp, with and without the drop: equal, and the clamp goes
    exactly when it changes none of them."""
    m = _qdq_clamps(zp=zp, zp_type=np.int8, lo=np.full((1, C, 1, 1), bound, np.float32),
                    hi=np.full((1, C, 1, 1), 1e9, np.float32))
    clamp = next(n for n in m.graph.node if n.op_type == "Max")
    clamp.op_type = op
    x = ((np.arange(-128, 127 + 1, dtype=np.float32) - zp) * np.float32(0.02)).reshape(1, 1, 1, -1)
    x = np.broadcast_to(x, (1, C, 1, 256)).reshape(1, C, 16, 16)[:, :, :5, :5].copy()
    grid = (np.arange(-128, 128, dtype=np.float32) - zp) * np.float32(0.02)
    identity = bool(np.all(grid >= bound)) if op == "Max" else bool(np.all(grid <= bound))
    assert ("max" in _same_after_drop(m, x, peer_outputs)) == identity
    assert ("max" in {n.name for n in m.graph.node}) != identity


def test_the_pipeline_drops_the_zero_max_of_a_cle_relu6_on_target_ort(cle_relu6):
    """Conv -> Max(0) -> Min(bound) -> Conv, per-tensor on target ort: the Max goes (a note says so), the Min stays."""
    model, data = cle_relu6
    x = data["x"]
    qm = qlinear.quantize(model, {"x": x}, dict(calibration_samples=32, evaluation_samples=0, weights="per-tensor"))
    ops = [n.op_type for n in qm.model.graph.node]
    assert "Max" not in ops and ops.count("Min") == 1
    assert any("Max/Min clamp(s) against a constant (max) dropped" in n for n in qm.notes)
    tflite = qlinear.quantize(model, {"x": x}, dict(calibration_samples=32, evaluation_samples=0,
                                                    weights="per-tensor", target="tflite"))
    assert "Max" in [n.op_type for n in tflite.model.graph.node]   # not on other targets (measured on ort only)


def test_a_clamp_whose_output_a_subgraph_reads_stays():
    """An If branch reading the Max's output from the outer scope keeps it (and its constant)."""
    m = _qdq_clamps()
    branch = lambda name: helper.make_graph(   # noqa: E731
        [helper.make_node("Identity", ["m"], [f"{name}_out"])], name, [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)])
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    m.graph.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=branch("t"), else_branch=branch("e")))
    m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    assert drop_satisfied_clamps(m) == []
    assert "lo" in {t.name for t in m.graph.initializer}
