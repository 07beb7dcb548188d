"""W8A8 / W8A16 on transformer encoders: placement (masks and shape subgraphs untouched, quantizers on MatMul
inputs), SmoothQuant-style smoothing of normalization outputs, int16 activations and overrides, a result ONNX Runtime
runs at its default level, cosine/SQNR in the report."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tiny_models import encoder_data, tiny_encoder

import qlinear
from qlinear.graph.plan import is_transformer, make_plan
from qlinear.ptq.algorithms.smooth import smooth, smoothable
from qlinear.ptq.data import load_dataset, model_inputs

CFG = {"calibration_samples": 48, "evaluation_samples": 32}


def _data():
    return encoder_data(n=80)


def _run(m, d):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, d)[0]


def _cos(a, b):
    a, b = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("decomposed", [False, True])
def test_masks_and_shapes_are_never_quantized(decomposed):
    m = tiny_encoder(decomposed_ln=decomposed)
    assert is_transformer(m)
    for placement in ("all", "matmul"):
        plan = make_plan(m, placement=placement)
        assert "mask_add" not in plan.activations and "scores_m" not in plan.activations
        assert "mask" in plan.skipped["mask_add"] and "mask" in plan.skipped["scores_m"]
        assert "pos_ids" not in plan.activations           # int64 shape subgraph
    plan = make_plan(m, placement="matmul")
    assert set(plan.activations) == {"h", "qs", "k", "probs", "v", "ctx", "h2", "gelu"}
    full = make_plan(m, placement="all")
    assert {"r1", "f3", "g1"} <= set(full.activations)    # residuals and Gelu internals only with "all"


def test_smoothing_is_the_same_function_and_folds_into_layernorm():
    m = tiny_encoder()
    d = _data()
    want = _run(m, d)
    ds = load_dataset(d, model_inputs(m))
    assert set(smoothable(m)) == {"h", "h2"}               # normalization outputs, not Gelu
    s = onnx.ModelProto()
    s.CopyFrom(m)
    assert smooth(s, ds, 48, 8) == 2
    ops = [n.op_type for n in s.graph.node]
    # h feeds the residual too: an explicit Mul; h2 feeds the residual too: a Mul as well
    assert ops.count("Mul") == [n.op_type for n in m.graph.node].count("Mul") + 2
    np.testing.assert_allclose(_run(s, d), want, rtol=1e-4, atol=1e-4)


def test_w8a8_transformer_runs_in_ort_and_beats_all_placement():
    m, d = tiny_encoder(), _data()
    ref = _run(m, {k: v[48:] for k, v in d.items()})
    qm = qlinear.quantize(m, d, CFG)
    assert any("transformer placement" in n for n in qm.notes) and any("smoothed" in n for n in qm.notes)
    rep = qm.report()
    out = rep.outputs["last_hidden_state"]
    assert {"cosine_mean", "cosine_min", "sqnr_db"} <= set(out)
    from qlinear.ptq.stats.session import Session

    y = Session(qm.model, level="all").run(["last_hidden_state"], {k: v[48:] for k, v in d.items()})[0]
    c = _cos(ref, y)
    assert c.mean() > 0.995 and out["cosine_mean"] == pytest.approx(c.mean(), abs=2e-3)
    plain = qlinear.quantize(m, d, {**CFG, "placement": "all", "smoothing": False})
    assert plain.report().outputs["last_hidden_state"]["cosine_mean"] < out["cosine_mean"]
    assert qlinear.graph.validate(qm.encodings, qm.encoded_model).ok


def test_w8a16_and_overrides():
    m, d = tiny_encoder(), _data()
    q16 = qlinear.quantize(m, d, {**CFG, "activation_type": "uint16"})
    assert not any("smoothed" in n for n in q16.notes)      # 16-bit grids need no smoothing
    assert {e.dtype for e in q16.encodings.activations} == {"uint16"}
    c16 = q16.report().outputs["last_hidden_state"]["cosine_mean"]
    assert c16 > 0.999
    mixed = qlinear.quantize(m, d, {**CFG, "overrides": [{"op_type": "Softmax", "type": "uint16"}]})
    assert mixed.encodings["probs"].dtype == "uint16" and mixed.encodings["h2_smoothed"].dtype == "uint8"


def test_qnn_lpbq_writes_int4_lpbq_weights_and_uint16_activations(tmp_path):
    m, d = tiny_encoder(), _data()
    qm = qlinear.quantize(m, d, {**CFG, "target": "qnn", "weights": "lpbq", "weight_type": "int4",
                                 "block_size": 16})
    w = qm.encodings["Wq"]
    assert w.granularity == "lpbq" and w.dtype == "int4"
    assert {e.dtype for e in qm.encodings.activations} == {"uint16"}
    qm.save(tmp_path / "o", report=False)
    from qlinear.encodings import load
    from qlinear.graph import validate

    es = load(tmp_path / "o" / "model.encodings")
    assert not (tmp_path / "o" / "model.float.onnx").exists()   # target qnn: placement all, nothing rewritten
    assert es.version == "2.0.0" and validate(es, m).ok and validate(es, tmp_path / "o" / "model.qdq.onnx").ok


def test_gelu_outputs_get_mse_ranges_unless_the_config_says_otherwise():
    from qlinear.graph.ir import to_ir
    from qlinear.graph.plan import activation_fn_output

    m, d = tiny_encoder(), _data()
    g = to_ir(m)
    assert activation_fn_output(g, "gelu")
    assert not any(activation_fn_output(g, t) for t in ("h", "qs", "probs", "ctx", "h2"))
    qm = qlinear.quantize(m, d, CFG)
    assert any("MSE ranges for the 1 Gelu/SiLU" in n for n in qm.notes)
    mm = qlinear.quantize(m, d, {**CFG, "activation_method": "minmax"})
    assert not any("MSE ranges" in n for n in mm.notes)
    # MSE clips the Gelu tail: a smaller range than min-max
    assert qm.encodings["gelu"].scale < mm.encodings["gelu"].scale


def test_the_placement_note_names_the_convolutions_it_leaves_float():
    """A transformer with a convolutional part (an OCR recognizer's backbone): ``matmul`` placement leaves the
    convolutions' inputs float too, and its note says so with the way to quantize them."""
    from onnx import TensorProto, helper

    from qlinear.ptq.pipeline import _matmul_placement_note

    m = tiny_encoder()
    assert "convolutions" not in _matmul_placement_note(m, "ort")
    conv = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])],
        [onnx.numpy_helper.from_array(np.ones((3, 2, 1, 1), np.float32), "w")]))
    note = _matmul_placement_note(conv, "ort")
    assert "inputs of its 1 convolution(s)" in note and 'placement "all"' in note
    assert "weights keep their float values" in note   # ONNX Runtime computes them in float
    assert "weights are quantized" in _matmul_placement_note(conv, "qnn")


def test_masked_scores_left_float_are_named_where_the_softmax_would_be_quantized():
    """On target qnn (every tensor quantized) the scores an attention mask is added to stayed float with no word
    (the qnn audit: MiniLM's 3 layers); a note names them. On target ort the matmul placement leaves the Softmax
    float anyway and says so: no second note."""
    m, d = tiny_encoder(), _data()
    qnn = qlinear.quantize(m, d, dict(CFG, target="qnn"))
    said = [n for n in qnn.notes if "where an attention mask is added" in n]
    assert len(said) == 1 and "scores_m" in said[0] and said[0].startswith("1 tensor(s)"), qnn.notes
    ort_run = qlinear.quantize(m, d, CFG)
    assert not [n for n in ort_run.notes if "where an attention mask is added" in n]


def test_target_qnn_runs_transformers_at_16_bit_activations_unless_asked():
    """At 8-bit activations target qnn lost most of a transformer (the qnn audit: MiniLM-L3 nearest-neighbour
    agreement 0.688, ppocr-v4-rec's text 0.250; uint16: 1.000 and 1.000 on the zoo's held-out samples): a transformer
    graph gets uint16 activations with a note; asked uint8 stays; a CNN stays 8-bit."""
    from qlinear.examples import MODEL
    from qlinear.ptq.settle import settle

    m, d = tiny_encoder(), _data()
    qm = qlinear.quantize(m, d, dict(CFG, target="qnn"))
    assert qm.config.activation_type == "uint16"
    assert any(n.startswith("target qnn, a transformer graph: activations uint16") for n in qm.notes)
    asked = qlinear.quantize(m, d, dict(CFG, target="qnn", activation_type="uint8"))
    assert asked.config.activation_type == "uint8" and not any("a transformer graph" in n for n in asked.notes)
    cnn, notes = settle(qlinear.ptq.QuantizeConfig(target="qnn"), onnx.load(MODEL))
    assert cnn.activation_type == "uint8" and not any("a transformer graph" in n for n in notes)
