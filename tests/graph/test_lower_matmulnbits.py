"""The LowerMatMulNBits pass on its own: ``DequantizeLinear -> MatMul/Gemm`` graphs written with ``onnx.helper``,
lowered, run in ONNX Runtime and compared with onnx.reference on the Q/DQ graph (the independent peer)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.lower_matmulnbits import LowerMatMulNBits

K, N = 40, 24
INT = {"int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4, "int8": np.int8, "uint8": np.uint8}


def _dq_inputs(rng, dtype: str, block: int, k_first: bool, zero_point: bool) -> tuple[list, dict]:
    """Integers, scale (and zero point) of a ``[K, N]`` (``k_first``) or ``[N, K]`` weight and the DQ attributes:
    blocked along K (``block``) or per channel (``block`` 0)."""
    lo, hi = (-8, 8) if dtype == "int4" else (0, 16) if dtype == "uint4" else (-128, 128) if dtype == "int8" \
        else (0, 256)
    shape = (K, N) if k_first else (N, K)
    q = rng.integers(lo, hi, shape).astype(INT[dtype])
    k_axis = 0 if k_first else 1
    if block:
        sshape = list(shape)
        sshape[k_axis] = -(-K // block)
        attrs = {"axis": k_axis, "block_size": block}
    else:
        sshape = [N]
        attrs = {"axis": 1 - k_axis}
    s = (rng.random(sshape) * 0.02 + 0.005).astype(np.float32)
    inits = [numpy_helper.from_array(q, "W_q"), numpy_helper.from_array(s, "W_s")]
    if zero_point:
        inits.append(numpy_helper.from_array(rng.integers(lo, hi, sshape).astype(INT[dtype]), "W_z"))
    return inits, attrs


def _model(op: str = "MatMul", dtype: str = "int4", block: int = 16, zero_point: bool = True,
           trans_b: int = 0, bias: bool = False, tied: bool = False, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    k_first = not (trans_b or tied)
    inits, attrs = _dq_inputs(rng, dtype, block, k_first, zero_point)
    dq_in = ["W_q", "W_s"] + (["W_z"] if zero_point else [])
    nodes = [helper.make_node("DequantizeLinear", dq_in, ["W"], name="W_dq", **attrs)]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", K])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", N])]
    if tied:  # E [N, K]: MatMul(x, Transpose(E)) and Gather(E, ids)
        nodes += [helper.make_node("Transpose", ["W"], ["W_T"], name="tr", perm=[1, 0]),
                  helper.make_node("MatMul", ["x", "W_T"], ["y"], name="mm"),
                  helper.make_node("Gather", ["W", "ids"], ["g"], name="gather")]
        ins.append(helper.make_tensor_value_info("ids", TensorProto.INT64, ["B"]))
        outs.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, ["B", K]))
    elif op == "Gemm":
        b = ["C"] if bias else []
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "C"))
        nodes.append(helper.make_node("Gemm", ["x", "W", *b], ["y"], name="mm", transB=trans_b))
    else:
        nodes.append(helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"))
    g = helper.make_graph(nodes, "g", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _lower(m: onnx.ModelProto, nodes=None) -> onnx.ModelProto:  # noqa: ANN001
    model = to_ir(m)
    LowerMatMulNBits(nodes)(model)
    return to_proto(model)


def _feeds(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    f = {"x": rng.standard_normal((3, K)).astype(np.float32)}
    if any(i.name == "ids" for i in m.graph.input):
        f["ids"] = np.array([0, 5, N - 1], np.int64)
    return f


def _check(m: onnx.ModelProto, lowered: onnx.ModelProto) -> None:
    onnx.checker.check_model(lowered)
    feeds = _feeds(m)
    want = ReferenceEvaluator(m).run(None, feeds)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(lowered.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("dtype", "block", "zero_point"), [("int4", 16, True), ("int4", 32, False),
                                                           ("uint4", 16, True), ("int8", 16, True),
                                                           ("uint8", 64, True), ("int4", 0, True),
                                                           ("int8", 0, False)])
def test_matmul_lowered(dtype, block, zero_point):
    m = _model(dtype=dtype, block=block, zero_point=zero_point)
    lw = _lower(m)
    ops = [n.op_type for n in lw.graph.node]
    assert ops == ["MatMulNBits"]
    n = lw.graph.node[0]
    attrs = {a.name: a.i for a in n.attribute}
    bits = 4 if "4" in dtype else 8
    assert attrs == {"K": K, "N": N, "bits": bits, "block_size": block or 64}
    assert n.domain == "com.microsoft" and n.name == "mm_MatMulNBits" and list(n.output) == ["y"]
    assert {t.name for t in lw.graph.initializer} == {"mm_B_nbits", "mm_scales"} | (
        {"mm_zero_points"} if zero_point else set())
    assert {o.domain: o.version for o in lw.opset_import}["com.microsoft"] == 1
    _check(m, lw)


@pytest.mark.parametrize(("trans_b", "bias"), [(0, True), (1, True), (1, False)])
def test_gemm_lowered_with_bias_add(trans_b, bias):
    m = _model("Gemm", trans_b=trans_b, bias=bias)
    lw = _lower(m)
    assert [n.op_type for n in lw.graph.node] == ["MatMulNBits"] + (["Add"] if bias else [])
    assert lw.graph.node[-1].output[0] == "y"
    _check(m, lw)


def test_tied_weight_keeps_its_dequantize_for_the_gather():
    m = _model(tied=True)
    lw = _lower(m)
    assert [n.op_type for n in lw.graph.node] == ["DequantizeLinear", "MatMulNBits", "Gather"]
    assert "W_q" in {t.name for t in lw.graph.initializer}
    _check(m, lw)


@pytest.mark.parametrize(("block", "nodes"), [(12, None), (8, None), (16, set())])
def test_not_lowerable_or_not_asked_left_alone(block, nodes):
    """Blocks that are not a power of two >= 16 stay Q/DQ (ONNX Runtime runs them unfused), and so do nodes not in
    ``nodes``."""
    m = _model(block=block)
    lw = _lower(m, nodes)
    assert [n.op_type for n in lw.graph.node] == ["DequantizeLinear", "MatMul"]
    assert lw.SerializeToString() == m.SerializeToString()


def test_param_source_integers_computed_when_written():
    """InsertQDQ with a ParamSource: the weight is never read, the integers are computed when the model is
    serialized (and every time: nothing cached), the scale in the source's type (float16, no Cast), no zero point
    when the source has none; the lowered model computes what onnx.reference computes on the Q/DQ one."""
    from qlinear.encodings import Encoding
    from qlinear.graph.passes.insert_qdq import InsertQDQ, ParamSource

    rng = np.random.default_rng(4)
    w = rng.standard_normal((K, N)).astype(np.float16)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["B", K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["B", N])],
                          [numpy_helper.from_array(w, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    scale = (rng.random((3, N)) * 0.05 + 0.01).astype(np.float16).astype(np.float64)
    e = Encoding("W", "int4", scale=scale, axis=0, block_size=16, role="param")
    q = rng.integers(-8, 8, (K, N)).astype(np.int8)
    calls = []

    def inserted() -> ir.Model:
        model = to_ir(m)
        InsertQDQ([e], sources={"W": ParamSource(lambda: calls.append(1) or q, TensorProto.FLOAT16, False)})(model)
        return model

    qm = to_proto(inserted())
    assert len(calls) == 1
    inits = {t.name: numpy_helper.to_array(t) for t in qm.graph.initializer}
    assert set(inits) == {"W_quantized", "W_scale"} and inits["W_scale"].dtype == np.float16
    np.testing.assert_array_equal(inits["W_quantized"].astype(np.int8), q)
    assert [n.op_type for n in qm.graph.node] == ["MatMul", "DequantizeLinear"]
    lowered = inserted()
    LowerMatMulNBits()(lowered)
    assert len(calls) == 1
    lm = to_proto(lowered)
    assert len(calls) == 2 and [n.op_type for n in lm.graph.node] == ["MatMulNBits"]
    x = {"x": rng.standard_normal((3, K)).astype(np.float16)}
    from qlinear.graph.model import topological_sort

    topological_sort(qm.graph)
    want = ReferenceEvaluator(qm).run(None, x)[0]
    got = ort.InferenceSession(lm.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2)
