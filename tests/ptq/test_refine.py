"""Data-driven weight methods: staged execution, layer statistics, SeqMSE, AdaRound (qlinear.ptq.algorithms.refine and friends).

Peers: ONNX Runtime (convolutions and whole-model runs the statistics must agree with), finite differences (the
analytic AdaRound gradient), brute force (the SeqMSE search).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import qlinear
import qlinear.calibration as C
from qlinear import graph as G
from qlinear.examples import DATA, MODEL
from qlinear.graph.plan import WeightSpec
from qlinear.ptq.algorithms.adaround import AdaRoundOptions, _h, _Problem, adaround, grid, regularizer
from qlinear.ptq.algorithms.seqmse import RATIOS, regrid, seqmse
from qlinear.ptq.layers import Layer
from qlinear.ptq.stats.session import Session
from qlinear.ptq.stats.staged import Staged


def _conv_model(w: np.ndarray, **attrs) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, None)],
                          [helper.make_tensor_value_info("y", 1, None)], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("c,o,k,group,stride,pad,dil,hw", [
    (8, 16, 3, 1, 1, 1, 1, 20), (8, 8, 3, 8, 2, 1, 1, 21), (6, 12, 1, 1, 1, 0, 1, 40), (6, 12, 1, 1, 2, 0, 1, 41),
    (4, 6, 5, 2, 2, 2, 1, 50), (4, 4, 3, 4, 1, 2, 2, 33), (3, 5, 3, 1, 2, 0, 1, 9)])
def test_columns_reproduce_the_convolution(c, o, k, group, stride, pad, dil, hw):
    """W @ columns == ONNX Runtime's Conv output at the sampled positions (im2col with groups, strides, pads,
    dilations, pointwise fast path, position subsampling)."""
    rng = np.random.default_rng(c * 100 + k)
    w = rng.normal(size=(o, c // group, k, k)).astype(np.float32)
    x = rng.normal(size=(2, c, hw, hw)).astype(np.float32)
    attrs = dict(group=group, strides=[stride, stride], pads=[pad] * 4, dilations=[dil, dil], kernel_shape=[k, k])
    m = _conv_model(w, **attrs)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ly = Layer(WeightSpec("w", "Conv", "conv", 0, None), m.graph.node[0], "conv", w.shape, groups=group)
    for max_pos in (10_000, 30):
        cols = ly.columns(x, max_positions=max_pos)
        oh, ow = y.shape[2:]
        step = max(1, int(np.ceil(np.sqrt(oh * ow / max_pos))))
        ys = y[:, :, step // 2::step, step // 2::step]
        ref = ys.reshape(2, group, o // group, -1).transpose(1, 2, 0, 3).reshape(group, o // group, -1)
        np.testing.assert_allclose(np.matmul(ly.to_matrix(w), cols), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind,attrs,hw", [
    ("1d", dict(group=1, strides=[2], pads=[1, 2], dilations=[1], kernel_shape=[3]), 37),
    ("1d", dict(group=4, strides=[1], pads=[2, 2], dilations=[2], kernel_shape=[3]), 30),
    ("1d", dict(group=1, strides=[3], auto_pad="SAME_UPPER", kernel_shape=[4]), 31),
    ("2d", dict(group=1, strides=[2, 2], auto_pad="SAME_UPPER", kernel_shape=[4, 3]), 15),
    ("2d", dict(group=4, strides=[2, 1], auto_pad="SAME_LOWER", kernel_shape=[4, 4]), 14),
    ("2d", dict(group=1, strides=[2, 2], auto_pad="VALID", kernel_shape=[3, 3]), 13)])
def test_columns_of_1d_and_auto_padded_convolutions(kind, attrs, hw):
    """1-D convolutions (fw-silero's encoder, onnx-asr's STFT) and auto_pad (keras2onnx's MTCNN: VALID) are layers
    too: W @ columns == ONNX Runtime's Conv output (AdaRound and SeqMSE skipped them, silently)."""
    rng = np.random.default_rng(hw)
    c, o, g = 4, 8, attrs["group"]
    k = attrs["kernel_shape"]
    w = rng.normal(size=(o, c // g, *k)).astype(np.float32)
    x = rng.normal(size=(2, c, hw) if kind == "1d" else (2, c, hw, hw + 3)).astype(np.float32)
    m = _conv_model(w, **attrs)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ly = Layer(WeightSpec("w", "Conv", "conv", 0, None), m.graph.node[0], "conv", w.shape, groups=g)
    cols = ly.columns(x, max_positions=100_000)
    ref = y.reshape(2, g, o // g, -1).transpose(1, 2, 0, 3).reshape(g, o // g, -1)
    np.testing.assert_allclose(np.matmul(ly.to_matrix(w), cols), ref, rtol=1e-4, atol=1e-4)
    assert ly.from_matrix(ly.to_matrix(w)).shape == w.shape


def _fc_layer(K=12, n_out=5, transposed=False):
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=0 if transposed else 1)
    shape = (K, n_out) if transposed else (n_out, K)
    return Layer(WeightSpec("w", "Gemm", "fc", 1 if transposed else 0, None), node, "fc", shape,
                 transposed=transposed)


def test_grams_give_the_output_error_and_the_bias_shift():
    rng = np.random.default_rng(1)
    ly = _fc_layer(transposed=True)
    w = rng.normal(size=(12, 5))
    w2 = w + 0.1 * rng.normal(size=w.shape)
    xs = [rng.normal(size=(7, 12)).astype(np.float32) for _ in range(3)]
    xq = [x + 0.2 * rng.normal(size=x.shape).astype(np.float32) for x in xs]
    for a, b in zip(xs, xq):
        ly.accumulate(a, b)
    Xf, Xq = np.concatenate(xs), np.concatenate(xq)
    yf, yq = Xf.astype(np.float64) @ w, Xq.astype(np.float64) @ w2
    np.testing.assert_allclose(ly.error(ly.to_matrix(w), ly.to_matrix(w2)).reshape(-1),
                               ((yf - yq) ** 2).mean(0), rtol=1e-5)
    np.testing.assert_allclose(ly.output_shift(ly.to_matrix(w), ly.to_matrix(w2)), (yf - yq).mean(0), rtol=1e-5,
                               atol=1e-6)
    assert ly.Xf is None  # 21 positions > 12 inputs: the Grams are cheaper than the columns, which are dropped
    one = _fc_layer(transposed=True)
    one.accumulate(xs[0], xq[0])
    np.testing.assert_array_equal(one.Xf[0], xs[0].T)  # 7 positions <= 12: the columns are kept


def test_staged_run_equals_one_session_and_takes_new_constants():
    m = onnx.load(MODEL)
    data = np.load(DATA)["input"][:12]
    batches = [{"input": data[i:i + 4]} for i in range(0, 12, 4)]
    cuts = ["dw", "pw", "fc"]
    st = Staged(m, cuts, batches)
    s = Session(m, ["relu_out", "relu6_out", "flat_out"], level="all")
    for i, t in enumerate(["relu_out", "relu6_out", "flat_out"]):
        st.advance(i)
        ref = np.concatenate([s.run([t], b)[0] for b in batches])
        np.testing.assert_allclose(np.concatenate(st.tensor(t)), ref, rtol=1e-5, atol=1e-5)
    # a constant set before a piece runs is what that piece uses
    st = Staged(m, cuts, batches)
    st.advance(1)
    w = numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "pw.weight"))
    st.set_constant("pw.weight", w * 2)
    st.advance(2)
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    next(t for t in m2.graph.initializer if t.name == "pw.weight").CopyFrom(numpy_helper.from_array(w * 2, "pw.weight"))
    s2 = Session(m2, ["flat_out"], level="all")
    ref = np.concatenate([s2.run(["flat_out"], b)[0] for b in batches])
    np.testing.assert_allclose(np.concatenate(st.tensor("flat_out")), ref, rtol=1e-5, atol=1e-5)
    assert "relu_out" not in st.cache  # tensors no later piece reads are dropped


def _layer_with_data(seed=0, K=16, n_out=6, n=200, noise=0.05):
    """An FC layer with correlated inputs (with independent inputs nearest rounding is already optimal)."""
    rng = np.random.default_rng(seed)
    ly = _fc_layer(K, n_out)
    w = (rng.normal(size=(n_out, K)) * np.linspace(0.2, 2, K)).astype(np.float32)
    x = (rng.normal(size=(n, K)) @ rng.normal(size=(K, K))).astype(np.float32)
    xq = x + noise * rng.normal(size=x.shape).astype(np.float32)
    ly.accumulate(x, xq)
    e = C.calibrate(w, "int4", method="minmax", symmetric=True, axis=0, name="w", role="param")
    return ly, w, e, x.astype(np.float64), xq.astype(np.float64)


@pytest.mark.parametrize("asymmetric", [False, True])
def test_seqmse_matches_brute_force(asymmetric):
    """Without the gain, the per-channel choice is the ratio whose quantized channel has the least output error,
    computed directly from the data."""
    ly, w, e, x, xq = _layer_with_data(2)
    e1, wq = seqmse(ly, w, e, asymmetric=asymmetric, unbiased=False)
    xf = x if asymmetric else xq
    for c in range(w.shape[0]):
        errs = []
        for r in RATIOS:
            ec = e.replace(scale=np.asarray(e.scale) * r)
            q = ec.fake_quantize(w)[c].astype(np.float64)
            errs.append(np.sum((xf @ w[c].astype(np.float64) - xq @ q) ** 2))
        best = RATIOS[int(np.argmin(errs))]
        assert np.isclose(np.asarray(e1.scale)[c], np.asarray(e.scale)[c] * best)
    np.testing.assert_array_equal(wq, e1.fake_quantize(w))


def test_seqmse_gain_makes_the_output_unbiased_and_keeps_integers():
    ly, w, e, _, xq = _layer_with_data(3)
    e1, wq = seqmse(ly, w, e)
    np.testing.assert_array_equal(e1.fake_quantize(wq), wq)             # on the grid
    # each channel's integers are those of one candidate ratio; the gain moved the scale, not the integers
    q1 = e1.quantize(wq)
    for c in range(w.shape[0]):
        assert any(np.array_equal(q1[c], e.replace(scale=np.asarray(e.scale) * r).quantize(w)[c]) for r in RATIOS)
    g = np.linspace(0.7, 1.4, w.shape[0])
    e2, w2 = regrid(ly, e, e.fake_quantize(w), g)
    np.testing.assert_array_equal(e2.quantize(w2), e.quantize(w))
    np.testing.assert_allclose(np.asarray(e2.scale), np.asarray(e.scale) * g)
    y, yhat = xq @ w.T.astype(np.float64), xq @ wq.T.astype(np.float64)
    slope = np.sum(y * yhat, 0) / np.sum(y * y, 0)  # regression of the quantized output on the float one
    np.testing.assert_allclose(slope, 1.0, atol=2e-3)


def test_seqmse_per_tensor_uses_one_ratio_and_one_gain():
    ly, w, e, _, _ = _layer_with_data(6)
    et = C.calibrate(w, "int4", method="minmax", symmetric=True, name="w", role="param")
    e1, wq = seqmse(ly, w, et)
    assert e1.granularity == "per_tensor" and np.ndim(e1.scale) == 0
    np.testing.assert_array_equal(e1.fake_quantize(wq), wq)
    W = ly.to_matrix(w.astype(np.float64))
    assert ly.error(W, ly.to_matrix(wq.astype(np.float64))).sum() < \
        ly.error(W, ly.to_matrix(et.fake_quantize(w).astype(np.float64))).sum()


@pytest.mark.parametrize("n", [200, 8])  # Gram formulation, and data formulation (fewer positions than inputs)
def test_adaround_gradient_is_exact(n):
    rng = np.random.default_rng(4)
    ly, w, e, x, xq = _layer_with_data(4, n=n)
    s, _, lo, hi = grid(e, w.shape)
    W = ly.to_matrix(w.astype(np.float64))
    S = ly.to_matrix(s)
    prob = _Problem(ly, W.astype(np.float32), S.astype(np.float32), np.floor(W / S), ly.to_matrix(lo),
                    ly.to_matrix(hi), True)
    assert prob.data == (n < 16)
    V = rng.normal(size=W.shape)
    loss, g = prob.loss_grad(V)
    h, _ = _h(V)
    Wt = S * np.clip(np.floor(W / S) + h, ly.to_matrix(lo), ly.to_matrix(hi))
    Wn = S * np.clip(np.round(W / S), ly.to_matrix(lo), ly.to_matrix(hi))  # nearest rounding: the loss's unit
    ref = np.sum((x @ W[0].T - xq @ Wt[0].T) ** 2) / np.sum((x @ W[0].T - xq @ Wn[0].T) ** 2)
    assert np.isclose(loss, ref, rtol=1e-3)
    eps = 1e-4
    for fn, grad in ((lambda v: prob.loss_grad(v)[0], g), (lambda v: regularizer(v, 7.0)[0], regularizer(V, 7.0)[1])):
        num = np.zeros_like(V)
        for idx in np.ndindex(V.shape):
            vp, vm = V.copy(), V.copy()
            vp[idx] += eps
            vm[idx] -= eps
            num[idx] = (fn(vp) - fn(vm)) / (2 * eps)
        np.testing.assert_allclose(grad, num, rtol=2e-3, atol=1e-6 * np.abs(num).max())


def test_adaround_lowers_the_layer_error_and_stays_on_the_grid():
    ly, w, e, _, _ = _layer_with_data(5, K=32, n_out=8, n=400, noise=0.02)
    w2 = adaround(ly, w, e, AdaRoundOptions(iterations=400))
    np.testing.assert_array_equal(e.fake_quantize(w2), w2)
    q0, q2 = e.quantize(w).astype(int), e.quantize(w2).astype(int)
    assert np.all(np.abs(q2 - q0) <= 1)  # rounding up or down only
    W = ly.to_matrix(w.astype(np.float64))
    near = ly.error(W, ly.to_matrix(e.fake_quantize(w).astype(np.float64))).sum()
    learned = ly.error(W, ly.to_matrix(w2.astype(np.float64))).sum()
    assert learned < 0.85 * near


@pytest.mark.parametrize("method", ["seqmse", "adaround"])
def test_pipeline_data_methods_on_the_example(method):
    cfg = dict(weight_type="int4", calibration_samples=24, evaluation_samples=16, weight_method=method,
               adaround_iterations=100)
    base = qlinear.quantize(MODEL, DATA, dict(cfg, weight_method="minmax"))
    qm = qlinear.quantize(MODEL, DATA, cfg)
    assert G.validate(qm.encodings, qm.model).ok
    # the Q/DQ model's integers are the encodings' quantization of the reference model's (rewritten) weights
    ref = {t.name: numpy_helper.to_array(t) for t in qm.encoded_model.graph.initializer}
    q = {t.name: numpy_helper.to_array(t) for t in qm.model.graph.initializer}
    for name in ("pw.weight", "fc.weight"):
        np.testing.assert_array_equal(q[f"{name}_quantized"], qm.encodings[name].quantize(ref[name]))
    again = G.apply(qm.encodings, qm.encoded_model)  # the encodings on model.float.onnx give model.qdq.onnx exactly
    assert {t.name: numpy_helper.to_array(t).tobytes() for t in again.graph.initializer} == \
        {t.name: numpy_helper.to_array(t).tobytes() for t in qm.model.graph.initializer}
    sq = qm.report().outputs["logits"]["sqnr_db"]
    assert sq > base.report().outputs["logits"]["sqnr_db"]
    assert any(method.replace("seqmse", "SeqMSE").replace("adaround", "AdaRound") in n for n in qm.notes)


@pytest.mark.parametrize("n_held", [500, 20])  # Gram formulation, and the columns (fewer samples than inputs)
def test_adaround_early_stopping_picks_the_checkpoint_best_on_held_back_samples(monkeypatch, n_held):
    """Overfitting forced: 6 samples fit a 32-input layer. Without held-back samples AdaRound's rounding drives the
    error on those 6 far below nearest rounding but is worse than nearest on fresh samples; with held-back samples
    it returns the checkpoint with the lowest held-back error (recomputed here from the data), which is never worse
    than nearest rounding (the first checkpoint) there; with 500 of them it generalises to 2000 unseen samples."""
    from qlinear.ptq.algorithms import adaround as ar

    rng = np.random.default_rng(0)
    K, n_out = 32, 8
    w = (rng.normal(size=(n_out, K)) * np.linspace(0.2, 2, K)).astype(np.float32)
    mix = rng.normal(size=(K, K))

    def data(n):
        x = (rng.normal(size=(n, K)) @ mix).astype(np.float32)
        return x, x + 0.3 * rng.normal(size=x.shape).astype(np.float32)

    fit, held, unseen = _fc_layer(K, n_out), _fc_layer(K, n_out), _fc_layer(K, n_out)
    fit.accumulate(*data(6))
    hx, hxq = data(n_held)
    held.accumulate(hx, hxq)
    unseen.accumulate(*data(2000))
    e = C.calibrate(w, "int4", method="minmax", symmetric=True, axis=0, name="w", role="param")
    W = fit.to_matrix(w.astype(np.float64))

    def err(ly, v):
        return ly.error(W, ly.to_matrix(v.astype(np.float64))).sum()

    def held_err(v):  # straight from the held-back data, not the Gram matrices
        return float(np.sum((hx.astype(np.float64) @ w.T.astype(np.float64) - hxq.astype(np.float64) @ v.T) ** 2))

    seen = []
    real = ar._checkpoint
    monkeypatch.setattr(ar, "_checkpoint", lambda judge, best, q, S: seen.append(fit.from_matrix(S * q)) or
                        real(judge, best, q, S))
    near = e.fake_quantize(w)
    last = adaround(fit, w, e, AdaRoundOptions(iterations=300))
    assert not seen
    assert err(fit, last) < 0.3 * err(fit, near) and err(unseen, last) > 1.1 * err(unseen, near)  # overfitted
    stopped = adaround(fit, w, e, AdaRoundOptions(iterations=300), held=held)
    assert len(seen) == 300 // 10 + 1
    np.testing.assert_array_equal(seen[0], near)  # the first checkpoint is nearest rounding
    np.testing.assert_array_equal(e.fake_quantize(stopped), stopped)
    losses = [held_err(v) for v in seen]
    assert held_err(stopped) == pytest.approx(min(losses), rel=1e-6)
    assert held_err(stopped) <= held_err(near)
    if n_held == 500:
        assert err(unseen, stopped) <= err(unseen, near) < err(unseen, last)


def test_mirror_images_flips_only_nchw_images():
    from qlinear.ptq.algorithms.refine import held_back, image_like, mirror_images

    rng = np.random.default_rng(0)
    img = rng.normal(size=(2, 3, 6, 8)).astype(np.float32)
    ids = np.arange(10).reshape(2, 5)
    nhwc = rng.normal(size=(2, 8, 8, 3)).astype(np.float32)
    feats = rng.normal(size=(2, 64, 7, 7)).astype(np.float32)
    (out,) = mirror_images([{"img": img, "ids": ids, "nhwc": nhwc, "feats": feats}])
    np.testing.assert_array_equal(out["img"][:, :, :, 0], img[:, :, :, -1])
    np.testing.assert_array_equal(out["img"][..., ::-1], img)
    assert out["ids"] is ids and out["nhwc"] is nhwc and out["feats"] is feats
    assert mirror_images([{"ids": ids, "nhwc": nhwc}]) == []  # nothing to mirror: no extra sample
    assert not image_like(img.astype(np.int32)) and not image_like(img[0])
    assert [held_back(n, f) for n, f in ((100, 0.2), (24, 0.2), (5, 0.2), (3, 0.5), (100, 0.0))] == [20, 5, 0, 0, 0]


@pytest.mark.parametrize("bad", [0.7, -0.1, True, "0.2"])
def test_adaround_holdout_is_checked(bad):
    with pytest.raises(qlinear.errors.ConfigError, match="adaround_holdout"):
        qlinear.QuantizeConfig(adaround_holdout=bad)


def test_pipeline_adaround_holds_back_and_mirrors():
    cfg = dict(weight_type="int4", calibration_samples=24, evaluation_samples=16, weight_method="adaround",
               adaround_iterations=60)
    qm = qlinear.quantize(MODEL, DATA, dict(cfg, adaround_holdout=0.2, adaround_augment=True))
    (note,) = [n for n in qm.notes if "AdaRound" in n]
    assert "fitted on 19 samples" in note and "other 5" in note and "mirror images" in note
    plain = qlinear.quantize(MODEL, DATA, cfg)  # both off by default
    (note,) = [n for n in plain.notes if "AdaRound" in n]
    assert "fitted on" not in note and "mirror" not in note
    w = {t.name: numpy_helper.to_array(t) for t in qm.encoded_model.graph.initializer}
    w0 = {t.name: numpy_helper.to_array(t) for t in plain.encoded_model.graph.initializer}
    assert not np.array_equal(w["pw.weight"], w0["pw.weight"])


def test_weights_adaround_does_not_fit_are_named(tmp_path):
    """A ConvTranspose weight (CenterFace's neck) keeps min-max with nearest rounding under --weight-method
    adaround: a note names it (it was silent), and an unnamed model's layers are fitted (its nodes were looked up
    by an empty name: CenterFace, torch 1.2, had AdaRound on none of its 60 convolutions, silently)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "w2"], ["y"], strides=[2, 2])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", 1, ["N", 4, 16, 16]),
                           helper.make_tensor_value_info("h", 1, ["N", 8, 8, 8])],   # renamed in the Q/DQ model
                          [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1"),
                           numpy_helper.from_array(rng.normal(0, 0.3, (8, 4, 2, 2)).astype(np.float32), "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.normal(0, 1, (24, 3, 8, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=16, evaluation_samples=8, weight_method="adaround"))
    left = [n for n in qm.notes if n.startswith("AdaRound fits")]
    assert len(left) == 1 and "1 weight(s) of ConvTranspose keep int8 min-max ranges" in left[0] and "w2" in left[0]
    assert any("AdaRound rounding" in n and "for 1 layers" in n for n in qm.notes)
