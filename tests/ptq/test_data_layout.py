"""Data for any input layout (issue 21): the batch axis of each input from the model's dynamic dimension (or
``batch_axes`` / ``--batch-axis``), inputs given once, recurrent states per sample, samples of different shapes in
the report. Numbers are checked against ONNX Runtime run on hand-built feeds."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tiny_models import make_model

import qlinear
from qlinear.errors import ConfigError, DataError
from qlinear.ptq.data import load_dataset, model_inputs

H = 16
CFG = dict(calibration_samples=12, evaluation_samples=8, batch_size=4)


def recurrent() -> onnx.ModelProto:
    """``x [batch, 16]``, ``state [2, batch, 16]`` -> ``y [batch, 16]`` and ``state_out [2, batch, 16]``."""
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((H, H)) / 4).astype(np.float32)
    U = (rng.standard_normal((H, H)) / 4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("MatMul", ["state", "U"], ["su"]),          # [2, b, 16]
             helper.make_node("ReduceSum", ["su", "ax0"], ["s"], keepdims=0),  # [b, 16]
             helper.make_node("Add", ["xw", "s"], ["pre"]),
             helper.make_node("Tanh", ["pre"], ["y"]),
             helper.make_node("Unsqueeze", ["y", "ax0"], ["y1"]),
             helper.make_node("Add", ["su", "y1"], ["state_out"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", H]),
                          helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", H])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", H]),
                   helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, "batch", H])],
                  {"W": W, "U": U, "ax0": np.array([0], np.int64)})


def with_scalar() -> onnx.ModelProto:
    """``x [batch, 16]`` and an int64 scalar ``sr``: ``y = MatMul(x, W) * float(sr) / 16000``."""
    rng = np.random.default_rng(1)
    W = (rng.standard_normal((H, H)) / 4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["srf", "k"], ["g"]),
             helper.make_node("Mul", ["xw", "g"], ["y"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", H]),
                          helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", H])],
                  {"W": W, "k": np.array(16000, np.float32)})


def sequencemake_model() -> onnx.ModelProto:
    """``x [batch, seq, 8]`` -> MatMul -> Relu -> ``h [batch, seq, 8]`` and its mean over ``seq``: ``pooled``."""
    rng = np.random.default_rng(2)
    W = (rng.standard_normal((8, 8)) / 3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Relu", ["xw"], ["h"]),
             helper.make_node("ReduceMean", ["h", "ax1"], ["pooled"], keepdims=0)]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                  [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", "seq", 8]),
                   helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 8])],
                  {"W": W, "ax1": np.array([1], np.int64)})


def _ort(m: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


def _rec_data(n: int = 20):
    rng = np.random.default_rng(3)
    return rng.standard_normal((n, H)).astype(np.float32), rng.standard_normal((n, 2, H)).astype(np.float32)


# ------------------------------------------------------------------------------------------------ batch axes
def test_recurrent_state_batch_axis_from_the_dynamic_dimension():
    m = recurrent()
    specs = model_inputs(m)
    x, st = _rec_data()
    ds = load_dataset({"x": x, "state": st}, specs)
    assert ds.specs["x"].batch_axis == 0 and ds.specs["state"].batch_axis == 1
    ds.validate()
    feeds = list(ds.batches(0, 10, 4))
    assert [ds.batch_len(f) for f in feeds] == [4, 4, 2]
    assert feeds[0]["state"].shape == (2, 4, H) and feeds[0]["x"].shape == (4, H)
    # batched run == sample-by-sample run (the state stacked along its batch axis, not the first one)
    got = _ort(m, feeds[0])
    for i in range(4):
        one = _ort(m, {"x": x[i:i + 1], "state": st[i][:, None]})
        np.testing.assert_allclose(got[0][i:i + 1], one[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1][:, i:i + 1], one[1], rtol=1e-5, atol=1e-6)
    # the batch axis kept as 1 in the data: the same feeds
    ds2 = load_dataset({"x": x, "state": st[:, :, None]}, specs)
    np.testing.assert_array_equal(next(ds2.batches(0, 4, 4))["state"], feeds[0]["state"])


def test_recurrent_model_quantizes_and_reports(tmp_path):
    m = recurrent()
    x, st = _rec_data()
    qm = qlinear.quantize(m, {"x": x, "state": st}, CFG)
    qm.save(tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    outs = doc["report"]["outputs"]
    assert set(outs) == {"y", "state_out"}
    assert outs["state_out"]["kind"] == "state" and outs["state_out"]["headline"] == "sqnr_db"   # not top-1
    # the quantized model on all held-out samples at once (state [2, 8, 16]) agrees with the report's SQNR
    f = _ort(m, {"x": x[12:], "state": np.moveaxis(st[12:], 0, 1)})
    q = _ort(qm.model, {"x": x[12:], "state": np.moveaxis(st[12:], 0, 1)})
    for name, a, b in zip(("y", "state_out"), f, q):
        sqnr = 10 * np.log10(np.sum(a.astype(np.float64) ** 2) / np.sum((a - b).astype(np.float64) ** 2))
        assert outs[name]["sqnr_db"] == pytest.approx(sqnr, abs=1.5)
        assert outs[name]["sqnr_db"] > 15


def test_samples_along_the_batch_axis_are_refused_with_a_hint():
    x, st = _rec_data()
    with pytest.raises(DataError, match=r"input 'state' has shape \[2, 20, 16\].*np\.moveaxis\(a, 1, 0\)"):
        load_dataset({"x": x, "state": np.moveaxis(st, 0, 1)}, model_inputs(recurrent()))
    with pytest.raises(DataError, match=r"input 'state' has shape \[20, 3, 16\]; the model input \[2, batch, 16\] "
                                        r"needs \[samples, 2, 16\]"):
        load_dataset({"x": x, "state": np.zeros((20, 3, H), np.float32)}, model_inputs(recurrent()))


def test_batch_axes_override_and_its_checks():
    m = recurrent()
    specs = model_inputs(m)
    x, st = _rec_data()
    ds = load_dataset({"x": x, "state": st}, specs, batch_axes={"state": -2})
    assert ds.specs["state"].batch_axis == 1
    with pytest.raises(ConfigError, match=r"batch_axes: \['nope'\] not model input\(s\)"):
        load_dataset({"x": x, "state": st}, specs, batch_axes={"nope": 0})
    with pytest.raises(ConfigError, match=r"input 'state' has rank 3 \[2, batch, 16\]; axis 3 is outside 0\.\.2"):
        load_dataset({"x": x, "state": st}, specs, batch_axes={"state": 3})
    with pytest.raises(ConfigError, match=r"input 'state' \[2, batch, 16\] has the static size 2 at axis 0"):
        load_dataset({"x": x, "state": st}, specs, batch_axes={"state": 0})
    with pytest.raises(ConfigError, match="batch_axes: expected a mapping"):
        qlinear.QuantizeConfig(batch_axes={"state": "1"})
    assert qlinear.QuantizeConfig(batch_axes={"state": 1}).to_dict()["batch_axes"] == {"state": 1}


def test_cli_batch_axis_option(tmp_path):
    from qlinear.cli.main import EXIT_ERROR, main

    m = recurrent()
    onnx.save(m, tmp_path / "m.onnx")
    x, st = _rec_data()
    np.savez(tmp_path / "d.npz", x=x, state=st)
    out = tmp_path / "out"
    assert main(["quantize", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "d.npz"), "--batch-axis", "state=1",
                 "--calibration-samples", "12", "--evaluation-samples", "8", "-o", str(out)]) == 0
    doc = json.loads((out / "report.json").read_text())
    assert doc["config"]["batch_axes"] == {"state": 1}
    assert main(["quantize", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "d.npz"), "--batch-axis", "state",
                 "-o", str(tmp_path / "o2")]) == EXIT_ERROR
    assert main(["quantize", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "d.npz"), "--batch-axis", "state=0",
                 "-o", str(tmp_path / "o3")]) == EXIT_ERROR
    assert not (tmp_path / "o3").exists()


# ------------------------------------------------------------------------------------------------ given once
def test_scalar_input_given_once_is_fed_with_every_batch():
    m = with_scalar()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((20, H)).astype(np.float32)
    ds = load_dataset({"x": x, "sr": np.array(16000)}, model_inputs(m))
    ds.validate()
    assert len(ds) == 20 and ds.shared == {"sr"}
    feeds = list(ds.batches(0, 8, 4))
    assert len(feeds) == 2 and feeds[0]["sr"].shape == () and feeds[0]["x"].shape == (4, H)
    assert ds.batch_len(feeds[0]) == 4
    qm = qlinear.quantize(m, {"x": x, "sr": np.array(16000)}, CFG)
    rep = qm.report()
    f = _ort(m, {"x": x[12:], "sr": np.array(16000)})[0]
    q = _ort(qm.model, {"x": x[12:], "sr": np.array(16000)})[0]
    cos = np.sum(f * q, 1) / np.linalg.norm(f, axis=1) / np.linalg.norm(q, axis=1)
    assert rep.outputs["y"]["cosine_mean"] == pytest.approx(float(cos.mean()), abs=2e-3)


def test_scalar_input_per_sample_goes_one_sample_per_batch():
    m = with_scalar()
    x = np.random.default_rng(5).standard_normal((6, H)).astype(np.float32)
    sr = np.array([8000, 16000, 16000, 22050, 44100, 48000], np.int64)
    ds = load_dataset({"x": x, "sr": sr}, model_inputs(m))
    feeds = list(ds.batches(0, 6, 4))
    assert len(feeds) == 6 and [int(f["sr"]) for f in feeds] == sr.tolist()
    got = np.concatenate([_ort(m, f)[0] for f in feeds])
    want = (x @ numpy_helper.to_array(m.graph.initializer[0])) * (sr[:, None] / 16000)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_scalar_input_bad_layouts_name_the_input():
    m = with_scalar()
    x = np.zeros((6, H), np.float32)
    with pytest.raises(DataError, match=r"input 'sr' has shape \[6, 2\]; the model input \[\] needs \[\] given once"):
        load_dataset({"x": x, "sr": np.zeros((6, 2), np.int64)}, model_inputs(m))
    with pytest.raises(DataError, match=r"different sample counts .*'sr': 5"):
        load_dataset({"x": x, "sr": np.zeros(5, np.int64)}, model_inputs(m))
    with pytest.raises(DataError, match=r"input 'sr' has dtype float32, the model expects int64"):
        load_dataset({"x": x, "sr": np.float32(16000)}, model_inputs(m))


def test_static_batchless_input_once_or_per_sample():
    """A fully static input not led by 1 (``[2, 16]``) has no batch axis: given once or once per sample."""
    m = recurrent()
    m.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 1  # state [2, 1, 16]: static, no batch axis
    inp = model_inputs(m)
    m2 = onnx.helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, H])
    spec = model_inputs(helper.make_model(helper.make_graph([], "g", [m2], [m2])))
    ds = load_dataset({"c": np.ones((2, H), np.float32)}, spec)
    assert ds.specs["c"].batch_axis is None and len(ds) == 1 and ds.shared == {"c"}
    ds = load_dataset({"c": np.ones((5, 2, H), np.float32)}, spec)
    assert len(ds) == 5 and [f["c"].shape for f in ds.batches(0, 5, 4)] == [(2, H)] * 5
    ds = load_dataset({"x": np.ones((3, H), np.float32), "state": np.ones((3, 2, 1, H), np.float32)}, inp)
    assert ds.specs["state"].batch_axis is None and [f["state"].shape for f in ds.batches(0, 3, 4)] == [(2, 1, H)] * 3


# ------------------------------------------------------------------------------------------------ variable lengths
def test_report_with_samples_of_different_lengths(tmp_path):
    """Issue 21: samples of 4..36 tokens made evaluate raise in np.concatenate; now metrics per sample, aggregated."""
    m = sequencemake_model()
    rng = np.random.default_rng(6)
    lengths = [4, 36, 9, 17, 4, 12, 30, 5, 22, 8, 11, 6, 7, 33, 4, 19]
    d = tmp_path / "data"
    d.mkdir()
    xs = [rng.standard_normal((n, 8)).astype(np.float32) for n in lengths]
    for i, x in enumerate(xs):
        np.savez(d / f"{i:03d}.npz", x=x)
    qm = qlinear.quantize(m, d, dict(calibration_samples=10, evaluation_samples=6, batch_size=4))
    qm.save(tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    outs = doc["report"]["outputs"]
    assert doc["report"]["samples"] == 6
    cos = {"h": [], "pooled": []}
    for x in xs[10:]:
        f = _ort(m, {"x": x[None]})
        q = _ort(qm.model, {"x": x[None]})
        for name, a, b in zip(("h", "pooled"), f, q):
            a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
            cos[name].append(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    for name in ("h", "pooled"):
        assert outs[name]["cosine_mean"] == pytest.approx(np.mean(cos[name]), abs=2e-3)
        assert outs[name]["cosine_min"] == pytest.approx(np.min(cos[name]), abs=5e-3)
        assert outs[name]["kind"] in ("generic", "embedding", "classifier")


def test_folder_samples_with_a_scalar_input(tmp_path):
    """One ``.npz`` per sample holding the scalar ``sr`` as a scalar (the silero-vad layout, refused before with
    "input 'sr' is a scalar; expected an array shaped like the model input []")."""
    m = with_scalar()
    rng = np.random.default_rng(7)
    d = tmp_path / "data"
    d.mkdir()
    xs = rng.standard_normal((16, 1, H)).astype(np.float32)
    for i, x in enumerate(xs):
        np.savez(d / f"{i:04d}.npz", x=x, sr=np.array(16000))
    qm = qlinear.quantize(m, d, dict(calibration_samples=8, evaluation_samples=8))
    assert [f["sr"].shape for f in qm.dataset.batches(0, 3, 8)] == [()] * 3   # per sample: one sample a batch
    rep = qm.report()
    f = _ort(m, {"x": xs[8:, 0], "sr": np.array(16000)})[0].astype(np.float64)
    q = _ort(qm.model, {"x": xs[8:, 0], "sr": np.array(16000)})[0].astype(np.float64)
    assert rep.outputs["y"]["sqnr_db"] == pytest.approx(10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2)), abs=1.0)
    np.savez(d / "0003.npz", x=xs[3], sr=np.array([16000, 8000]))
    with pytest.raises(DataError, match=r"0003\.npz: input 'sr' has shape \[2\], the model expects rank 0"):
        qlinear.quantize(m, d, dict(calibration_samples=8, evaluation_samples=8))


def test_accuracy_target_with_samples_of_different_lengths(tmp_path):
    """Precision repair judges on calibration samples of different lengths too (per batch, no np.concatenate)."""
    m = sequencemake_model()
    rng = np.random.default_rng(8)
    d = tmp_path / "data"
    d.mkdir()
    for i, n in enumerate([5, 9, 5, 14, 7, 7, 20, 3, 11, 6, 8, 12]):
        np.savez(d / f"{i:03d}.npz", x=rng.standard_normal((n, 8)).astype(np.float32))
    qm = qlinear.quantize(m, d, dict(calibration_samples=8, evaluation_samples=4, batch_size=4,
                                     accuracy_target="sqnr_db>=60", repair_samples=4))
    assert any(n.startswith("precision repair (sqnr_db>=60") for n in qm.notes)
    assert qm.report().outputs["h"]["sqnr_db"] > 20


def test_a_sequence_axis_declared_not_a_batch(tmp_path):
    """``batch_axes: {"x": null}`` (``--batch-axis x=none``): the dynamic first dimension of ``x [seq, 8]`` is a
    sequence, each sample file is one whole input (faster-whisper's VAD clip of windows); by default it is read as
    the batch axis and a file's rows count as samples."""
    from qlinear.cli.quantize import _batch_axes

    assert _batch_axes(["x=none", "state=1"]) == {"x": None, "state": 1}
    with pytest.raises(ConfigError, match=r"--batch-axis 'x=seq': expected NAME=AXIS or NAME=none"):
        _batch_axes(["x=seq"])
    rng = np.random.default_rng(3)
    m = make_model([helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Relu", ["xw"], ["h"]),
                    helper.make_node("ReduceMean", ["h", "ax0"], ["pooled"], keepdims=0)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 8])],
                   [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [8])],
                   {"W": (rng.standard_normal((8, 8)) / 3).astype(np.float32), "ax0": np.array([0], np.int64)})
    d = tmp_path / "data"
    d.mkdir()
    for i, n in enumerate([5, 9, 5, 14, 7, 7, 20, 3, 11, 6, 8, 12]):
        np.savez(d / f"{i:03d}.npz", x=rng.standard_normal((n, 8)).astype(np.float32))
    ds = load_dataset(d, model_inputs(m), batch_axes={"x": None})
    feed = next(ds.batches(0, 4, 4))
    assert len(ds) == 12 and ds.axes() == {"x": None} and feed["x"].shape == (5, 8) and ds.batch_len(feed) == 1
    default = load_dataset(d, model_inputs(m))
    stacked = next(default.batches(0, 2, 2))   # default: two clips in one sequence, with a note saying so
    assert stacked["x"].shape == (14, 8)
    assert default.notes == ["input 'x': its dynamic dimension 'seq' (axis 0) is read as the batch axis, samples "
                             "stacked along it; if each sample is a whole sequence, give --batch-axis x=none (config "
                             "batch_axes)"] and ds.notes == []
    qm = qlinear.quantize(m, d, dict(calibration_samples=8, evaluation_samples=4, batch_axes={"x": None}))
    assert qm.report().samples == 4
    with pytest.raises(ConfigError, match=r"batch_axes: expected a mapping of input name to axis \(or null"):
        qlinear.QuantizeConfig(batch_axes={"x": "none"})


def test_model_whose_reshape_fixes_the_batch_runs_one_sample_per_call(tmp_path):
    """khmersm's export declares a dynamic batch but a Reshape fixes it at 1: two samples stacked in one call
    failed in ONNX Runtime (calibration, smoothing or the report, wherever two same-shape samples met). The first
    stacked call is tried once; the model then runs one sample per call, with a note, and the report is written."""
    rng = np.random.default_rng(5)
    W = (rng.standard_normal((4, 6)) / 2).astype(np.float32)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]),          # [1, 2, 4]: only a batch of one fits
             helper.make_node("MatMul", ["r", "W"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    m = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6])],
                   {"W": W, "s": np.array([1, 2, 4], np.int64)})
    x = rng.standard_normal((20, 2, 4)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, CFG)
    assert any("does not run two samples in one call" in n and "Reshape node" in n for n in qm.notes)
    assert qm.dataset.stacks is False and qm.report().outputs["y"]["sqnr_db"] > 15
    sess = ort.InferenceSession(qm.model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": x[:1]})[0].shape == (1, 2, 6)
    ok = make_model([helper.make_node("MatMul", ["x", "W"], ["y"])],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 4])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 6])], {"W": W})
    qm = qlinear.quantize(ok, {"x": x}, CFG)   # a real batch axis: stacked, no note
    assert qm.dataset.stacks is True and not any("two samples" in n for n in qm.notes)


def test_report_pass_checks_stacking_itself(tmp_path):
    """The report's passes start while quantizing (``report_ahead``, the command line), possibly before
    calibration tried two samples in one call: khmersm with --target qnn or --activation-type uint16 failed in the
    report's float pass ("samples 33..34", Reshape node). A pass checks the stacking itself first."""
    from qlinear.ptq.report.passes import float_session, model_outputs

    rng = np.random.default_rng(6)
    W = (rng.standard_normal((4, 6)) / 2).astype(np.float32)
    m = make_model([helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("MatMul", ["r", "W"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6])],
                   {"W": W, "s": np.array([1, 2, 4], np.int64)})
    x = rng.standard_normal((6, 2, 4)).astype(np.float32)
    ds = load_dataset({"x": x}, model_inputs(m))
    assert ds.stacks is None
    out, counts = model_outputs(float_session(m), ["y"], ds, [(0, 6, 4)])
    assert ds.stacks is False and counts == [1] * 6
    np.testing.assert_allclose(np.concatenate(out["y"]), x.reshape(6, 2, 4) @ W, rtol=1e-5, atol=1e-5)
