"""FoldConvAffine on its own: ``Conv -> Add/Sub/Mul(per-channel constant)`` folds into the Conv's weight and bias and
computes what the unfolded model does in ONNX Runtime; what cannot fold is left alone. In the pipeline: one
quantized output instead of two, fused by ONNX Runtime; Identity nodes between layers take no second quantizer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx_peers import run_ort

import qlinear
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.fold_batchnorm import FoldBatchNorm
from qlinear.graph.passes.fold_conv_affine import FoldConvAffine

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)


def model(tail: list[tuple[str, np.ndarray, bool]], *, bias: bool = False, extra: bool = False,
          shared: bool = False) -> onnx.ModelProto:
    """x -> Conv(W[, B]) -> each (op, constant, constant first) of ``tail`` in turn -> Relu -> z; ``extra``: the
    Conv output also feeds z's Add; ``shared``: a second Conv reads W."""
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")]
    ins = ["x", "W"] + (["B"] if bias else [])
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32), "B"))
    nodes = [helper.make_node("Conv", ins, ["c0"], name="conv", pads=[1, 1, 1, 1])]
    for i, (op, c, first) in enumerate(tail):
        inits.append(numpy_helper.from_array(np.asarray(c, np.float32), f"k{i}"))
        a, b = (f"k{i}", f"c{i}") if first else (f"c{i}", f"k{i}")
        nodes.append(helper.make_node(op, [a, b], [f"c{i + 1}"], name=f"n{i}"))
    last = f"c{len(tail)}"
    nodes.append(helper.make_node("Relu", [last], ["r"], name="relu"))
    out = "r"
    if extra:
        nodes.append(helper.make_node("Add", ["r", "c0"], ["e"], name="extra"))
        out = "e"
    if shared:
        nodes.append(helper.make_node("Conv", ["x", "W"], ["s"], name="conv2", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Add", [out, "s"], ["t"], name="sum"))
        out = "t"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 8, 8])],
                          [helper.make_tensor_value_info(out, T.FLOAT, [2, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def fold(m: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    ir_model = to_ir(m)
    p = FoldConvAffine()
    p(ir_model)
    return to_proto(ir_model), p.folded


CHANNEL = RNG.uniform(0.5, 2, (1, 4, 1, 1))
cases = {
    "bias add": [("Add", RNG.standard_normal((1, 4, 1, 1)), False)],
    "add, constant first, rank 3": [("Add", RNG.standard_normal((4, 1, 1)), True)],
    "scale then shift": [("Mul", CHANNEL, False), ("Add", RNG.standard_normal((1, 4, 1, 1)), False)],
    "scalar scale, sub": [("Mul", np.array(1.7), True), ("Sub", np.array(0.25), False)],
}


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name", list(cases))
def test_folded_computes_what_the_model_computes(name, bias):
    m = model(cases[name], bias=bias)
    f, n = fold(m)
    assert n == len(cases[name])
    assert [x.op_type for x in f.graph.node] == ["Conv", "Relu"] and len(f.graph.node[0].input) == 3
    assert f.graph.node[0].output[0] == f"c{n}"   # the folded Conv's output takes the last node's name
    assert {t.name for t in f.graph.initializer} == {"W", f.graph.node[0].input[2]}   # the constants dropped
    np.testing.assert_allclose(run_ort(f, {"x": X})[0], run_ort(m, {"x": X})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [
    model([("Add", RNG.standard_normal((1, 4, 1, 1)), False)], extra=True),          # the Conv output read twice
    model([("Add", RNG.standard_normal((1, 4, 8, 8)), False)]),                      # not per channel
    model([("Add", RNG.standard_normal((1, 4, 1, 1)), False)], shared=True),         # W read by another Conv
    model([("Sub", RNG.standard_normal((1, 4, 1, 1)), True)]),                       # c - Conv: not a bias
    model([("Mul", RNG.standard_normal((2, 4, 1, 1)), False)]),                      # would widen the batch
], ids=["two readers", "spatial", "shared weight", "constant minus conv", "widens"])
def test_what_cannot_fold_is_left_alone(m):
    f, n = fold(m)
    assert n == 0 and [x.op_type for x in f.graph.node] == [x.op_type for x in m.graph.node]


def test_batchnorm_folding_leaves_a_shared_weight_alone():
    """A weight two Convs read keeps its values (each Conv's BatchNorm would fold its own factors into it)."""
    m = model([], shared=True)
    g = m.graph
    for k, v in (("g", RNG.uniform(.5, 2, 4)), ("be", RNG.standard_normal(4)), ("mu", RNG.standard_normal(4)),
                 ("var", RNG.uniform(.5, 2, 4))):
        g.initializer.append(numpy_helper.from_array(v.astype(np.float32), k))
    relu = next(n for n in g.node if n.op_type == "Relu")
    relu.input[0] = "bn"
    g.node.insert(1, helper.make_node("BatchNormalization", ["c0", "g", "be", "mu", "var"], ["bn"], name="bn"))
    ir_model = to_ir(m)
    p = FoldBatchNorm()
    p(ir_model)
    assert p.folded == 0
    np.testing.assert_allclose(run_ort(to_proto(ir_model), {"x": X})[0], run_ort(m, {"x": X})[0], rtol=1e-6)


def test_the_pipeline_folds_and_drops_identities_before_quantizing():
    """Conv -> Identity -> Add(bias) -> Identity -> Relu: one quantizer pair on the Conv's output (ONNX Runtime fuses
    it into QLinearConv), a note says what was folded, and the quantized model follows the float one."""
    m = model([("Add", RNG.standard_normal((1, 4, 1, 1)), False)])
    g = m.graph
    for n in g.node:
        n.input[:] = [f"{i}_id" if i in ("c0", "c1") else i for i in n.input]
    g.node.insert(1, helper.make_node("Identity", ["c0"], ["c0_id"], name="id0"))
    g.node.insert(3, helper.make_node("Identity", ["c1"], ["c1_id"], name="id1"))
    data = {"x": RNG.standard_normal((20, 2, 3, 8, 8)).astype(np.float32)}   # samples of the model's [2, 3, 8, 8]
    qm = qlinear.quantize(m, data, dict(calibration_samples=16, evaluation_samples=0))
    ops = [n.op_type for n in qm.model.graph.node]
    assert "Identity" not in ops and "Add" not in ops and ops.count("QuantizeLinear") == 2   # x and the Conv
    assert any(n.startswith("folded 1 Mul/Add/Sub") for n in qm.notes)
    want = np.stack([run_ort(m, {"x": x})[0] for x in data["x"][16:]])
    got = np.stack([run_ort(qm.model, {"x": x})[0] for x in data["x"][16:]])
    assert 10 * np.log10(np.sum(want ** 2) / np.sum((want - got) ** 2)) > 30


def test_an_identity_that_makes_a_graph_output_stays():
    """``h -> Identity -> z`` (a graph output) and ``h -> Identity -> Relu``: the second is dropped, the first kept
    (``z`` keeps its own quantizer, and ``h``'s other readers do not read a graph output)."""
    from qlinear.graph.passes.drop_identity import DropIdentity

    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Identity", ["h"], ["z"]),
             helper.make_node("Identity", ["h"], ["i"]), helper.make_node("Relu", ["i"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(o, T.FLOAT, [2, 3]) for o in ("z", "y")])
    ir_model = to_ir(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    p = DropIdentity()
    p(ir_model)
    f = to_proto(ir_model)
    assert p.dropped == 1 and [(n.op_type, list(n.input)) for n in f.graph.node] == \
        [("Relu", ["x"]), ("Identity", ["h"]), ("Relu", ["h"])]
