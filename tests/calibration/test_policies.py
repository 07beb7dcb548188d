"""Policies against their tools: ORT's compute_scale_zp and calibrators (equal, not approximately), AIMET's
worked edge cases (measured on 2.42, notes aimet.md §2.2), TFLite's converter formulas (notes int8-kernels.md §3)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnxruntime.quantization import quant_utils as QU

import qlinear
from qlinear.calibration import policies as P
from qlinear.errors import CalibrationError

ORT_TYPES = {"uint8": QU.QuantType.QUInt8, "int8": QU.QuantType.QInt8, "uint16": QU.QuantType.QUInt16,
             "int16": QU.QuantType.QInt16, "int4": QU.QuantType.QInt4, "uint4": QU.QuantType.QUInt4}

f32 = st.floats(-1e4, 1e4, width=32, allow_subnormal=True)


@given(f32, f32, st.sampled_from(sorted(ORT_TYPES)), st.booleans(), st.booleans())
def test_onnxruntime_policy_equals_compute_scale_zp(a, b, dtype, symmetric, reduce_range):
    lo, hi = np.float32(min(a, b)), np.float32(max(a, b))
    qt = QU.tensor_proto_to_array  # noqa: F841 - keep import used
    onnx_t = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8, "uint16": TensorProto.UINT16,
              "int16": TensorProto.INT16, "int4": TensorProto.INT4, "uint4": TensorProto.UINT4}[dtype]
    qmin, qmax = QU.get_qmin_qmax_for_qType(onnx_t, reduce_range=reduce_range, symmetric=symmetric)
    zp, scale = QU.compute_scale_zp(np.array(lo), np.array(hi), np.array(qmin), np.array(qmax), symmetric=symmetric)
    got = P.onnxruntime(np.array(lo), np.array(hi), dtype, symmetric=symmetric, reduce_range=reduce_range)
    assert float(got.scale) == float(scale) and int(got.zero_point) == int(zp)


def _calib_model(shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    n = helper.make_node("Relu", ["x"], ["r"])
    n2 = helper.make_node("Neg", ["r"], ["y"])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, list(shape))
    m = helper.make_model(helper.make_graph([n, n2], "g", [x], [y], value_info=[r]), opset_imports=[helper.make_opsetid("", 17)])
    return m


@pytest.mark.parametrize("moving_average", [False, True])
def test_minmax_equals_ort_minmax_calibrater(tmp_path, moving_average):
    from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator

    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((1, 3, 8, 8)) * rng.uniform(0.1, 5)).astype(np.float32) for _ in range(12)]
    p = tmp_path / "m.onnx"
    onnx.save(_calib_model((1, 3, 8, 8)), p)

    class R(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": b} for b in batches])

        def get_next(self):
            return next(self.it, None)

    cal = create_calibrator(str(p), ["Relu", "Neg"], augmented_model_path=str(tmp_path / "aug.onnx"),
                            calibrate_method=CalibrationMethod.MinMax,
                            extra_options={"moving_average": moving_average})
    cal.collect_data(R())
    ranges = cal.compute_data()
    method = "moving_average" if moving_average else "minmax"
    for name, per_batch in (("x", batches), ("y", [-np.maximum(b, 0) for b in batches])):
        lo, hi = (np.asarray(v).reshape(()) for v in ranges[name].range_value)
        e = qlinear.calibrate(per_batch, "uint8", method=method, policy="onnxruntime")
        zp, scale = QU.compute_scale_zp(np.array(lo), np.array(hi), np.array(0, np.uint8), np.array(255, np.uint8))
        assert float(e.scale) == float(scale) and int(e.zero_point) == int(zp), name


@pytest.mark.parametrize("data, bits, kind, delta, offset", [
    ([-1, .25, 2], 8, "asym", 3 / 255, -85),
    ([-1, .25, 2], 8, "sym", 2 / 127, -128),
    ([-2, .25, 1], 8, "sym", 2 / 128, -128),
    ([-2, .25, 1], 8, "asym", 3 / 255, -170),
    ([.5, 1, 3], 8, "asym", 3 / 255, 0),
    ([-3, -1], 8, "asym", 3 / 255, -255),
    ([0, 0], 8, "asym", 1.1920928955078125e-07, 0),
    ([-1e-6, 1e-6], 8, "asym", 1.1920928955078125e-07, -8),
    ([-1, .25, 2], 2, "asym", 1, -1),
    ([-1, .25, 2], 2, "sym", 1, -2),
    ([-1, .25, 2], 4, "asym", 0.2, -5),
    ([-1, .25, 2], 4, "sym", 2 / 7, -8),
    ([-1, .25, 2], 16, "asym", 3 / 65535, -21845),
    ([-1, .25, 2], 16, "sym", 2 / 32767, -32768),
])
def test_aimet_policy_worked_examples(data, bits, kind, delta, offset):
    """The table measured on AIMET 2.42 (notes aimet.md §2.2)."""
    sym = kind == "sym"
    dt = f"{'int' if sym else 'uint'}{bits}"
    e = qlinear.calibrate(np.array(data, np.float32), dt, symmetric=sym)
    legacy = -int(e.zero_point) - (2 ** (bits - 1) if sym else 0)
    assert legacy == offset
    np.testing.assert_allclose(float(e.scale), delta, rtol=1e-6)


def test_aimet_strict_and_batches():
    e = qlinear.calibrate(np.array([-1, .25, 2], np.float32), "int8", symmetric=True, strict=True)
    np.testing.assert_allclose(float(e.scale), 2 / 127, rtol=1e-7)
    e = qlinear.calibrate([np.array([-1, .5], np.float32), np.array([.2, 3], np.float32)], "uint8")
    assert int(e.zero_point) == 64 and np.isclose(float(e.scale), 4 / 255)


def test_tflite_policy():
    # activations: rmin -1, rmax 3 -> scale 4/255, zero point round(-128 + 63.75) = -64 (min-based, ties away)
    e = qlinear.calibrate(np.array([-1, 3], np.float32), "int8", policy="tflite")
    assert float(e.scale) == float(np.float32(4 / 255)) and int(e.zero_point) == -64
    # the max-based zero point wins when it is closer (MLIR): rmin -0.1, rmax 25.4
    lo, hi = -0.1, 25.4
    s = (hi - lo) / 255
    zmin, zmax = -128 - lo / s, 127 - hi / s
    use_min = (128 + abs(lo / s)) < (127 + abs(hi / s))
    z = zmin if use_min else zmax
    e = qlinear.calibrate(np.array([lo, hi], np.float32), "int8", policy="tflite")
    assert int(e.zero_point) == int(np.copysign(np.floor(abs(z) + 0.5), z))
    # weights: symmetric per-channel absmax/127, zero point 0
    w = np.array([[-0.5, 0.25], [2.0, -4.0]], np.float32)
    e = qlinear.calibrate(w, "int8", policy="tflite", symmetric=True, axis=0)
    assert np.array_equal(e.scale.astype(np.float32), np.array([0.5, 4.0], np.float32) / np.float32(127))
    q = e.quantize(w)
    assert q.min() >= -127


def test_tflite_weights_of_a_dead_channel_take_the_converters_smallest_range():
    """The MLIR converter widens every range of at most 1e-6 to [-5e-7, 5e-7] (``ExpandVerySmallRange`` in
    ``GetQuantizedType``, weights included): an all-zero channel and one decayed to subnormals (PP-OCRv4's
    recognizer has 48 such channels) get ``1e-6/254``, not 1.0 or a subnormal scale whose int32 bias scale
    ``s_in s_w`` is 0 in float32 with 16-bit activations."""
    w = np.array([[0.0, 0.0], [3e-39, -1e-39], [2e-7, -4e-7], [5e-7, 1e-3]], np.float32)
    e = qlinear.calibrate(w, "int8", policy="tflite", symmetric=True, axis=0)
    small = np.float32(1e-6 / 254)
    assert np.array_equal(e.scale.astype(np.float32), np.array([small, small, small, np.float32(1e-3) / 127],
                                                               np.float32))
    assert np.all(e.quantize(w)[:2] == 0)
    assert np.float32(np.float64(e.scale[1]) * (1 / 65535)) > 0   # the bias scale of a 16-bit input survives


@given(st.lists(st.floats(-100, 100, width=32), min_size=1, max_size=50))
def test_dynamic_policy_agrees_with_dynamic_quantize_linear(vals):
    x = np.array(vals, np.float32)
    _, s, z = qlinear.dynamic_quantize_linear(x)
    if s == 0:  # (max - min) / 255 underflows (subnormal data): no valid encoding exists, a clear error instead
        with pytest.raises(CalibrationError, match="underflows"):
            qlinear.calibrate(x, "uint8", policy="dynamic")
        return
    e = qlinear.calibrate(x, "uint8", policy="dynamic")
    assert np.float32(e.scale) == s and int(e.zero_point) == int(z)
