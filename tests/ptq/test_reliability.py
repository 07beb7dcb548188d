"""Bad input gets a clear error, and nothing is lost (issue 16): every reproduction of the issue, the transactional
output folder (killed and failing runs), streamed .npz data, the written float model, float8 at ORT's default level."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import qlinear
from qlinear import encodings as E
from qlinear import graph as G
from qlinear.cli.main import EXIT_ERROR, EXIT_USAGE, main
from qlinear.errors import (
    AxisError,
    CalibrationError,
    ConfigError,
    DataError,
    EncodingError,
    GraphError,
    OutputError,
    QlinearError,
)
from qlinear.examples import DATA, MODEL
from qlinear.ptq import QuantizeConfig

X = np.load(DATA)["input"]
SMALL = dict(calibration_samples=8, evaluation_samples=4)


def _one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# ------------------------------------------------------------------------------------------------ data
@pytest.mark.parametrize("case,match", [
    ("spatial", r"expects \[N, 3, 24, 24\] \(dimension 2 is 16, not 24; dimension 3 is 16, not 24\); resize the "
                r"data, or.*--input-shape input=1,3,16,16"),
    ("int64", r"has dtype int64, the model expects float32"),
    ("scalar", r"is a scalar"),
    ("string_labels", r"'labels' has dtype <U1; expected integer class indices"),
    ("misaligned_labels", r"39 labels for 40 samples"),
    ("inf", r"input 'input', sample 3 holds a non-finite value \(inf\)"),
    ("nan", r"sample 0 holds a non-finite value \(nan\)"),
    ("2d_labels", r"'labels' has shape \[40, 3\]"),
])
def test_bad_npz_is_a_clear_data_error_before_any_work(tmp_path, case, match, monkeypatch):
    arrays = {"input": X}
    if case == "spatial":
        arrays = {"input": X[:, :, :16, :16]}
    elif case == "int64":
        arrays = {"input": X.astype(np.int64)}
    elif case == "scalar":
        arrays = {"input": np.float32(1)}
    elif case == "string_labels":
        arrays["labels"] = np.array(["a"] * len(X))
    elif case == "misaligned_labels":
        arrays["labels"] = np.arange(39) % 10
    elif case == "inf":
        x = X.copy()
        x[3, 0, 0, 0] = np.inf
        arrays = {"input": x}
    elif case == "nan":
        arrays = {"input": np.full_like(X, np.nan)}
    elif case == "2d_labels":
        arrays["labels"] = np.ones((40, 3))
    p = tmp_path / f"{case}.npz"
    np.savez(p, **arrays)
    # nothing runs: the data is rejected before calibration starts
    import qlinear.ptq.stats.collect as collect

    monkeypatch.setattr(collect, "calibrate_activations", lambda *a, **k: pytest.fail("calibration started"))
    with pytest.raises(DataError, match=match) as ei:
        qlinear.quantize(MODEL, p, SMALL)
    assert str(p) in _one_line(ei.value)


def test_one_hot_labels_become_indices_and_say_so(tmp_path):
    p = tmp_path / "onehot.npz"
    lab = np.arange(40) % 10
    np.savez(p, input=X, labels=np.eye(10)[lab])
    qm = qlinear.quantize(MODEL, p, SMALL)
    assert qm.dataset.labels == lab.tolist()
    assert any("one-hot" in n for n in qm.notes)


def test_arrays_no_input_takes_are_named_in_a_note(tmp_path):
    """An array whose name no input takes (a misnamed input or labels array) was dropped without a word; now a
    note names it, for an .npz, a folder of .npz samples and the API's dict; labels and the inputs are not named."""
    p = tmp_path / "extra.npz"
    np.savez(p, input=X, label=np.arange(40) % 10)
    folder = tmp_path / "folder"
    folder.mkdir()
    for i in range(12):
        np.savez(folder / f"{i:02d}.npz", input=X[i:i + 1], mask=np.ones(3))
    for data, name, where in ((p, "label", str(p)), (folder, "mask", str(folder / "00.npz")),
                              ({"input": X, "labels": np.arange(40) % 10, "ids": X}, "ids", "<arrays>")):
        qm = qlinear.quantize(MODEL, data, SMALL)
        said = [n for n in qm.notes if "not read" in n]
        assert said == [f"{where}: {name!r} is no input of the model, not read (the model takes 'input'; class "
                        "labels go in an array named 'labels')"], qm.notes
    qm = qlinear.quantize(MODEL, {"input": X, "labels": np.arange(40) % 10}, SMALL)
    assert not [n for n in qm.notes if "not read" in n]


def test_labels_outside_the_classes_are_an_error(tmp_path):
    p = tmp_path / "big.npz"
    np.savez(p, input=X, labels=np.full(40, 10))  # the example has 10 classes: 0-based indices stop at 9
    qm = qlinear.quantize(MODEL, p, SMALL)
    with pytest.raises(DataError, match="label 10 is outside the 10 classes"):
        qm.report()


def test_npy_folder_of_different_shapes(tmp_path):
    d = tmp_path / "npys"
    d.mkdir()
    np.save(d / "a.npy", X[0])
    np.save(d / "b.npy", X[1, :, :20, :20])
    with pytest.raises(DataError, match=r"b\.npy: input 'input' has shape \[1, 3, 20, 20\]"):
        qlinear.quantize(MODEL, d, dict(calibration_samples=2, evaluation_samples=0))


def test_dynamic_sample_shapes_are_batched_apart():
    """A model with a dynamic spatial size takes samples of different shapes: they go to different batches."""
    from qlinear.ptq.data import InputSpec, load_dataset

    spec = {"input": InputSpec("input", ("N", 3, "H", "W"), np.dtype(np.float32))}
    items = [X[0, :, :8, :8], X[1, :, :8, :8], X[2, :, :12, :12]]
    from qlinear.ptq.data import Dataset

    ds = Dataset([(lambda a=a: {"input": a}) for a in items], None, "list")
    ds = load_dataset(ds, spec)
    shapes = [b["input"].shape for b in ds.batches(0, 3, 8)]
    assert shapes == [(2, 3, 8, 8), (1, 3, 12, 12)]


def test_test_data_set_with_external_data_outside_its_folder(tmp_path):
    d = tmp_path / "sets" / "test_data_set_0"
    d.mkdir(parents=True)
    t = onnx.numpy_helper.from_array(X[:1], "input")
    onnx.external_data_helper.set_external_data(t, location="../../secret.bin")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.ClearField("raw_data")
    (d / "input_0.pb").write_bytes(t.SerializeToString())
    (tmp_path / "secret.bin").write_bytes(X[:1].tobytes())
    with pytest.raises(DataError, match="input_0.pb: cannot read the tensor"):
        qlinear.quantize(MODEL, tmp_path / "sets", dict(calibration_samples=1, evaluation_samples=0))


def test_npz_streams_rows_without_loading_members(tmp_path):
    from qlinear.ptq.data import open_npz

    x = np.arange(6 * 5, dtype=np.float32).reshape(6, 5)
    for saver in (np.savez, np.savez_compressed):
        p = tmp_path / f"{saver.__name__}.npz"
        saver(p, a=x, b=x.T.copy())
        m = open_npz(p)
        assert m["a"].shape == (6, 5) and len(m["a"]) == 6
        np.testing.assert_array_equal(m["a"][2:4], x[2:4])
        np.testing.assert_array_equal(m["a"][5], x[5])
        np.testing.assert_array_equal(m["a"][0:1], x[0:1])  # backwards: re-opened stream
        np.testing.assert_array_equal(np.asarray(m["b"]), x.T)
    bad = tmp_path / "pickle.npz"
    np.savez(bad, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(DataError, match="never loads pickles"):
        open_npz(bad)


_RSS = """
import resource, sys, numpy as np, qlinear
qm = qlinear.quantize(qlinear.examples.MODEL, sys.argv[1], dict(calibration_samples=16, evaluation_samples=4))
qm.report()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


@pytest.mark.slow
@pytest.mark.parametrize("compressed", [False, True])
def test_large_npz_memory_is_bounded_by_the_samples_used(tmp_path, compressed):
    """A 420 MB .npz of which 20 samples are used: peak RSS stays near the baseline (no member is loaded)."""
    import qlinear.examples  # noqa: F401

    p = tmp_path / "big.npz"
    n = 60_000  # 60k samples x 6.9 kB
    big = np.broadcast_to(X[:1], (n,) + X.shape[1:])
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED, compresslevel=1) as z:
        with z.open("input.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": big.shape})
            for s in range(0, n, 5000):
                f.write(np.ascontiguousarray(big[s:s + 5000]).tobytes())
    assert p.stat().st_size > (400e6 if not compressed else 1e5)
    small = tmp_path / "small.npz"
    np.savez(small, input=X)
    code = "import qlinear.examples\n" + _RSS
    base = int(subprocess.run([sys.executable, "-c", code, str(small)], capture_output=True, text=True,
                              check=True).stdout.split()[-1])
    rss = int(subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True,
                             check=True).stdout.split()[-1])
    assert rss < base + 60, (base, rss)


# ------------------------------------------------------------------------------------------------ config / API
def test_config_and_api_argument_errors(tmp_path):
    with pytest.raises(ConfigError, match="percentile: expected a number in \\[50, 100\\], got 'abc'"):
        QuantizeConfig.from_dict({"percentile": "abc"})
    p = tmp_path / "c.json"
    p.write_bytes(b'{"weights": "per-tensor\xff"}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        QuantizeConfig.from_file(p)
    with pytest.raises(AxisError, match="axis must be an int, got float"):
        qlinear.quantize_linear(X, np.ones(40, np.float32), np.zeros(40, np.uint8), axis=0.0)
    with pytest.raises(ConfigError, match="threads must be an int"):
        qlinear.quantize_linear(X, np.float32(1), np.uint8(0), threads="2")
    with pytest.raises(ConfigError, match="threads must be an int"):
        qlinear.dequantize_linear(np.zeros(4, np.uint8), np.float32(1), threads=0)
    with pytest.raises(EncodingError, match="expected a path or an open file"):
        E.load(None)
    with pytest.raises(EncodingError, match="expected an EncodingSet, got list"):
        E.save([1, 2], tmp_path / "x.encodings")
    with pytest.raises(ConfigError, match="config: expected a QuantizeConfig"):
        qlinear.quantize(MODEL, DATA, "per-channel")
    with pytest.raises(DataError, match="expected a path"):
        qlinear.quantize(MODEL, 42, SMALL)


def test_saving_to_a_folder_and_bad_report_samples(tmp_path):
    qm = qlinear.quantize(MODEL, DATA, SMALL)
    (tmp_path / "adir").mkdir()
    with pytest.raises(OutputError, match="is a folder; give a file name"):
        qm.save_encodings(tmp_path / "adir")
    with pytest.raises(OutputError, match="is a folder"):
        qm.save_onnx(tmp_path / "adir")
    with pytest.raises(EncodingError, match="is a folder"):
        E.load(tmp_path / "adir")
    for bad in (-1, 0, 2.5, "3"):
        with pytest.raises(ConfigError, match="samples: expected a positive integer"):
            qm.report(samples=bad)


def test_huge_block_size_is_one_block_and_per_block_works():
    # int4 blocks: 8-bit blocked Conv weights with 8-bit activations are quantized per channel (QLinearConv)
    qm = qlinear.quantize(MODEL, DATA, dict(SMALL, weights="per-block", weight_type="int4", block_size=2**40))
    e = qm.encodings["stem.weight"]
    assert e.granularity == "per_block" and e.block_size == 3  # the whole axis (3 input channels) is one block
    qm = qlinear.quantize(MODEL, DATA, dict(SMALL, weights="per-block", weight_type="int4"))  # int32 bias from blocks
    assert qm.encodings["dw.bias"].scale.shape == (16,)
    assert G.validate(qm.encodings, qm.model).ok
    qm = qlinear.quantize(MODEL, DATA, dict(SMALL, weights="per-block"))
    assert qm.encodings["stem.weight"].granularity == "per_channel" and qm.encodings["fc.weight"].block_size
    assert any("3 Conv weight(s) quantized per-channel instead" in n for n in qm.notes)
    assert G.validate(qm.encodings, qm.model).ok


def test_models_named_in_errors(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(GraphError, match="empty.onnx: empty file, not an ONNX model"):
        qlinear.quantize(empty, DATA, SMALL)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07garbage")
    with pytest.raises(GraphError, match="junk.onnx"):
        qlinear.quantize(junk, DATA, SMALL)
    m = onnx.load(MODEL)
    m.graph.node[0].input[0] = "nothing"
    bad = tmp_path / "bad.onnx"
    onnx.save(m, bad)
    with pytest.raises(GraphError, match="bad.onnx: invalid ONNX model"):
        qlinear.quantize(bad, DATA, SMALL)


def test_encodings_scale_that_is_zero_in_float32():
    es = E.EncodingSet((E.Encoding("input", "uint8", scale=1e-320, zero_point=0),))
    rep = G.validate(es, MODEL)
    assert not rep.ok and "is 0 in float32" in str(rep)
    with pytest.raises(EncodingError, match="is 0 in float32"):
        G.apply(es, MODEL)


def test_apply_onto_a_quantized_model(tmp_path):
    qm = qlinear.quantize(MODEL, DATA, SMALL)
    with pytest.raises(EncodingError, match="already quantized.*model.float.onnx"):
        G.apply(qm.encodings, qm.model)
    qm.save_onnx(tmp_path / "q.onnx")
    qm.save_encodings(tmp_path / "q.encodings")
    assert main(["encodings", "apply", str(tmp_path / "q.encodings"), str(tmp_path / "q.onnx"), "-o",
                 str(tmp_path / "qq.onnx")]) == EXIT_ERROR
    assert not (tmp_path / "qq.onnx").exists()


def test_infinite_activation_is_a_calibration_error(tmp_path):
    m = onnx.load(MODEL)
    big = onnx.helper.make_tensor("big", onnx.TensorProto.FLOAT, [], [3e38])
    m.graph.initializer.append(big)
    gemm = next(n for n in m.graph.node if n.op_type == "Gemm")
    out = gemm.output[0]
    gemm.output[0] = "pre"
    m.graph.node.append(onnx.helper.make_node("Mul", ["pre", "big"], [out]))
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(CalibrationError, match="holds infinite values"):
        qlinear.quantize(tmp_path / "m.onnx", DATA, SMALL)


# ------------------------------------------------------------------------------------------------ outputs
def test_float_model_is_written_and_encodings_validate_against_both(tmp_path):
    qm = qlinear.quantize(MODEL, DATA, SMALL)
    out = tmp_path / "out"
    files = qm.save(out, report=False)
    assert files == ["model.encodings", "model.float.onnx", "model.qdq.onnx"]
    es = E.load(out / "model.encodings")
    assert G.validate(es, out / "model.float.onnx").ok and G.validate(es, out / "model.qdq.onnx").ok
    assert not G.validate(es, MODEL).ok  # the user's model has no BN-folded bias: hence model.float.onnx
    assert G.apply(es, out / "model.float.onnx") is not None


def test_report_json_is_strict_and_histograms_cover_the_range(tmp_path):
    qm = qlinear.quantize(MODEL, DATA, SMALL)
    qm.report()
    qm._report.tensors[0].sqnr_db = float("inf")
    from qlinear.ptq.report.html import to_html, to_json

    doc = json.loads(to_json(qm, qm._report), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["report"]["tensors"][0]["sqnr_db"] is None
    for h in qm._report.histograms.values():
        lo, hi = h["edges"][0], h["edges"][-1]
        assert lo <= min(h["lo"], h["data_lo"]) and hi >= max(h["hi"], h["data_hi"])
        assert h["values"] > 0
    assert "<svg" in to_html(qm, qm._report)


def test_outputs_get_the_umask_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        qm = qlinear.quantize(MODEL, DATA, SMALL)
        qm.save(tmp_path / "out", report=False)
        qm.save_encodings(tmp_path / "single.encodings")
    finally:
        os.umask(old)
    for f in list((tmp_path / "out").iterdir()) + [tmp_path / "single.encodings"]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o640, f
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o750


def test_output_folder_checked_before_work(tmp_path, monkeypatch):
    import qlinear.ptq.stats.collect as collect

    monkeypatch.setattr(collect, "calibrate_activations", lambda *a, **k: pytest.fail("calibration started"))
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)  # read-only by its mode bits: refused even when running as root
    try:
        assert main(["quantize", str(MODEL), "--data", str(DATA), "-o", str(ro / "out")]) == EXIT_ERROR
    finally:
        ro.chmod(0o755)
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    assert main(["quantize", str(MODEL), "--data", str(DATA), "-o", str(user)]) == EXIT_ERROR
    assert (user / "notes.txt").read_text() == "keep me"
    monkeypatch.chdir(user)
    assert main(["quantize", str(MODEL), "--data", str(DATA), "-o", "."]) == EXIT_ERROR
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["quantize", str(MODEL), "--data", str(DATA), "-o", str(f)]) == EXIT_ERROR


def test_read_only_output_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["quantize", "-o", str(out), "--no-report"]) == 0
    out.chmod(0o555)
    try:
        assert main(["quantize", "-o", str(out)]) == EXIT_ERROR
        assert "read-only" in capsys.readouterr().err
    finally:
        out.chmod(0o755)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _strays(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


def test_failing_runs_leave_the_previous_outputs(tmp_path, capsys):
    out = tmp_path / "prev"
    assert main(["quantize", "-o", str(out)]) == 0
    before = _snapshot(out)
    # an unknown encodings version: refused before any work
    assert main(["quantize", "-o", str(out), "--encodings-version", "3.0"]) == EXIT_ERROR
    assert "3.0" in capsys.readouterr().err
    # float8 cannot be written as 1.0.0: found while writing, after the model file was staged (a float8 activation
    # type is refused up front; an override's type is known only once it matches a tensor)
    cfg = tmp_path / "f8.json"
    cfg.write_text('{"overrides": [{"name": "relu_out", "type": "float8e4m3fn"}]}')
    assert main(["quantize", "-o", str(out), "--config", str(cfg), "--encodings-version", "1.0.0"]) == EXIT_ERROR
    assert "relu_out: float8e4m3fn encodings cannot be expressed in 1.0.0" in capsys.readouterr().err
    assert _snapshot(out) == before
    assert _strays(tmp_path, "prev") == []


def test_full_disk_during_the_writes_leaves_the_previous_outputs(tmp_path, monkeypatch):
    out = tmp_path / "prev"
    qm = qlinear.quantize(MODEL, DATA, SMALL)
    qm.save(out, report=False)
    before = _snapshot(out)
    import errno

    import qlinear.graph.save as gs

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gs, "atomic_open", full)
    with pytest.raises(OutputError, match="No space left on device"):
        qm.save(out, report=False)
    assert _snapshot(out) == before and _strays(tmp_path, "prev") == []


_KILL = r"""
import os, signal, sys
import qlinear, qlinear.outdir as od
from qlinear.examples import DATA, MODEL
k, target, how = int(sys.argv[1]), sys.argv[2], sys.argv[3]
qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=8, evaluation_samples=4, seed=int(sys.argv[4])))
qm.report()
calls = [0]
def hit():
    calls[0] += 1
    if calls[0] == k:
        os.kill(os.getpid(), signal.SIGKILL)
if how == "fsync":
    real = os.fsync
    def fsync(fd):
        hit(); real(fd)
    os.fsync = fsync
else:
    real_x = od.exchange
    def exchange(a, b):
        hit(); r = real_x(a, b); hit(); return r
    od.exchange = exchange
    real_r = os.rename
    def rename(a, b):
        hit(); real_r(a, b); hit()
    os.rename = rename
qm.save(target)
print("calls", calls[0])
"""


@pytest.mark.slow
def test_a_killed_writer_leaves_old_or_new_never_mixed(tmp_path):
    """SIGKILL at every fsync and around every rename/exchange of the commit: the folder holds the previous run's
    files byte for byte, or the new run's complete set; the next run removes what the killed one left."""
    out = tmp_path / "out"
    script = tmp_path / "kill.py"
    script.write_text(_KILL)
    old = qlinear.quantize(MODEL, DATA, dict(SMALL, seed=0))
    old.save(out)
    before = _snapshot(out)
    counts = {}
    for how in ("fsync", "rename"):
        r = subprocess.run([sys.executable, str(script), "0", str(tmp_path / f"count_{how}"), how, "1"],
                           capture_output=True, text=True, check=True)
        counts[how] = int(r.stdout.split()[-1])
    assert counts["fsync"] >= 6 and counts["rename"] >= 2
    outcomes = set()
    for how, n in counts.items():
        for k in range(1, n + 1):
            r = subprocess.run([sys.executable, str(script), str(k), str(out), how, "1"], capture_output=True)
            assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
            now = _snapshot(out)
            if now == before:
                outcomes.add("old")
            else:
                assert sorted(now) == sorted(before)  # the complete new set
                assert all(len(v) for v in now.values())
                outcomes.add("new")
                old.save(out)  # back to the old set for the next trial
                before = _snapshot(out)
            assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.") and "old" in p.name] == []
    assert outcomes == {"old", "new"}
    # what the killed runs left beside the folder is removed by the next run
    qlinear.quantize(MODEL, DATA, SMALL).save(out, report=False)
    assert _strays(tmp_path, "out") == []


# ------------------------------------------------------------------------------------------------ ORT levels
def test_float8_model_loads_at_ort_default_level_and_keeps_relu():
    qm = qlinear.quantize(MODEL, DATA, dict(SMALL, activation_type="float8e4m3fn"))
    s = ort.InferenceSession(qm.model.SerializeToString(), providers=["CPUExecutionProvider"])
    from onnx.reference import ReferenceEvaluator

    x = X[20:24]
    got = s.run(None, {"input": x})[0]
    want = ReferenceEvaluator(qm.model).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cli_exit_codes_and_python_m(tmp_path):
    assert main(["quantize", "--bogus"]) == EXIT_USAGE
    r = subprocess.run([sys.executable, "-m", "qlinear", "quantize", "--data", str(tmp_path / "nope.npz"),
                        str(MODEL), "-o", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == EXIT_ERROR and "Traceback" not in r.stderr and "nope.npz" in r.stderr
    r = subprocess.run([sys.executable, "-m", "qlinear", "quantize", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0
    assert "(input name -> array with the samples on the first axis, optional 'labels')" in " ".join(r.stdout.split())


def test_every_error_is_a_qlinear_error():
    assert issubclass(OutputError, QlinearError) and issubclass(DataError, QlinearError)


def test_mask_infinities_are_left_float_not_refused():
    """swift-f0 masks its pitch band with -inf (a Pad of value -inf, gathered): the infinities come from a
    constant, not an overflow, so the masked tensor is left float with a note (the run was refused, and the advice
    to use exclude_nodes could not work on its unnamed nodes); an overflow is still refused, naming the op type."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    mask = np.array([0, -np.inf, 0, -np.inf, 0, 0], np.float32)   # an additive attention-style mask
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Add", ["y", "mask"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=1), helper.make_node("MatMul", ["p", "V"], ["out"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4])],
                          [numpy_helper.from_array(rng.normal(0, 1, (8, 6)).astype(np.float32), "W"),
                           numpy_helper.from_array(mask, "mask"),
                           numpy_helper.from_array(rng.normal(0, 1, (6, 4)).astype(np.float32), "V")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.normal(0, 1, (24, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=16, evaluation_samples=8))
    assert "masked" not in qm.plan.activations and {"y", "p"} <= set(qm.plan.activations)
    assert any("hold the infinities of a mask constant" in n and "masked" in n for n in qm.notes)
    assert qm.report().outputs["out"]["sqnr_db"] > 20
    m.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.full(6, 3e38, np.float32), "mask"))  # an overflow
    m.graph.node[1].CopyFrom(helper.make_node("Mul", ["y", "mask"], ["masked"]))
    with pytest.raises(CalibrationError, match="holds infinite values.*unnamed.*exclude_op_types Mul"):
        qlinear.quantize(m, {"x": x}, dict(calibration_samples=16, evaluation_samples=0))


def test_an_already_quantized_model_is_refused_before_any_work(tmp_path):
    """pipecat's smart-turn ships quantized by ONNX Runtime: qlinear calibrated all its samples, then said "apply
    encodings to the float model" (the encodings workflow's advice). Now the load refuses it at once, counting the
    Q/DQ nodes and naming what to give instead; weight-only and every target alike."""
    from qlinear.errors import GraphError

    qm = qlinear.quantize(MODEL, DATA, SMALL)
    qm.save_onnx(tmp_path / "q.onnx")
    for cfg in (SMALL, dict(SMALL, target="qnn"), dict(activation_type="float", weight_type="int4")):
        t = time.perf_counter()
        with pytest.raises(GraphError, match=r"the model is quantized already.*\d+ DequantizeLinear.*give the float "
                                             r"model it was made from"):
            qlinear.quantize(tmp_path / "q.onnx", DATA, cfg)
        assert time.perf_counter() - t < 2


def test_an_operator_onnx_runtime_lacks_is_refused_before_any_work(tmp_path, capsys):
    """A node of a custom domain failed once calibration had started ('calibrating 0/8', then ONNX Runtime's
    "is not a registered function/op" behind "cannot load it at optimization level 'all'"). Now the load refuses it,
    naming the node and the operator; a com.microsoft operator ONNX Runtime has, or a custom one the model defines
    as a function, quantizes."""
    from onnx import TensorProto, helper, numpy_helper

    from qlinear.errors import GraphError

    w = numpy_helper.from_array(np.random.default_rng(0).normal(size=(8, 4, 3, 3)).astype(np.float32), "w")

    def model(domain: str, op: str, functions=()):
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                 helper.make_node(op, ["c"], ["y"], name="act", domain=domain)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 6, 6])], [w])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)],
                                 functions=list(functions))

    data = {"x": np.random.default_rng(1).normal(size=(12, 4, 8, 8)).astype(np.float32)}
    cfg = dict(calibration_samples=8, evaluation_samples=4)
    onnx.save(model("my.domain", "Foo"), tmp_path / "custom.onnx")
    with pytest.raises(GraphError, match=r"custom.onnx: node 'act' is my.domain:Foo, an operator ONNX Runtime does "
                                         r"not have.*expressed in ONNX operators"):
        qlinear.quantize(tmp_path / "custom.onnx", data, cfg)
    assert "calibrating" not in capsys.readouterr().err
    qm = qlinear.quantize(model("com.microsoft", "Gelu"), data, cfg)
    assert [s.name for s in qm.plan.weights] == ["w"]
    relu = helper.make_function("my.domain", "Foo", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                [helper.make_opsetid("", 17)])
    qm = qlinear.quantize(model("my.domain", "Foo", [relu]), data, cfg)
    assert [s.name for s in qm.plan.weights] == ["w"]
