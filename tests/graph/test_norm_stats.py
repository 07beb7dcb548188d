"""A decomposed normalization's statistics stay float (:mod:`qlinear.graph.norm_stats`): which tensors they are,
and what quantizing them did to a jax2tf-style LayerNorm (``E[x^2] - E[x]^2``, magika's form)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from tiny_models import make_model, tiny_encoder

import qlinear
from qlinear.graph.ir import to_ir
from qlinear.graph.norm_stats import norm_statistics
from qlinear.graph.plan import make_plan


def jax_layernorm() -> onnx.ModelProto:
    """``x [batch, 16]`` -> MatMul -> ``h`` (mean ~30, std ~1) -> LayerNorm as ``(h - E[h]) / sqrt(max(E[h^2] -
    E[h]^2, 0) + eps)`` -> MatMul -> ``out [batch, 4]``."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h0"]), helper.make_node("Add", ["h0", "shift"], ["h"]),
             helper.make_node("ReduceSum", ["h", "ax"], ["s1"], keepdims=1),
             helper.make_node("Mul", ["s1", "inv_n"], ["mean"]),
             helper.make_node("Mul", ["h", "h"], ["hh"]), helper.make_node("ReduceSum", ["hh", "ax"], ["s2"],
                                                                            keepdims=1),
             helper.make_node("Mul", ["s2", "inv_n"], ["ex2"]), helper.make_node("Mul", ["mean", "mean"], ["m2"]),
             helper.make_node("Sub", ["ex2", "m2"], ["d"]), helper.make_node("Max", ["d", "zero"], ["var"]),
             helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Reciprocal", ["sd"], ["rs"]), helper.make_node("Sub", ["h", "mean"], ["c"]),
             helper.make_node("Mul", ["c", "rs"], ["y"]), helper.make_node("MatMul", ["y", "W2"], ["out"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                      [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4])],
                      {"W": (rng.standard_normal((16, 16)) / 4).astype(np.float32),
                       "shift": np.full(16, 30.0, np.float32), "ax": np.array([1], np.int64),
                       "inv_n": np.array(1 / 16, np.float32), "zero": np.array(0, np.float32),
                       "eps": np.array(1e-6, np.float32),
                       "W2": (rng.standard_normal((16, 4)) / 2).astype(np.float32)})


def test_statistics_of_a_layernorm_and_nothing_of_its_data():
    assert norm_statistics(list(to_ir(jax_layernorm()).graph)) == \
        {"s1", "mean", "hh", "s2", "ex2", "m2", "d", "var", "ve", "sd", "rs"}
    enc = tiny_encoder(decomposed_ln=True)
    stats = norm_statistics(list(to_ir(enc).graph))
    assert stats == {"sq", "var", "ve", "sd"}
    plan = make_plan(enc, placement="all", target="ort")
    assert not stats & set(plan.activations) and all("statistic" in plan.skipped[t] for t in stats)
    assert stats <= set(make_plan(enc, placement="all", target="qnn").activations)      # integers, as AIMET does
    assert stats <= set(make_plan(enc, placement="all", target="tflite", float_stats=False).activations)  # full int


def test_layernorm_written_as_e_x2_minus_mean2_keeps_its_accuracy():
    """With the statistics at 8 bits the variance ``E[h^2] - E[h]^2`` of values near 30 was noise.
    Left float, the model agrees with float as a W8A8 model should (ONNX Runtime runs both)."""
    m = jax_layernorm()
    x = np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=32, evaluation_samples=32))
    assert {"h", "c", "y"} & set(qm.plan.activations)            # the data is quantized
    run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
        None, {"x": x[32:]})[0].astype(np.float64)
    f, q = run(m), run(qm.model)
    assert 10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2)) > 18   # 22 dB; 11 dB with the statistics at 8 bits


def test_qnn_quantizes_the_statistics_at_16_bits():
    """QNN's HTP runs every tensor in integers: the statistics stay quantized there, at 16 bits over their range
    (with a note), and the model keeps its accuracy; at 8 bits (an overrides rule) it does not."""
    m = jax_layernorm()
    x = np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32)
    stats = norm_statistics(list(to_ir(m).graph))
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=32, evaluation_samples=32, target="qnn"))
    assert set(qm.plan.norm_stats) <= stats and {"var", "ex2", "m2"} <= set(qm.plan.norm_stats)
    dtypes = {e.name: e.dtype for e in qm.encodings.activations}
    assert all(dtypes[t] == "uint16" for t in qm.plan.norm_stats) and dtypes["y"] == "uint8"
    assert any(n.startswith(f"{len(qm.plan.norm_stats)} statistics of decomposed normalizations") for n in qm.notes)
    eight = qlinear.quantize(m, {"x": x}, dict(calibration_samples=32, evaluation_samples=32, target="qnn",
                                               overrides=[{"name": "*", "role": "activation", "type": "uint8"}]))
    assert all(e.dtype == "uint8" for e in eight.encodings.activations)       # an overrides rule keeps its type
    run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
        None, {"x": x[32:]})[0].astype(np.float64)
    f = run(m)
    db = [10 * np.log10(np.sum(f ** 2) / np.sum((f - run(q.model)) ** 2)) for q in (qm, eight)]
    assert db[0] > 18 and db[0] > db[1] + 6, db


def magnitude_model() -> onnx.ModelProto:
    """``audio [batch, 1024]`` -> STFT as two strided Conv (cos/sin rows) -> magnitude ``sqrt(re^2 + im^2)`` ->
    Conv (an encoder layer, silero-vad's shape) -> ``out [batch, 8, 31]``."""
    n_fft, hop, bins = 64, 32, 33
    k, f = np.arange(n_fft), np.arange(bins)[:, None]
    win = 0.5 - 0.5 * np.cos(2 * np.pi * k / n_fft)
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Unsqueeze", ["audio", "ax1"], ["a3"]),
             helper.make_node("Conv", ["a3", "Wr"], ["re"], strides=[hop], kernel_shape=[n_fft]),
             helper.make_node("Conv", ["a3", "Wi"], ["im"], strides=[hop], kernel_shape=[n_fft]),
             helper.make_node("Pow", ["re", "two"], ["re2"]), helper.make_node("Pow", ["im", "two"], ["im2"]),
             helper.make_node("Add", ["re2", "im2"], ["pw"]), helper.make_node("Sqrt", ["pw"], ["mag"]),
             helper.make_node("Conv", ["mag", "We"], ["out"], kernel_shape=[1])]
    return make_model(nodes, [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 1024])],
                      [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 8, 31])],
                      {"ax1": np.array([1], np.int64),
                       "Wr": (win * np.cos(2 * np.pi * f * k / n_fft)).astype(np.float32)[:, None, :],
                       "Wi": (-win * np.sin(2 * np.pi * f * k / n_fft)).astype(np.float32)[:, None, :],
                       "two": np.array(2, np.float32),
                       "We": (rng.standard_normal((8, bins, 1)) / 6).astype(np.float32)})


def test_a_magnitude_written_out_keeps_its_squares_float():
    """silero-vad's STFT magnitude: the squares and their sum span the square of the magnitude's range, and 8 bits
    over them round the quiet bins to zero before the root magnifies it. They stay float on target ort (the
    magnitude and the layers around it stay quantized); at 8 bits (target qnn, which quantizes them, with an
    overrides rule for 8 bits) the output loses > 6 dB."""
    m = magnitude_model()
    assert norm_statistics(list(to_ir(m).graph)) == {"re2", "im2", "pw"}
    rng = np.random.default_rng(3)
    t = np.arange(1024) / 16000
    x = np.stack([sum(10 ** rng.uniform(-3, 0) * np.sin(2 * np.pi * rng.uniform(100, 7000) * t) for _ in range(3))
                  + 10 ** rng.uniform(-4, -2) * rng.standard_normal(1024) for _ in range(64)]).astype(np.float32)
    qm = qlinear.quantize(m, {"audio": x}, dict(calibration_samples=32, evaluation_samples=32))
    assert not {"re2", "im2", "pw"} & set(qm.plan.activations) and {"re", "im", "mag"} <= set(qm.plan.activations)
    eight = qlinear.quantize(m, {"audio": x}, dict(calibration_samples=32, evaluation_samples=32, target="qnn",
                                                   overrides=[{"name": "*", "role": "activation", "type": "uint8"}]))
    assert {"re2", "im2", "pw"} <= set(eight.plan.activations)
    run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
        None, {"audio": x[32:]})[0].astype(np.float64)
    f = run(m)
    db = [10 * np.log10(np.sum(f ** 2) / np.sum((f - run(q.model)) ** 2)) for q in (qm, eight)]
    assert db[0] > 25 and db[0] > db[1] + 6, db
