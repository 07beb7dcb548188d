"""Integer kernels against the LiteRT interpreter (ai-edge-litert), each op resolver with the mode it runs:
reference kernels, optimized (ruy) kernels, XNNPACK (AUTO). Inputs are tie-heavy (effective multipliers with short
binary expansions), cover saturation, odd zero points and effective multipliers from 1e-8 to 1e3."""

from __future__ import annotations

import litert_peer as LP
import numpy as np
import pytest

from qlinear import kernels as K
from qlinear.kernels.requant import activation_range

pytestmark = pytest.mark.skipif(not LP.available(), reason="ai-edge-litert not installed (test extra)")

FC_MODES = {"ref": "f64_round_away", "opt": "ruy_x86", "auto": "f32_rne"}
CONV_MODES = {"ref": "fixed_double", "opt": "ruy_x86", "auto": "f32_rne"}


def _scales(n, s_in, s_out, rng, extreme=False):
    eff = [2**-5, 3 * 2**-7, 5 * 2**-8, 2**-4, 7 * 2**-9, 2**-6]
    if extreme:
        eff += [1e-8, 3e-6, 0.9, 5.0, 37.0, 1e3]
    eff = np.array((eff + list(rng.uniform(0.003, 0.03, n)))[:n])
    return (eff * float(s_out) / float(s_in)).astype(np.float32)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("act", ["NONE", "RELU", "RELU6"])
def test_fully_connected(seed, act):
    rng = np.random.default_rng(seed)
    b_, k, n = 512, 16, 12
    s_in, z_in, s_out, z_out = np.float32(2**-6), 7, np.float32(2**-2), -3
    s_w = _scales(n, s_in, s_out, rng, extreme=seed == 2)
    w = rng.integers(-127, 128, (n, k)).astype(np.int8) if seed else rng.integers(-3, 4, (n, k)).astype(np.int8)
    bias = rng.integers(-2000, 2000, n).astype(np.int32)
    x = rng.integers(-128, 128, (b_, k)).astype(np.int8)
    mb = LP.Builder()
    ti = mb.tensor([b_, k], np.int8, s_in, z_in)
    tw = mb.tensor([n, k], np.int8, s_w, 0, data=w)
    tb = mb.tensor([n], np.int32, s_in * s_w, 0, data=bias)
    to = mb.tensor([b_, n], np.int8, s_out, z_out)
    opt = LP.S.FullyConnectedOptionsT()
    opt.fusedActivationFunction = getattr(LP.S.ActivationFunctionType, act)
    mb.op(LP.S.BuiltinOperator.FULLY_CONNECTED, [ti, tw, tb], [to], LP.S.BuiltinOptions.FullyConnectedOptions, opt,
          version=5)
    model = mb.build([ti], [to])
    lo, hi = activation_range(act, s_out, z_out, -128, 127)
    for resolver, mode in FC_MODES.items():
        if resolver == "auto" and seed == 2:
            continue  # XNNPACK refuses to prepare multipliers outside its range (1e-8, 1e3): the others run them
        want = LP.run(model, [x], resolver)
        got = K.fully_connected(x, w, bias, zp_x=z_in, s_x=s_in, s_w=s_w, s_out=s_out, zp_out=z_out, mode=mode,
                                qmin=lo, qmax=hi)
        assert np.array_equal(got, want), (resolver, mode, int((got != want).sum()))


def _same_pads(size, k, stride, dil):
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + (k - 1) * dil + 1 - size, 0)
    return total // 2, total - total // 2


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("depthwise", [False, True])
def test_conv2d_and_depthwise(seed, depthwise):
    rng = np.random.default_rng(10 + seed)
    h, w_, cin, kh, kw = 13, 12, (4 if depthwise else 3), 3, 3
    mult = 2
    cout = cin * mult if depthwise else 8
    stride, dil = (2, 1) if seed == 0 else (1, 2)
    s_in, z_in, s_out, z_out = np.float32(2**-6), -9, np.float32(2**-1), 5
    s_w = _scales(cout, s_in, s_out, rng)
    wt = rng.integers(-127, 128, (1, kh, kw, cout) if depthwise else (cout, kh, kw, cin)).astype(np.int8)
    bias = rng.integers(-300, 300, cout).astype(np.int32)
    x = rng.integers(-128, 128, (2, h, w_, cin)).astype(np.int8)
    ph, pw = _same_pads(h, kh, stride, dil), _same_pads(w_, kw, stride, dil)
    oh, ow = (h + stride - 1) // stride, (w_ + stride - 1) // stride
    mb = LP.Builder()
    ti = mb.tensor(list(x.shape), np.int8, s_in, z_in)
    tw = mb.tensor(list(wt.shape), np.int8, s_w, 0, qdim=3 if depthwise else 0, data=wt)
    tb = mb.tensor([cout], np.int32, s_in * s_w, 0, data=bias)
    to = mb.tensor([2, oh, ow, cout], np.int8, s_out, z_out)
    if depthwise:
        opt = LP.S.DepthwiseConv2DOptionsT()
        opt.depthMultiplier = mult
        code, otype = LP.S.BuiltinOperator.DEPTHWISE_CONV_2D, LP.S.BuiltinOptions.DepthwiseConv2DOptions
    else:
        opt = LP.S.Conv2DOptionsT()
        code, otype = LP.S.BuiltinOperator.CONV_2D, LP.S.BuiltinOptions.Conv2DOptions
    opt.padding = LP.S.Padding.SAME
    opt.strideW = opt.strideH = stride
    opt.dilationWFactor = opt.dilationHFactor = dil
    mb.op(code, [ti, tw, tb], [to], otype, opt, version=3)
    model = mb.build([ti], [to])
    xn = x.transpose(0, 3, 1, 2)  # NHWC -> NCHW
    if depthwise:
        wo = wt[0].transpose(2, 0, 1)[:, None]  # [1,KH,KW,C*m] -> [C*m, 1, KH, KW]
        groups = cin
    else:
        wo = wt.transpose(0, 3, 1, 2)  # OHWI -> OIHW
        groups = 1
    for resolver, mode in CONV_MODES.items():
        want = LP.run(model, [x], resolver)
        got = K.conv2d(xn, wo, bias, zp_x=z_in, s_x=s_in, s_w=s_w, s_out=s_out, zp_out=z_out, mode=mode,
                       stride=(stride, stride), dilation=(dil, dil), pads=(ph[0], pw[0], ph[1], pw[1]),
                       groups=groups).transpose(0, 2, 3, 1)
        assert np.array_equal(got, want), (resolver, mode, int((got != want).sum()))


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
def test_add_sub_mul_reference(op):
    rng = np.random.default_rng(5)
    n = 4096
    s1, z1, s2, z2, so, zo = np.float32(0.05), -3, np.float32(0.02), 10, np.float32(0.06), 2
    a = rng.integers(-128, 128, n).astype(np.int8)
    b = rng.integers(-128, 128, n).astype(np.int8)
    mb = LP.Builder()
    t1 = mb.tensor([n], np.int8, s1, z1)
    t2 = mb.tensor([n], np.int8, s2, z2)
    to = mb.tensor([n], np.int8, so, zo)
    opts = {"ADD": (LP.S.BuiltinOptions.AddOptions, LP.S.AddOptionsT()),
            "SUB": (LP.S.BuiltinOptions.SubOptions, LP.S.SubOptionsT()),
            "MUL": (LP.S.BuiltinOptions.MulOptions, LP.S.MulOptionsT())}[op]
    mb.op(getattr(LP.S.BuiltinOperator, op), [t1, t2], [to], opts[0], opts[1], version=2)
    model = mb.build([t1, t2], [to])
    want = LP.run(model, [a, b], "ref")
    if op == "MUL":
        got = K.mul(a, b, s_a=s1, zp_a=z1, s_b=s2, zp_b=z2, s_out=so, zp_out=zo, mode="fixed_double")
    else:
        got = K.add(a, b, s_a=s1, zp_a=z1, s_b=s2, zp_b=z2, s_out=so, zp_out=zo, mode="fixed_double", sub=op == "SUB")
    assert np.array_equal(got, want), int((got != want).sum())


def test_pooling_and_mean_reference():
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (2, 9, 10, 5)).astype(np.int8)
    s, z = np.float32(0.1), 3
    for op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        mb = LP.Builder()
        ti = mb.tensor(list(x.shape), np.int8, s, z)
        to = mb.tensor([2, 5, 5, 5], np.int8, s, z)
        opt = LP.S.Pool2DOptionsT()
        opt.padding, opt.strideW, opt.strideH, opt.filterWidth, opt.filterHeight = LP.S.Padding.SAME, 2, 2, 3, 3
        mb.op(getattr(LP.S.BuiltinOperator, op), [ti], [to], LP.S.BuiltinOptions.Pool2DOptions, opt, version=2)
        want = LP.run(mb.build([ti], [to]), [x], "ref")
        ph, pw = _same_pads(9, 3, 2, 1), _same_pads(10, 3, 2, 1)
        fn = K.avg_pool2d if op.startswith("AVERAGE") else K.max_pool2d
        got = fn(x.transpose(0, 3, 1, 2), (3, 3), stride=(2, 2), pads=(ph[0], pw[0], ph[1], pw[1])).transpose(0, 2, 3, 1)
        assert np.array_equal(got, want), (op, int((got != want).sum()))
    # MEAN over H, W (keep dims) with requantization
    so, zo = np.float32(0.037), -5
    mb = LP.Builder()
    ti = mb.tensor(list(x.shape), np.int8, s, z)
    ta = mb.tensor([2], np.int32, data=np.array([1, 2], np.int32))
    to = mb.tensor([2, 1, 1, 5], np.int8, so, zo)
    opt = LP.S.ReducerOptionsT()
    opt.keepDims = True
    mb.op(LP.S.BuiltinOperator.MEAN, [ti, ta], [to], LP.S.BuiltinOptions.ReducerOptions, opt, version=2)
    want = LP.run(mb.build([ti], [to]), [x], "ref")
    got = K.mean(x, (1, 2), s_in=s, zp_in=z, s_out=so, zp_out=zo, mode="fixed_double")
    assert np.array_equal(got, want), int((got != want).sum())


def test_softmax_logistic_tanh():
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (600, 8)).astype(np.int8)
    s_in, z_in = np.float32(0.05), 3
    cases = [("SOFTMAX", 1 / 256, -128, lambda: K.softmax(x, s_in=s_in)),
             ("LOGISTIC", 1 / 256, -128, lambda: K.logistic(x, s_in=s_in, zp_in=z_in)),
             ("TANH", 1 / 128, 0, lambda: K.tanh(x, s_in=s_in, zp_in=z_in))]
    for op, so, zo, fn in cases:
        mb = LP.Builder()
        ti = mb.tensor(list(x.shape), np.int8, s_in, z_in)
        to = mb.tensor(list(x.shape), np.int8, so, zo)
        if op == "SOFTMAX":
            opt = LP.S.SoftmaxOptionsT()
            opt.beta = 1.0
            mb.op(LP.S.BuiltinOperator.SOFTMAX, [ti], [to], LP.S.BuiltinOptions.SoftmaxOptions, opt, version=2)
        else:
            mb.op(getattr(LP.S.BuiltinOperator, op), [ti], [to], version=2)
        want = LP.run(mb.build([ti], [to]), [x], "opt")
        got = fn()
        assert np.array_equal(got, want), (op, int((got != want).sum()))


def test_requantize_and_concat_reference():
    """QUANTIZE int8 -> int8 (requantize, fixed_double) and CONCATENATION (int8: same parameters, a copy)."""
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, 4096).astype(np.int8)
    s_in, z_in, s_out, z_out = np.float32(0.05), 3, np.float32(0.0371), -7
    mb = LP.Builder()
    ti = mb.tensor([4096], np.int8, s_in, z_in)
    to = mb.tensor([4096], np.int8, s_out, z_out)
    mb.op(LP.S.BuiltinOperator.QUANTIZE, [ti], [to], version=2)
    want = LP.run(mb.build([ti], [to]), [x], "ref")
    got = K.requantize_tensor(x, s_in=s_in, zp_in=z_in, s_out=s_out, zp_out=z_out, mode="fixed_double")
    assert np.array_equal(got, want), int((got != want).sum())
    a, b = x[:2048].reshape(32, 64), x[2048:].reshape(32, 64)
    mb = LP.Builder()
    t1 = mb.tensor([32, 64], np.int8, s_in, z_in)
    t2 = mb.tensor([32, 64], np.int8, s_in, z_in)
    to = mb.tensor([32, 128], np.int8, s_in, z_in)
    opt = LP.S.ConcatenationOptionsT()
    opt.axis = 1
    mb.op(LP.S.BuiltinOperator.CONCATENATION, [t1, t2], [to], LP.S.BuiltinOptions.ConcatenationOptions, opt,
          version=2)
    want = LP.run(mb.build([t1, t2], [to]), [a, b], "ref")
    got = K.concat([a, b], [(s_in, z_in), (s_in, z_in)], s_out=s_in, zp_out=z_in, axis=1, mode="fixed_double")
    assert np.array_equal(got, want)


@pytest.mark.parametrize("depth,s_in,seed", [(2, 0.0069, 0), (16, 0.16, 1), (100, 0.34, 2), (1000, 0.049, 3),
                                             (6625, 1.18, 4), (16, 2.4, 5)])
def test_softmax_reference_kernel(depth, s_in, seed):
    """LiteRT's reference int8 SOFTMAX (gemmlowp fixed point) against ``softmax_reference``, every value: depths of a
    YOLOv8 DFL head (16) and of an OCR recognizer's classes (6,625), scales where ``diff_min`` cuts the row; the
    optimized kernels' float table (:func:`qlinear.kernels.activation.softmax`) differs from it by a step in about one
    row in 5,000 (PP-OCRv4 rec: 1 of 265,000 values), which is why ``run_integer``'s ``litert_ref`` profile uses it."""
    from qlinear.kernels.activation import softmax_reference

    rng = np.random.default_rng(seed)
    rows = max(4, 24000 // depth)
    x = rng.integers(-128, 128, (rows, depth)).astype(np.int8)
    x[: rows // 2] = np.clip(rng.normal(60, 20, (rows // 2, depth)), -128, 127).astype(np.int8)
    s = np.float32(s_in)
    mb = LP.Builder()
    ti = mb.tensor(list(x.shape), np.int8, s, 3)
    to = mb.tensor(list(x.shape), np.int8, 1 / 256, -128)
    opt = LP.S.SoftmaxOptionsT()
    opt.beta = 1.0
    mb.op(LP.S.BuiltinOperator.SOFTMAX, [ti], [to], LP.S.BuiltinOptions.SoftmaxOptions, opt, version=2)
    want = LP.run(mb.build([ti], [to]), [x], "ref")
    got = softmax_reference(x, s_in=s)
    assert np.array_equal(got, want), int((got != want).sum())
