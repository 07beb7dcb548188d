"""A float graph input that is 0 on every calibration sample (a recurrent state or a KV cache given as zeros, as the
first step of a sequence has them) got a grid ~1e-7 wide from its [0, 0] range: in use, any value it then takes
rounds to 0, silently (ONNX Runtime's quantize_static picks scale 1.0 there: a grid nothing was measured for either).
Now it is left float with a note naming it, or refused with --full-integer. Checked by running the written model in
ONNX Runtime on a non-zero state: it follows the float model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import qlinear
from qlinear.errors import CalibrationError

RNG = np.random.default_rng(0)


def _model() -> onnx.ModelProto:
    w = RNG.normal(0, 1, (4, 2, 1, 1)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "state"], ["a"]), helper.make_node("Conv", ["a", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [onnx.numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _data() -> dict[str, np.ndarray]:
    x = RNG.normal(0, 1, (40, 2, 4, 4)).astype(np.float32)
    return {"x": x, "state": np.zeros_like(x)}


@pytest.mark.parametrize("target", ["ort", "tflite", "qnn"])
def test_an_input_that_is_zero_on_every_calibration_sample_is_left_float(target, tmp_path):
    m = _model()
    qm = qlinear.quantize(m, _data(), dict(calibration_samples=16, evaluation_samples=8, target=target))
    assert "state" not in {e.name for e in qm.encodings}
    assert any(n.startswith("graph input(s) state: 0 on every calibration sample") for n in qm.notes), qm.notes
    qm.save(tmp_path, report=False)
    x = RNG.normal(0, 1, (1, 2, 4, 4)).astype(np.float32)
    state = 0.3 * RNG.normal(0, 1, (1, 2, 4, 4)).astype(np.float32)   # the state the next step carries (within
    # the range calibrated for x + state: the quantizer after the Add stays as measured)
    run = lambda p: ort.InferenceSession(p, providers=["CPUExecutionProvider"]).run(None, {"x": x, "state": state})[0]  # noqa: E731
    want, got = run(m.SerializeToString()), run(str(tmp_path / "model.qdq.onnx"))
    sqnr = 10 * np.log10(np.sum(want ** 2) / np.sum((got - want) ** 2))
    assert sqnr > 20, sqnr   # the state quantized on its [0, 0] grid: its share is lost (5-12 dB)


def test_full_integer_refuses_an_input_that_is_zero_on_every_calibration_sample():
    with pytest.raises(CalibrationError, match="graph input.*state.*0 on every calibration sample.*--full-integer"):
        qlinear.quantize(_model(), _data(), dict(calibration_samples=16, evaluation_samples=8, target="tflite",
                                                  full_integer=True))


def test_an_input_with_values_is_quantized_as_before():
    d = _data()
    d["state"] = RNG.normal(0, 1, d["x"].shape).astype(np.float32)
    qm = qlinear.quantize(_model(), d, dict(calibration_samples=16, evaluation_samples=8))
    assert "state" in {e.name for e in qm.encodings}
    assert not any("0 on every calibration sample" in n for n in qm.notes)
