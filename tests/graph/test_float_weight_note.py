"""Weights the plan leaves float are named (brief: "A weight left float is named"): recurrent weights and the
float tables of embedding lookups, never a weight the plan quantizes."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.graph.plan import float_weight_note, make_plan

RNG = np.random.default_rng(0)


def _init(name, shape):
    return numpy_helper.from_array(RNG.normal(0, 0.5, shape).astype(np.float32), name)


def _embedding_model():
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], name="lookup"),
             helper.make_node("MatMul", ["e", "w"], ["y"], name="proj")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, 3])],
                          [_init("emb", (10, 4)), _init("w", (4, 3))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _lstm_model():
    h = 3
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="rnn", hidden_size=h)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 1, 1, h])],
                          [_init("W", (1, 4 * h, 4)), _init("R", (1, 4 * h, h))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_embedding_table_named_and_quantized_weight_not():
    m = _embedding_model()
    note = float_weight_note(m, make_plan(m))
    assert len(note) == 1 and "emb (Gather lookup)" in note[0] and "w (" not in note[0]
    # the reason is the table's, not the LSTM's (target qnn said "no integer kernel for their operator")
    assert note[0].startswith("1 embedding table(s) stay float (stored quantized on targets ort and qnn only")


def test_recurrent_weights_named_in_the_run_notes():
    m = _lstm_model()
    x = RNG.normal(0, 1, (8, 6, 1, 4)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=8, evaluation_samples=0))
    named = [n for n in qm.notes if "stay float" in n and "no integer kernel" in n]
    assert len(named) == 1 and "W (LSTM rnn)" in named[0] and "R (LSTM rnn)" in named[0], qm.notes
    assert isinstance(qm.model, onnx.ModelProto)


def test_no_note_when_every_weight_is_planned():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [_init("w", (4, 3))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert float_weight_note(m, make_plan(m)) == []


def test_embedding_table_stored_quantized_on_target_ort(tmp_path):
    """Target ort stores an embedding table as its activation type, per-tensor over the whole table (LAC's 29.8 MB
    float table: the qlinear model was 31.8 MB against ONNX Runtime's 9.5 MB), and the Gather's output takes the same
    parameters, so that ONNX Runtime's optimized session gathers the integers (no DequantizeLinear of the table).
    The outputs equal the float model's within the table's quantization; the note names the table; excluding the
    Gather keeps it float; target tflite keeps its float island."""
    import onnxruntime as ort

    m = _embedding_model()
    ids = RNG.integers(0, 10, (24, 5)).astype(np.int64)
    qm = qlinear.quantize(m, {"ids": ids}, dict(calibration_samples=16, evaluation_samples=8))
    t, e = qm.encodings["emb"], qm.encodings["e"]
    assert t.role == "param" and t.dtype == "uint8" and float(t.scale) == float(e.scale) and \
        int(t.zero_point) == int(e.zero_point)
    emb = numpy_helper.to_array(m.graph.initializer[0])
    assert float(t.scale) * 255 >= float(emb.max() - emb.min()) - 1e-6   # every row within the grid's range
    assert any("embedding table(s) stored as uint8" in n and "emb" in n for n in qm.notes)
    assert not any("stay float" in n for n in qm.notes)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = ort.InferenceSession(qm.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    opt = onnx.load(str(tmp_path / "opt.onnx"))
    prod = {o: n.op_type for n in opt.graph.node for o in n.output}
    gather = next(n for n in opt.graph.node if n.op_type == "Gather")
    assert gather.input[0] not in prod   # the integer table itself, not a DequantizeLinear of it
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    y, yf = sess.run(None, {"ids": ids[16:]})[0], ref.run(None, {"ids": ids[16:]})[0]
    assert 10 * np.log10(np.sum(yf ** 2) / np.sum((y - yf) ** 2)) > 30
    qf = qlinear.quantize(m, {"ids": ids}, dict(calibration_samples=16, evaluation_samples=0,
                                                exclude_op_types=["Gather"]))
    assert "emb" not in qf.encodings.names() and any("emb (Gather lookup)" in n for n in qf.notes)


def test_a_model_with_nothing_to_quantize_says_so():
    """A lone tree ensemble (surfaces-onnx-files' validity model) or a softmax alone: no weight, no activation
    inside; the run wrote "int8 weights per-channel" and nothing else. Now a note says it computes in float."""
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    qm = qlinear.quantize(m, {"x": RNG.normal(0, 1, (16, 6)).astype(np.float32)},
                          dict(calibration_samples=8, evaluation_samples=0))
    assert any(n.startswith("nothing inside the model is quantized") for n in qm.notes), qm.notes
    assert not any(n.startswith("nothing inside") for n in qlinear.quantize(
        _embedding_model(), {"ids": RNG.integers(0, 10, (16, 5)).astype(np.int64)},
        dict(calibration_samples=8, evaluation_samples=0)).notes)


def test_embedding_table_stored_quantized_on_target_qnn():
    """Target qnn quantizes a Gather's table as AIMET's HTP configs do (an input quantizer at the activation type,
    per tensor over the whole table; aimet-onnx 2.42's sim on MiniLM: 8-bit quantizers on its 3 tables): QNN runs
    the lookup on the integers. It was left float, named in a note."""
    m = _embedding_model()
    ids = RNG.integers(0, 10, (24, 5)).astype(np.int64)
    qm = qlinear.quantize(m, {"ids": ids}, dict(target="qnn", activation_type="uint8", calibration_samples=16,
                                                evaluation_samples=0))
    t, e = qm.encodings["emb"], qm.encodings["e"]
    assert t.dtype == "uint8" and float(t.scale) == float(e.scale) and int(t.zero_point) == int(e.zero_point)
    emb = numpy_helper.to_array(m.graph.initializer[0])
    assert float(t.scale) * 255 >= float(emb.max() - emb.min()) - 1e-6
    assert not any("stay float" in n for n in qm.notes)
    prod = {o: n for n in qm.model.graph.node for o in n.output}
    dq = prod[next(n for n in qm.model.graph.node if n.op_type == "Gather").input[0]]
    stored = {i.name: i for i in qm.model.graph.initializer}[dq.input[0]]
    assert dq.op_type == "DequantizeLinear" and stored.data_type == TensorProto.UINT8
