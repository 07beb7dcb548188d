"""Issue 21: a Concat of parts with very different ranges (a detector's boxes in pixels next to sigmoid scores).

Target ort keeps each part's own parameters (scores survive); target tflite ties them (the TFLite rule) and the report
flags the Concat with each part's SQNR and the remedy; the headline of such an output is its worst part. The numbers
are checked against ONNX Runtime and onnx.reference runs of the written models, not against the report alone."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_peers import run_reference

import qlinear
from qlinear.graph.plan import make_plan
from qlinear.ptq.report.html import to_html, to_json
from qlinear.ptq.report.metrics import Target

N_BOX, N_CLS = 4, 6


def detector(inner: bool = False) -> onnx.ModelProto:
    """``[N, 8, 64]`` features -> boxes in 0..320 (Conv, Clip) and class scores in 0..1 (Conv, Sigmoid), joined by a
    Concat on axis 1 (``[N, 10, 64]``, YOLOv8's ``output0`` layout). ``inner``: a 1x1 Conv reads the Concat (a
    Concat inside the graph) and its output is the graph output."""
    rng = np.random.default_rng(0)
    inits = {"wb": (rng.standard_normal((N_BOX, 8, 1)) * 60).astype(np.float32), "bb": np.full(N_BOX, 160, np.float32),
             "wc": rng.standard_normal((N_CLS, 8, 1)).astype(np.float32), "bc": np.zeros(N_CLS, np.float32),
             "lo": np.array(0, np.float32), "hi": np.array(320, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "wb", "bb"], ["braw"], name="box_conv"),
             helper.make_node("Clip", ["braw", "lo", "hi"], ["box"], name="box_clip"),
             helper.make_node("Conv", ["x", "wc", "bc"], ["craw"], name="cls_conv"),
             helper.make_node("Sigmoid", ["craw"], ["cls"], name="cls_sigmoid"),
             helper.make_node("Concat", ["box", "cls"], ["det"], name="head_concat", axis=1)]
    out = "det"
    if inner:
        inits["wm"] = (rng.standard_normal((3, N_BOX + N_CLS, 1)) * 0.1).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["det", "wm"], ["mix"], name="mix_conv"))
        out = "mix"
    shape = ["N", 3 if inner else N_BOX + N_CLS, 64]
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 64])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _with_output(m: onnx.ModelProto, t: str) -> onnx.ModelProto:
    """``m`` with the tensor ``t`` as a second graph output."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    m2.graph.output.append(helper.make_empty_tensor_value_info(t))
    return m2


def _data() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((48, 8, 64)).astype(np.float32)


CFG = dict(calibration_samples=32, evaluation_samples=16)


def _sqnr(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(10 * np.log10(np.sum(a ** 2) / np.sum((a - b) ** 2)))


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])  # default level: fusions on
    return s.run(None, {"x": x})[0]


def _scales(qm, tensor: str) -> float:
    return float(np.asarray(qm.encodings[tensor].scale).reshape(-1)[0])


@pytest.fixture(scope="module")
def runs():
    m, x = detector(), _data()
    return m, x, {t: qlinear.quantize(m, {"x": x}, dict(CFG, target=t)) for t in ("ort", "tflite")}


def test_plan_ties_concat_only_for_tflite():
    m = detector()
    for target, tied in (("ort", False), ("qnn", False), ("tflite", True)):
        p = make_plan(m, target=target)
        assert bool(p.tied) is tied
        assert [(c.node, c.inputs, c.output, c.axis) for c in p.concats] == [("head_concat", ["box", "cls"], "det", 1)]


def test_ort_keeps_the_scores(runs):
    m, x, qms = runs
    qm = qms["ort"]
    enc = {e.name for e in qm.encodings}
    # each part its own grid: the boxes 8-bit, the scores (and what they are computed from) float on target ort
    assert qm.encodings["box"].dtype == "uint8" and not {"cls", "craw", "x"} & enc
    assert "det" not in enc  # the mixed graph output is left in float, with a note
    assert any("head_concat" in n and "left in float" in n for n in qm.notes)
    ev = x[32:]
    f, q = run_reference(m, {"x": ev})[0], _ort(qm.model, ev)
    assert _sqnr(f[:, N_BOX:], q[:, N_BOX:]) >= 15 and _sqnr(f[:, :N_BOX], q[:, :N_BOX]) >= 15
    rep = qm.report()
    r = rep.outputs["det"]
    assert rep.kinds["det"] == "mixed" and rep.headlines["det"] == "sqnr_db_worst_part"
    # the score cone runs in float with its float weights: the float model's numbers (up to float32 summation order
    # against the reference evaluator; the report's ONNX Runtime float run gives them bit for bit)
    assert _sqnr(f[:, N_BOX:], q[:, N_BOX:]) > 100 and r["sqnr_db[4:10]"] > 100
    assert r["sqnr_db_worst_part"] == min(r["sqnr_db[0:4]"], r["sqnr_db[4:10]"]) == r["sqnr_db[0:4]"]
    row, = rep.mixed
    assert row["concat"] == "head_concat" and not row["tied"] and row["remedy"] is None


def test_tflite_flags_the_shared_scale(runs):
    m, x, qms = runs
    qm = qms["tflite"]
    assert _scales(qm, "box") == _scales(qm, "det")  # the TFLite rule: the output takes the (merged) input grid
    assert any(n.startswith("WARNING: Concat 'head_concat'") and "16-bit activations" in n
               and "--activation-type int16" in n for n in qm.notes)
    ev = x[32:]
    f, q = run_reference(m, {"x": ev})[0], run_reference(qm.model, {"x": ev})[0]
    scores = _sqnr(f[:, N_BOX:], q[:, N_BOX:])
    assert scores < 15  # what the shared scale costs the scores (the issue)
    rep = qm.report()
    r = rep.outputs["det"]
    assert r["sqnr_db[4:10]"] == pytest.approx(scores, abs=0.5)
    assert r["sqnr_db_worst_part"] == r["sqnr_db[4:10]"] < r["sqnr_db"]  # the headline is the worst part
    row, = rep.mixed
    assert row["tied"] and "target ort or qnn" in row["remedy"] and row["ratio"] > 16
    assert [p["tensor"] for p in row["parts"]] == ["box", "cls"]
    assert row["parts"][1]["sqnr_db"] == r["sqnr_db[4:10]"]
    doc = json.loads(to_json(qm, rep))
    assert doc["report"]["mixed_ranges"][0]["concat"] == "head_concat"
    assert "Concats of mixed ranges" in to_html(qm, rep)


def test_ort_inner_concat_requantizes_each_part():
    """A mixed Concat inside the graph: its inputs keep their grids, its output gets its own (it feeds a Conv); ONNX
    Runtime at its default level (QLinearConcat fusion) agrees with the Q/DQ model as ONNX defines it."""
    m, x = detector(inner=True), _data()
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, target="ort"))
    assert _scales(qm, "box") > 100 * _scales(qm, "cls")
    assert "det" in {e.name for e in qm.encodings}
    s_out = _scales(qm, "mix")
    ev = x[32:]
    fused, ref = _ort(qm.model, ev), run_reference(qm.model, {"x": ev})[0]
    assert np.max(np.abs(fused - ref)) <= 2 * s_out + 1e-6
    assert _sqnr(run_reference(m, {"x": ev})[0], ref) > 20
    assert qm.report().mixed[0]["graph_outputs"] == []


def test_ort_mixed_output_also_read_by_a_conv_stays_quantized():
    """A mixed Concat that is a graph output and also feeds a Conv keeps its output encoding (the Conv needs one
    input grid): nothing is left in float and no note claims so."""
    m, x = detector(inner=True), _data()
    m.graph.output.append(helper.make_tensor_value_info("det", TensorProto.FLOAT, ["N", N_BOX + N_CLS, 64]))
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, target="ort"))
    assert "det" in {e.name for e in qm.encodings}
    assert not any("left in float" in n for n in qm.notes)
    rep = qm.report()
    assert rep.kinds["det"] == "mixed" and rep.outputs["det"]["sqnr_db_worst_part"] < rep.outputs["det"]["sqnr_db"]


def score_head() -> onnx.ModelProto:
    """Boxes in 0..320 next to class scores, YOLOv8's way: one Conv computes the class logits with other channels of
    a wider range (``5 x[:, 2]``, as the box distribution logits), a Split takes the class logits (``x0 + x1 - 4``)
    to the Sigmoid. Inputs with ``x0 + x1`` larger than on the calibration samples give scores above the calibration
    maximum while their logits stay inside the logits' grid."""
    rng = np.random.default_rng(2)
    wc = (rng.standard_normal((2 * N_CLS, 8, 1)) * 0.05).astype(np.float32)
    wc[:N_CLS, :2], wc[N_CLS:, 2] = 1.0, 5.0
    inits = {"wb": (rng.standard_normal((N_BOX, 8, 1)) * 20).astype(np.float32), "bb": np.full(N_BOX, 160, np.float32),
             "wc": wc, "bc": np.r_[np.full(N_CLS, -4), np.zeros(N_CLS)].astype(np.float32),
             "lo": np.array(0, np.float32), "hi": np.array(320, np.float32),
             "split": np.array([N_CLS, N_CLS], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "wb", "bb"], ["braw"], name="box_conv"),
             helper.make_node("Clip", ["braw", "lo", "hi"], ["box"], name="box_clip"),
             helper.make_node("Conv", ["x", "wc", "bc"], ["logits"], name="cls_conv"),
             helper.make_node("Split", ["logits", "split"], ["craw", "other"], name="cls_split", axis=1),
             helper.make_node("Sigmoid", ["craw"], ["cls"], name="cls_sigmoid"),
             helper.make_node("Concat", ["box", "cls"], ["det"], name="head_concat", axis=1)]
    return _det_model(nodes, inits)


def _score_data() -> np.ndarray:
    """48 samples in U(-2, 2): the first 32 (calibration) with ``x1 = -x0`` (logits near -4), the held-out 16 with
    ``x1 = x0`` (logits up to 0)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (48, 8, 64)).astype(np.float32)
    x[:32, 1] = np.clip(-x[:32, 0] + rng.normal(0, 0.5, (32, 64)), -2, 2)
    x[32:, 1] = x[32:, 0]
    return x


@pytest.mark.parametrize("target", ["ort", "qnn"])
def test_scores_above_the_calibration_maximum_are_kept(target):
    """A Sigmoid part of a mixed output left in float is quantized over [0, 1] at 16 bits on target qnn (left float
    on target ort, whose CPU session runs 16-bit layers in float anyway): held-out scores up to ~0.5 where the
    calibration scores stay below ~0.2 (min-max uint8 clipped them there); the part's SQNR of ONNX Runtime running
    the written model against the float model (onnx.reference) is >= 15 dB."""
    m, x = score_head(), _score_data()
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, target=target))
    if target == "ort":
        assert not {"cls", "logits"} & {e.name for e in qm.encodings}
        assert any(n.startswith("cls (Sigmoid") and "is left in float too (target ort" in n for n in qm.notes)
    else:
        e = qm.encodings["cls"]
        assert e.dtype == "uint16" and _scales(qm, "cls") == pytest.approx(1 / 65535)
        assert any(n.startswith("cls (Sigmoid") and "uint16 over the Sigmoid range [0, 1]" in n for n in qm.notes)
        lg = qm.encodings["logits"]  # what the scores are computed from: 16 bits over twice the calibrated range
        f_logits = run_reference(_with_output(m, "logits"), {"x": x[:32]})[1]
        assert lg.dtype == "uint16" and float(np.asarray(lg.scale)) * 65535 >= 1.99 * (f_logits.max() -
                                                                                      f_logits.min())
    assert qm.encodings["box"].dtype == "uint8"   # the boxes' own branch keeps the run's type
    f_cal = run_reference(m, {"x": x[:32]})[0][:, N_BOX:]
    ev = x[32:]
    f, q = run_reference(m, {"x": ev})[0], _ort(qm.model, ev)
    assert f[:, N_BOX:].max() > 2 * f_cal.max()   # what min-max over the calibration samples clipped
    assert _sqnr(f[:, N_BOX:], q[:, N_BOX:]) >= 15
    _report_scores_sqnr(qm, _sqnr(f[:, N_BOX:], q[:, N_BOX:]), target)


def _report_scores_sqnr(qm, scores: float, target: str) -> None:
    """The report's SQNR of the scores part is the one computed here; on target ort the scores run in float with
    their float weights (the float model's numbers: > 100 dB here, float32 summation order against the reference
    evaluator; the report's float run in ONNX Runtime gives them bit for bit, inf)."""
    got = qm.report().outputs["det"]["sqnr_db[4:10]"]
    if target == "ort":
        assert scores > 100 and got > 100
    else:
        assert got == pytest.approx(scores, abs=0.5)


def trunk_detector(depth: int = 4, width: int = 16) -> onnx.ModelProto:
    """A detector-like graph whose scores carry the error of a shared trunk, YOLOv8's way: ``depth`` 1x1 Conv + SiLU
    (Sigmoid, Mul) layers, then boxes in 0..320 (Conv, Clip) and class scores (Conv with bias -5, Sigmoid: most
    scores ~1e-2) concatenated on axis 1 into the graph output."""
    rng = np.random.default_rng(4)
    inits, nodes, h, c = {}, [], "x", 8
    for i in range(depth):
        inits[f"w{i}"] = (rng.standard_normal((width, c, 1)) * (1.5 / np.sqrt(c))).astype(np.float32)
        inits[f"b{i}"] = (rng.standard_normal(width) * 0.5).astype(np.float32)
        nodes += [helper.make_node("Conv", [h, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}"),
                  helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"], name=f"sig{i}"),
                  helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"h{i}"], name=f"silu{i}")]
        h, c = f"h{i}", width
    inits.update({"wb": (rng.standard_normal((N_BOX, c, 1)) * 30).astype(np.float32),
                  "bb": np.full(N_BOX, 160, np.float32),
                  "wc": (rng.standard_normal((N_CLS, c, 1)) / np.sqrt(c)).astype(np.float32),
                  "bc": np.full(N_CLS, -5, np.float32), "lo": np.array(0, np.float32), "hi": np.array(320, np.float32)})
    nodes += [helper.make_node("Conv", [h, "wb", "bb"], ["braw"], name="box_conv"),
              helper.make_node("Clip", ["braw", "lo", "hi"], ["box"], name="box_clip"),
              helper.make_node("Conv", [h, "wc", "bc"], ["craw"], name="cls_conv"),
              helper.make_node("Sigmoid", ["craw"], ["cls"], name="cls_sigmoid"),
              helper.make_node("Concat", ["box", "cls"], ["det"], name="head_concat", axis=1)]
    return _det_model(nodes, inits)


def _trunk_data() -> np.ndarray:
    """48 samples of N(0, 1) with 0.2 % of the values 25x larger (heavy tails, as image features have)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((48, 8, 64)).astype(np.float32)
    x[rng.random(x.shape) < 0.002] *= 25
    return x


@pytest.mark.parametrize("target", ["ort", "qnn"])
def test_scores_computed_from_a_shared_trunk_reach_15_db(target):
    """The activations a Sigmoid part of a mixed output is computed from (the whole trunk, back to the input) are
    quantized at 16 bits over twice their calibrated ranges on target qnn, and left float on target ort (its CPU
    session runs a 16-bit layer in float between its Q/DQ pairs; the weights keep their float values): the scores'
    SQNR of ONNX Runtime running the written model against the float model is >= 15 dB, where the same model with those
    activations kept at 8 bits by an overrides rule stays below (the trunk's 8-bit noise, not the Concat or the
    Sigmoid, is what the small scores suffer)."""
    m, x = trunk_detector(), _trunk_data()
    ev = x[32:]
    f = run_reference(m, {"x": ev})[0]
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, target=target))
    trunk = ("x", "c0", "s0", "h3", "craw", "cls")
    if target == "ort":
        assert not set(trunk) & {e.name for e in qm.encodings} and qm.encodings["box"].dtype == "uint8"
        # the layers reading them compute in float in ONNX Runtime: their weights keep their float values
        assert not {"w0", "w3", "wb", "wc"} & {e.name for e in qm.encodings}
        assert any("keep their float values" in n and "w0" in n for n in qm.notes)
        note, = [n for n in qm.notes if n.startswith("14 activations that cls is computed from")]
        assert "left in float" in note and "float, not 16 bits, on target ort" in note
    else:
        assert {t: qm.encodings[t].dtype for t in trunk + ("box",)} == {t: "uint16" for t in trunk} | {"box": "uint8"}
        note, = [n for n in qm.notes if n.startswith("14 activations that cls is computed from")]
        assert "uint16 over 2x their calibrated ranges" in note
        c0 = run_reference(_with_output(m, "c0"), {"x": x[:32]})[1]
        e = qm.encodings["c0"]
        lo, hi = (0 - float(e.zero_point)) * float(e.scale), (65535 - float(e.zero_point)) * float(e.scale)
        assert lo <= 1.99 * c0.min() and hi >= 1.99 * c0.max()
        assert _scales(qm, "s0") == pytest.approx(1 / 65535)   # a SiLU's Sigmoid over its range [0, 1]
    q = _ort(qm.model, ev)
    scores = _sqnr(f[:, N_BOX:], q[:, N_BOX:])
    assert scores >= 15 and _sqnr(f[:, :N_BOX], q[:, :N_BOX]) >= 15
    _report_scores_sqnr(qm, scores, target)
    q8 = qlinear.quantize(m, {"x": x}, dict(CFG, target=target, overrides=[{"name": "*", "role": "activation",
                                                                             "type": "uint8"}]))
    assert q8.encodings["c0"].dtype == "uint8" and not any("is computed from" in n for n in q8.notes)
    assert _sqnr(f[:, N_BOX:], _ort(q8.model, ev)[:, N_BOX:]) < 15


def test_ort_sigmoid_part_read_elsewhere_keeps_its_grid():
    """A Sigmoid part that another operator also reads keeps the run's type and calibrated range (that operator
    needs its grid); so does a part an overrides rule sets."""
    m, x = score_head(), _score_data()
    m.graph.node.append(helper.make_node("Neg", ["cls"], ["neg"], name="cls_neg"))
    m.graph.output.append(helper.make_tensor_value_info("neg", TensorProto.FLOAT, ["N", N_CLS, 64]))
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, target="ort"))
    assert qm.encodings["cls"].dtype == "uint8" and not any(n.startswith("cls (Sigmoid") for n in qm.notes)
    qm = qlinear.quantize(score_head(), {"x": x}, dict(CFG, target="ort",
                                                       overrides=[{"name": "cls", "type": "uint8"}]))
    assert qm.encodings["cls"].dtype == "uint8" and _scales(qm, "cls") < 1 / 255


def test_accuracy_target_sqnr_judges_a_mixed_output_by_its_worst_part():
    """``accuracy_target: sqnr_db>=T`` holds for a mixed output when its worst part reaches T (the whole output's
    SQNR is its widest part's): here (the scores' inputs kept at 8 bits by overrides rules) the whole passes 42.5 dB
    and the scores do not until repair raises a tensor."""
    assert Target.parse("sqnr_db>=20").value_of({"det": {"sqnr_db": 30.0, "sqnr_db_worst_part": 10.0},
                                                 "y": {"sqnr_db": 25.0}}) == 10.0
    m, x = detector(), _data()
    keep8 = dict(CFG, target="ort", overrides=[{"name": "x", "type": "uint8"}, {"name": "craw", "type": "uint8"}])
    r0 = qlinear.quantize(m, {"x": x}, keep8).report().outputs["det"]  # the scores' inputs kept 8-bit by the rules
    assert r0["sqnr_db_worst_part"] < 42.5 < r0["sqnr_db"]
    qm = qlinear.quantize(m, {"x": x}, dict(keep8, accuracy_target="sqnr_db>=42.5"))
    note, = [n for n in qm.notes if n.startswith("precision repair")]
    assert "by raising" in note and qm.decisions
    ev = x[32:]
    f, q = run_reference(m, {"x": ev})[0], _ort(qm.model, ev)
    assert _sqnr(f[:, N_BOX:], q[:, N_BOX:]) > r0["sqnr_db_worst_part"]


def _det_model(nodes: list, inits: dict) -> onnx.ModelProto:
    """The detector-like graph of ``nodes``: input ``x`` [N, 8, 64], output ``det`` (boxes then class scores)."""
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 64])],
                          [helper.make_tensor_value_info("det", TensorProto.FLOAT, ["N", N_BOX + N_CLS, 64])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def concat_batchnorm(reader: str = "Mul") -> onnx.ModelProto:
    """deepcut's head: a wide part (ReLU'd Conv, 0..~700) next to a narrow one (Conv, |x| ~3) joined on axis 1, then a
    BatchNorm written out (``Mul`` and ``Add`` of per-channel constants that bring the wide channels down to the
    narrow ones' range), then a 1x1 Conv. ``reader="Conv"``: the 1x1 Conv reads the Concat directly."""
    rng = np.random.default_rng(6)
    inits = {"wb": (rng.standard_normal((N_BOX, 8, 1)) * 60).astype(np.float32), "bb": np.full(N_BOX, 150, np.float32),
             "ws": (rng.standard_normal((N_CLS, 8, 1)) * 0.5).astype(np.float32),
             "g": np.r_[np.full(N_BOX, 1 / 200), np.full(N_CLS, 1.0)].astype(np.float32).reshape(1, -1, 1),
             "b": np.r_[np.full(N_BOX, -0.75), np.zeros(N_CLS)].astype(np.float32).reshape(1, -1, 1),
             "wm": (rng.standard_normal((3, N_BOX + N_CLS, 1)) * 0.3).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "wb", "bb"], ["braw"], name="wide_conv"),
             helper.make_node("Relu", ["braw"], ["wide"], name="wide_relu"),
             helper.make_node("Conv", ["x", "ws"], ["narrow"], name="narrow_conv"),
             helper.make_node("Concat", ["wide", "narrow"], ["cat"], name="cat", axis=1)]
    if reader == "Mul":
        nodes += [helper.make_node("Mul", ["cat", "g"], ["bn_m"], name="bn_mul"),
                  helper.make_node("Add", ["bn_m", "b"], ["bn"], name="bn_add"),
                  helper.make_node("Conv", ["bn", "wm"], ["y"], name="mix_conv")]
    else:
        nodes.append(helper.make_node("Conv", ["cat", "wm"], ["y"], name="mix_conv"))
    g = helper.make_graph(nodes, "cat_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 64])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def test_plan_marks_a_concat_only_float_operators_read():
    """``float_readers``: every reader of the Concat output runs in float on ONNX Runtime (a Mul of a constant), set
    where float chains apply (target ort); a Conv reading it is an integer kernel."""
    m = concat_batchnorm()
    assert [c.float_readers for c in make_plan(m, target="ort").concats] == [True]
    for target in ("qnn", "tflite"):
        assert [c.float_readers for c in make_plan(m, target=target).concats] == [False]
    assert [c.float_readers for c in make_plan(concat_batchnorm("Conv"), target="ort").concats] == [False]


def test_ort_mixed_concat_read_by_float_operators_is_left_float():
    """Target ort: the output of a mixed Concat that only operators ONNX Runtime runs in float read (a BatchNorm
    written out) gets no quantizer, with a note; each part keeps its grid, the BatchNorm's output is quantized for the
    Conv. On one 8-bit grid (kept by an overrides rule) the narrow part is a few steps wide and the output is far
    from float (ONNX Runtime running the written models against onnx.reference running the float one)."""
    m, x = concat_batchnorm(), _data()
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, target="ort"))
    enc = {e.name for e in qm.encodings}
    assert "cat" not in enc and {"wide", "narrow", "bn"} <= enc
    note, = [n for n in qm.notes if n.startswith("Concat 'cat'")]
    assert "the output cat is left in float" in note and "bn_mul" in note
    assert not qm.report().mixed[0].get("output_grid")
    q8 = qlinear.quantize(m, {"x": x}, dict(CFG, target="ort", overrides=[{"name": "cat", "type": "uint8"}]))
    assert q8.encodings["cat"].dtype == "uint8"
    assert not any("left in float" in n for n in q8.notes if n.startswith("Concat 'cat'"))
    ev = x[32:]
    f = run_reference(m, {"x": ev})[0]
    new, old = _sqnr(f, _ort(qm.model, ev)), _sqnr(f, _ort(q8.model, ev))
    assert new > 25 > old + 10


def test_mixed_concat_on_one_grid_is_named_with_each_parts_sqnr_on_it():
    """A mixed Concat whose output stays on one 8-bit grid (here kept by an overrides rule): a note names the output,
    how many steps of that grid the narrow part is and the remedy; the report's row gives each part's SQNR on that
    grid (the narrow part's as quantizing its float values with the output's encoding gives), in report.json and the
    HTML page."""
    m, x = concat_batchnorm(), _data()
    q8 = qlinear.quantize(m, {"x": x}, dict(CFG, target="ort", overrides=[{"name": "cat", "type": "uint8"}]))
    note, = [n for n in q8.notes if n.startswith("Concat 'cat'")]
    assert "is quantized on one grid for the nodes reading it (bn_mul)" in note
    assert '{"name": "cat", "type": "float"}' in note and "the largest |x| of narrow is about" in note
    rep = q8.report()
    row, = rep.mixed
    assert row["output_grid"] and not row["tied"] and [p["tensor"] for p in row["parts"]] == ["wide", "narrow"]
    xn = run_reference(_with_output(m, "narrow"), {"x": x[32:]})[1]
    on_grid = _sqnr(xn, q8.encodings["cat"].fake_quantize(xn))
    assert row["parts"][1]["sqnr_db"] == pytest.approx(on_grid, abs=1.0) and on_grid < 15
    assert row["parts"][1]["sqnr_db"] < next(s.sqnr_db for s in rep.tensors if s.name == "narrow") - 20
    doc = json.loads(to_json(q8, rep))
    assert doc["report"]["mixed_ranges"][0]["output_grid"] is True
    assert "quantized on one grid" in to_html(q8, rep)


@pytest.mark.parametrize("target", ["ort", "qnn"])
def test_mixed_concat_read_by_a_conv_is_named_with_the_remedy(target):
    """A mixed Concat a Conv reads keeps its output grid (the Conv needs one) on targets ort and qnn; a note names
    the output and the overrides rule that keeps the narrow part (float on ort, 16 bits on qnn)."""
    m, x = concat_batchnorm("Conv"), _data()
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, target=target))
    assert "cat" in {e.name for e in qm.encodings}
    note, = [n for n in qm.notes if n.startswith("Concat 'cat'")]
    wide = "float" if target == "ort" else "uint16"
    assert "the output cat is quantized on one grid for the nodes reading it (mix_conv)" in note
    assert f'{{"name": "cat", "type": "{wide}"}}' in note


def test_ort_layers_reading_float_activations_get_float_weights():
    """Target ort: the layers that read an activation left in float (the trunk of the score cone) have no integer
    kernel in ONNX Runtime, which computes them in float: their weights keep their float values (int8 values, written
    as float, added their rounding error and saved nothing), leave the encodings before bias correction (their biases
    are the float model's) and are named in a note. Layers reading a quantized activation (every activation uint8 by
    an overrides rule) keep their int8 DequantizeLinear."""
    m, x = trunk_detector(), _trunk_data()
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, target="ort"))
    g = qm.model.graph
    prod = {o: n.op_type for n in g.node for o in n.output}
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    given = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    convs = [n for n in g.node if n.op_type == "Conv"]
    assert len(convs) == 6 and all(n.input[1] in inits and n.input[1] not in prod for n in convs)
    for n in convs:   # the weights and biases as given
        assert np.array_equal(inits[n.input[1]], given[n.input[1]]) and n.input[1] not in qm.encodings.names()
        assert np.array_equal(inits[n.input[2]], given[n.input[2]])
    note, = [n for n in qm.notes if "keep their float values" in n]
    assert note.startswith("6 weight(s) (w0, w1, w2 ...; 100% of the weights)") and "float model's speed" in note
    assert not any("run in float in ONNX Runtime (" in n for n in qm.notes)
    q8 = qlinear.quantize(m, {"x": x}, dict(CFG, target="ort", overrides=[{"name": "*", "role": "activation",
                                                                           "type": "uint8"}]))
    p8 = {o: n.op_type for n in q8.model.graph.node for o in n.output}
    assert all(p8.get(n.input[1]) == "DequantizeLinear" for n in q8.model.graph.node if n.op_type == "Conv")
    assert not any("run in float in ONNX Runtime (" in n or "keep their float values" in n for n in q8.notes)
