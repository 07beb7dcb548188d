"""Max/Min clamps against a constant between a DequantizeLinear and a QuantizeLinear of the same 8-bit grid move onto
the integers: ONNX Runtime's outputs (both levels), the ONNX reference evaluator's and run_integer's are bit-identical
before and after, model.encodings extracted from the model is unchanged, and chains that cannot move stay."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.graph.bridge import extract, validate
from qlinear.graph.integer_clamps import integer_clamps
from qlinear.kernels.run import run_integer

RNG = np.random.default_rng(0)
C = 4


def _chain(ops=("Max", "Min"), bounds=None, s=0.02, zp=0, zp_type=np.uint8, s_out=None, tail_q=True,
           extra_reader=False, output=False) -> onnx.ModelProto:
    """x -> Q -> DQ -> clamps... -> Q -> DQ -> Relu -> y (the clamps against per-channel constants ``b0, b1...``)."""
    bounds = bounds if bounds is not None else [RNG.uniform(-1, 3, (1, C, 1, 1)).astype(np.float32) for _ in ops]
    s_out = s if s_out is None else s_out
    inits = [numpy_helper.from_array(np.array(s, np.float32), "s"), numpy_helper.from_array(np.array(zp, zp_type), "z"),
             numpy_helper.from_array(np.array(s_out, np.float32), "s2"),
             numpy_helper.from_array(np.array(zp, zp_type), "z2")]
    inits += [numpy_helper.from_array(np.asarray(b, np.float32), f"b{i}") for i, b in enumerate(bounds)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_quantized"], name="q_x"),
             helper.make_node("DequantizeLinear", ["x_quantized", "s", "z"], ["x_dequantized"], name="dq_x")]
    prev = "x_dequantized"
    for i, op in enumerate(ops):
        nodes.append(helper.make_node(op, [prev, f"b{i}"] if i % 2 == 0 else [f"b{i}", prev], [f"c{i}"], name=op))
        prev = f"c{i}"
    if tail_q:
        nodes += [helper.make_node("QuantizeLinear", [prev, "s2", "z2"], [f"{prev}_quantized"], name="q_c"),
                  helper.make_node("DequantizeLinear", [f"{prev}_quantized", "s2", "z2"], [f"{prev}_dequantized"],
                                   name="dq_c")]
        prev = f"{prev}_dequantized"
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="relu"))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", C, 5, 5])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["c0"], ["n"], name="neg"))
        outs.append(helper.make_tensor_value_info("n", TensorProto.FLOAT, ["N", C, 5, 5]))
    if output:
        outs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, ["N", C, 5, 5]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, 5, 5])], outs,
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _outputs(m: onnx.ModelProto, x: np.ndarray, peers) -> list[np.ndarray]:
    """The peers' outputs (ONNX Runtime at two levels, the reference evaluator), then run_integer's."""
    return peers(m, {"x": x}) + [v for _, v in sorted(run_integer(m, {"x": x}, mode="ort_fused").items())]


def _same_after_move(m: onnx.ModelProto, x: np.ndarray, peers) -> list[str]:
    want, before = _outputs(m, x, peers), extract(m)
    moved = integer_clamps(m)
    onnx.checker.check_model(m, full_check=True)
    got = _outputs(m, x, peers)
    assert len(want) == len(got) and all(np.array_equal(a, b) for a, b in zip(want, got))
    after = extract(m)
    assert [repr(e) for e in after] == [repr(e) for e in before]   # both tensors' parameters, as before
    return moved


def test_a_relu6_chain_moves_onto_the_integers(peer_outputs):
    m = _chain()
    assert _same_after_move(m, RNG.normal(0, 2, (3, C, 5, 5)).astype(np.float32), peer_outputs) == ["Max", "Min"]
    assert [n.op_type for n in m.graph.node] == ["QuantizeLinear", "Max", "Min", "DequantizeLinear", "Relu"]
    types = {t.name: t.data_type for t in m.graph.initializer}
    assert types["b0_uint8"] == types["b1_uint8"] == TensorProto.UINT8 and "b0" not in types and "b1" not in types


@pytest.mark.parametrize("case", ["other parameters after", "16-bit grid", "no QuantizeLinear after",
                                  "another reader", "a graph output"])
def test_chains_that_cannot_move_stay(case, peer_outputs):
    kw = {"other parameters after": dict(s_out=0.03), "16-bit grid": dict(zp_type=np.uint16),
          "no QuantizeLinear after": dict(tail_q=False), "another reader": dict(extra_reader=True),
          "a graph output": dict(output=True)}[case]
    m = _chain(**kw)
    assert _same_after_move(m, RNG.normal(0, 2, (2, C, 5, 5)).astype(np.float32), peer_outputs) == []
    assert "Max" in [n.op_type for n in m.graph.node]


@settings(max_examples=30, deadline=None)
@given(zp=st.integers(-128, 127), s=st.floats(0.0009765625, 1.0, width=32), lo=st.floats(-300.0, 300.0, width=32),
       hi=st.floats(-300.0, 300.0, width=32), signed=st.booleans(), order=st.sampled_from([("Max", "Min"),
                                                                                          ("Min", "Max"), ("Min",)]))
def test_every_8_bit_value_through_the_moved_chain_is_unchanged(peer_outputs, zp, s, lo, hi, signed, order):
    """All 256 integers through DequantizeLinear, the clamps (bounds anywhere, saturating ones too) and
    QuantizeLinear, before and after: equal in ONNX Runtime, the reference evaluator and run_integer."""
    zp = zp if signed else zp + 128
    dt = np.int8 if signed else np.uint8
    bounds = [np.full((1, C, 1, 1), v, np.float32) for v in (lo, hi)[:len(order)]]
    m = _chain(order, bounds, s=s, zp=zp, zp_type=dt)
    q = np.arange(-128, 128) if signed else np.arange(256)
    x = ((q.astype(np.float32) - np.float32(zp)) * np.float32(s))
    x = np.broadcast_to(np.resize(x, 100).reshape(1, 1, 4, 25), (1, C, 4, 25)).reshape(4, C, 5, 5).copy()
    assert _same_after_move(m, x, peer_outputs) == list(order)


def test_the_pipeline_moves_the_min_of_a_cle_relu6_on_target_ort(cle_relu6):
    """Conv -> Max(0) -> Min(bound) -> Conv per-tensor on target ort: the Max goes, the Min runs on the integers
    (a note says so), and the outputs are those of the model before the move."""
    model, data = cle_relu6
    x = data["x"]
    qm = qlinear.quantize(model, {"x": x}, dict(calibration_samples=32, evaluation_samples=0, weights="per-tensor"))
    mins = [n for n in qm.model.graph.node if n.op_type == "Min"]
    types = {t.name: t.data_type for t in qm.model.graph.initializer}
    assert len(mins) == 1 and types[mins[0].input[1]] == TensorProto.UINT8
    assert any("Max/Min clamp(s) against a constant (min) computed on the integers" in n for n in qm.notes)
    before = qlinear.graph.apply(qm.encodings, qm.encoded_model)   # the same encodings, nothing moved
    sess = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (before, qm.model)]
    a, b = (s.run(None, {"x": x})[0] for s in sess)
    assert np.array_equal(a, b)
    assert not validate(qm.encodings, qm.model).problems   # the moved clamp's tensor is known to validate
    assert [repr(e) for e in extract(qm.model)] == [repr(e) for e in extract(before)]


def test_written_back_for_debug_the_same_tensors_and_values(peer_outputs):
    """float_clamps undoes the move (the same outputs), and qlinear debug, which compares tensor by tensor, finds the
    clamps' tensors in a moved model with the SQNR it finds before the move (a note says how it compared them)."""
    from qlinear.graph.integer_clamps import float_clamps
    from qlinear.ptq.report.debug import compare_models

    bounds = [np.zeros((1, C, 1, 1), np.float32), RNG.uniform(0.5, 2, (1, C, 1, 1)).astype(np.float32)]
    qdq = _chain(bounds=bounds)
    fm = onnx.ModelProto()
    fm.CopyFrom(qdq)
    keep = [n for n in fm.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    keep[0].input[0] = "x"
    keep[-1].input[0] = "c1"
    del fm.graph.node[:]
    fm.graph.node.extend(keep)
    moved = onnx.ModelProto()
    moved.CopyFrom(qdq)
    integer_clamps(moved)
    back = onnx.ModelProto()
    back.CopyFrom(moved)
    assert float_clamps(back) == ["Max", "Min"]
    x = RNG.normal(0, 2, (8, C, 5, 5)).astype(np.float32)
    assert all(np.array_equal(a, b) for a, b in zip(_outputs(qdq, x, peer_outputs), _outputs(back, x, peer_outputs)))
    want, got = (compare_models(fm, m, {"x": x}, samples=8) for m in (qdq, moved))
    assert [(t.tensor, t.quantized, t.sqnr_db) for t in got.tensors] == \
        [(t.tensor, t.quantized, t.sqnr_db) for t in want.tensors]
    assert {"c0", "c1"} <= {t.tensor for t in got.tensors if t.quantized or t.tensor == "c0"}
    assert any("compared as DequantizeLinear -> clamp -> QuantizeLinear" in n for n in got.notes)
