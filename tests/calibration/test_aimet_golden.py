"""Min-max encodings recomputed from AIMET's own model and calibration data equal AIMET 2.42's golden files
(notes aimet.md §4.1: offsets equal, scales to rtol 1e-6)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import qlinear
from qlinear import encodings as E
from qlinear import graph as G

CASES = ["per_tensor_tf", "per_channel_tf", "blockwise_tf", "lpbq_tf"]
# Activations observed in AIMET's QuantSim see the fake-quantized weights. The output ``y`` (after the MatMul whose
# weight AIMET quantizes in its own simulation path) is 0.04-3 % away from every reconstruction tried here
# (float, weights quantized, inputs quantized), so it is left out; see the README notes.
ACTS = ["x", "relu1_out", "gap_out", "flat_out", "relu2_out"]


@pytest.fixture(scope="module")
def gold(shared_dir):
    d = shared_dir / "aimet-golden"
    m = onnx.load(d / "tiny_model.onnx")
    return d, m, np.load(d / "calib_inputs.npz")["x"]


def _weight_args(e: E.Encoding, w: np.ndarray) -> dict:
    if e.granularity == "per_tensor":
        return {}
    if e.granularity == "per_channel":
        return {"axis": e.axis}
    return {"block_size": e.block_size, "block_axis": e.axis}


@pytest.mark.parametrize("case", CASES)
def test_param_encodings_equal_aimet(gold, case):
    d, m, _ = gold
    es = G.load_encodings(d / f"aimet-onnx-2.42.0_{case}_v2.0.0.encodings", d / "tiny_model.onnx")
    weights = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    checked = 0
    for e in es.params:
        if e.dtype == "int32":
            continue
        w = weights[e.name]
        got = qlinear.calibrate(w, e.dtype, symmetric=True, name=e.name, role="param",
                                lpbq_scale_bits=4 if e.granularity == "lpbq" else None, **_weight_args(e, w))
        want_scale = e.scale
        got_scale = got.scale
        if e.granularity == "per_block":  # AIMET keeps size-1 dims where ONNX has the full dim
            got_scale = got_scale.reshape(want_scale.shape) if got_scale.size == want_scale.size else got_scale
        np.testing.assert_allclose(got_scale, want_scale, rtol=1e-6, err_msg=e.name)
        assert np.array_equal(got.zero_point_or_zeros.reshape(-1), e.zero_point_or_zeros.reshape(-1)), e.name
        if e.int_scale is not None:
            assert np.array_equal(got.int_scale, e.int_scale), e.name
        checked += 1
    assert checked == 3


# LPBQ is left out here: downstream of AIMET's LPBQ weights relu2_out is 1e-4 relative away (its simulation of the
# int-scale product is not reproducible through ONNX DequantizeLinear); its param encodings are checked above.
@pytest.mark.parametrize("case", CASES[:3])
def test_activation_encodings_equal_aimet(gold, case):
    d, m, xs = gold
    es = G.load_encodings(d / f"aimet-onnx-2.42.0_{case}_v2.0.0.encodings", d / "tiny_model.onnx")
    sim = G.apply(es.with_encodings(e for e in es.params if e.dtype != "int32"), m)  # AIMET: weights quantized
    for n in ACTS[1:]:
        sim.graph.output.append(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    s = ort.InferenceSession(sim.SerializeToString(), providers=["CPUExecutionProvider"])
    obs = {n: qlinear.calibration.MinMaxObserver() for n in ACTS}
    for i in range(len(xs)):  # 8 batches, streamed
        out = dict(zip([o.name for o in s.get_outputs()], s.run(None, {"x": xs[i]})))
        out["x"] = xs[i]
        for n in ACTS:
            obs[n].update(out[n])
    for n in ACTS:
        e = es[n]
        got = obs[n].compute(e.dtype)
        assert int(got.zero_point) == int(e.zero_point_or_zeros), n
        np.testing.assert_allclose(got.scale, e.scale, rtol=1e-6, err_msg=n)


def test_fp8_weight_scale_is_amax_over_448(gold):
    d, m, _ = gold
    es = G.load_encodings(d / "aimet-onnx-2.42.0_fp8_weight_v2.0.0.encodings", d / "tiny_model.onnx")
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}["fc1.weight"]
    got = qlinear.calibrate(w, "float8e4m3fn", axis=0, symmetric=True)
    np.testing.assert_allclose(got.scale, es["fc1.weight"].scale, rtol=1e-6)


def test_int32_bias_scale_is_input_times_weight_scale(gold):
    d, _, _ = gold
    es = G.load_encodings(d / "aimet-onnx-2.42.0_per_channel_tf_v2.0.0.encodings", d / "tiny_model.onnx")
    got = qlinear.calibration.bias_scale(es["x"].scale, es["conv.weight"].scale)
    np.testing.assert_allclose(got, es["conv.bias"].scale, rtol=1e-6)
