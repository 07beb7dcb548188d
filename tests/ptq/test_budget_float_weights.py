"""A size budget is honoured in the written file: on target ort the weights of layers ONNX Runtime runs in float are
written as float values by default (:mod:`qlinear.graph.float_weights`), which the budget did not count (nudenet at
``--size-budget 0.5``: the note said 0.265 of the float file, the file was 1.003). Under a budget they stay quantized
and a note says so; without one they keep their float values (no int8 encoding: they would only add error)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import qlinear

RNG = np.random.default_rng(0)
C = 32


def _two_convs() -> onnx.ModelProto:
    inits = [numpy_helper.from_array(RNG.normal(0, 0.2, (C, C, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(RNG.normal(0, 0.2, (C, C, 3, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", C, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _quantize(tmp_path, **kw):
    m = _two_convs()
    x = RNG.normal(0, 1, (24, C, 6, 6)).astype(np.float32)
    cfg = dict(calibration_samples=16, evaluation_samples=0,
               overrides=[{"name": "x", "role": "activation", "type": "float"}], **kw)   # conv1 runs in float
    qm = qlinear.quantize(m, {"x": x}, cfg)
    qm.save(tmp_path, report=False)
    path = tmp_path / "model.qdq.onnx"
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x[:2]})   # it runs
    return qm, path.stat().st_size, m.ByteSize()


def _weight_dequantized(qm, name: str) -> bool:
    return any(n.op_type == "DequantizeLinear" and n.output[0] == name for n in qm.model.graph.node)


def test_without_a_budget_the_float_layers_weight_keeps_its_float_values(tmp_path):
    """Without a budget the weight of the layer ONNX Runtime computes in float keeps its float values (not its int8
    ones written as float): no encoding, named in a note."""
    qm, _, _ = _quantize(tmp_path)
    assert not _weight_dequantized(qm, "w1") and _weight_dequantized(qm, "w2")
    w1 = {t.name: numpy_helper.to_array(t) for t in qm.model.graph.initializer}["w1"]
    assert np.array_equal(w1, numpy_helper.to_array(qm.float_model.graph.initializer[0]))   # the model as given
    assert "w1" not in qm.encodings.names() and "w2" in qm.encodings.names()
    assert any("keep their float values" in n and "w1" in n for n in qm.notes)


def test_under_a_size_budget_it_stays_quantized_and_the_file_keeps_the_budget(tmp_path):
    qm, written, float_bytes = _quantize(tmp_path, size_budget=0.5)
    assert _weight_dequantized(qm, "w1") and _weight_dequantized(qm, "w2")
    assert written <= 0.5 * float_bytes, (written, float_bytes)
    assert any("they stay quantized in the file, as the size budget counted them" in n and "conv1" in n
               for n in qm.notes)
