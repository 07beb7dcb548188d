"""The InsertQDQ pass on its own (small graphs) and through ``apply``: onnx.reference and ONNX Runtime against
Q/DQ semantics written out in NumPy here (not qlinear's kernels)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from qlinear import encodings as E
from qlinear.encodings.model import Encoding, EncodingSet
from qlinear.errors import EncodingError
from qlinear.graph.axes import resolve_set
from qlinear.graph.bridge import apply, extract, validate
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.model import topological_sort
from qlinear.graph.passes.insert_qdq import InsertQDQ

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4)).astype(np.float32)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)


def fq(x, s, zp, lo, hi):
    """ONNX QuantizeLinear -> DequantizeLinear: round half to even, saturate, (q - zp) * s in float32."""
    x = np.asarray(x, np.float32)
    s = np.asarray(s, np.float32)
    q = np.clip(np.rint(x / s) + zp, lo, hi)
    return ((q - zp) * s).astype(np.float32)


def mlp(dtype=T.FLOAT, out="y"):
    """x -> MatMul(W) -> Add(B) -> h -> Relu -> r -> (Add r r -> a, Mul r h -> y)."""
    npd = helper.tensor_dtype_to_np_dtype(dtype)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "B"], ["h"], name="bias"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "r"], ["a"], name="twice"),
             helper.make_node("Mul", ["a", "h"], [out], name="mul")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", dtype, [2, 4])],
                          [helper.make_tensor_value_info(out, dtype, [2, 3])],
                          [numpy_helper.from_array(W.astype(npd), "W"), numpy_helper.from_array(B.astype(npd), "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def ref(m, x=X):
    return ReferenceEvaluator(m).run(None, {"x": x})[0]


BASIC = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # keeps the ONNX semantics of Q/DQ (no int8 fusions)


def ort_run(m, x=X, level=BASIC):
    so = ort.SessionOptions()
    if level is not None:
        so.graph_optimization_level = level
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def run_pass(m, encodings):
    model = to_ir(m)
    InsertQDQ(encodings)(model)
    out = to_proto(model)
    topological_sort(out.graph)  # new nodes are appended; apply sorts the same way
    onnx.checker.check_model(out)
    return out


def test_ir_round_trip_is_byte_identical():
    m = mlp()
    assert to_proto(to_ir(m)).SerializeToString() == m.SerializeToString()


def test_ir_round_trip_keeps_sparse_initializers():
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5], np.float32), "v"),
                                   numpy_helper.from_array(np.array([1], np.int64), "i"), [3])
    sp.values.name = "sp"
    g = helper.make_graph([helper.make_node("Add", ["x", "sp"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3])], sparse_initializer=[sp])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    q = run_pass(m, [Encoding("y", "uint8", scale=np.float64(0.5), zero_point=np.int64(0))])
    assert list(q.graph.sparse_initializer) == [sp]
    y = ort_run(q, np.array([1, 1, 1], np.float32))  # onnx.reference does not read sparse initializers
    np.testing.assert_array_equal(y, [1, 2.5, 1])  # 2.5 / 0.5 = 5: exact on the grid


def test_param_per_channel_and_shared_activation_consumers():
    sw = np.abs(W).max(0) / 127
    ew = Encoding("W", "int8", scale=sw.astype(np.float64), zero_point=np.zeros(3, np.int64), axis=1, role="param")
    er = Encoding("r", "uint8", scale=np.float64(0.02), zero_point=np.int64(3))
    q = run_pass(mlp(), [ew, er])
    byname = {n.name: n for n in q.graph.node}
    # both inputs of the shared consumer read the DQ output; the other consumer of h keeps the float value
    assert list(byname["twice"].input) == ["r_dequantized", "r_dequantized"]
    assert list(byname["mul"].input) == ["a", "h"]
    assert "W" not in {t.name for t in q.graph.initializer} and byname["W_DequantizeLinear"].output[0] == "W"
    wq = fq(W, sw[None, :], 0, -128, 127)
    h = X @ wq + B
    want = (2 * fq(np.maximum(h, 0), 0.02, 3, 0, 255)) * h
    np.testing.assert_array_equal(ref(q), want.astype(np.float32))
    np.testing.assert_allclose(ort_run(q), want, rtol=1e-6, atol=1e-6)


def test_graph_output_keeps_its_name():
    e = Encoding("y", "int8", scale=np.float64(0.05), zero_point=np.int64(0))
    q = run_pass(mlp(), [e])
    assert [o.name for o in q.graph.output] == ["y"]
    assert q.graph.output[0].type.tensor_type.elem_type == T.FLOAT
    assert {n.name: n for n in q.graph.node}["mul"].output[0] == "y_prequant"
    y = ref(mlp())
    np.testing.assert_array_equal(ref(q), fq(y, 0.05, 0, -128, 127))


def test_graph_output_also_consumed_inside():
    """The producer writes T_prequant; other consumers keep reading the float value (as before the pass)."""
    m = mlp()
    m.graph.output.append(helper.make_tensor_value_info("r", T.FLOAT, [2, 3]))
    q = run_pass(m, [Encoding("r", "uint8", scale=np.float64(0.02), zero_point=np.int64(0))])
    byname = {n.name: n for n in q.graph.node}
    assert list(byname["twice"].input) == ["r_prequant", "r_prequant"]
    r, y = ReferenceEvaluator(q).run(None, {"x": X})[1], ref(q)
    np.testing.assert_array_equal(y, ref(m))
    np.testing.assert_array_equal(r, fq(np.maximum(X @ W + B, 0), 0.02, 0, 0, 255))


def test_int32_bias_and_lpbq():
    sw = np.array([[0.01], [0.02], [0.03]]).T  # per-channel float scale of LPBQ (keepdims), axis 0 blocks of 2
    ints = np.array([[3, 5, 7], [2, 4, 6]], np.int64)  # [blocks, channels]
    ew = Encoding("W", "int4", scale=sw, zero_point=None, axis=0, block_size=2, role="param", int_scale=ints,
                  decompressed_bits=8)
    eb = Encoding("B", "int32", scale=np.full(3, 0.001), zero_point=np.zeros(3, np.int64), axis=0, role="param")
    q = run_pass(mlp(), [ew, eb])
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("DequantizeLinear") == 3
    eff = (np.repeat(ints, 2, axis=0) * sw).astype(np.float32)  # [4, 3] effective block scales
    wq = fq(W, eff, 0, -8, 7)
    bq = (np.rint(B.astype(np.float64) / np.float32(0.001)) * np.float32(0.001)).astype(np.float32)
    h = X @ wq + bq
    want = (2 * np.maximum(h, 0)) * h
    np.testing.assert_allclose(ref(q), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ort_run(q), want, rtol=1e-5, atol=1e-6)


def test_subgraph_consumer_is_rewired():
    """An If branch reading an outer-scope activation reads its dequantized value."""
    then_g = helper.make_graph([helper.make_node("Neg", ["r"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", T.FLOAT, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["r"], ["f"])], "else", [],
                               [helper.make_tensor_value_info("f", T.FLOAT, [2, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "sub", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])],
                          [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    q = run_pass(m, [Encoding("r", "uint8", scale=np.float64(0.1), zero_point=np.int64(0))])
    x = np.array([[0.04, 0.26, 1.0], [-1, 0.5, 3.33]], np.float32)
    want = fq(np.maximum(x, 0), 0.1, 0, 0, 255)
    want = -want if x.sum() > 0 else want
    np.testing.assert_array_equal(ref(q, x), want)
    np.testing.assert_array_equal(ort_run(q, x), want)


def test_float16_model_runs_in_ort_at_default_level():
    m = mlp(T.FLOAT16)
    sw = np.abs(W.astype(np.float16).astype(np.float32)).max(0) / 127
    es = EncodingSet((Encoding("W", "int8", scale=sw.astype(np.float64), zero_point=np.zeros(3, np.int64), axis=1,
                               role="param"),
                      Encoding("x", "uint8", scale=np.float64(0.02), zero_point=np.int64(128)),
                      Encoding("r", "uint8", scale=np.float64(0.02), zero_point=np.int64(0)),
                      Encoding("y", "int8", scale=np.float64(0.05), zero_point=np.int64(0)),
                      Encoding("B", "float16", role="param")))
    assert validate(es, m).ok
    q = apply(es, m)
    onnx.checker.check_model(q, full_check=True)
    x16 = X.astype(np.float16)
    y = ort_run(q, x16, level=None)  # default optimization level (ORT_ENABLE_ALL)
    assert y.dtype == np.float16
    # the same arithmetic written out: quantize in float32, round to float16 after each DQ and float op
    xq = fq(x16.astype(np.float32), 0.02, 128, 0, 255).astype(np.float16)
    wq = fq(W.astype(np.float16).astype(np.float32), sw[None, :], 0, -128, 127).astype(np.float16)
    h = (xq.astype(np.float32) @ wq.astype(np.float32)).astype(np.float16) + B.astype(np.float16)
    rq = fq(np.maximum(h, 0).astype(np.float32), 0.02, 0, 0, 255).astype(np.float16)
    want = fq(((rq + rq) * h).astype(np.float32), 0.05, 0, -128, 127).astype(np.float16)
    np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), atol=0.051)
    assert extract(q) == es


def test_validate_and_apply_refuse_encodings_on_integer_tensors():
    m = mlp()
    m.graph.node.append(helper.make_node("Shape", ["y"], ["shp"], name="shape"))
    m.graph.output.append(helper.make_tensor_value_info("shp", T.INT64, [2]))
    es = EncodingSet((Encoding("shp", "uint8", scale=np.float64(0.1), zero_point=np.int64(0)),))
    rep = validate(es, m)
    assert not rep.ok and "shp" in str(rep) and "INT64" in str(rep)
    with pytest.raises(EncodingError, match="shp"):
        apply(es, m)


def test_validate_reports_what_apply_refuses():
    m = mlp()
    m.graph.output.append(helper.make_tensor_value_info("x", T.FLOAT, [2, 4]))
    es = EncodingSet((Encoding("x", "uint8", scale=np.float64(0.1), zero_point=np.int64(0)),
                      Encoding("r", "int2", scale=np.float64(0.1), zero_point=np.float64(-0.5))))
    rep = validate(es, m)
    assert [p.tensor for p in rep.problems] == ["x", "r"], str(rep)
    with pytest.raises(EncodingError, match="graph input that is also a graph output"):
        apply(es, m)


def test_apply_round_trips_golden_encodings_through_extract(shared_dir):
    d = shared_dir / "aimet-golden"
    model = d / "tiny_model.onnx"
    for f in sorted(d.glob("*v2.0.0.encodings")):
        es = resolve_set(E.load(f), model)
        assert extract(apply(es, model)) == es, f.name


def test_insertion_walks_the_graph_a_constant_number_of_times(monkeypatch):
    """Linear in graph size: a chain of N Relus with an encoding on every activation; the pass visits each node a
    fixed number of times (no scan of the graph per activation, as the proto version did: N^2 visits)."""
    visits = [0]
    real_iter = ir.Graph.__iter__

    def counting(self):
        for n in real_iter(self):
            visits[0] += 1
            yield n

    monkeypatch.setattr(ir.Graph, "__iter__", counting)
    for n in (200, 800):
        nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
        g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("t0", T.FLOAT, [1])],
                              [helper.make_tensor_value_info(f"t{n}", T.FLOAT, [1])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
        es = [Encoding(f"t{i}", "uint8", scale=np.float64(0.1), zero_point=np.int64(0)) for i in range(1, n + 1)]
        model = to_ir(m)
        visits[0] = 0
        InsertQDQ(es)(model)
        assert visits[0] <= 2 * n
        out = to_proto(model)
        topological_sort(out.graph)
        x = np.array([0.26], np.float32)
        assert ReferenceEvaluator(out).run(None, {"t0": x})[0] == np.float32(0.3)


def test_float_encoding_on_float16_activation_casts_back_to_float16():
    m = mlp(T.FLOAT16)
    es = EncodingSet((Encoding("r", "bfloat16"),))
    q = apply(es, m)
    casts = [n for n in q.graph.node if n.op_type == "Cast"]
    assert [helper.get_attribute_value(n.attribute[0]) for n in casts] == [T.BFLOAT16, T.FLOAT16]
    x16 = X.astype(np.float16)
    y = ort_run(q, x16, level=None)
    h = (x16.astype(np.float32) @ W.astype(np.float16).astype(np.float32)).astype(np.float16) + B.astype(np.float16)
    r = np.maximum(h, 0).astype(ml_dtypes.bfloat16).astype(np.float16)
    np.testing.assert_allclose(y.astype(np.float32), ((r + r) * h).astype(np.float32), rtol=2e-3, atol=2e-3)
    assert extract(q) == es
