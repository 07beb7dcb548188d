"""run_integer on Q/DQ models against ONNX Runtime.

* ``f32_rne`` equals ORT running the Q/DQ model with its Q/DQ nodes kept (DequantizeLinear -> float op ->
  QuantizeLinear, basic optimizations), bit for bit, on the bundled example quantized with uint8 and int8
  activations;
* against ORT's fused int8 kernels (the QOperator form it builds with full optimizations) the outputs differ by at
  most the documented amounts: one unit per QLinearAdd / QLinearGlobalAveragePool (float arithmetic in MLAS), and
  on AVX2 CPUs without VNNI the u8s8 GEMM saturation of ORT itself (not a qlinear rounding difference)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import qlinear
from qlinear.errors import KernelError
from qlinear.examples import DATA, MODEL
from qlinear.kernels import run_integer


def _ort(m, x, fused):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not fused:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


@pytest.fixture(scope="module", params=["uint8", "int8"])
def qdq(request):
    cfg = qlinear.QuantizeConfig(calibration_samples=20, evaluation_samples=0, activation_type=request.param)
    return qlinear.quantize(MODEL, DATA, cfg), np.load(DATA)["input"][20:]


def test_f32_rne_equals_ort_qdq(qdq):
    qm, x = qdq
    y = run_integer(qm.model, {"input": x}, mode="f32_rne")["logits"]
    assert np.array_equal(y, _ort(qm.model, x, fused=False))


def test_modes_close_to_each_other_and_to_fused_ort(qdq):
    qm, x = qdq
    out_enc = qm.encodings["logits"]
    step = float(out_enc.scale)
    ref = run_integer(qm.model, {"input": x}, mode="f32_rne")["logits"]
    for mode in ("fixed_double", "fixed_single", "ruy_x86", "f64_round_away", "onednn"):
        y = run_integer(qm.model, {"input": x}, mode=mode)["logits"]
        assert np.abs(y - ref).max() <= 3 * step + 1e-6, mode
    fused = _ort(qm.model, x, fused=True)
    if out_enc.dtype == "int8":  # s8s8 path: only the per-op float rounding differences remain; one-unit
        # differences inside the network (QLinearAdd, QLinearGlobalAveragePool) reach the logits as a few units
        d = np.abs(fused - ref)
        assert d.max() <= 4 * step + 1e-6 and np.mean(d > 1e-9) < 0.05


def test_unknown_mode():
    with pytest.raises(KernelError, match="mode"):
        run_integer(MODEL, {"input": np.zeros((1, 3, 24, 24), np.float32)}, mode="magic")


def test_a_float_if_reads_outer_values():
    """An ``If`` left float in the Q/DQ model whose branches read an outer value (silero-vad's and akiki-vad's
    decoders, under ``qlinear debug --runtime ort_fused``: "Unable to find input ... in known results"): the outer
    values are given to the one-node model by name, and run_integer equals ONNX Runtime on both branches."""
    from onnx import TensorProto, helper

    then = helper.make_graph([helper.make_node("Identity", ["r"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4])])
    other = helper.make_graph([helper.make_node("Neg", ["r"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                       helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(0, 1, (20, 1, 4)).astype(np.float32), "c": np.ones(20, bool)}
    # the If's output is data (its branches read r) and, as a graph output, left float (quantize_outputs false)
    qm = qlinear.quantize(m, data, dict(calibration_samples=16, evaluation_samples=0, batch_axes={"c": None},
                                        quantize_outputs=False))
    sess = ort.InferenceSession(qm.model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = data["x"][int(np.argmax(data["x"].max(axis=(1, 2))))]   # a sample with a positive value
    got = {}
    for c in (True, False):
        feed = {"x": x, "c": np.array(c)}
        got[c] = run_integer(qm.model, feed, mode="f32_rne")["y"]
        np.testing.assert_array_equal(got[c], sess.run(None, feed)[0])
    assert got[True].max() > 0 and np.array_equal(got[True], -got[False])


def test_a_float_part_onnx_reference_cannot_run_is_one_named_error():
    """A node run_integer evaluates in float with onnx.reference fails (an operator it does not know): one
    KernelError naming the node and the way out, not onnx.reference's traceback."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Mystery", ["xd"], ["y"], name="odd", domain="example.custom")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
                           numpy_helper.from_array(np.array(128, np.uint8), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)])
    with pytest.raises(KernelError, match=r"node odd \(Mystery\) runs in float \(onnx.reference\) and failed: .*"
                                          r"compare the outputs with ONNX Runtime itself"):
        run_integer(m, {"x": np.ones((1, 4), np.float32)}, mode="f32_rne")


def _one_node(node, inputs: dict, opset: int = 18):
    """ONNX Runtime's outputs and FloatNode's (run_integer's float parts) of one node on ``inputs``."""
    from onnx import TensorProto, helper

    from qlinear.kernels.steps import FloatNode

    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                      list(v.shape)) for k, v in inputs.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
    return want, FloatNode(node, m)([inputs.get(i) if i else None for i in node.input])


@pytest.mark.parametrize("data_shape,idx_shape,axis", [((1, 3000), (1, 200), 1), ((2, 5), (1, 3), 1),
                                                       ((4, 3, 6), (2, 3, 4), -1), ((5, 4), (7, 2), 0)])
def test_gather_elements_as_onnx_runtime(data_shape, idx_shape, axis):
    """GatherElements where onnx.reference fails ([1, N] data, [1, K] indices: onnx-asr's Kaldi framing, SwiftF0's
    pitch pick) or where the indices are smaller than the data off the axis, negative indices included."""
    from onnx import helper

    rng = np.random.default_rng(len(data_shape) + idx_shape[0])
    d = rng.normal(size=data_shape).astype(np.float32)
    n = data_shape[axis]
    i = rng.integers(-n, n, size=idx_shape).astype(np.int64)
    want, got = _one_node(helper.make_node("GatherElements", ["d", "i"], ["o"], axis=axis), {"d": d, "i": i})
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("pads,axes", [([0, -3, 0, 5], None), ([-1, 2, 1, -2], None), ([4, -2], [1])])
def test_pad_with_negative_pads_as_onnx_runtime(mode, pads, axes):
    """Pad whose negative pads crop (onnx-asr's Kaldi preprocessor; onnx.reference refuses them)."""
    from onnx import helper

    x = np.random.default_rng(2).normal(size=(3, 10)).astype(np.float32)
    ins = {"x": x, "p": np.array(pads, np.int64), "v": np.array(1.5, np.float32)}
    names = ["x", "p", "v" if mode == "constant" else ""]
    if axes is not None:
        ins["a"] = np.array(axes, np.int64)
        names.append("a")
    want, got = _one_node(helper.make_node("Pad", names, ["o"], mode=mode), ins)
    np.testing.assert_array_equal(got[0], want[0])
