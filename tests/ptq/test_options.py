"""Every option combination either runs and writes models that run (ONNX Runtime at its default optimization level,
LiteRT for the .tflite) or is refused before any work (a QlinearError within a second, no ONNX Runtime session);
a requested option the target's rules change is named in a note, never silent (issue 20)."""

from __future__ import annotations

import io
import itertools
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from tiny_models import encoder_data, tiny_encoder

import qlinear
from qlinear.errors import ConfigError, GraphError, OutputError, QlinearError
from qlinear.examples import DATA, MODEL
from qlinear.ptq import QuantizeConfig
from qlinear.ptq.settle import settle

TARGETS = ("ort", "tflite", "qnn")
WEIGHTS = ("per-channel", "per-tensor", "per-block", "lpbq")
WEIGHT_TYPES = ("int8", "int4")
ACTIVATIONS = (None, "int8", "uint16", "float")
FORMATS = ("qdq", "matmulnbits")


def conv_bn(c: int = 32, seed: int = 0) -> onnx.ModelProto:
    """Conv -> BatchNorm -> Relu -> depthwise Conv -> Relu6 -> pointwise Conv (+ residual) -> pool -> Gemm; 32
    input channels on the pointwise Conv so that blocks of 16 are real blocks."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.standard_normal((c, 3, 3, 3)) * 0.3, "g": rng.uniform(0.5, 1.5, c),
             "b": rng.standard_normal(c) * 0.1, "mu": rng.standard_normal(c) * 0.1, "var": rng.uniform(0.5, 1.5, c),
             "wdw": rng.standard_normal((c, 1, 3, 3)) * 0.3, "bdw": rng.standard_normal(c) * 0.1,
             "w2": rng.standard_normal((c, c, 1, 1)) / np.sqrt(c), "b2": rng.standard_normal(c) * 0.1,
             "wfc": rng.standard_normal((10, c)) / np.sqrt(c), "bfc": rng.standard_normal(10) * 0.1,
             "lo": np.array(0.0), "hi": np.array(6.0)}
    N = helper.make_node
    nodes = [N("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             N("BatchNormalization", ["c1", "g", "b", "mu", "var"], ["bn1"], name="bn1"),
             N("Relu", ["bn1"], ["r1"], name="relu1"),
             N("Conv", ["r1", "wdw", "bdw"], ["c2"], name="dw", group=c, pads=[1, 1, 1, 1]),
             N("Clip", ["c2", "lo", "hi"], ["r2"], name="relu6"),
             N("Conv", ["r2", "w2", "b2"], ["c3"], name="pw"),
             N("Add", ["c3", "r1"], ["a"], name="add"),
             N("GlobalAveragePool", ["a"], ["p"], name="gap"),
             N("Flatten", ["p"], ["fl"], name="flat"),
             N("Gemm", ["fl", "wfc", "bfc"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def _models():
    ex = dict(np.load(DATA))
    return {"example": (str(MODEL), {k: v for k, v in ex.items() if k != "labels"}),
            "conv_bn": (conv_bn(), {"x": np.random.default_rng(1).standard_normal((4, 3, 16, 16)).astype(np.float32)}),
            "transformer": (tiny_encoder(), encoder_data(n=4))}


MODELS = _models()


class _SessionCount:
    """Counts ONNX Runtime sessions created (a refusal must come before any)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = ort.InferenceSession

        def counting(*a, **k):
            self.n += 1
            return real(*a, **k)

        monkeypatch.setattr(ort, "InferenceSession", counting)
        self.real = real


def _run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], real) -> None:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = real(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = s.run(None, {i.name: feeds[i.name][:1] for i in s.get_inputs()})
    assert all(np.all(np.isfinite(o)) for o in outs)


def _run_litert(qm, tmp: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    p = tmp / "m.tflite"
    qm.save_tflite(p)
    it = Interpreter(model_path=str(p))
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], np.random.default_rng(0).standard_normal(d["shape"]).astype(d["dtype"]))
    it.invoke()
    assert all(np.all(np.isfinite(it.get_tensor(d["index"]))) for d in it.get_output_details())


def _check_changes_noted(requested: dict, qm) -> None:
    """Every requested option the settled configuration changed is named in a note."""
    notes = " | ".join(qm.notes)
    for k, v in requested.items():
        used = getattr(qm.config, k)
        if used != v:
            assert f"asked {v}" in notes, f"{k}: asked {v}, used {used}, no note: {notes}"
    if requested.get("weights") in ("per-block", "lpbq") and qm.config.weights == requested["weights"] \
            and not qm.config.weight_only:
        convs = {n.input[1] for n in qm.reference_model.graph.node if n.op_type == "Conv"}
        per_ch = [e.name for e in qm.encodings if e.name in convs and e.granularity == "per_channel"]
        if per_ch:
            assert "per-channel instead" in notes, notes


def _combos():
    for name, t, w, wt, a, f in itertools.product(MODELS, TARGETS, WEIGHTS, WEIGHT_TYPES, ACTIVATIONS, FORMATS):
        if f == "matmulnbits" and a != "float" and (t, w, wt) != ("ort", "per-channel", "int8"):
            continue  # refused by the config alone: one representative per model is enough
        yield name, t, w, wt, a, f


@pytest.mark.parametrize("name", list(MODELS))
def test_option_matrix(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, data = MODELS[name]
    count = _SessionCount(monkeypatch)
    ran = refused = 0
    for _, t, w, wt, a, f in (c for c in _combos() if c[0] == name):
        req = {"target": t, "weights": w, "weight_type": wt, "output_format": f}
        if a is not None:
            req["activation_type"] = a
        cfg = dict(req, calibration_samples=2, evaluation_samples=0, block_size=16)
        count.n = 0
        t0 = time.perf_counter()
        try:
            qm = qlinear.quantize(model, data, cfg)
        except QlinearError as e:
            dt = time.perf_counter() - t0
            assert count.n == 0, f"{req}: refused after {count.n} ONNX Runtime session(s): {e}"
            assert dt < 1.0, f"{req}: refused after {dt:.2f} s: {e}"
            assert str(e) and "\n" not in str(e)
            refused += 1
            continue
        ran += 1
        _check_changes_noted(req, qm)
        _run_ort(qm.model, data, count.real)
        if qm.config.weight_only:
            assert any(n.startswith("weight-only: quantized ") for n in qm.notes), qm.notes
        if t == "tflite":
            _run_litert(qm, tmp_path)
    assert ran > 20 and refused > 10, (ran, refused)


def test_refusals_name_the_fix() -> None:
    m = conv_bn()
    with pytest.raises(ConfigError, match="weight_type: int4 is not available with target tflite"):
        settle(QuantizeConfig(target="tflite", weight_type="int4"), m)
    with pytest.raises(ConfigError, match="lpbq .int4 blocks. is not in the TFLite int8 table"):
        settle(QuantizeConfig(target="tflite", weights="lpbq"), m)
    with pytest.raises(ConfigError, match="use weight_type int4"):
        settle(QuantizeConfig(weights="lpbq", weight_type="int8"), m)
    with pytest.raises(ConfigError, match="unknown option.*bogus"):
        QuantizeConfig(bogus=1)


def test_defaults_resolve_silently_requested_changes_are_noted() -> None:
    m = conv_bn()
    used, notes = settle(QuantizeConfig(weights="lpbq"), m)       # lpbq implies int4 (a default)
    assert used.weight_type == "int4" and not [n for n in notes if "asked" in n]
    used, notes = settle(QuantizeConfig(target="qnn", weights="lpbq", weight_type="int4"), m)
    assert used.activation_type == "uint16" and notes == []       # AIMET's W4A16 LPBQ default
    used, notes = settle(QuantizeConfig(target="qnn", activation_type="int8"), m)
    assert used.activation_type == "uint8" and any("asked int8" in n for n in notes)
    used, notes = settle(QuantizeConfig(target="tflite"), m)
    assert used.activation_type == "int8" and notes == []
    used, notes = settle(QuantizeConfig(target="tflite", weights="per-block"), m)
    assert used.weights == "per-channel" and any("asked per-block" in n for n in notes)
    used, notes = settle(QuantizeConfig(target="tflite", activation_type="uint16"), m)
    assert used.activation_type == "int16" and any("asked uint16" in n for n in notes)
    used, notes = settle(QuantizeConfig(weights="per-block", block_size=16), m)
    assert used.weights == "per-block" and any("3 Conv weight(s) quantized per-channel instead" in n for n in notes), notes
    assert settle(used, m)[0] == used                              # settling is idempotent
    _, notes = settle(QuantizeConfig(activation_type="uint16"), m)  # 16-bit on ORT's CPU session: runs in float
    assert any(n.startswith("activation_type uint16 on target ort: ONNX Runtime's CPU session has no 16-bit") for n in
               notes)
    assert settle(QuantizeConfig(activation_type="uint16", target="qnn"), m)[1] == []


def test_blocked_conv_runs_at_default_level() -> None:
    """8-bit blocked Conv weights with 8-bit activations would run as QLinearConv (no blocked scales): per-channel,
    noted; MatMul/Gemm weights keep their blocks."""
    qm = qlinear.quantize(conv_bn(), MODELS["conv_bn"][1], {"weights": "per-block", "block_size": 16,
                                                                "calibration_samples": 2, "evaluation_samples": 0})
    enc = {e.name: e for e in qm.encodings}
    assert enc["w2"].granularity == "per_channel" and enc["wfc"].granularity == "per_block"
    assert any("per-channel instead" in n for n in qm.notes)
    _run_ort(qm.model, MODELS["conv_bn"][1], ort.InferenceSession)


def test_lpbq_conv_has_one_float_scale_per_output_channel() -> None:
    qm = qlinear.quantize(conv_bn(), MODELS["conv_bn"][1], {"weights": "lpbq", "weight_type": "int4", "block_size": 16,
                                                                "calibration_samples": 2, "evaluation_samples": 0})
    e = {e.name: e for e in qm.encodings}["w2"]
    assert e.granularity == "lpbq" and np.asarray(e.scale).size == 32
    buf = io.StringIO()
    qm.save_encodings(buf)  # 2.0.0 LPBQ: decompressed bits 2 x 4
    assert "per_channel_float_scale" in buf.getvalue()


def test_weight_only_says_what_it_left() -> None:
    qm = qlinear.quantize(conv_bn(), None, {"activation_type": "float", "weights": "per-channel"})
    assert "weight-only: quantized 1 of 4 weights; left float: 3 Conv weight(s)" in " ".join(qm.notes)


def test_save_errors_are_qlinear_errors(tmp_path: Path) -> None:
    qm = qlinear.quantize(str(MODEL), str(DATA), {"calibration_samples": 2, "evaluation_samples": 0})
    with pytest.raises(OutputError):
        qm.save(123)
    with pytest.raises(OutputError):
        qm.save_onnx(io.StringIO())
    with pytest.raises(OutputError):
        qm.save_encodings(3.5)
    with pytest.raises(ConfigError):
        qm.save_encodings(tmp_path / "e.json", version="9.9")
    b = io.BytesIO()
    qm.save_onnx(b)
    assert onnx.load_from_string(b.getvalue()).graph.node
    with pytest.raises(GraphError, match="TFLite rule.*activations must be int8"):
        qm.save_tflite(tmp_path / "m.tflite")  # target ort: uint8 activations
    assert not (tmp_path / "m.tflite").exists()


def test_no_import_circle_in_ptq() -> None:
    import ast

    root = Path(qlinear.__file__).parent / "ptq"
    mods = {".".join(p.relative_to(root.parents[1]).with_suffix("").parts).removesuffix(".__init__"): p
            for p in root.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in mods] or [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[m] |= {t for t in targets if t in mods and t != m}

    def reach(a: str) -> set[str]:
        seen, todo = set(), [a]
        while todo:
            for b in edges[todo.pop()]:
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    circles = sorted(m for m in mods if m in reach(m))
    assert circles == [], circles


@pytest.mark.slow
def test_efficientnet_matrix(shared_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar of issue 20 on EfficientNet-Lite0 (4 calibration samples): targets x granularities x weight types."""
    model = shared_dir / "models" / "efficientnet-lite0.onnx"
    data = shared_dir / "data" / "imagenet-dev"
    count = _SessionCount(monkeypatch)
    for t, w, wt in itertools.product(TARGETS, WEIGHTS, WEIGHT_TYPES):
        req = {"target": t, "weights": w, "weight_type": wt}
        count.n = 0
        t0 = time.perf_counter()
        try:
            qm = qlinear.quantize(model, data, dict(req, calibration_samples=4, evaluation_samples=0))
        except QlinearError as e:
            assert count.n == 0 and time.perf_counter() - t0 < 1.0, f"{req}: refused late: {e}"
            continue
        _check_changes_noted(req, qm)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        s = count.real(qm.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        x = s.get_inputs()[0]
        s.run(None, {x.name: np.random.default_rng(0).random([d if isinstance(d, int) else 1 for d in x.shape],
                                                              np.float32)})
        if t == "tflite":
            _run_litert(qm, tmp_path)


def test_cli_refuses_before_work_and_titles_the_settled_settings(tmp_path: Path, capsys, monkeypatch) -> None:
    import json

    from qlinear.cli.main import EXIT_ERROR, EXIT_OK, main

    count = _SessionCount(monkeypatch)
    out = tmp_path / "o"
    t0 = time.perf_counter()
    rc = main(["quantize", "-o", str(out), "--target", "tflite", "--weights", "per-block", "--weight-type", "int4"])
    # no ONNX Runtime session, no output; the time includes the first import of the CLI stack (typer, rich)
    assert rc == EXIT_ERROR and count.n == 0 and time.perf_counter() - t0 < 3.0 and not out.exists()
    assert "weight_type: int4 is not available with target tflite" in capsys.readouterr().err
    rc = main(["quantize", "-o", str(out), "--target", "qnn", "--weights", "lpbq", "--activation-type", "int8",
               "--calibration-samples", "4", "--evaluation-samples", "4"])
    text = " ".join(capsys.readouterr().out.split())  # the title may wrap
    assert rc == EXIT_OK
    assert "int4 weights lpbq (block 32), uint8 activations" in text and "asked int8" in text, text
    rep = json.loads((out / "report.json").read_text())
    assert rep["config"]["activation_type"] == "uint8" and rep["config"]["weight_type"] == "int4"
    assert "activation_type" in rep["requested"] and any("asked int8" in n for n in rep["notes"])


_SETTLE_KEYS = {"target": TARGETS, "weights": WEIGHTS, "weight_type": ("int8", "uint8", "int4", "uint4", "int16"),
                "activation_type": ("uint8", "int8", "uint16", "int16", "float8e4m3fn", "float"),
                "weight_symmetric": (True, False), "activation_symmetric": (True, False),
                "policy": ("aimet", "onnxruntime", "tflite")}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(_SETTLE_KEYS)), st.integers(0, 5), max_size=5))
def test_settle_never_changes_a_requested_option_silently(picks: dict) -> None:
    req = {k: _SETTLE_KEYS[k][i % len(_SETTLE_KEYS[k])] for k, i in picks.items()}
    try:
        cfg = QuantizeConfig(**req)
        used, notes = settle(cfg, conv_bn())
    except ConfigError as e:
        assert str(e) and "\n" not in str(e)
        return
    text = " | ".join(notes)
    for k, v in req.items():
        if getattr(used, k) != v:
            val = str(v).lower() if isinstance(v, bool) else v
            assert f"asked {val}" in text or f"asked {k} {val}" in text, (k, v, getattr(used, k), notes)
    facts = ("per-channel instead", "CPU session has no 16-bit kernels")   # notes of what is, not of a change
    assert settle(used, conv_bn()) == (used, [n for n in notes if any(f in n for f in facts)])  # idempotent
    if used.target == "tflite":
        assert used.weight_type == "int8" and used.activation_type in ("int8", "int16") and used.weight_symmetric
    if used.target == "qnn":
        assert not used.activation_type.startswith("int")
    if used.weights == "lpbq":
        assert used.weight_type == "int4"


def test_cli_config_file_with_overrides_writes_the_report(tmp_path: Path) -> None:
    """``--config`` with ``overrides`` (a list of rules) runs to the end: report.json gives the rules as written (a
    rule object in the JSON raised a traceback before)."""
    import json

    from qlinear.cli.main import main

    rules = [{"name": "*", "role": "activation", "type": "uint8"}, {"op_type": "Conv", "role": "weight",
                                                                      "type": "int16"}]
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"overrides": rules, "calibration_samples": 8, "evaluation_samples": 8}))
    assert main(["quantize", "--config", str(cfg), "-o", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["config"]["overrides"] == rules and "overrides" in doc["requested"]
