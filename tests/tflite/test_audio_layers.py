"""The layers of streaming audio models in the ``.tflite`` export (silero-vad, openwakeword, akiki): ``LSTM`` and
``GRU`` unrolled as float islands (:mod:`qlinear.tflite.recurrent`), 1-D convolutions as height-1 CONV_2D /
DEPTHWISE_CONV_2D, reflect padding as MIRROR_PAD, and a Concat of reshaped tensors keeping one scale. Each ``.tflite``
runs in LiteRT 2.3.0 (reference kernels and the default resolver) and equals ``run_integer`` in the matching
profile; ``run_integer`` runs the recurrent layers by the ONNX reference and the 1-D convolutions by its integer
kernel, which equals ONNX Runtime on the Q/DQ model bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.kernels.run import IntegerModel
from qlinear.ptq.report.debug import compare_runtime
from qlinear.tflite.export import convert

litert = pytest.importorskip("ai_edge_litert.interpreter")

RESOLVERS = (("ref", litert.OpResolverType.BUILTIN_REF, "litert_ref"),
             ("auto", litert.OpResolverType.AUTO, "litert_xnnpack"))
N_CAL, N = 32, 40


def _model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(m)
    for i, o in enumerate(inferred.graph.output):
        m.graph.output[i].CopyFrom(o)
    return m


def _litert_equals_run_integer(qm, data: dict, outputs: list[str]) -> dict[str, np.ndarray]:
    """Every output of the ``.tflite`` equals run_integer's, per sample, under both resolvers; returns run_integer's
    outputs over the held-out samples (``litert_ref``)."""
    out = convert(qm.model)
    got = {}
    for _, resolver, mode in RESOLVERS:
        it = litert.Interpreter(model_content=out.data, experimental_op_resolver_type=resolver)
        it.allocate_tensors()
        ins = {d["name"]: d for d in it.get_input_details()}
        outs = {d["name"]: d for d in it.get_output_details()}
        im = IntegerModel(qm.model, mode)
        ys = {o: [] for o in outputs}
        for k in range(N_CAL, N):
            feed = {name: v[k] for name, v in data.items()}
            for name, d in ins.items():
                it.set_tensor(d["index"], feed[name].astype(d["dtype"]).reshape(d["shape"]))
            it.invoke()
            ref = im.run({name: v[None] if v.ndim < len(ins[name]["shape"]) else v for name, v in feed.items()})
            for o in outputs:
                y = it.get_tensor(outs[o]["index"])
                assert np.array_equal(y.reshape(ref[o].shape), ref[o]), \
                    f"{mode} {o}: {int((y.reshape(ref[o].shape) != ref[o]).sum())} of {y.size} differ"
                ys[o].append(ref[o])
        got = {o: np.stack(v) for o, v in ys.items()}
    return got


def _ort_equals_run_integer(m: onnx.ModelProto, data: dict) -> None:
    """The Q/DQ model of target ort: run_integer (``f32_rne``) equals ONNX Runtime at its basic level on the held-out
    samples of input ``x``, output ``y``."""
    ort_q = qlinear.quantize(m, data, dict(calibration_samples=N_CAL, evaluation_samples=0))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s = ort.InferenceSession(ort_q.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    im = IntegerModel(ort_q.model, "f32_rne")
    assert im.steps and all(np.array_equal(im.run({"x": x})["y"], s.run(None, {"x": x})[0]) for x in data["x"][N_CAL:])


def _sqnr(f: np.ndarray, q: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(f.astype(np.float64) ** 2) / np.sum((f - q.reshape(f.shape)) ** 2)))


@pytest.mark.parametrize("op,direction,steps,lbr", [("LSTM", "forward", 1, 0), ("LSTM", "reverse", 3, 0),
                                                    ("LSTM", "bidirectional", 2, 0), ("GRU", "forward", 3, 0),
                                                    ("GRU", "forward", 1, 1), ("GRU", "bidirectional", 2, 1)])
def test_recurrent_layers_unroll_into_a_tflite_that_computes_the_onnx_definition(op, direction, steps, lbr):
    rng = np.random.default_rng(steps)
    i, h, d = 5, 6, 2 if direction == "bidirectional" else 1
    g = 4 if op == "LSTM" else 3
    inits = {"W": rng.normal(0, .5, (d, g * h, i)).astype(np.float32),
             "R": rng.normal(0, .5, (d, g * h, h)).astype(np.float32),
             "B": rng.normal(0, .3, (d, 2 * g * h)).astype(np.float32)}
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    outs = ["Y", "Yh", "Yc"] if op == "LSTM" else ["Y", "Yh"]
    kw = {"linear_before_reset": lbr} if op == "GRU" else {}
    node = helper.make_node(op, ["x", "W", "R", "B", ""] + states, outs, hidden_size=h, direction=direction, **kw)
    m = _model([node], [("x", [steps, 1, i])] + [(s, [d, 1, h]) for s in states], outs, inits)
    data = {"x": rng.normal(0, 1, (N, steps, 1, i)).astype(np.float32)}
    data.update({s: rng.normal(0, .5, (N, d, 1, h)).astype(np.float32) for s in states})
    qm = qlinear.quantize(m, data, dict(calibration_samples=N_CAL, evaluation_samples=0, target="tflite",
                                        batch_axes={k: 1 for k in data}))
    assert [x.split(" (")[1] for x in convert(qm.model).islands] == [f"{op})"]
    got = _litert_equals_run_integer(qm, data, outs)
    # qlinear debug QUANT.onnx MODEL.tflite reads the 4-D Y in ONNX order (it is not an NHWC image tensor)
    res = compare_runtime(qm.model, {k: v[N_CAL:] for k, v in data.items()}, tflite=convert(qm.model).data,
                          samples=1, batch_axes={k: 1 for k in data})
    assert res.tensors and res.first_difference is None
    # ONNX Runtime's own LSTM/GRU kernel on the same Q/DQ model: the same integers, or one step off where its float
    # sums round a value across a rounding boundary
    s = ort.InferenceSession(qm.model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = [s.run(None, {k: v[j] for k, v in data.items()}) for j in range(N_CAL, N)]
    steps_of = {e.name: float(e.scale) for e in qm.encodings.activations}
    for k, o in enumerate(outs):
        d = np.abs(np.stack([w[k] for w in want]) - got[o].reshape(np.stack([w[k] for w in want]).shape))
        assert d.max() <= steps_of[o] * 1.001 and np.mean(d > 0) < 0.05, (o, d.max() / steps_of[o])


def test_one_d_convolutions_reflect_padding_and_a_concat_of_reshapes():
    """``x [N, 4, 32]`` -> Pad(reflect) -> Conv1d (stride 2, dilation 2) -> Relu -> depthwise Conv1d -> two
    Reshapes of different ranges (x1 and x30) -> Concat -> ``y``; run_integer's 1-D kernels equal ONNX Runtime on
    the Q/DQ model (target ort), the .tflite equals run_integer, and the Concat's output covers both parts."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Pad", ["x", "pads"], ["xp"], mode="reflect"),
             helper.make_node("Conv", ["xp", "w1", "b1"], ["c1"], strides=[2], dilations=[2], pads=[1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], group=8, pads=[1, 1], kernel_shape=[3]),
             helper.make_node("Reshape", ["c2", "s"], ["a"]), helper.make_node("Mul", ["c2", "k"], ["big"]),
             helper.make_node("Reshape", ["big", "s"], ["b"]), helper.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    inits = {"pads": np.array([0, 0, 3, 0, 0, 3], np.int64), "w1": rng.normal(0, .4, (8, 4, 3)).astype(np.float32),
             "b1": rng.normal(0, .1, 8).astype(np.float32), "w2": rng.normal(0, .5, (8, 1, 3)).astype(np.float32),
             "s": np.array([1, -1], np.int64), "k": np.array(30, np.float32)}
    m = _model(nodes, [("x", [1, 4, 32])], ["y"], inits)
    data = {"x": rng.normal(0, 1, (N, 1, 4, 32)).astype(np.float32)}
    _ort_equals_run_integer(m, data)
    qm = qlinear.quantize(m, data, dict(calibration_samples=N_CAL, evaluation_samples=0, target="tflite"))
    out = convert(qm.model)
    # MIRROR_PAD and the height-1 convolutions in integers; the Concat of parts with other scales (each Reshape keeps
    # its source's) as a float island into the scale of the union of their ranges (the first part's clipped the
    # second before)
    assert [i.split(" (")[1] for i in out.islands] == ["Concat)"]
    enc = {e.name: e for e in qm.encodings.activations}
    assert float(enc["y"].scale) == float(enc["big"].scale) > 10 * float(enc["c2"].scale)
    got = _litert_equals_run_integer(qm, data, ["y"])["y"]
    f = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = np.stack([f.run(None, {"x": x})[0] for x in data["x"][N_CAL:]]).reshape(got.shape)
    half = want.shape[-1] // 2   # the x30 part sets the shared scale (TFLite's rule; the report flags the ranges)
    assert _sqnr(want[..., half:], got[..., half:]) > 25
    assert any(n.startswith("WARNING: Concat 'y': its parts' ranges differ by 30x") for n in qm.notes), qm.notes


def test_a_recurrent_layer_the_island_cannot_unroll_is_refused_before_work():
    rng = np.random.default_rng(0)
    inits = {"W": rng.normal(0, .5, (1, 24, 5)).astype(np.float32), "R": rng.normal(0, .5, (1, 24, 6)).astype(np.float32)}
    node = helper.make_node("LSTM", ["x", "W", "R"], ["Y"], hidden_size=6, clip=3.0)
    m = _model([node], [("x", [2, 1, 5])], ["Y"], inits)
    with pytest.raises(qlinear.QlinearError, match=r"target: tflite unrolls an LSTM as a float island, but node Y "
                                                    r"has a clip; use target ort or qnn"):
        qlinear.quantize(m, {"x": rng.normal(0, 1, (8, 2, 1, 5)).astype(np.float32)},
                         dict(calibration_samples=4, evaluation_samples=0, target="tflite", batch_axes={"x": 1}))


@pytest.mark.parametrize("auto_pad,shape,kernel,strides", [
    ("VALID", [1, 1, 64], [8], [4]),          # keras2onnx's STFT convolution (DNSMOS): a 1-D VALID Conv
    ("SAME_UPPER", [1, 2, 9, 10], [3, 4], [2, 3]),
    ("SAME_LOWER", [1, 2, 9, 10], [3, 4], [2, 3]),
])
def test_a_float_island_convolution_with_auto_pad(auto_pad, shape, kernel, strides):
    """``x`` -> Conv(auto_pad) -> square -> + 1e-10 -> Log: the wide Log's cone, the Conv included, runs as float
    islands on target tflite; ``auto_pad`` becomes explicit padding (ONNX's SAME_UPPER / SAME_LOWER rule), the
    .tflite equals run_integer and both follow ONNX Runtime's float model. (A 2-D case reads and writes 3-D
    tensors through Reshapes: the .tflite's 4-D inputs and outputs are NHWC.)"""
    rng = np.random.default_rng(1)
    c_out = 3
    w = rng.normal(0, .5, [c_out, shape[1]] + kernel).astype(np.float32)
    flat = len(shape) == 4
    io = [1, shape[1], shape[2] * shape[3]] if flat else shape
    nodes = ([helper.make_node("Reshape", ["x", "s4"], ["x4"])] if flat else []) + [
        helper.make_node("Conv", ["x4" if flat else "x", "w"], ["c"], auto_pad=auto_pad, strides=strides,
                         kernel_shape=kernel),
        helper.make_node("Mul", ["c", "c"], ["p"]), helper.make_node("Add", ["p", "eps"], ["pe"]),
        helper.make_node("Log", ["pe"], ["l" if flat else "y"])] + (
        [helper.make_node("Reshape", ["l", "s3"], ["y"])] if flat else [])
    inits = {"w": w, "eps": np.array(1e-10, np.float32)}
    if flat:
        inits.update(s4=np.array(shape, np.int64), s3=np.array([1, c_out, -1], np.int64))
    m = _model(nodes, [("x", io)], ["y"], inits)
    x = rng.normal(0, 1, (N, *io)).astype(np.float32)
    x[::3] *= 1e-4                     # quiet samples: the Log's input spans many decades
    x[1::3] *= 30.0
    data = {"x": x}
    qm = qlinear.quantize(m, data, dict(calibration_samples=N_CAL, evaluation_samples=0, target="tflite"))
    assert "Conv)" in {i.split(" (")[1] for i in convert(qm.model).islands}
    got = _litert_equals_run_integer(qm, data, ["y"])["y"]
    f = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = np.stack([f.run(None, {"x": v})[0] for v in x[N_CAL:]]).reshape(got.shape)
    assert got.shape == want.shape and _sqnr(want, got) > 30


def test_integer_convolutions_with_auto_pad_are_bit_exact():
    """Conv(auto_pad SAME_UPPER, an even 2x2 kernel: the odd pad at the end) -> Relu -> Conv(VALID, stride 2), as
    PP-OCRv6's detector writes them, in integers: run_integer equals ONNX Runtime on the Q/DQ model (target ort) and
    LiteRT on the .tflite (its SAME padding), where it used to fall back and differ by a step (PP-OCRv6: 186 of
    442,368 values)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Reshape", ["x", "s4"], ["x4"]),
             helper.make_node("Conv", ["x4", "w1", "b1"], ["c1"], auto_pad="SAME_UPPER", kernel_shape=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], auto_pad="VALID", kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Reshape", ["c2", "s3"], ["y"])]
    inits = {"s4": np.array([1, 3, 9, 11], np.int64), "s3": np.array([1, 4, -1], np.int64),
             "w1": rng.normal(0, .4, (6, 3, 2, 2)).astype(np.float32), "b1": rng.normal(0, .2, 6).astype(np.float32),
             "w2": rng.normal(0, .3, (4, 6, 3, 3)).astype(np.float32)}
    m = _model(nodes, [("x", [1, 3, 99])], ["y"], inits)
    data = {"x": rng.normal(0, 1, (N, 1, 3, 99)).astype(np.float32)}
    _ort_equals_run_integer(m, data)
    qm = qlinear.quantize(m, data, dict(calibration_samples=N_CAL, evaluation_samples=0, target="tflite"))
    assert convert(qm.model).islands == []
    _litert_equals_run_integer(qm, data, ["y"])
