"""AWQ and the activation-aware grid against their definitions on small cases: the Gram-form error equals the
explicit ``||X W^T - X Q(W)^T||^2``, the alpha search equals a brute force with explicit activations, the fold
leaves the float model's outputs unchanged in ONNX Runtime, and the output error is never above round to
nearest's."""

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx_peers import run_ort

from qlinear.ptq import QuantizeConfig, quantize
from qlinear.ptq.algorithms.awq import (
    ALPHAS,
    apply_awq,
    awq_scales,
    fold_input_scale,
    output_error,
    rtn_quantizer,
    search_scales,
)
from qlinear.ptq.algorithms.grids import (
    activation_aware_grid,
    block_grams,
    block_output_error,
    padded,
    quantize_blocks,
    quantize_rtn,
)
from qlinear.ptq.weightonly.plan import find_linears


def _acts(t=600, k=64, seed=0, outliers=6):
    """Activations with a few large channels (the case AWQ is for)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, k)).astype(np.float32)
    x[:, rng.choice(k, outliers, replace=False)] *= 20
    return x


def _explicit(x, w, wq):
    return float(np.square(x.astype(np.float64) @ w.T.astype(np.float64) - x.astype(np.float64) @ wq.T).sum())


def test_awq_scales_paper_form():
    mag = np.array([0.5, 2.0, 8.0, 1.0])
    s = awq_scales(mag, 0.5)
    ref = mag ** 0.5 / np.sqrt(mag.max() ** 0.5 * mag.min() ** 0.5)
    np.testing.assert_allclose(s, ref, rtol=1e-6)
    np.testing.assert_array_equal(awq_scales(mag, 0.0), np.ones(4, np.float32))


@pytest.mark.parametrize("grid", ["full", "symmetric", "asymmetric"])
def test_awq_search_equals_brute_force_with_explicit_activations(grid):
    """The paper's objective ||Q(W diag s)(diag(s)^-1 X) - W X|| computed on X itself, per alpha, for q/k/v-like
    weights sharing X: the same minimiser and errors as the Gram form."""
    x = _acts()
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal((n, 64)).astype(np.float32) for n in (24, 8, 8)]
    h = x.T.astype(np.float64) @ x
    mag = np.abs(x).mean(0)
    quant = rtn_quantizer(4, 32, grid)
    s, alpha, errs = search_scales(ws, h, mag, quant)
    brute = []
    for a in ALPHAS:
        sa = awq_scales(mag, a)
        xs = x / sa[None, :]
        brute.append(sum(float(np.square(xs.astype(np.float64) @ quant(w * sa[None, :]).T.astype(np.float64)
                                         - x.astype(np.float64) @ w.T.astype(np.float64)).sum()) for w in ws))
    np.testing.assert_allclose(errs, brute, rtol=2e-4)
    assert alpha == ALPHAS[int(np.argmin(brute))]
    assert min(errs) <= errs[0]                     # alpha 0 is round to nearest
    assert min(errs) < 0.9 * errs[0]                # and outlier channels make scaling pay
    np.testing.assert_array_equal(s, awq_scales(mag, alpha))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10 ** 6), st.sampled_from(["full", "symmetric", "asymmetric"]), st.sampled_from([16, 32]),
       st.integers(40, 80))
def test_aag_block_output_error_never_above_rtn(seed, grid, block, k):
    x = _acts(t=200, k=k, seed=seed, outliers=3)
    w = np.random.default_rng(seed + 1).standard_normal((12, k)).astype(np.float32)
    h = x.T.astype(np.float64) @ x
    gbb = block_grams(h, k, block)
    rtn = quantize_rtn(w, 4, block, grid)
    a = activation_aware_grid(w, h, 4, block, grid)
    wb = padded(w, block)
    e_rtn = block_output_error(wb, padded(rtn.dequantize(), block), gbb)
    e_a = block_output_error(wb, padded(a.dequantize(), block), gbb)
    assert np.all(e_a <= e_rtn * (1 + 1e-5) + 1e-6)
    # the integers are round to nearest on the returned grid (what the writer redoes from the scales)
    z = np.zeros(a.scale.shape, np.int64) if a.zero_point is None else a.zero_point.astype(np.int64)
    q = quantize_blocks(wb, a.scale, z, 4).reshape(12, -1)[:, :k]
    np.testing.assert_array_equal(q, a.q)


def test_block_output_error_is_the_explicit_error_per_block():
    x = _acts(t=300, k=48)
    w = np.random.default_rng(3).standard_normal((10, 48)).astype(np.float32)
    h = x.T.astype(np.float64) @ x
    wq = quantize_rtn(w, 4, 32, "full").dequantize()
    e = block_output_error(padded(w, 32), padded(wq, 32), block_grams(h, 48, 32))
    for b, (lo, hi) in enumerate([(0, 32), (32, 48)]):
        ref = np.square(x[:, lo:hi].astype(np.float64) @ (w - wq)[:, lo:hi].T).sum(0)
        np.testing.assert_allclose(e[:, b], ref, rtol=1e-3)
    assert output_error(w, wq, h) == pytest.approx(_explicit(x, w, wq), rel=1e-4)


def test_aag_lowers_the_layer_output_error():
    x = _acts(t=800, k=128, outliers=8)
    w = np.random.default_rng(4).standard_normal((64, 128)).astype(np.float32)
    h = x.T.astype(np.float64) @ x
    e_rtn = _explicit(x, w, quantize_rtn(w, 4, 32, "full").dequantize())
    e_mse = _explicit(x, w, quantize_rtn(w, 4, 32, "full", method="mse").dequantize())
    e_a = _explicit(x, w, activation_aware_grid(w, h, 4, 32, "full").dequantize())
    assert e_a < 0.95 * e_rtn and e_a < e_mse


# --- the graph: folding leaves the float model's outputs unchanged ------------------------------------------------

def _block_model(norm: str, d=64, ff=96, seed=0, reshape=False):
    """x -> norm -> q/k (MatMul), v (Gemm transB) -> SiLU(q + k) -> MatMul down, v -> MatMul down2 -> y: q/k/v share
    the norm's output (with ``reshape`` v reads it through a Reshape: the norm has a reader that is no linear), down
    reads an activation (no norm: a Mul is inserted)."""
    rng = np.random.default_rng(seed)
    inits = {"gamma": (1 + rng.random(d)).astype(np.float32), "beta": rng.standard_normal(d).astype(np.float32),
             "wq": rng.standard_normal((d, ff)).astype(np.float32) / 8,
             "wk": rng.standard_normal((d, ff)).astype(np.float32) / 8,
             "wv": rng.standard_normal((ff, d)).astype(np.float32) / 8,
             "wd": rng.standard_normal((ff, d)).astype(np.float32) / 8,
             "wd2": rng.standard_normal((ff, d)).astype(np.float32) / 8}
    if norm == "LayerNormalization":
        nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], name="ln", axis=-1)]
    else:  # decomposed RMSNorm: x / sqrt(mean(x^2) + eps) * gamma
        del inits["beta"]
        inits["eps"] = np.array(1e-5, np.float32)
        inits["two"] = np.array(2.0, np.float32)
        nodes = [helper.make_node("Pow", ["x", "two"], ["x2"]),
                 helper.make_node("ReduceMean", ["x2", "axes"], ["ms"], keepdims=1),
                 helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
                 helper.make_node("Div", ["x", "rms"], ["xn"]),
                 helper.make_node("Mul", ["gamma", "xn"], ["n"], name="rms_weight")]
        inits["axes"] = np.array([-1], np.int64)
    nodes += [helper.make_node("MatMul", ["n", "wq"], ["q"], name="q_proj"),
              helper.make_node("MatMul", ["n", "wk"], ["k"], name="k_proj"),
              helper.make_node("Gemm", ["n2", "wv"], ["v"], name="v_proj", transB=1),
              helper.make_node("Add", ["q", "k"], ["qk"]), helper.make_node("Sigmoid", ["qk"], ["sg"]),
              helper.make_node("Mul", ["qk", "sg"], ["act"], name="silu"),
              helper.make_node("MatMul", ["act", "wd"], ["y0"], name="down_proj"),
              helper.make_node("MatMul", ["v", "wd2"], ["y1"], name="down2"),
              helper.make_node("Add", ["y0", "y1"], ["y"])]
    if reshape:
        nodes.insert(-9, helper.make_node("Reshape", ["n", "shape2"], ["n2"]))
        inits["shape2"] = np.array([-1, d], np.int64)
    else:
        nodes[-7].input[0] = "n"
    g = helper.make_graph(nodes, "blk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, d])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def _x(n=256, d=64, seed=5):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    x[:, [3, 17, 40]] *= 15
    return x


@pytest.mark.parametrize("norm", ["LayerNormalization", "rms"])
@pytest.mark.parametrize("reshape", [False, True])
def test_fold_leaves_float_outputs_unchanged(norm, reshape):
    """x diag(1/s) (W diag(s))^T = x W^T: folded into the norm's scale (and bias) when q/k/v are its only readers,
    through an inserted Mul otherwise; ORT computes the same outputs."""
    m = _block_model(norm, reshape=reshape)
    x = _x()
    ref = run_ort(m, {"x": x})[0]
    inits = {t.name: t for t in m.graph.initializer}
    read = lambda name: numpy_helper.to_array(inits[name])  # noqa: E731
    s = np.random.default_rng(0).uniform(0.2, 5, 64).astype(np.float32)
    linears = {"q_proj", "k_proj"} | (set() if reshape else {"v_proj"})
    where = fold_input_scale(m, "n", linears, 1 / s, read)
    assert where.startswith("a Mul") == reshape, where
    for nm in ("wq", "wk") + (() if reshape else ("wv",)):
        a = numpy_helper.to_array(inits[nm])
        inits[nm].CopyFrom(numpy_helper.from_array(a * (s[:, None] if nm != "wv" else s[None, :]), nm))
    onnx.checker.check_model(m)
    got = run_ort(m, {"x": x})[0]
    assert not np.array_equal(got, 0 * got)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("norm", ["LayerNormalization", "rms"])
def test_apply_awq_folds_into_the_norm_and_keeps_the_float_model(norm):
    m = _block_model(norm)
    x = _x()
    ref = run_ort(m, {"x": x})[0]
    inits = {t.name: t for t in m.graph.initializer}
    read = lambda name: numpy_helper.to_array(inits[name])  # noqa: E731
    lins, _ = find_linears(m)
    by_weight = {}
    for lin in lins:
        by_weight.setdefault(lin.weight, []).append(lin)
    outs = _intermediates(m, x, ["n", "act", "v"])
    grams = {t: (a.T.astype(np.float64) @ a, len(a)) for t, a in outs.items()}
    m_before = onnx.ModelProto()
    m_before.CopyFrom(m)
    new, notes = apply_awq(m, read, by_weight, grams, rtn_quantizer(4, 32, "full"))
    onnx.checker.check_model(m)
    np.testing.assert_allclose(run_ort(m, {"x": x})[0], ref, rtol=1e-4, atol=2e-4 * np.abs(ref).max())
    assert "AWQ" in notes[0] and "1 folded into a norm" in notes[0], notes
    # the norm's scale changed, not its input; act and v (no norm before them) got a Mul each
    g0 = {t.name: numpy_helper.to_array(t) for t in m_before.graph.initializer}
    assert not np.array_equal(read("gamma"), g0["gamma"])
    muls = [n.input[0] for n in m.graph.node if n.name.endswith("_awq_mul")]
    assert f"{len(muls)} through an inserted Mul" in notes[0] and set(muls) <= {"act", "v"}, notes
    # the scaled Grams are those of the scaled inputs
    pairs = [("n", "n")] + [(t, f"{t}_awq") for t in muls]
    outs2 = _intermediates(m, x, [b for _, b in pairs])
    for t, t2 in pairs:
        a = outs2[t2]
        np.testing.assert_allclose(new[t][0], a.T.astype(np.float64) @ a, rtol=2e-3,
                                   atol=2e-4 * np.abs(new[t][0]).max())


def _intermediates(m, x, names):
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    for nm in names:
        m2.graph.output.append(helper.make_tensor_value_info(nm, TensorProto.FLOAT, None))
    outs = run_ort(m2, {"x": x})
    return dict(zip(names, outs[1:]))


@pytest.mark.parametrize("method", ["awq", "aag", "awq+gptq", "aag+gptq", "awq+aag"])
def test_weight_only_methods_end_to_end(tmp_path, method):
    """The quantized model in ORT against the float one: every data-aware method is at least as close as round to
    nearest on held-out data, and AWQ's graph still computes the float model where the weights are float."""
    m = _block_model("rms")
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    x = _x(n=400)
    data = tmp_path / "d.npz"
    np.savez(data, x=x)
    base = dict(activation_type="float", weight_type="int4", weights="per-block", block_size=32,
                calibration_samples=300, evaluation_samples=100)
    ref = run_ort(m, {"x": x[300:]})[0]
    errs = {}
    for meth in ("minmax", method):
        qm = quantize(str(p), str(data), QuantizeConfig(**base, weight_method=meth))
        out = run_ort(qm.model, {"x": x[300:]})[0]
        errs[meth] = float(np.square(out - ref).sum())
    assert errs[method] < errs["minmax"]


def test_config_refusals(tmp_path):
    from qlinear.errors import ConfigError

    with pytest.raises(ConfigError, match="aag.*LPBQ"):
        QuantizeConfig(activation_type="float", weight_type="int4", weights="lpbq", weight_method="aag")
    with pytest.raises(ConfigError, match="weight_method"):
        QuantizeConfig(activation_type="float", weight_type="int4", weight_method="gptq+awq")
    p = tmp_path / "m.onnx"
    onnx.save(_block_model("rms"), p)
    with pytest.raises(ConfigError, match="awq needs calibration data"):
        quantize(str(p), None, QuantizeConfig(activation_type="float", weight_type="int4", weight_method="awq"))
