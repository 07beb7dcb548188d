"""G.apply with AIMET's int2 shifted grid (stored exactly on int4 with scale/2): the model ONNX Runtime runs at its
default optimization level dequantizes every weight to AIMET's own fake-quantized numbers, bit for bit, per-tensor,
per-channel and per-block, on the weights and on a probe of grid points and exact ties (tests/encodings/aimet_formats,
written by aimet-onnx 2.42 QcQuantizeOp.quantize_dequantize, which rounds ties half away from zero)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from qlinear import encodings as E
from qlinear import graph as G
from qlinear.core import granularity as gr
from qlinear.encodings.model import expand_block_scale

DATA = Path(__file__).parents[1] / "encodings" / "aimet_formats"
MODEL = DATA / "probe_model.onnx"
WEIGHTS = ("conv.weight", "fc1.weight", "fc2.weight")


def _with_weights(values: dict[str, np.ndarray]) -> onnx.ModelProto:
    m = onnx.load(MODEL)
    for t in m.graph.initializer:
        if t.name in values:
            t.CopyFrom(numpy_helper.from_array(values[t.name].astype(np.float32), t.name))
    return m


def _dequantized_weights(q: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Each weight as ONNX Runtime (default optimization level) computes it, read as extra graph outputs."""
    q = onnx.ModelProto.FromString(q.SerializeToString())
    for n in WEIGHTS:
        q.graph.output.append(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    s = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    outs = s.run(None, {s.get_inputs()[0].name: x})
    return dict(zip(WEIGHTS, outs[1:]))


@pytest.mark.parametrize("version", ["1.0.0", "2.0.0"])
@pytest.mark.parametrize("which", ["w", "probe"])
def test_apply_shifted_int2_runs_in_ort_as_aimet_quantized(version, which):
    qdq = np.load(DATA / "int2_shift_qdq.npz")
    es = G.resolve(E.load(DATA / f"aimet-onnx-2.42.0_int2_shift_v{version}.encodings"), MODEL)
    assert {type(es[n].grain).__name__ for n in WEIGHTS} == {"PerTensor", "PerAxis", "PerBlock"}
    q = G.apply(es, _with_weights({n: qdq[f"{n}/{which}"] for n in WEIGHTS}))
    got = _dequantized_weights(q)
    for n in WEIGHTS:
        want = qdq[f"{n}/qdq" if which == "w" else f"{n}/probe_qdq"]
        np.testing.assert_array_equal(got[n].view(np.uint32), want.view(np.uint32), err_msg=n)
        init = {t.name: t for t in q.graph.initializer}[f"{n}_quantized"]
        assert init.data_type == onnx.TensorProto.INT4  # the exact 4-bit grid: odd integers in [-3, 3]
        assert set(np.unique(numpy_helper.to_array(init).astype(np.int8)).tolist()) <= {-3, -1, 1, 3}
    back = G.extract(q)  # the int2 encodings come back from the int4 storage, bytes and all
    assert back == es and E.dumps(back) == E.dumps(es)


def test_apply_shifted_probe_ties_round_away_from_zero():
    """The probe's exact ties (k/2 * scale, odd k) are where round-half-to-even and AIMET's rounding differ:
    the applied model must take AIMET's side on every one of them."""
    qdq = np.load(DATA / "int2_shift_qdq.npz")
    es = G.resolve(E.load(DATA / "aimet-onnx-2.42.0_int2_shift_v2.0.0.encodings"), MODEL)
    got = _dequantized_weights(G.apply(es, _with_weights({n: qdq[f"{n}/probe"] for n in WEIGHTS})))
    ties = 0
    for n in WEIGHTS:
        e, probe, want = es[n], qdq[f"{n}/probe"], qdq[f"{n}/probe_qdq"]
        sc = np.broadcast_to(_scale(e, probe.shape), probe.shape)
        k = np.round(2 * probe.astype(np.float64) / sc, 6)
        tie = np.isin(k, [-2.0, 0.0, 2.0])  # midpoints of the grid {-1.5, -0.5, 0.5, 1.5}
        ties += int(tie.sum())
        np.testing.assert_array_equal(got[n][tie].view(np.uint32), want[tie].view(np.uint32), err_msg=n)
        half_even = np.rint(np.clip(k / 2 + 0.5, -1, 2)) - 0.5  # what rounding ties to even would give
        assert np.any(half_even[tie] != np.round(2 * want.astype(np.float64) / sc)[tie] / 2)
    assert ties > 100


def _scale(e: E.Encoding, shape: tuple[int, ...]) -> np.ndarray:
    s = np.asarray(e.scale, np.float32).astype(np.float64)
    if isinstance(e.grain, gr.PerTensor):
        return np.broadcast_to(s.reshape(()), shape)
    if isinstance(e.grain, gr.PerBlock):
        s = expand_block_scale(s, shape, e.axis, e.block_size)
        return gr.expand(s, shape, gr.resolve(shape, s.shape, e.axis, e.block_size))
    return gr.expand(s.reshape(-1), shape, gr.PerAxis(e.axis % len(shape)))


@pytest.mark.parametrize("case", ["tensor", "channel", "block"])
def test_apply_aimet_torch_shifted_weights_in_ort(case):
    """aimet-torch's Linear(64, 8) int2 shifted weights (block (1, 16) for "block"): ONNX Runtime's weight equals
    aimet-torch's QuantizeDequantize everywhere but on exact ties, which aimet-torch rounds to even."""
    f = DATA / f"aimet-torch-2.42.0_int2_shift_{case}_v2.0.0.encodings"
    model = f.with_suffix(".onnx")
    es = G.resolve(E.load(f), model)
    e = es["fc1.weight"]
    qdq = np.load(DATA / "int2_shift_qdq_torch.npz")
    m = onnx.load(model)
    for t in m.graph.initializer:
        if t.name == e.name:
            t.CopyFrom(numpy_helper.from_array(qdq[f"{case}/w"].astype(np.float32), t.name))
    q = G.apply(es, m)
    q.graph.output.append(onnx.helper.make_tensor_value_info(e.name, onnx.TensorProto.FLOAT, None))
    s = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in s.get_inputs()}
    got = s.run([e.name], feed)[0]
    want = qdq[f"{case}/qdq"]
    w = qdq[f"{case}/w"].astype(np.float64)
    sc = np.broadcast_to(_scale(e, w.shape), w.shape)
    tie = np.isin(np.round(2 * w / sc, 6), [-2.0, 0.0, 2.0])
    assert (~tie).all() or tie.sum() < w.size // 10
    np.testing.assert_array_equal(got[~tie].view(np.uint32), want[~tie].view(np.uint32))
    assert G.extract(q) == es
