"""int32 accumulators: the weight-scale rule of the pipeline, the checker's proof, and run_integer's overflow report
(issue 14 item 1). The worst case the checker computes is compared with the accumulator actually reached by the
input that maximises it, computed independently with ONNX Runtime's ConvInteger/MatMulInteger."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear import encodings as E
from qlinear import graph as G
from qlinear.calibration.bias import BIAS_LIMIT, I32_MAX, fit_accumulator
from qlinear.cli.main import EXIT_PROBLEMS, main
from qlinear.errors import EncodingError, OverflowRiskError
from qlinear.examples import DATA, MODEL
from qlinear.graph import check_integer
from qlinear.kernels import run_integer


def _matmul_model(k: int, n: int = 4, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = rng.choice([-1.0, 1.0], size=(k, n)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _worst_input_acc(w_q: np.ndarray, zx: int) -> int:
    """The largest |accumulator| any uint8 input reaches, by ONNX Runtime's MatMulInteger: per column, x = 255 where
    the weight is positive and 0 elsewhere, and the reverse."""
    k, n = w_q.shape
    rows = [np.where(w_q[:, c] > 0, 255, 0) for c in range(n)] + [np.where(w_q[:, c] > 0, 0, 255) for c in range(n)]
    x = np.stack(rows).astype(np.uint8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["x", "w", "zx"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [2 * n, k])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                          [numpy_helper.from_array(w_q.astype(np.int8), "w"), numpy_helper.from_array(np.uint8(zx), "zx")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return int(np.abs(y.astype(np.int64)).max())


def test_checker_bound_is_the_reachable_worst_case_and_flags_overflow():
    k = 140_000  # a long int8 reduction: 255 * 127 * ~70000 same-sign products pass 2^31
    m = _matmul_model(k)
    es = E.EncodingSet((E.Encoding("x", "uint8", scale=0.01, zero_point=0),
                        E.Encoding("w", "int8", scale=np.full(4, 1 / 127), axis=1, role="param")))
    q = G.apply(es, m)
    res = check_integer(q)
    (lc,) = res.layers
    assert not res.ok and lc.accumulator == "int32" and lc.bound > I32_MAX
    w_q = numpy_helper.to_array(next(t for t in q.graph.initializer if t.name.endswith("_quantized")))
    # the bound is reached by an input: it is the worst case, exactly (ORT's int32 output wraps past 2^31, so compare
    # on a slice that fits)
    half = w_q[: k // 4]
    es2 = E.EncodingSet((E.Encoding("x", "uint8", scale=0.01, zero_point=0),
                         E.Encoding("w", "int8", scale=np.full(4, 1 / 127), axis=1, role="param")))
    q2 = G.apply(es2, _matmul_model(k // 4))
    assert check_integer(q2).layers[0].bound == _worst_input_acc(half, 0) < I32_MAX
    with pytest.raises(OverflowRiskError, match="int32 accumulator overflow"):
        x = np.where(w_q[:, lc.channel] > 0, 2.55, 0.0).astype(np.float32)[None]
        run_integer(q, {"x": x}, mode="f32_rne")


def test_pipeline_raises_the_weight_scale_until_nothing_can_overflow():
    k = 140_000
    m = _matmul_model(k)
    x = np.random.default_rng(1).uniform(0, 2.55, (8, k)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=8, evaluation_samples=0))
    assert qm.integer_check.ok and any("raised the weight scale" in n for n in qm.notes)
    lc = qm.integer_check.layers[0]
    assert 0 < lc.bound <= I32_MAX and lc.headroom_bits >= 0
    run_integer(qm.model, {"x": x[:1]}, mode="fixed_double")  # no overflow now


def _conv_with_dead_channel() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    w[1] = rng.normal(0, 1e-10, (3, 3, 3))  # a channel BatchNorm folding left nearly zero
    b = np.array([0.1, 2.0, -0.3, 0.05], np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["ort", "tflite", "qnn"])
@pytest.mark.parametrize("weights", ["per-channel", "per-tensor", "per-block"])
def test_dead_channel_bias_fits_int32_for_every_target(target, weights):
    m = _conv_with_dead_channel()
    x = np.random.default_rng(2).normal(0, 1, (16, 3, 8, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=12, evaluation_samples=4, target=target,
                                            weights=weights, block_size=2))
    assert qm.integer_check.ok
    b = qm.encodings["b"]
    bq = np.rint(numpy_helper.to_array(next(t for t in qm.model.graph.initializer if t.name == "b_quantized")))
    assert np.abs(bq).max() <= BIAS_LIMIT  # TFLite's margin: half the int32 range
    ref = qm.integer_check.layers[0]
    assert ref.bound <= I32_MAX
    y = run_integer(qm.model, {"x": x[:2]}, mode="fixed_double")["y"]
    f = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x[:2]})[0]
    assert np.corrcoef(y.ravel(), f.ravel())[0, 1] > 0.99
    assert b.dtype == "int32"


def test_fit_accumulator_rule_per_channel():
    w = np.array([[1e-9, -1e-9], [0.5, -0.25]], np.float32)
    e = qlinear.calibrate(w, "int8", symmetric=True, axis=0, role="param", name="w")
    bias = np.array([3.0, 0.1])
    e2, ratio = fit_accumulator(e, w, bias, 0.02, (-128, 127), 0)
    assert ratio[0] > 1 and ratio[1] == 1
    s = e2.scale
    assert float(np.float32(s[0])) >= bias[0] / (0.02 * BIAS_LIMIT) and s[1] == e.scale[1]


def test_apply_refuses_a_bias_that_does_not_fit_int32():
    m = _conv_with_dead_channel()
    es = E.EncodingSet((E.Encoding("x", "uint8", scale=0.02, zero_point=128),
                        E.Encoding("w", "int8", scale=np.array([0.01, 1e-12, 0.01, 0.01]), axis=0, role="param"),
                        E.Encoding("b", "int32", scale=0.02 * np.array([0.01, 1e-12, 0.01, 0.01]), axis=0,
                                   role="param")))
    with pytest.raises(EncodingError, match="b: bias value 2.0 .* does not fit in int32"):
        G.apply(es, m)


def test_cli_check(tmp_path, capsys):
    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=8, evaluation_samples=0))
    qm.save_onnx(tmp_path / "q.onnx")
    assert main(["check", str(tmp_path / "q.onnx")]) == 0
    out = capsys.readouterr().out
    assert "no accumulator can overflow" in out and "headroom" in out
    m = _matmul_model(140_000)
    es = E.EncodingSet((E.Encoding("x", "uint8", scale=0.01, zero_point=0),
                        E.Encoding("w", "int8", scale=np.full(4, 1 / 127), axis=1, role="param")))
    onnx.save(G.apply(es, m), tmp_path / "bad.onnx")
    assert main(["check", str(tmp_path / "bad.onnx")]) == EXIT_PROBLEMS
    assert "can overflow" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ort", "tflite", "qnn"])
@pytest.mark.parametrize("weights", ["per-channel", "per-tensor", "per-block"])
def test_efficientnet_no_overflow_every_target(shared_dir, target, weights):
    qm = qlinear.quantize(shared_dir / "models" / "efficientnet-lite0.onnx", shared_dir / "data" / "imagenet-dev",
                          dict(calibration_samples=8, evaluation_samples=0, target=target, weights=weights))
    assert qm.integer_check.ok, str(qm.integer_check)
    # every Conv and the Gemm an integer layer on every target (per tensor on ort too: the Convs before the
    # per-channel Max/Min clamps of equalization take the clamp's grid, tests/graph/test_unfused_clamps.py), so none
    # has its weight written float for ONNX Runtime
    assert not [n for n in qm.notes if "run in float in ONNX Runtime (" in n]
    assert len([lc for lc in qm.integer_check.layers if lc.accumulator == "int32"]) == 50


def test_lpbq_accumulator_sums_the_expanded_8bit_integers():
    """An LPBQ layer runs on the 8-bit integers its blocks expand to (``w_q * int_scale``, at the per-channel float
    scale its int32 bias is at): the bound is the worst accumulator of those integers, reached by an input (ONNX
    Runtime's MatMulInteger on the expanded weights), not of the int4 values."""
    k, n, b = 64, 4, 16
    rng = np.random.default_rng(3)
    m = _matmul_model(k, n)
    w = rng.normal(0, 1, (k, n)).astype(np.float32)
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    ints = rng.integers(1, 17, (k // b, n))
    ints[0] = 16
    pcs = (np.abs(w).max(0, keepdims=True) / (7 * 16)).astype(np.float64)
    es = E.EncodingSet((E.Encoding("x", "uint8", scale=0.01, zero_point=0),
                        E.Encoding("w", "int4", scale=pcs, int_scale=ints, axis=0, block_size=b, role="param",
                                   decompressed_bits=8)))
    (lc,) = check_integer(G.apply(es, m)).layers
    w4 = es["w"].quantize(w).astype(np.int64)
    expanded = w4 * np.repeat(ints, b, axis=0)
    assert np.abs(expanded).max() <= 128 and lc.bound == _worst_input_acc(expanded, 0)
    assert lc.bound > _worst_input_acc(w4, 0)
