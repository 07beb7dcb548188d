"""A logarithm of values spanning many decades (a spectrogram front end in dB, openwakeword's melspectrogram.onnx):
:mod:`qlinear.graph.log_inputs` finds what it reads, :mod:`qlinear.ptq.logs` leaves a wide one's cone in float on
target ort. Judged against the float model run by ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from tiny_models import make_model

import qlinear
from qlinear.graph.ir import to_ir
from qlinear.graph.log_inputs import log_cones

N_FFT, HOP, BINS, MELS = 64, 32, 33, 8


def spectrogram(floor: float = 1e-10, squash: bool = False) -> onnx.ModelProto:
    """``audio [batch, 1024]`` -> STFT as two strided Conv (Hann-windowed cos/sin) -> power -> mel MatMul -> Clip at
    ``floor`` -> ``10 log10`` -> MatMul (a small classifier head) -> ``out [batch, frames, 4]``, with ``db`` a second
    output; ``squash``: a Sigmoid between the power and the mel MatMul (the cone stops there)."""
    k = np.arange(N_FFT)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * k / N_FFT)
    f = np.arange(BINS)[:, None]
    real = (win * np.cos(2 * np.pi * f * k / N_FFT)).astype(np.float32)[:, None, :]
    imag = (-win * np.sin(2 * np.pi * f * k / N_FFT)).astype(np.float32)[:, None, :]
    mel = np.zeros((BINS, MELS), np.float32)
    for j in range(MELS):
        mel[4 * j:4 * j + 6, j] = [0.3, 0.7, 1.0, 1.0, 0.7, 0.3][:len(mel[4 * j:4 * j + 6, j])]
    nodes = [helper.make_node("Unsqueeze", ["audio", "ax1"], ["a3"]),
             helper.make_node("Conv", ["a3", "Wr"], ["re"], strides=[HOP], kernel_shape=[N_FFT]),
             helper.make_node("Conv", ["a3", "Wi"], ["im"], strides=[HOP], kernel_shape=[N_FFT]),
             helper.make_node("Pow", ["re", "two"], ["re2"]), helper.make_node("Pow", ["im", "two"], ["im2"]),
             helper.make_node("Add", ["re2", "im2"], ["pw"]),
             helper.make_node("Transpose", ["pw"], ["pwt"], perm=[0, 2, 1])]
    last = "pwt"
    if squash:
        nodes.append(helper.make_node("Sigmoid", ["pwt"], ["sq"]))
        last = "sq"
    nodes += [helper.make_node("MatMul", [last, "M"], ["mel"]),
              helper.make_node("Clip", ["mel", "lo", ""], ["mc"]), helper.make_node("Log", ["mc"], ["ln"]),
              helper.make_node("Mul", ["ln", "ten_ln10"], ["db"]), helper.make_node("MatMul", ["db", "H"], ["out"])]
    rng = np.random.default_rng(0)
    return make_model(nodes, [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 1024])],
                      [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 31, 4]),
                       helper.make_tensor_value_info("db", TensorProto.FLOAT, ["batch", 31, MELS])],
                      {"ax1": np.array([1], np.int64), "Wr": real, "Wi": imag, "two": np.array(2, np.float32),
                       "M": mel, "lo": np.array(floor, np.float32),
                       "ten_ln10": np.array(10 / np.log(10), np.float32),
                       "H": (rng.standard_normal((MELS, 4)) / 20).astype(np.float32)})


def audio(n: int) -> np.ndarray:
    """Tones and noise whose loudness spans 80 dB from sample to sample and within each (a quiet tail)."""
    rng = np.random.default_rng(2)
    t = np.arange(1024) / 16000
    x = np.zeros((n, 1024), np.float32)
    for i in range(n):
        for _ in range(3):
            x[i] += 10 ** rng.uniform(-4, 0) * np.sin(2 * np.pi * rng.uniform(200, 7000) * t + rng.uniform(0, 6))
        x[i] += 10 ** rng.uniform(-5, -3) * rng.standard_normal(1024)
        x[i, 512:] *= 10 ** rng.uniform(-3, 0)
    return x


def _run(m: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"audio": x})


def test_the_cone_of_a_log_runs_back_to_the_graph_input_and_stops_at_a_squashing_function():
    assert log_cones(list(to_ir(spectrogram()).graph)) == \
        {"mc": ["mc", "mel", "pwt", "pw", "re2", "im2", "re", "im", "a3", "audio"]}
    assert log_cones(list(to_ir(spectrogram(squash=True)).graph)) == {"mc": ["mc", "mel", "sq"]}


def test_a_spectrogram_in_db_keeps_its_accuracy_with_its_power_in_float():
    """W8A8 rounds the quiet bins' power to zero and their dB to the floor (-100): the dB output was tens of dB off.
    With the cone in float (target ort) it is within a fraction of a dB of float; the head's input stays quantized."""
    m = spectrogram()
    x = audio(64)
    qm = qlinear.quantize(m, {"audio": x}, dict(calibration_samples=32, evaluation_samples=32))
    cone = {"mc", "mel", "pwt", "pw", "re2", "im2", "re", "im", "a3", "audio"}
    assert not cone & set(qm.plan.activations) and {"db", "out"} <= set(qm.plan.activations)
    assert all("Log of 'mc'" in qm.plan.skipped[t] for t in cone - {"mel"})   # mel: fused with its Clip
    assert any(n.startswith("Log of 'mc': its values span 1e-10") and "left in float" in n for n in qm.notes)
    quantized = {n.input[0] for n in qm.model.graph.node if n.op_type == "QuantizeLinear"}
    dequantized = {n.output[0] for n in qm.model.graph.node if n.op_type == "DequantizeLinear"}
    assert not cone & quantized and not {"Wr", "Wi", "M"} & dequantized
    # the head MatMul reads db's float value (db is a graph output: its readers read the value before its Q/DQ), so
    # ONNX Runtime runs it in float and its weight is written as float values (qlinear.graph.float_weights)
    assert "H" not in dequantized and "H" in {t.name for t in qm.model.graph.initializer} and "H" in qm.encodings
    assert any(n.endswith("the weights of the layers computing them: Wr, Wi, M") for n in qm.notes)
    f, q = _run(m, x[32:])[1], _run(qm.model, x[32:])[1]
    assert np.mean(np.abs(f - q)) < 0.5          # 0.13 dB; with the STFT weights at 8 bits 4.4 dB (leakage)
    eight = qlinear.quantize(m, {"audio": x}, dict(calibration_samples=32, evaluation_samples=32, overrides=[
        {"name": "*", "role": "activation", "type": "uint8"}]))   # an overrides rule keeps the tensors it sets
    assert {"mc", "pw", "re2", "re", "im", "audio"} <= set(eight.plan.activations)
    assert np.mean(np.abs(f - _run(eight.model, x[32:])[1])) > 5


def test_a_narrow_log_and_a_target_in_integers_keep_their_quantization():
    """Values within 2^16 of each other (a floor of 1e-2 over powers up to ~10^2..10^3) are quantized as before; on
    target qnn (integers throughout) a wide one is quantized with a warning naming it."""
    m = spectrogram(floor=1e-2)
    x = audio(64)
    qm = qlinear.quantize(m, {"audio": x}, dict(calibration_samples=32, evaluation_samples=32))
    assert {"mc", "pw", "re"} <= set(qm.plan.activations) and not any("Log of" in n for n in qm.notes)
    qnn = qlinear.quantize(spectrogram(), {"audio": x}, dict(calibration_samples=32, evaluation_samples=32,
                                                              target="qnn"))
    assert {"mc", "pw", "re"} <= set(qnn.plan.activations)
    assert any(n.startswith("WARNING: Log of 'mc'") and "target ort" in n for n in qnn.notes)


def test_debug_reads_the_float_cone_as_exact_not_as_a_drop():
    """The debug command on the model with its cone in float: those tensors equal float (SQNR inf) and no drop below
    their inputs is computed for them (it was -inf); the first jump is not among them."""
    from qlinear.ptq.report.debug import compare_models

    m = spectrogram()
    x = audio(48)
    qm = qlinear.quantize(m, {"audio": x}, dict(calibration_samples=32, evaluation_samples=16))
    r = compare_models(m, qm.model, {"audio": x[32:]})
    by = {t.tensor: t for t in r.tensors}
    assert {"pw", "mc"} <= set(by) and all(np.isinf(by[t].sqnr_db) and by[t].drop_db is None for t in ("pw", "mc"))
    assert r.first_jump not in {"pw", "mc", "re", "im", "audio"}


def test_the_cone_runs_through_sums_of_squares_masks_and_gathers():
    """onnx-asr's front ends (OnnxScript): pre-emphasis by GatherElements, frames' power by ReduceSumSquare, padding
    masked by Where; the cone reaches the waveform through all of them."""
    nodes = [helper.make_node("GatherElements", ["audio", "idx"], ["prev"], axis=1),
             helper.make_node("Mul", ["prev", "k"], ["kp"]), helper.make_node("Sub", ["audio", "kp"], ["emph"]),
             helper.make_node("Where", ["keep", "emph", "zero"], ["masked"]),
             helper.make_node("Reshape", ["masked", "shape"], ["frames"]),
             helper.make_node("ReduceSumSquare", ["frames", "ax"], ["power"], keepdims=0),
             helper.make_node("Clip", ["power", "lo", ""], ["pc"]), helper.make_node("Log", ["pc"], ["out"])]
    m = make_model(nodes, [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1024])],
                   [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16])],
                   {"idx": np.maximum(np.arange(1024) - 1, 0)[None].astype(np.int64), "k": np.array(0.97, np.float32),
                    "keep": np.ones((1, 1024), bool), "zero": np.array(0, np.float32),
                    "shape": np.array([1, 16, 64], np.int64), "ax": np.array([2], np.int64),
                    "lo": np.array(1e-10, np.float32)})
    assert log_cones(list(to_ir(m).graph)) == {"pc": ["pc", "power", "frames", "masked", "emph", "audio", "kp", "prev"]}
    x = audio(48)
    qm = qlinear.quantize(m, {"audio": x}, dict(calibration_samples=32, evaluation_samples=16))
    assert not {"pc", "power", "emph", "audio", "prev"} & set(qm.plan.activations)
    run = lambda mm: [ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"])  # noqa: E731
                      .run(None, {"audio": v[None]})[0] for v in x[32:]]
    eight = qlinear.quantize(m, {"audio": x}, dict(calibration_samples=32, evaluation_samples=16, overrides=[
        {"name": "*", "role": "activation", "type": "uint8"}]))
    f, q, q8 = (np.concatenate(run(mm)) for mm in (m, qm.model, eight.model))
    # ln power: 0.10 (the 8-bit grid of the output itself); with every activation at 8 bits 6.4
    assert np.abs(f - q).mean() < 0.2 and np.abs(f - q8).mean() > 2


def test_tflite_runs_a_wide_cone_as_float_islands_unless_full_integer(tmp_path):
    """Target tflite leaves the cone float too: the .tflite runs the STFT's 1-D convolutions, the power and the mel
    MatMul as float islands, and LiteRT's dB output is within a fraction of a dB of float (ONNX Runtime);
    --full-integer refuses the islands before work."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    from qlinear.tflite.export import convert

    m = spectrogram()
    x = audio(64)
    cfg = dict(calibration_samples=32, evaluation_samples=0, target="tflite", input_shapes={"audio": [1, 1024]})
    qm = qlinear.quantize(m, {"audio": x[:, None]}, cfg)
    assert not {"mc", "pw", "re"} & set(qm.plan.activations) and "db" in qm.plan.activations
    islands = convert(qm.model).islands
    assert any(i.endswith("(Conv)") for i in islands) and any(i.endswith("(Log)") for i in islands)
    qm.save(tmp_path / "out", report=False)
    it = litert.Interpreter(model_path=str(tmp_path / "out" / "model.tflite"))
    it.allocate_tensors()
    outs = {d["name"]: d["index"] for d in it.get_output_details()}
    f = _run(m, x[32:])[1]
    got = []
    for xi in x[32:]:
        it.set_tensor(it.get_input_details()[0]["index"], xi[None])
        it.invoke()
        got.append(it.get_tensor(outs["db"]))
    assert np.mean(np.abs(f - np.concatenate(got))) < 0.5
    with pytest.raises(qlinear.QlinearError, match=r"full_integer: node re2 \(Pow\) is not among the "
                                                    r"operators qlinear's TFLite export writes in integers"):
        qlinear.quantize(m, {"audio": x[:, None]}, dict(cfg, full_integer=True))
