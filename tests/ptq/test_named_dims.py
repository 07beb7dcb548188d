"""Inputs that declare one named dimension must give it one size: ``input_ids`` of length 12 beside an
``attention_mask`` of length 9 (both ``["batch", "sequence_length"]``) failed inside ONNX Runtime with a Mul's
broadcast error; it is now refused before any work, naming both inputs and the dimension. Placeholder names
(paddle2onnx's ``?``, or one name on two dims of one input) are not compared."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import qlinear
from qlinear.errors import DataError

RNG = np.random.default_rng(0)


def _two_inputs(dims_a, dims_b) -> onnx.ModelProto:
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], RNG.normal(0, 1, 16).astype(np.float32).tolist())
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("MatMul", ["m", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, dims_a),
                                       helper.make_tensor_value_info("b", TensorProto.FLOAT, dims_b)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T", 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_inputs_that_disagree_on_a_named_dimension_are_refused_before_work(tmp_path):
    m = _two_inputs(["batch", "seq", 4], ["batch", "seq", 4])
    data = {"a": RNG.normal(0, 1, (8, 12, 4)).astype(np.float32), "b": RNG.normal(0, 1, (8, 9, 4)).astype(np.float32)}
    with pytest.raises(DataError, match="inputs 'a' and 'b' both declare dimension 'seq' but give it 12 and 9"):
        qlinear.quantize(m, data, dict(calibration_samples=4, evaluation_samples=4))
    folder = tmp_path / "samples"   # the same in a folder of .npz samples
    folder.mkdir()
    for i in range(4):
        np.savez(folder / f"{i}.npz", a=data["a"][i:i + 1], b=data["b"][i:i + 1])
    with pytest.raises(DataError, match="0.npz: inputs 'a' and 'b' both declare dimension 'seq'"):
        qlinear.quantize(m, folder, dict(calibration_samples=2, evaluation_samples=2))


def test_equal_lengths_and_placeholder_names_pass():
    data = {"a": RNG.normal(0, 1, (8, 12, 4)).astype(np.float32), "b": RNG.normal(0, 1, (8, 12, 4)).astype(np.float32)}
    qm = qlinear.quantize(_two_inputs(["batch", "seq", 4], ["batch", "seq", 4]), data,
                          dict(calibration_samples=4, evaluation_samples=4))
    assert qm.model is not None
    # '?' on two dims of one input (paddle2onnx) names nothing: a [N, 6, 4] beside a [N, 1, 4] broadcasts fine
    data = {"a": RNG.normal(0, 1, (8, 6, 4)).astype(np.float32), "b": RNG.normal(0, 1, (8, 1, 4)).astype(np.float32)}
    qm = qlinear.quantize(_two_inputs(["N", "?", "?"], ["N", "?", 4]), data,
                          dict(calibration_samples=4, evaluation_samples=4))
    assert qm.model is not None
