"""``qlinear.ptq.report.debug``: float against quantized tensor by tensor (the first jump names a corrupted scale, on
qlinear's and on ONNX Runtime's ``quantize_static`` models; SQNR against the ONNX reference evaluator), and
``run_integer`` against LiteRT / ONNX Runtime's fused kernels integer tensor by integer tensor."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import qlinear
from qlinear.errors import ConfigError, DataError
from qlinear.examples import DATA, MODEL
from qlinear.ptq.report.debug import compare_models, compare_runtime, match_tensors, to_json
from qlinear.ptq.report.evaluate import int8_kernels_exact

CFG = dict(calibration_samples=20, evaluation_samples=20)


@pytest.fixture(scope="module")
def qlinear_pair(tmp_path_factory):
    out = tmp_path_factory.mktemp("q") / "out"
    qlinear.quantize(MODEL, DATA, CFG).save(out, report=False)
    return onnx.load(out / "model.float.onnx"), onnx.load(out / "model.qdq.onnx")


@pytest.fixture(scope="module")
def ort_pair(tmp_path_factory):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    x = np.load(DATA)["input"]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x[i:i + 1]} for i in range(20)])

        def get_next(self):
            return next(self.it, None)

    p = tmp_path_factory.mktemp("ort") / "ort.onnx"
    quantize_static(str(MODEL), str(p), Reader(), quant_format=QuantFormat.QDQ, per_channel=True)
    return onnx.load(MODEL), onnx.load(p)


def _scaled(m: onnx.ModelProto, name: str, factor: float = 10.0) -> onnx.ModelProto:
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    (t,) = [t for t in m2.graph.initializer if t.name == name]
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor), name))
    return m2


def test_qlinear_model_has_no_jump_and_matches_every_tensor(qlinear_pair):
    fm, qm = qlinear_pair
    r = compare_models(fm, qm, DATA)
    assert r.first_jump is None and not r.unmatched
    roles = {t.tensor: t.role for t in r.tensors}
    assert roles["input"] == "input" and roles["stem.weight"] == "weight" and roles["fc.bias"] == "bias"
    assert {t for t, ro in roles.items() if ro == "activation"} == {o for n in fm.graph.node for o in n.output}
    order = [t.tensor for t in r.tensors]
    assert order.index("relu_out") < order.index("relu6_out") < order.index("logits")  # graph order
    assert all(10 < t.sqnr_db < 90 for t in r.tensors)


def test_sqnr_agrees_with_the_onnx_reference_evaluator(qlinear_pair):
    fm, qm = qlinear_pair
    x = np.load(DATA)["input"][:16]
    r = compare_models(fm, qm, DATA, samples=16)
    d = {t.tensor: t for t in r.tensors}
    for name, qname in (("relu6_out", "relu6_out_dequantized"), ("logits", "logits")):
        f = ReferenceEvaluator(_exposing(fm, name)).run([name], {"input": x})[0].astype(np.float64)
        q = ReferenceEvaluator(_exposing(qm, qname)).run([qname], {"input": x})[0].astype(np.float64)
        want = 10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2))
        assert d[name].sqnr_db == pytest.approx(want, abs=0.05)


def _exposing(m: onnx.ModelProto, name: str) -> onnx.ModelProto:
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    if name not in {o.name for o in m2.graph.output}:
        m2.graph.output.append(onnx.ValueInfoProto(name=name))
    for o in m2.opset_import:  # the reference evaluator implements QuantizeLinear from opset 19 (same semantics)
        if o.domain in ("", "ai.onnx"):
            o.version = max(o.version, 21)
    return m2


@pytest.mark.parametrize("tensor", ["input", "relu_out", "relu6_out", "pw_out", "res_out", "gap_out", "logits",
                                    "stem.weight", "pw.weight", "fc.weight"])
def test_corrupted_scale_is_the_first_jump_qlinear(qlinear_pair, tensor):
    fm, qm = qlinear_pair
    r = compare_models(fm, _scaled(qm, f"{tensor}_scale"), DATA)
    assert r.first_jump == tensor
    (j,) = [t for t in r.tensors if t.jump]
    if j.role == "weight":
        assert j.drop_db > 15   # against the model's other weights
    else:  # its own quantization is ~20 dB noisier than a min-max grid (gap_out: the drop alone would not show it)
        assert j.excess_db > 15
    clean = {t.tensor: t for t in compare_models(fm, qm, DATA).tensors}
    assert all(t.excess_db is None or t.excess_db < 6 for t in clean.values())


@pytest.mark.parametrize("tensor", ["stem_out", "relu_out", "relu6_out", "pw_out", "res_out"])
def test_corrupted_scale_is_the_first_jump_ort_quantize_static(ort_pair, tensor):
    fm, qm = ort_pair
    assert compare_models(fm, qm, DATA).first_jump is None
    r = compare_models(fm, _scaled(qm, f"{tensor}_scale"), DATA)
    assert r.first_jump == tensor
    (j,) = [t for t in r.tensors if t.jump]
    assert j.excess_db > 15  # relu_out, relu6_out: quantize_static fused the Relu/Clip; its clamp is applied to compare


def test_fused_relu_is_unmatched_not_misread(ort_pair):
    fm, qm = ort_pair
    matches, unmatched = match_tensors(fm, qm)
    # quantize_static removed the Relu/Clip nodes: BatchNormalization writes relu_out directly
    assert "bn_out" in unmatched and "dw_out" in unmatched
    m = {x.tensor: x for x in matches}
    assert m["relu_out"].post == "relu_out_DequantizeLinear_Output" and m["relu_out"].pre == "relu_out"
    assert m["relu_out"].clip == (0.0, float("inf")) and m["relu6_out"].clip == (0.0, 6.0)
    assert m["stem.weight"].post == "stem.weight_DequantizeLinear_Output"


def test_json_is_strict_and_bad_input_is_named(qlinear_pair):
    import json

    fm, qm = qlinear_pair
    doc = json.loads(to_json(compare_models(fm, qm, DATA, samples=4)))
    assert doc["samples"] == 4 and doc["first_jump"] is None and doc["tensors"][0]["tensor"] == "input"
    with pytest.raises(ConfigError, match="samples"):
        compare_models(fm, qm, DATA, samples=0)
    other = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["input"], ["zz"])], "g",
        [onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [None, 3, 24, 24])],
        [onnx.helper.make_tensor_value_info("zz", onnx.TensorProto.FLOAT, None)]))
    with pytest.raises(DataError, match="share no tensor"):
        compare_models(other, qm, DATA)


# ------------------------------------------------------------------------------------------- integer vs runtime
@pytest.fixture(scope="module")
def tflite_pair(tmp_path_factory):
    out = tmp_path_factory.mktemp("t") / "out"
    qlinear.quantize(MODEL, DATA, dict(CFG, target="tflite")).save(out, report=False)
    return out / "model.qdq.onnx", out / "model.tflite"


def test_litert_every_tensor_bit_exact(tflite_pair):
    pytest.importorskip("ai_edge_litert")
    q, t = tflite_pair
    r = compare_runtime(q, DATA, tflite=t, samples=8)
    assert r.first_difference is None and r.mode == "litert_ref"
    names = [d.tensor for d in r.tensors]
    assert names[0] == "input_quantized" and "relu6_out_quantized" in names and names[-1] == "logits_quantized"
    assert all(d.size > 0 and d.differing == 0 for d in r.tensors)


def test_litert_wrong_formula_names_first_tensor_and_formula(tflite_pair):
    pytest.importorskip("ai_edge_litert")
    q, t = tflite_pair
    r = compare_runtime(q, DATA, tflite=t, samples=8, mode="f32_rne")
    assert r.first_difference == "relu_out_quantized"   # the first Conv: TFLite's reference requantizes in fixed point
    d = r.tensors[[x.tensor for x in r.tensors].index(r.first_difference)]
    assert d.op == "Conv" and d.node == "stem" and d.max_diff == 1 and 0 < d.differing < d.size
    assert "conv fixed_double" in d.formula and "instead of f32_rne" in d.formula
    assert r.tensors[0].differing == 0  # the input QuantizeLinear agrees


def test_litert_default_resolver_outputs(tflite_pair):
    pytest.importorskip("ai_edge_litert")
    q, t = tflite_pair
    r = compare_runtime(q, DATA, runtime="litert_xnnpack", tflite=t, samples=8)
    assert [d.tensor for d in r.tensors] == ["logits_quantized"] and "only the graph outputs" in r.notes[0]
    assert r.first_difference is None and r.mode == "litert_xnnpack"
    r = compare_runtime(q, DATA, runtime="litert_xnnpack", tflite=t, samples=8, mode="litert_ref")
    assert r.first_difference == "logits_quantized"  # the reference formulas do not give XNNPACK's logits


def test_ort_fused_outputs(qlinear_pair):
    _, qm = qlinear_pair
    r = compare_runtime(qm, DATA, runtime="ort_fused", samples=8)
    assert [d.tensor for d in r.tensors] == ["logits_quantized"] and "only the graph outputs" in r.notes[0]
    if int8_kernels_exact():  # README: run_integer(mode="ort_fused") reproduces ORT's int8 kernels there
        assert r.first_difference is None
    with pytest.raises(ConfigError, match="runtime"):
        compare_runtime(qm, DATA, runtime="tvm")


def _ort_fused_ops(path) -> set[str]:
    """The operator types of ONNX Runtime's optimized graph (default level) of the model at ``path``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.optimized_model_filepath = str(path) + ".opt.onnx"
    so.log_severity_level = 3
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return {n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node}


@pytest.mark.parametrize("cfg,unfused", [(dict(activation_type="uint16"), {"Conv", "Gemm", "Add", "GlobalAveragePool"}),
                                         (dict(weight_type="int4"), {"Conv", "Gemm"})])
def test_ort_fused_runs_unfused_widths_in_float(tmp_path, cfg, unfused):
    """ONNX Runtime's CPU provider fuses 8-bit Q/DQ patterns only (its optimized graph keeps Conv/Gemm in float for
    16-bit activations or 4-bit weights): the ort_fused profile runs those operators in float too, and a value 1 step
    apart there is float32 summation order, named as such, not a first difference (it was: 5 of 160 logits under
    uint16, exit 1)."""
    from qlinear.kernels import IntegerModel
    from qlinear.ptq.report.debug import _unfused

    qlinear.quantize(MODEL, DATA, dict(CFG, **cfg)).save(tmp_path / "o", report=False)
    path = tmp_path / "o" / "model.qdq.onnx"
    fused = _ort_fused_ops(path)
    assert not {"QLinearConv", "QGemm"} & fused and "Conv" in fused  # the peer: not fused at these widths
    im = IntegerModel(onnx.load(path), "ort_fused")
    got = set(_unfused(im).values())
    assert unfused <= got and not {"Conv", "Gemm", "Add", "GlobalAveragePool"} - unfused & got
    assert ("QLinearAdd" in fused) == ("Add" not in unfused)
    r = compare_runtime(onnx.load(path), DATA, runtime="ort_fused", samples=16)
    assert r.first_difference is None
    assert all(d.max_diff <= 1 and (not d.differing or "float32 summation order" in d.formula) for d in r.tensors)


@pytest.mark.parametrize("tensor", ["h_smoothed", "probs", "gelu"])
def test_transformer_encoder(tmp_path, tensor):
    """A BERT-like encoder (smoothing, masked attention: scores_m holds -3.4e38 where masked, whose SQNR says nothing
    about its error): no jump in qlinear's model; a corrupted scale is named (the first tensor after float
    LayerNorm, the softmax output, the Gelu output)."""
    from tiny_models import encoder_data, tiny_encoder

    data = encoder_data()
    qlinear.quantize(tiny_encoder(), data, dict(calibration_samples=32, evaluation_samples=32)).save(
        tmp_path / "o", report=False)
    fm, qm = onnx.load(tmp_path / "o" / "model.float.onnx"), onnx.load(tmp_path / "o" / "model.qdq.onnx")
    clean = compare_models(fm, qm, data)
    assert clean.first_jump is None and not clean.unmatched
    assert compare_models(fm, _scaled(qm, f"{tensor}_scale"), data).first_jump == tensor


def test_same_values_in_another_shape_are_compared():
    """A constant the quantized model holds as ``[1]`` where the float model has a scalar (the TFLite target writes
    scalars so; ppocr-v4-rec's ``qlinear debug`` stopped on it): compared value for value. Another number of values
    is not comparable and says so."""
    from qlinear.ptq.report.debug import _Acc

    a = _Acc()
    a.add(np.float32(2.0), np.array([2.5], np.float32), None)
    assert a.sig == pytest.approx(4.0) and a.noise == pytest.approx(0.25)
    with pytest.raises(DataError, match="shapes differ"):
        a.add(np.zeros(3, np.float32), np.zeros(4, np.float32), None)


def test_the_model_as_shipped_compares_like_the_runs_rewritten_float():
    """A paddle2onnx-style model (Constant-node weights, Conv -> BatchNormalization): qlinear folds and moves them, so
    the original file's weights and Conv outputs differ from the quantized model's. The debug command rewrites FLOAT
    the same way (with notes) and gives what model.float.onnx gives; before, the folded weight was the first jump
    (SQNR near 0 dB against the unfolded one)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.5, (6, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "w")),
             helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"g": rng.uniform(0.2, 3, 6), "b": rng.normal(0, 1, 6), "mu": rng.normal(0, 1, 6),
             "var": rng.uniform(0.01, 4, 6), "w2": rng.normal(0, 0.3, (4, 6, 3, 3))}
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = {"x": rng.normal(0, 1, (24, 3, 8, 8)).astype(np.float32)}
    out = qlinear.quantize(m, data, dict(calibration_samples=16, evaluation_samples=8))
    shipped = compare_models(m, out.model, data, samples=8)
    rewritten = compare_models(out.reference_model, out.model, data, samples=8)   # model.float.onnx
    assert any("Constant-node weights" in n for n in shipped.notes) and any("1 BatchNormalization" in n
                                                                              for n in shipped.notes)
    assert not rewritten.notes and shipped.first_jump == rewritten.first_jump
    by = {t.tensor: t.sqnr_db for t in shipped.tensors}
    assert by == pytest.approx({t.tensor: t.sqnr_db for t in rewritten.tensors}) and min(by.values()) > 30


def test_runtime_comparison_covers_samples_of_several_lengths(tmp_path):
    """Samples of different sequence lengths cannot share a call: every batch of the first --samples is compared
    (only the first batch was: "on 1 samples" whatever --samples said)."""
    rng = np.random.default_rng(0)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T", 4])],
                          [numpy_helper.from_array(rng.normal(0, 0.5, (8, 4)).astype(np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = tmp_path / "data"
    data.mkdir()
    for i in range(12):
        np.savez(data / f"{i:02d}.npz", x=rng.normal(0, 1, (1, 3 + i % 4, 8)).astype(np.float32))
    qlinear.quantize(m, data, dict(calibration_samples=8, evaluation_samples=4)).save(tmp_path / "o", report=False)
    r = compare_runtime(onnx.load(tmp_path / "o" / "model.qdq.onnx"), data, runtime="ort_fused", samples=6)
    assert r.samples == 6 and [d.size for d in r.tensors] == [4 * (3 + 4 + 5 + 6 + 3 + 4)]
    if int8_kernels_exact():
        assert r.first_difference is None


def test_differences_named_float_rounding_only_where_both_compute_in_float(qlinear_pair):
    """A QuantizeLinear of a float operator's output (basic-pitch's sigmoid, dnsmos's) 1 step apart is float32
    rounding of two float kernels; 2 steps, or an integer kernel's tensor, is a difference."""
    from qlinear.kernels import IntegerModel
    from qlinear.ptq.report.debug import FLOAT_INPUT_ROUNDING, IntDiff, RuntimeDiff, name_differences

    im = IntegerModel(qlinear_pair[1], "ort_fused")

    def diff(t, op, k, mx):
        return IntDiff(t, t, "n", op, "uint8", 100, k, mx)

    res = RuntimeDiff("ort_fused", "ort_fused", 4, [diff("a", "QuantizeLinear", 3, 1), diff("b", "Conv", 0, 0),
                                                    diff("c", "Gemm", 1, 1), diff("d", "QuantizeLinear", 2, 2)])
    name_differences(res, im, lambda d: f"formula of {d.tensor}")
    assert res.tensors[0].formula == FLOAT_INPUT_ROUNDING and res.first_difference == "c"
    assert res.tensors[2].formula == "formula of c" and res.tensors[3].formula == ""
    # an operator whose input differs by float rounding carries the difference on: not its formula's (a 16x8
    # PP-OCRv6 rec: a float-island Add 1 step apart, then a MUL equal to LiteRT's on LiteRT's own inputs)
    op = next(o for o in im.qg.ops.values() if o.output is not None and any(
        v is not None and v.const is None and v.name in {p.output.name for p in im.qg.ops.values() if p.output}
        for v in o.inputs))
    src = next(v.name for v in op.inputs if v is not None and v.const is None)
    res = RuntimeDiff("litert", "litert_ref", 4, [diff(src, "QuantizeLinear", 2, 1), diff(op.output.name, op.op, 9, 3)])
    name_differences(res, im, lambda d: "formula")
    assert res.tensors[0].rounding and res.tensors[1].propagated and res.first_difference is None
    assert res.tensors[1].formula.startswith(f"its input {src} differs already (float rounding)")


def test_litert_later_tensors_carried_or_made_on_the_runtimes_own_inputs(tflite_pair, capsys):
    """Under a wrong formula every later tensor differs too; each is computed again from LiteRT's own values of its
    inputs: an Add, a Flatten, the Gemm then equal LiteRT's (carried), the later Convs and the mean do not (made
    there too: the same formula)."""
    pytest.importorskip("ai_edge_litert")
    from qlinear.cli.main import main

    q, t = tflite_pair
    r = compare_runtime(q, DATA, tflite=t, samples=8, mode="f32_rne")
    after = r.tensors[[x.tensor for x in r.tensors].index(r.first_difference) + 1:]
    assert after and all(d.differing and d.own_differing is not None for d in after)
    carried = [d.op for d in after if d.propagated]
    assert carried and all(d.own_differing == 0 for d in after if d.propagated)
    # the operators that requantize make the difference again under f32_rne: the Convs, and the mean
    # (GlobalAveragePool, TFLite's MEAN into its own output grid), whose float requantization differs from LiteRT's
    # fixed point on values of its own inputs too; it was labelled carried because its input differed
    made = {d.op for d in after if not d.propagated}
    assert made == {"Conv", "GlobalAveragePool"} and all(d.own_differing > 0 for d in after if not d.propagated)
    assert all("computed from the runtime's own values of its inputs" in d.formula for d in after if d.propagated)
    assert main(["debug", str(q), str(t), "--data", str(DATA), "--samples", "8", "--mode", "f32_rne"]) == 1
    said = capsys.readouterr().out
    assert "carried" in said and "made here too" in said


def test_a_grid_that_starts_where_a_clamp_after_it_cuts_is_no_jump(cle_relu6, tmp_path):
    """Per-tensor on target ort a layer before a ReLU6 written as Max(0)/Min(bound) takes the clamp's grid, which
    starts at 0: its saturation there changes nothing after the clamp. It was counted as the conv's own error
    (EfficientNet-Lite0: a "first jump" of 4.7 dB at the first Conv, whose clamp's output had 46 dB); now the float
    value is cut where the grid and the clamp both cut it: the conv output scores as its clamped output does, and a
    scale corrupted after it is still the first jump."""
    model, data = cle_relu6
    qm = qlinear.quantize(model, data, dict(calibration_samples=32, evaluation_samples=0, weights="per-tensor"))
    qm.save(tmp_path / "o")
    fm, q = tmp_path / "o" / "model.float.onnx", onnx.load(tmp_path / "o" / "model.qdq.onnx")
    r = {t.tensor: t for t in compare_models(fm, q, data).tensors}
    assert r["c1"].quantized and r["c1"].sqnr_db > 25 and abs(r["c1"].sqnr_db - r["r"].sqnr_db) < 3
    assert not any(t.jump for t in r.values())
    bad = compare_models(fm, _scaled(q, "y_scale"), data)
    assert bad.first_jump == "y"


def test_the_model_as_given_compares_like_the_float_model_after_equalization(tmp_path):
    """A per-tensor run rescales the channels (cross-layer equalization): the model as given was compared with
    other values (EfficientNet-Lite0: -1.3 dB at the first Conv, a false first jump). The debug command now redoes
    the equalization (data-free, the run's scales) when the quantized weights show it: the same tensors and SQNRs as
    against the run's model.float.onnx (bias correction off, so the two float models are one); a per-channel run
    (no equalization) is compared as given."""
    rng = np.random.default_rng(5)
    c = 8
    inits = [numpy_helper.from_array((rng.normal(0, 0.5, (c, 3, 3, 3)) * rng.uniform(0.05, 3, (c, 1, 1, 1)))
                                     .astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (4, c, 1, 1)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(0, np.float32), "zero"), numpy_helper.from_array(np.array(6, np.float32),
                                                                                                "six")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c1", "zero", "six"], ["r"], name="relu6"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = {"x": rng.normal(0, 1, (24, 3, 8, 8)).astype(np.float32)}
    for weights, redone in (("per-tensor", True), ("per-channel", False)):
        qm = qlinear.quantize(model, data, dict(calibration_samples=16, evaluation_samples=0, weights=weights,
                                                bias_correction=False))
        qm.save(tmp_path / weights)
        q, out = onnx.load(tmp_path / weights / "model.qdq.onnx"), tmp_path / weights / "model.float.onnx"
        given = compare_models(model, q, data)
        written = compare_models(out if out.exists() else model, q, data)
        assert out.exists() == redone and any("cross-layer equalization" in n for n in given.notes) == redone
        assert [(t.tensor, round(t.sqnr_db, 6)) for t in given.tensors] == \
            [(t.tensor, round(t.sqnr_db, 6)) for t in written.tensors]
        assert given.first_jump is None and min(t.sqnr_db for t in given.tensors) > 20


def test_a_quantized_model_with_a_fixed_batch_runs_one_sample_a_call():
    """A Q/DQ model whose batch dimension is fixed at 1 (``--input-shape`` for a .tflite) beside a float model with
    a dynamic one: the stacking check ran the float model only and sent 8 samples at once to the quantized one,
    which ONNX Runtime refused ("Got: 8 Expected: 1"); both are probed now, and the comparison runs sample by
    sample with the SQNRs of the dynamic-batch run."""
    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=16, evaluation_samples=0))
    fixed = onnx.ModelProto()
    fixed.CopyFrom(qm.model)
    for v in fixed.graph.input:
        v.type.tensor_type.shape.dim[0].dim_value = 1
    a = compare_models(qm.encoded_model, fixed, DATA, samples=4)
    b = compare_models(qm.encoded_model, qm.model, DATA, samples=4)
    assert a.samples == b.samples == 4
    assert [(x.tensor, round(x.sqnr_db, 6)) for x in a.tensors if x.sqnr_db is not None] == \
        [(x.tensor, round(x.sqnr_db, 6)) for x in b.tensors if x.sqnr_db is not None]
