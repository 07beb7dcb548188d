"""Fuzzing the main job: mutated models (bytes and structure), data (.npz contents, folders), configs and command
lines. Whatever the input, ``qlinear.quantize`` returns or raises a ``QlinearError``; the CLI returns a documented exit
status and never shows a traceback."""

from __future__ import annotations

import io
import os

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qlinear
from qlinear.cli.main import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from qlinear.errors import QlinearError
from qlinear.examples import DATA, MODEL

MODEL_BYTES = MODEL.read_bytes()
X = np.load(DATA)["input"]
SMALL = dict(calibration_samples=4, evaluation_samples=2, batch_size=2)
FUZZ = settings(max_examples=int(os.environ.get("QLINEAR_FUZZ_EXAMPLES", "40")), deadline=None,
                suppress_health_check=list(HealthCheck))


def _quantize_ok_or_qlinear_error(model, data, cfg=None) -> None:  # noqa: ANN001
    try:
        qm = qlinear.quantize(model, data, SMALL if cfg is None else cfg)
        qm.report()
    except QlinearError as e:
        assert str(e)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(MODEL_BYTES) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, len(MODEL_BYTES)))
def test_mutated_model_bytes(tmp_path_factory, flips, cut):
    b = bytearray(MODEL_BYTES)
    for i, v in flips:
        b[i] = v
    p = tmp_path_factory.mktemp("m") / "m.onnx"
    p.write_bytes(bytes(b[:cut] if cut > 8 else b))
    _quantize_ok_or_qlinear_error(p, DATA)


def _mutate(m: onnx.ModelProto, kind: int, k: int, v: int) -> None:
    g = m.graph
    nodes = list(g.node)
    n = nodes[k % len(nodes)]
    if kind == 0:  # drop a node
        g.node.remove(n)
    elif kind == 1 and n.attribute:  # change an int / ints attribute
        a = n.attribute[v % len(n.attribute)]
        if a.type == onnx.AttributeProto.INT:
            a.i = v - 3
        elif a.type == onnx.AttributeProto.INTS and a.ints:
            a.ints[0] = v - 3
        elif a.type == onnx.AttributeProto.FLOAT:
            a.f = float(v - 3)
    elif kind == 2 and g.initializer:  # reshape / retype / corrupt an initializer
        t = g.initializer[k % len(g.initializer)]
        if v % 3 == 0 and t.dims:
            t.dims[0] = max(1, t.dims[0] + v % 5 - 2)
        elif v % 3 == 1:
            t.data_type = [onnx.TensorProto.INT64, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE][v % 3]
        elif t.data_type == onnx.TensorProto.FLOAT and not t.dims[:0]:
            try:
                raw = bytearray(onnx.numpy_helper.to_array(t).astype(np.float32).tobytes())
            except ValueError:  # an earlier mutation made it unreadable: leave it so
                return
            for j in range(0, len(raw), 4):
                raw[j:j + 4] = np.float32([np.nan, np.inf, 1e30, 0.0][v % 4]).tobytes() if j % 12 == 0 else raw[j:j + 4]
            t.ClearField("float_data")
            t.raw_data = bytes(raw)
    elif kind == 3:  # rewire an input
        if n.input:
            n.input[v % len(n.input)] = [g.input[0].name, "missing", n.output[0], ""][v % 4]
    elif kind == 4:  # opset
        m.opset_import[0].version = [1, 12, 13, 21, 25, 26, 99][v % 7]
    elif kind == 5:  # input type / shape
        tt = g.input[0].type.tensor_type
        if v % 2:
            tt.elem_type = [onnx.TensorProto.INT64, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                            onnx.TensorProto.STRING][v % 4]
        elif tt.shape.dim:
            tt.shape.dim[v % len(tt.shape.dim)].dim_value = v % 7
    elif kind == 6:  # op type
        n.op_type = ["Relu", "Conv", "Gemm", "Add", "Foo", "Concat", "Softmax"][v % 7]
    elif kind == 7:  # graph output
        if g.output:
            g.output[0].name = ["missing", n.output[0], g.input[0].name][v % 3]


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 50), st.integers(0, 60)), min_size=1, max_size=3))
def test_mutated_model_structure(tmp_path_factory, muts):
    m = onnx.load_from_string(MODEL_BYTES)
    for kind, k, v in muts:
        _mutate(m, kind, k, v)
    p = tmp_path_factory.mktemp("m") / "m.onnx"
    p.write_bytes(m.SerializeToString())
    _quantize_ok_or_qlinear_error(p, DATA)


_arrays = st.one_of(
    st.just(X),
    st.builds(lambda s: X[:, :, :s, :s], st.integers(1, 24)),
    st.builds(lambda d: X.astype(d), st.sampled_from([np.float16, np.float64, np.int32, np.uint8, np.bool_])),
    st.builds(lambda v: np.where(np.arange(X.size).reshape(X.shape) % 97 == 0, v, X).astype(np.float32),
              st.sampled_from([np.nan, np.inf, -np.inf, 1e38, 0.0])),
    st.builds(lambda n: X[:n], st.integers(0, 3)),
    st.just(np.float32(1.0)),
    st.just(np.array(["a", "b"])),
    st.builds(lambda r: X.reshape(-1)[: 40 * 3 * 24 * 24].reshape((40,) + (3 * 24 * 24,) if r else (40, 3, 576)),
              st.booleans()),
)
_labels = st.one_of(st.none(), st.just(np.arange(40) % 10), st.just(np.arange(39)), st.just(np.eye(10)[np.arange(40) % 10]),
                    st.just(np.full(40, -1)), st.just(np.full(40, 99)), st.just(np.array(["x"] * 40)),
                    st.just(np.linspace(0, 9, 40)))


@FUZZ
@given(_arrays, _labels, st.sampled_from(["input", "other"]), st.booleans())
def test_mutated_npz(tmp_path_factory, arr, labels, key, compressed):
    p = tmp_path_factory.mktemp("d") / "d.npz"
    d = {key: arr}
    if labels is not None:
        d["labels"] = labels
    (np.savez_compressed if compressed else np.savez)(p, **d)
    if compressed and len(p.read_bytes()) > 64:  # also: a truncated archive
        b = p.read_bytes()
        (p.parent / "cut.npz").write_bytes(b[: len(b) // 2])
        _quantize_ok_or_qlinear_error(p.parent / "cut.npz", None or p.parent / "cut.npz")
    _quantize_ok_or_qlinear_error(MODEL, p)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["a.npy", "b.npz", "c.png", "d.jpg", "e.txt", "test_data_set_0",
                                           "f.npy"]),
                          st.sampled_from(["good", "junk", "empty", "small", "dir"])), min_size=1, max_size=4,
                unique_by=lambda t: t[0]))
def test_mutated_data_folder(tmp_path_factory, entries):
    d = tmp_path_factory.mktemp("folder")
    for name, what in entries:
        p = d / name
        if what == "dir" or name.startswith("test_data_set"):
            p.mkdir()
            if name.startswith("test_data_set") and what == "good":
                (p / "input_0.pb").write_bytes(onnx.numpy_helper.from_array(X[:1]).SerializeToString())
            elif name.startswith("test_data_set") and what == "junk":
                (p / "input_0.pb").write_bytes(b"\x12\x34junk")
            continue
        if what == "empty":
            p.write_bytes(b"")
        elif what == "junk":
            p.write_bytes(b"\x93NUMPY junk" if name.endswith(".npy") else b"PK\x03\x04junk")
        elif name.endswith(".npy"):
            np.save(p, X[0] if what == "good" else X[0, :, :5])
        elif name.endswith(".npz"):
            np.savez(p, input=X[:1] if what == "good" else X[:1, :1])
        elif name.endswith((".png", ".jpg")):
            from PIL import Image

            size = (24, 24) if what == "good" else (3, 5)
            buf = io.BytesIO()
            Image.fromarray(np.zeros(size + (3,), np.uint8)).save(buf, format="PNG" if name.endswith("png") else "JPEG")
            p.write_bytes(buf.getvalue())
        else:
            p.write_text("hello")
    _quantize_ok_or_qlinear_error(MODEL, d, dict(calibration_samples=2, evaluation_samples=1))


_value = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**41), st.floats(allow_nan=True), st.text(max_size=8),
                   st.lists(st.text(max_size=4), max_size=2), st.sampled_from(
                       ["int8", "uint8", "int4", "int16", "uint16", "float8e4m3fn", "per-block", "per-tensor", "mse",
                        "sqnr", "entropy", "percentile", "tflite", "qnn", "ort", "aimet", "onnxruntime", "float", "lpbq",
                        "uint4", "int2", "gptq", "matmulnbits", "qdq", "matmul", "all", "auto"]))
_keys = st.sampled_from(["weight_type", "activation_type", "weights", "block_size", "weight_method", "activation_method",
                         "weight_symmetric", "activation_symmetric", "policy", "percentile", "exclude_nodes",
                         "exclude_op_types", "target", "equalize", "bias_correction", "quantize_outputs",
                         "calibration_samples", "evaluation_samples", "batch_size", "seed", "colour", "output_format",
                         "placement", "smoothing", "gptq_act_order", "gptq_damp", "gptq_sequential"])


@FUZZ
@given(st.dictionaries(_keys, _value, max_size=4))
def test_mutated_config(cfg):
    base = dict(SMALL)
    base.update(cfg)
    if isinstance(base.get("calibration_samples"), int) and base["calibration_samples"] > 40:
        base["calibration_samples"] = 40
    if isinstance(base.get("evaluation_samples"), int) and base["evaluation_samples"] > 40:
        base["evaluation_samples"] = 4
    _quantize_ok_or_qlinear_error(MODEL, DATA, base)


@FUZZ
@given(st.dictionaries(_keys, _value, max_size=4), st.sampled_from([None, "data"]))
def test_mutated_weight_only_config(cfg, with_data):
    """Weight-only runs on a tiny transformer LM (tied lm_head, MatMuls) with mutated options."""
    from tiny_models import lm_data, tiny_lm

    base = {"activation_type": "float", "weight_type": "int4", "weights": "per-block", "calibration_samples": 8,
            "evaluation_samples": 4, "batch_size": 4}
    base.update(cfg)
    for k in ("calibration_samples", "evaluation_samples", "batch_size"):
        if isinstance(base.get(k), int) and base[k] > 16:
            base[k] = 16
    if isinstance(base.get("block_size"), int) and base["block_size"] > 4096:
        base["block_size"] = 4096
    _quantize_ok_or_qlinear_error(tiny_lm(), lm_data() if with_data else None, base)


_opts = st.lists(st.sampled_from([
    ["--weights", "per-block"], ["--weights", "per-tensor"], ["--weights", "bogus"], ["--block-size", "0"],
    ["--block-size", "7"], ["--weight-type", "int4"], ["--weight-type", "nope"], ["--activation-type", "int16"],
    ["--activation-type", "float8e4m3fn"], ["--target", "tflite"], ["--target", "qnn"], ["--calibration", "entropy"],
    ["--calibration-samples", "-1"], ["--evaluation-samples", "0"], ["--encodings-version", "0.6.1"],
    ["--encodings-version", "9"], ["--no-report"], ["--image-mean", "nan"], ["--unknown"], ["--data"],
    ["--weight-method", "mse"], ["--config", "/nonexistent.json"], ["--activation-type", "float"],
    ["--weights", "lpbq"], ["--format", "matmulnbits"], ["--weight-method", "gptq"], ["--weight-type", "uint4"]]),
    max_size=3)


@FUZZ
@given(_opts)
def test_cli_exit_statuses(tmp_path_factory, opts):
    out = tmp_path_factory.mktemp("cli") / "out"
    argv = ["quantize", "-o", str(out), "--calibration-samples", "4", "--evaluation-samples", "2"]
    for o in opts:
        argv += o
    rc = main(argv)  # anything but a QlinearError would propagate and fail the test
    assert rc in (EXIT_OK, EXIT_USAGE, EXIT_ERROR)
    if rc != EXIT_OK:
        assert not out.exists() or not any(out.iterdir())
