"""Report metrics by output kind (issue 21): classifier (top-1 agreement), probability / score (decision agreement
at 0.5 and SQNR), embedding (cosine), generic (cosine, SQNR), integer outputs (exact match) and integer passthrough
outputs (skipped, with a note). The report's numbers are checked against ONNX Runtime runs of the float and the
quantized model on the held-out samples."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from tiny_models import make_model

import qlinear
from qlinear.ptq.report.evaluate import HEADLINE, kind_metrics, output_kind, sequence_agreement

CFG = dict(calibration_samples=24, evaluation_samples=40, batch_size=8)
N_CAL = 24


def heads() -> onnx.ModelProto:
    """``x [batch, 16]`` and ``ids [batch, 5]`` (int64) -> ``logits [batch, 10]``, ``prob [batch, 1]`` (sigmoid),
    ``embedding [batch, 12]`` (L2-normalized), ``depth_map [batch, 4, 6]``, ``pred`` (ArgMax of the logits, int64)
    and ``ids_out`` (the ids passed through)."""
    rng = np.random.default_rng(0)
    w = {"W1": (rng.standard_normal((16, 32)) / 4).astype(np.float32),
         "Wc": (rng.standard_normal((32, 10)) / 3).astype(np.float32),
         "Wp": (rng.standard_normal((32, 1)) / 6).astype(np.float32),
         "We": (rng.standard_normal((32, 12)) / 3).astype(np.float32),
         "Wf": (rng.standard_normal((32, 24)) / 3).astype(np.float32),
         "shape": np.array([-1, 4, 6], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"]), helper.make_node("Relu", ["a"], ["h"]),
             helper.make_node("MatMul", ["h", "Wc"], ["logits"]),
             helper.make_node("MatMul", ["h", "Wp"], ["p"]), helper.make_node("Sigmoid", ["p"], ["prob"]),
             helper.make_node("MatMul", ["h", "We"], ["e"]),
             helper.make_node("LpNormalization", ["e"], ["embedding"], axis=-1, p=2),
             helper.make_node("MatMul", ["h", "Wf"], ["f"]), helper.make_node("Reshape", ["f", "shape"], ["fm"]),
             helper.make_node("Tanh", ["fm"], ["depth_map"]),
             helper.make_node("ArgMax", ["logits"], ["pred"], axis=1, keepdims=0),
             helper.make_node("Identity", ["ids"], ["ids_out"])]
    f = TensorProto.FLOAT
    return make_model(nodes, [helper.make_tensor_value_info("x", f, ["batch", 16]),
                          helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 5])],
                  [helper.make_tensor_value_info("logits", f, ["batch", 10]),
                   helper.make_tensor_value_info("prob", f, ["batch", 1]),
                   helper.make_tensor_value_info("embedding", f, ["batch", 12]),
                   helper.make_tensor_value_info("depth_map", f, ["batch", 4, 6]),
                   helper.make_tensor_value_info("pred", TensorProto.INT64, ["batch"]),
                   helper.make_tensor_value_info("ids_out", TensorProto.INT64, ["batch", 5])], w)


def _data(n: int = 64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((n, 16)).astype(np.float32), "ids": rng.integers(0, 99, (n, 5))}


def _run(m: onnx.ModelProto, feed: dict) -> dict[str, np.ndarray]:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


@pytest.fixture(scope="module")
def quantized():
    m, d = heads(), _data()
    qm = qlinear.quantize(m, d, CFG)
    held = {k: v[N_CAL:] for k, v in d.items()}
    return m, qm, qm.report(), _run(m, held), _run(qm.model, held)


def test_each_output_gets_its_kind_and_headline(quantized):
    _, qm, rep, _, _ = quantized
    assert rep.kinds == {"logits": "classifier", "prob": "probability", "embedding": "embedding",
                         "depth_map": "generic", "pred": "integer", "ids_out": "passthrough"}
    assert rep.headlines == {o: HEADLINE[k] for o, k in rep.kinds.items()}
    assert set(rep.outputs["logits"]) >= {"top1_agreement", "cosine_mean", "sqnr_db"}
    assert set(rep.outputs["prob"]) == {"decision_agreement", "sqnr_db"}          # no cosine of one value
    assert "top1_agreement" not in rep.outputs["embedding"] and "cosine_mean" in rep.outputs["embedding"]
    assert "top1_agreement" not in rep.outputs["depth_map"] and "sqnr_db" in rep.outputs["depth_map"]
    assert rep.outputs["ids_out"] == {}                                            # no SQNR inf of a passthrough
    assert any("'ids_out'" in n and "left out" in n for n in qm.notes)


def test_metric_values_match_onnxruntime(quantized):
    _, _, rep, f, q = quantized
    r = rep.outputs
    assert r["logits"]["top1_agreement"] == pytest.approx(np.mean(f["logits"].argmax(1) == q["logits"].argmax(1)),
                                                          abs=1 / 40 + 1e-9)
    assert r["prob"]["decision_agreement"] == pytest.approx(np.mean((f["prob"] >= 0.5) == (q["prob"] >= 0.5)),
                                                            abs=1 / 40 + 1e-9)
    a, b = f["embedding"].astype(np.float64), q["embedding"].astype(np.float64)
    cos = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert r["embedding"]["cosine_mean"] == pytest.approx(cos.mean(), abs=2e-3)
    a, b = f["depth_map"].astype(np.float64), q["depth_map"].astype(np.float64)
    assert r["depth_map"]["sqnr_db"] == pytest.approx(10 * np.log10(np.sum(a ** 2) / np.sum((a - b) ** 2)), abs=1.0)
    assert r["pred"]["exact_match"] == pytest.approx(np.mean(f["pred"] == q["pred"]), abs=1 / 40 + 1e-9)
    # the ArgMax output agrees exactly as often as the logits' top-1
    assert r["pred"]["exact_match"] == pytest.approx(r["logits"]["top1_agreement"], abs=1 / 40 + 1e-9)


def test_report_json_and_html_carry_the_kind(quantized, tmp_path):
    _, qm, _, _, _ = quantized
    qm.save(tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    outs = doc["report"]["outputs"]
    assert outs["prob"]["kind"] == "probability" and outs["prob"]["headline"] == "decision_agreement"
    assert outs["ids_out"] == {"kind": "passthrough", "headline": None}
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<td>probability</td>" in html and "skipped" in html


def test_output_kind_from_values():
    rng = np.random.default_rng(2)
    logits = [rng.standard_normal((8, 10)).astype(np.float32)]
    soft = [np.exp(x) / np.exp(x).sum(1, keepdims=True) for x in logits]
    unit = [x / np.linalg.norm(x, axis=1, keepdims=True) for x in logits]
    assert output_kind("out", logits, [8]) == "classifier"
    assert output_kind("probs", soft, [8]) == "classifier"                # softmax rows, 10 classes
    assert output_kind("out", unit, [8]) == "embedding"                   # unit-norm rows
    assert output_kind("sentence_embedding", logits, [8]) == "embedding"  # by name
    assert output_kind("pooler_output", logits, [8]) == "embedding"
    assert output_kind("score", [rng.random((8, 1)).astype(np.float32)], [8]) == "probability"
    assert output_kind("score", [rng.random(8).astype(np.float32)], [8]) == "probability"
    assert output_kind("value", [rng.standard_normal(8).astype(np.float32)], [8]) == "generic"
    mos = [(1 + 4 * rng.random((8, 3))).astype(np.float32)]   # three quality scores in 1..5 (speechmos' DNSMOS)
    assert output_kind("Identity:0", mos, [8]) == "regression"
    assert output_kind("plcmos", [np.float32(2.4).reshape(())], [1]) == "regression"   # one scalar MOS per sample
    assert output_kind("Identity:0", [mos[0] - 3], [8]) == "classifier"   # negative somewhere: logits
    assert output_kind("out", [rng.random((8, 5)).astype(np.float32) - 0.5], [8]) == "classifier"  # 5 logits
    # swift-f0's pitch in Hz and confidence per frame, [1, 125]: not logits (never negative): no top-1 over frames
    hz = [(50 + 400 * rng.random((1, 125))).astype(np.float32)]
    assert output_kind("pitch", hz, [1]) == "generic" and output_kind("confidence", [hz[0] / 500], [1]) == "generic"
    assert output_kind("last_hidden_state", [rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 9, 4))],
                       [2, 2]) == "embedding"
    assert output_kind("boxes", [rng.standard_normal((2, 5, 4))], [2]) == "generic"
    seq = rng.standard_normal((2, 5, 4))
    soft_seq = np.exp(seq) / np.exp(seq).sum(-1, keepdims=True)
    assert output_kind("probs", [soft_seq], [2]) == "sequence"
    assert output_kind("log_probs", [np.log(soft_seq).transpose(1, 0, 2)], [2]) == "sequence"   # torch CTC layout
    assert output_kind("probs", [soft_seq[:, :1]], [2]) != "sequence"                           # one position
    # a text / segmentation map from a Sigmoid (float32 rounding may give 1.0000001): decisions at 0.5, judged by IoU
    pm = rng.random((2, 1, 8, 8)).astype(np.float32)
    pm[0, 0, 0, 0] = np.nextafter(np.float32(1), np.float32(2))
    assert output_kind("maps", [pm], [2], producer="Sigmoid") == "map"
    assert output_kind("score", [pm[:, 0, 0, :1]], [2], producer="Sigmoid") == "probability"   # a few per sample
    f, q = np.zeros((1, 10), np.float32), np.zeros((1, 10), np.float32)
    f[0, :4], q[0, 2:5] = 0.9, 0.7                      # float says 0..3, quantized 2..4: IoU 2 / 5
    r = kind_metrics("map", [f], [q], [1], None, "maps", "src")
    assert r["decision_iou"] == pytest.approx(2 / 5) and r["decision_agreement"] == pytest.approx(7 / 10)
    assert HEADLINE["map"] == "decision_iou"
    # recurrent states: never top-1 (a GRU's [1, batch, 128]) nor parts (silero's [2, batch, 128])
    state = [rng.standard_normal((1, 1, 128)).astype(np.float32)]
    assert output_kind("h_out", state, [1], producer="GRU") == "state"
    assert output_kind("out7", state, [1], producer="GRU") == "state"
    assert output_kind("stateN", [rng.standard_normal((2, 1, 128)) * np.logspace(-3, 2, 128)], [1]) == "state"
    assert output_kind("hn", state, [1]) == "state" and output_kind("present.0.key", state, [1]) == "state"
    probs = [rng.random((1, 172, 88)).astype(np.float32)]   # basic-pitch's note posteriorgram, named by tf2onnx
    assert output_kind("StatefulPartitionedCall:1", probs, [1], producer="Sigmoid") == "map"
    assert output_kind("last_hidden_state", state, [1]) == "embedding"                    # an encoder's output
    assert output_kind("hand", [rng.standard_normal((8, 10))], [8]) == "classifier"       # 'h' only as a word
    assert output_kind("h", [rng.standard_normal((8, 10))], [8]) == "classifier"          # a bare 'h' is not
    assert output_kind("ids", [np.arange(8)], [8]) == "integer"
    assert output_kind("ids", [np.arange(8)], [8], passthrough=True) == "passthrough"


def test_kind_metrics_with_samples_of_different_shapes():
    """Batches of different sequence lengths: cosine per sample over all batches, SQNR over all values."""
    rng = np.random.default_rng(3)
    fa = [rng.standard_normal((2, n, 4)) for n in (3, 7, 5)]
    qa = [a + rng.standard_normal(a.shape) * 0.1 for a in fa]
    r = kind_metrics("generic", fa, qa, [2, 2, 2], None, "h", "src")
    cos = [float(a[i].ravel() @ b[i].ravel() / np.linalg.norm(a[i]) / np.linalg.norm(b[i]))
           for a, b in zip(fa, qa) for i in range(2)]
    assert r["cosine_mean"] == pytest.approx(np.mean(cos)) and r["cosine_min"] == pytest.approx(np.min(cos))
    sig = sum(float(np.sum(a ** 2)) for a in fa)
    noise = sum(float(np.sum((a - b) ** 2)) for a, b in zip(fa, qa))
    assert r["sqnr_db"] == pytest.approx(10 * np.log10(sig / noise))
    # a state [2, batch, 16]: samples along axis 1
    fa = [rng.standard_normal((2, 3, 16))]
    qa = [fa[0].copy()]
    qa[0][:, 1] = -qa[0][:, 1]
    r = kind_metrics("generic", fa, qa, [3], None, "state", "src")
    assert r["cosine_min"] == pytest.approx(-1.0) and r["cosine_mean"] == pytest.approx(1 / 3)


def test_regression_output_is_judged_in_its_units():
    """A few quality scores per sample (DNSMOS's [N, 3] MOS): SQNR as the headline and the absolute errors in MOS
    points, no top-1 agreement (the largest score is not a class) and no cosine (three positive values always point
    the same way)."""
    f = [np.array([[3.0, 4.0, 2.5], [1.5, 2.0, 1.25]], np.float32), np.array([[4.5, 4.5, 4.0]], np.float32)]
    q = [f[0] + np.array([[0.05, 0.0, -0.2], [0.0, 0.1, 0.0]], np.float32), f[1].copy()]
    r = kind_metrics("regression", f, q, [2, 1], None, "mos", "src")
    assert r["max_abs_error"] == pytest.approx(0.2) and r["mean_abs_error"] == pytest.approx(0.35 / 9)
    assert "top1_agreement" not in r and "cosine_mean" not in r and HEADLINE["regression"] == "sqnr_db"
    sig = sum(float(np.sum(a.astype(np.float64) ** 2)) for a in f)
    assert r["sqnr_db"] == pytest.approx(10 * np.log10(sig / (0.05 ** 2 + 0.2 ** 2 + 0.1 ** 2)), rel=1e-4)


def test_mean_pooled_sentence_embedding_is_not_a_classifier():
    """A sentence encoder's mean pooling (ReduceSum / Div, then a one-input Concat, as MiniLM exports it) under a
    bare numeric name: an embedding judged by cosine, not top-1 agreement."""
    rng = np.random.default_rng(4)
    W = (rng.standard_normal((8, 24)) / 3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("ReduceSum", ["h", "ax1"], ["s"], keepdims=0),
             helper.make_node("Div", ["s", "len"], ["mean"]),
             helper.make_node("Concat", ["mean"], ["461"], axis=1)]
    m = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
               [helper.make_tensor_value_info("461", TensorProto.FLOAT, ["batch", 24])],
               {"W": W, "ax1": np.array([1], np.int64), "len": np.array(6, np.float32)})
    x = rng.standard_normal((40, 6, 8)).astype(np.float32)
    rep = qlinear.quantize(m, {"x": x}, dict(calibration_samples=20, evaluation_samples=20)).report()
    assert rep.kinds["461"] == "embedding" and rep.headlines["461"] == "cosine_mean"
    assert "top1_agreement" not in rep.outputs["461"]


def test_mixed_range_output_is_judged_per_part():
    """Boxes in pixels next to scores in [0, 1] in one output ``[batch, 5, 6]``: the SQNR of the whole is the
    boxes' alone; the report gives each part's and judges by the worst."""
    rng = np.random.default_rng(5)
    w = {"Wb": (rng.standard_normal((8, 20)) / 3).astype(np.float32),
         "Ws": (rng.standard_normal((8, 10)) / 3).astype(np.float32),
         "px": np.array(300, np.float32), "sb": np.array([-1, 5, 4], np.int64), "ss": np.array([-1, 5, 2], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "Wb"], ["b0"]), helper.make_node("Mul", ["b0", "px"], ["b1"]),
             helper.make_node("Reshape", ["b1", "sb"], ["boxes"]),
             helper.make_node("MatMul", ["x", "Ws"], ["s0"]), helper.make_node("Sigmoid", ["s0"], ["s1"]),
             helper.make_node("Reshape", ["s1", "ss"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["det"], axis=-1)]
    m = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
               [helper.make_tensor_value_info("det", TensorProto.FLOAT, ["batch", 5, 6])], w)
    x = rng.standard_normal((40, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=20, evaluation_samples=20))
    rep = qm.report()
    r = rep.outputs["det"]
    assert rep.kinds["det"] == "mixed" and rep.headlines["det"] == "sqnr_db_worst_part"
    assert {"sqnr_db[0:4]", "sqnr_db[4:6]"} <= set(r)
    f = _run(m, {"x": x[20:]})["det"].astype(np.float64)
    # the scores and what they are computed from stay float on target ort (qlinear.ptq.mixed), the boxes are
    # quantized; the report's figures are ONNX Runtime's default session's (which may run a MatMul with a DQ'd
    # weight otherwise than the Q/DQ definition: ~3 dB on the scores here)
    assert {"s1", "s0", "x"} & set(qm.plan.skipped) == {"s1", "s0", "x"}
    q = _run(qm.model, {"x": x[20:]})["det"].astype(np.float64)

    def sqnr(a, b):
        return 10 * np.log10(np.sum(a ** 2) / np.sum((a - b) ** 2))

    assert r["sqnr_db[0:4]"] == pytest.approx(sqnr(f[..., :4], q[..., :4]), abs=1.0)
    assert r["sqnr_db[4:6]"] == pytest.approx(sqnr(f[..., 4:], q[..., 4:]), abs=1.0)
    assert r["sqnr_db_worst_part"] == min(r["sqnr_db[0:4]"], r["sqnr_db[4:6]"])
    assert r["sqnr_db"] == pytest.approx(sqnr(f, q), abs=1.0)


def _onehot(paths: list[list[int]], classes: int = 4) -> np.ndarray:
    return np.eye(classes, dtype=np.float32)[np.asarray(paths)] * 0.9 + 0.1 / classes


def test_sequence_agreement_reads_paths_as_a_ctc_decoder():
    """Paths over classes {0: blank, 1: 'a', 2: 'b', 3: 'c'} (the blank is the most frequent top class): a
    character's run ending one step later is the same text; a dropped, added or doubled-across-blank character
    is not."""
    f = [[1, 1, 0, 2, 0, 0], [3, 0, 0, 3, 0, 0], [1, 2, 0, 0, 0, 0], [2, 0, 0, 0, 0, 1]]
    q = [[1, 0, 0, 2, 2, 0],   # "ab" both: same text, 2 positions differ
         [3, 3, 0, 3, 0, 0],   # "cc" both: same text
         [1, 0, 0, 0, 0, 0],   # "ab" -> "a"
         [2, 0, 0, 0, 0, 1]]   # identical
    r = sequence_agreement([_onehot(f)], [_onehot(q)], [4])
    assert r["ctc_agreement"] == 3 / 4
    assert r["sequence_agreement"] == 1 / 4
    assert r["top1_agreement"] == 1 - 4 / 24
    # batches of different lengths are read sample by sample
    r2 = sequence_agreement([_onehot(f[:2]), _onehot([x[:4] for x in f[2:]])],
                            [_onehot(q[:2]), _onehot([x[:4] for x in q[2:]])], [2, 2])
    assert r2["ctc_agreement"] == 3 / 4 and r2["sequence_agreement"] == 1 / 4
    # log-probabilities, positions first ([positions, batch, classes], as torch's CTC loss takes them)
    r3 = sequence_agreement([np.log(_onehot(f)).transpose(1, 0, 2)], [np.log(_onehot(q)).transpose(1, 0, 2)], [4])
    assert r3 == r


def _ctc_text(path: np.ndarray, blank: int = 0) -> tuple:
    out, prev = [], None
    for c in path.tolist():
        if c != prev and c != blank:
            out.append(c)
        prev = c
    return tuple(out)


def test_sequence_output_report_and_target_against_onnxruntime():
    """A recognizer's head ``[batch, 12 positions, 6 classes]`` (softmax, class 0 the blank): the report judges it
    as a sequence, its numbers equal greedy CTC decoding of ONNX Runtime's float and quantized outputs, and
    ``ctc_agreement`` is a target precision repair accepts."""
    rng = np.random.default_rng(6)
    w = {"W": (rng.standard_normal((8, 6)) / 2).astype(np.float32),
         "b": np.array([1.2, 0, 0, 0, 0, 0], np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["l"]),
             helper.make_node("Softmax", ["l"], ["probs"], axis=-1)]
    m = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 12, 8])],
                   [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 12, 6])], w)
    x = rng.standard_normal((48, 12, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=16, evaluation_samples=32))
    rep = qm.report()
    assert rep.kinds["probs"] == "sequence" and rep.headlines["probs"] == "sequence_agreement"
    f, q = _run(m, {"x": x[16:]})["probs"].argmax(-1), _run(qm.model, {"x": x[16:]})["probs"].argmax(-1)
    r = rep.outputs["probs"]
    assert r["top1_agreement"] == pytest.approx(np.mean(f == q))
    assert r["sequence_agreement"] == pytest.approx(np.mean(np.all(f == q, axis=1)))
    assert r["ctc_agreement"] == pytest.approx(np.mean([_ctc_text(a) == _ctc_text(b) for a, b in zip(f, q)]))
    assert r["ctc_agreement"] >= r["sequence_agreement"]
    hint = [n for n in qm.notes if n.startswith("output 'probs'") and "--accuracy-target ctc_agreement>=1.0" in n]
    assert len(hint) == (r["ctc_agreement"] < 0.99) == 1   # the text changed: the option that repairs it is named
    tq = qlinear.quantize(m, {"x": x}, dict(calibration_samples=16, evaluation_samples=32,
                                            accuracy_target="ctc_agreement>=1.0"))
    assert any(n.startswith("precision repair (ctc_agreement>=1") for n in tq.notes)


def test_sequence_note_leads_with_every_position_and_names_the_ctc_reading_as_one():
    """An attention decoder's softmax rows (SLANet's table tokens) are sequences too: the note says how many samples
    agree at every position and only then what a CTC reading gives, not that the output is CTC text."""
    from qlinear.ptq.report.evaluate import _kind_note

    note = _kind_note("structure_probs", "sequence", {"ctc_agreement": 0.5, "sequence_agreement": 0.25}, None)
    assert "every position's top class agrees on 0.250" in note and "read as CTC text" in note
    assert note.index("0.250") < note.index("0.500")
    assert _kind_note("structure_probs", "sequence", {"ctc_agreement": 1.0, "sequence_agreement": 0.9}, None) is None


def test_output_kinds_override_how_the_report_reads_an_output(tmp_path):
    """An embedding with negative values reads as classifier logits (top-1 agreement); ``output_kinds`` (CLI
    ``--output-kind NAME=KIND``) says what it is, and a name or kind that is not one is refused before work."""
    from qlinear.cli.main import EXIT_ERROR, main
    from qlinear.errors import ConfigError
    from qlinear.examples import DATA, MODEL

    cfg = dict(calibration_samples=20, evaluation_samples=20)
    guessed = qlinear.quantize(MODEL, DATA, cfg).report()
    assert guessed.kinds["logits"] == "classifier" and "top1_agreement" in guessed.outputs["logits"]
    told = qlinear.quantize(MODEL, DATA, dict(cfg, output_kinds={"logits": "embedding"})).report()
    assert told.kinds["logits"] == "embedding" and told.headlines["logits"] == "cosine_mean"
    assert "top1_agreement" not in told.outputs["logits"] and "cosine_mean" in told.outputs["logits"]
    with pytest.raises(ConfigError, match="output_kinds: expected .* one of classifier"):
        qlinear.quantize(MODEL, DATA, dict(cfg, output_kinds={"logits": "embeding"}))
    with pytest.raises(ConfigError, match="'logitz' is not a graph output; the model's outputs are 'logits'"):
        qlinear.quantize(MODEL, DATA, dict(cfg, output_kinds={"logitz": "embedding"}))
    out = tmp_path / "o"
    assert main(["quantize", "-o", str(out), "--output-kind", "logits=probability"]) == 0
    rep = json.loads((out / "report.json").read_text())["report"]["outputs"]["logits"]
    assert rep["kind"] == "probability" and rep["headline"] == "decision_agreement"
    assert main(["quantize", "-o", str(tmp_path / "p"), "--output-kind", "logits"]) == EXIT_ERROR


def test_top1_ties_of_a_coarse_output_are_counted_and_named():
    """A Softmax over 40 classes, nearly uniform (probabilities about 1/40): in 8 bits (steps near 1/255 of its
    range) two or more classes often share the top value. The report counts those samples (``top1_ties``, the same
    fraction as ONNX Runtime's run of the written model gives) and a note says that top-1 there is ArgMax's pick and
    names the 16-bit activations that order them; float rows with one top class each give no ``top1_ties``."""
    rng = np.random.default_rng(5)
    w = {"W": (rng.standard_normal((16, 40)) / 20).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["z"]), helper.make_node("Softmax", ["z"], ["probs"], axis=-1)]
    f = TensorProto.FLOAT
    m = make_model(nodes, [helper.make_tensor_value_info("x", f, ["batch", 16])],
                   [helper.make_tensor_value_info("probs", f, ["batch", 40])], w)
    d = {"x": rng.standard_normal((64, 16)).astype(np.float32)}
    qm = qlinear.quantize(m, d, CFG)
    rep = qm.report()
    q = _run(qm.model, {"x": d["x"][N_CAL:]})["probs"]
    tied = np.mean(np.sum(q == q.max(1, keepdims=True), 1) > 1)
    assert rep.kinds["probs"] == "classifier" and tied > 0
    assert rep.outputs["probs"]["top1_ties"] == pytest.approx(tied)
    note = next(n for n in qm.notes if "'probs'" in n and "shared by two or more classes" in n)
    assert f"{tied:.3f}" in note and "--activation-type uint16" in note and '"type": "uint16"' in note
    fl = _run(m, {"x": d["x"][N_CAL:]})["probs"]
    r = kind_metrics("classifier", [fl], [fl.copy()], [len(fl)], None, "probs", "src")
    assert "top1_ties" not in r and r["top1_agreement"] == 1.0
    # the remedies the note names: 16-bit activations, or the output and the logits it is computed from
    for extra in ({"activation_type": "uint16"},
                  {"overrides": [{"name": "probs", "type": "uint16"}, {"name": "z", "type": "uint16"}]}):
        assert "top1_ties" not in qlinear.quantize(m, d, dict(CFG, **extra)).report().outputs["probs"], extra
    # the output alone is not enough: the Softmax of tied 8-bit logits is tied
    assert "top1_ties" in qlinear.quantize(m, d, dict(CFG, overrides=[{"name": "probs", "type": "uint16"}])
                                           ).report().outputs["probs"]


def test_top1_ties_of_the_deployed_tflite_are_named(tmp_path):
    """Target tflite: the .tflite's Softmax output (int8, steps of 1/256) ties too; the deployed file's figures count
    them as LiteRT gives them, and the note names the .tflite and the 16x8 way out."""
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed: the .tflite cannot be run")
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(5)
    w = {"W": (rng.standard_normal((16, 40)) / 20).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["z"]), helper.make_node("Softmax", ["z"], ["probs"], axis=-1)]
    f = TensorProto.FLOAT
    m = make_model(nodes, [helper.make_tensor_value_info("x", f, [1, 16])],
                   [helper.make_tensor_value_info("probs", f, [1, 40])], w)
    x = rng.standard_normal((64, 1, 16)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(CFG, batch_size=1, target="tflite"))
    qm.save(tmp_path / "o")
    d = json.loads((tmp_path / "o" / "report.json").read_text())["report"]["deployed"]
    it = Interpreter(model_path=str(tmp_path / "o" / "model.tflite"))
    it.allocate_tensors()
    tied = []
    for s in x[N_CAL:]:
        it.set_tensor(it.get_input_details()[0]["index"], s)
        it.invoke()
        t = it.get_tensor(it.get_output_details()[0]["index"]).reshape(-1)
        tied.append(np.sum(t == t.max()) > 1)
    assert np.mean(tied) > 0 and d["outputs"]["probs"]["top1_ties"] == pytest.approx(np.mean(tied))
    assert any("the .tflite's top value" in n and "--activation-type int16" in n for n in qm.notes)
