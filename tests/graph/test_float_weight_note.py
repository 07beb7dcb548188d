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
