"""Inputs fixed to a value (``fix_inputs``, ``--fix-input sr=16000``) and the ``If`` they decide inlined
(:mod:`qlinear.graph.passes.fix_inputs`, :mod:`qlinear.graph.passes.inline_if`): silero-vad's shape, a network
inside an ``If`` on its sample rate. The specialized model is judged against the original run by ONNX Runtime with
the input fed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tiny_models import make_model

import qlinear
from qlinear.errors import DataError, GraphError
from qlinear.graph.passes.fix_inputs import fix_input_values
from qlinear.graph.passes.shapes import fix_input_shapes

RNG = np.random.default_rng(0)
W_HI, W_LO = RNG.normal(size=(4, 1, 3)).astype(np.float32), RNG.normal(size=(4, 1, 3)).astype(np.float32)


def _branch(tag: str, w: np.ndarray, clash: bool = False) -> onnx.GraphProto:
    """``x`` (outer scope) -> Conv (a weight stored as a Constant node, as exporters do) -> Relu -> ``{tag}_y``;
    ``clash``: its Conv output is named ``h``, a name the main graph uses too."""
    c = "h" if clash else f"{tag}_c"
    nodes = [helper.make_node("Constant", [], [f"{tag}_w"], value=numpy_helper.from_array(w)),
             helper.make_node("Conv", ["x", f"{tag}_w"], [c], pads=[1, 1], name=f"{tag}_conv"),
             helper.make_node("Relu", [c], [f"{tag}_y"], name=f"{tag}_relu")]
    return helper.make_graph(nodes, tag, [], [helper.make_tensor_value_info(f"{tag}_y", TensorProto.FLOAT,
                                                                            ["N", 4, 16])])


def rate_model(clash: bool = False, nested: bool = False) -> onnx.ModelProto:
    """``x [N, 1, 16]``, ``sr`` (int64 scalar) -> If(sr == 16000): the 16 kHz Conv/Relu, else the 8 kHz one ->
    ``h`` -> Conv -> ``y [N, 2, 16]``. ``nested``: the 16 kHz branch holds a second If on ``sr > 0``."""
    hi = _branch("hi", W_HI, clash)
    if nested:
        inner = helper.make_node("If", ["pos"], ["hi_y2"], name="If_inner", then_branch=_branch("in", W_HI),
                                 else_branch=_branch("out", W_LO))
        hi = helper.make_graph([helper.make_node("Greater", ["sr", "zero"], ["pos"]), inner], "hi", [],
                               [helper.make_tensor_value_info("hi_y2", TensorProto.FLOAT, ["N", 4, 16])])
    nodes = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(16000, np.int64))),
             helper.make_node("Equal", ["sr", "k"], ["cond"]),
             helper.make_node("If", ["cond"], ["h"], name="If_rate", then_branch=hi,
                              else_branch=_branch("lo", W_LO)),
             helper.make_node("Conv", ["h", "wf"], ["y"], name="final")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 16]),
                              helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 16])],
                      {"wf": RNG.normal(size=(2, 4, 1)).astype(np.float32), "zero": np.array(0, np.int64)}, opset=17)


def _run(m: onnx.ModelProto, feeds: dict) -> np.ndarray:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in s.get_inputs()}})[0]


X = RNG.normal(size=(48, 1, 16)).astype(np.float32)


@pytest.mark.parametrize("clash,nested", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("rate", [16000, 8000])
def test_the_branch_a_fixed_input_takes_is_inlined_and_computes_what_the_if_did(rate, clash, nested):
    m = rate_model(clash, nested)
    want = _run(m, {"x": X, "sr": np.array(rate, np.int64)})
    fixed = onnx.ModelProto()
    fixed.CopyFrom(m)
    fixed, notes = fix_input_values(fixed, {"sr": rate})
    onnx.checker.check_model(fixed, full_check=True)
    assert [i.name for i in fixed.graph.input] == ["x"] and not any(n.op_type == "If" for n in fixed.graph.node)
    np.testing.assert_array_equal(_run(fixed, {"x": X}), want)
    assert notes[0].startswith(f"inputs fixed: sr={rate}")
    taken = "then" if rate == 16000 else "else"
    assert any(n.startswith(f"If 'If_rate': condition {rate == 16000} once fixed, replaced by its {taken}_branch")
               for n in notes)


def test_a_fixed_input_quantizes_the_layers_of_the_branch_taken():
    """Without the fix the branches stay float, and the note names the input that decides them; with it the Conv
    of the 16 kHz branch is quantized, the written model has no ``sr`` input and is close to the float model."""
    m = rate_model()
    data = {"x": X, "sr": np.array(16000, np.int64)}
    plain = qlinear.quantize(m, data, dict(calibration_samples=32, evaluation_samples=16))
    note = next(n for n in plain.notes if n.startswith("If node 'If_rate'"))
    assert "Conv 'hi_conv'" in note and "depends on the value of input(s) sr" in note and "--fix-input" in note
    qm = qlinear.quantize(m, data, dict(calibration_samples=32, evaluation_samples=16, fix_inputs={"sr": 16000}))
    assert [i.name for i in qm.model.graph.input] == ["x"]
    assert not any(n.startswith("If node") for n in qm.notes)
    dq = {n.output[0] for n in qm.model.graph.node if n.op_type == "DequantizeLinear"}
    assert {"hi_w", "wf"} <= dq
    f, q = _run(m, {"x": X[32:], "sr": np.array(16000, np.int64)}), _run(qm.model, {"x": X[32:]})
    assert 10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2)) > 30


def test_samples_holding_another_value_and_bad_values_are_refused_before_work():
    m = rate_model()
    with pytest.raises(DataError, match=r"input 'sr' holds 8000, but fix_inputs fixes it to 16000"):
        qlinear.quantize(m, {"x": X, "sr": np.array(8000, np.int64)}, dict(fix_inputs={"sr": 16000}))
    qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, fix_inputs={"sr": 8000}))
    for value, msg in ((16000.5, r"input 'sr' is int64; 16000.5 is not one"),
                       ([1, 2], r"input 'sr' has the shape \[\] \(1 values\); 2 value\(s\) given")):
        with pytest.raises(GraphError, match=msg):
            qlinear.quantize(m, {"x": X}, dict(fix_inputs={"sr": value}))
    with pytest.raises(GraphError, match=r"fix_inputs: 'rate' is not a graph input; the model's inputs are \['sr', "
                                         r"'x'\]"):
        qlinear.quantize(m, {"x": X}, dict(fix_inputs={"rate": 16000}))
    with pytest.raises(qlinear.QlinearError, match=r"fix_inputs: expected a mapping"):
        qlinear.quantize(m, {"x": X}, dict(fix_inputs={"sr": "16k"}))


def test_a_fixed_shape_inlines_the_if_a_squeeze_exporter_wrote():
    """torch's export of ``squeeze(dim)`` on a dynamic dimension: If(Shape(x)[1] == 1, Squeeze, Identity); with the
    shape fixed the If goes (silero-vad's decoder)."""
    then = helper.make_graph([helper.make_node("Squeeze", ["x", "ax"], ["t_y"])], "t", [],
                             [helper.make_tensor_value_info("t_y", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e_y"])], "e", [],
                              [helper.make_tensor_value_info("e_y", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["d"], axis=0),
             helper.make_node("Equal", ["d", "one"], ["c"]),
             helper.make_node("If", ["c"], ["y"], name="If_sq", then_branch=then, else_branch=other)]
    g = helper.make_graph(nodes, "sq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array(1, np.int64), "one"),
                           numpy_helper.from_array(np.array([1], np.int64), "ax")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])   # rank differs by branch: no checker
    from qlinear.graph.passes.normalize import subgraph_notes

    assert "depends on the shape of input(s) x" in subgraph_notes(m)[0] and "--input-shape" in subgraph_notes(m)[0]
    x = RNG.normal(size=(2, 1, 8)).astype(np.float32)
    want = _run(m, {"x": x})
    fixed, notes = fix_input_shapes(m, {"x": [2, 1, 8]})
    assert not any(n.op_type == "If" for n in fixed.graph.node)
    assert any(n.startswith("If 'If_sq': condition True once fixed, replaced by its then_branch") for n in notes)
    np.testing.assert_array_equal(_run(fixed, {"x": x}), want)


def test_the_command_line_takes_fix_input(tmp_path):
    import subprocess
    import sys

    from qlinear.cli.quantize import _fixed_inputs
    from qlinear.errors import ConfigError

    assert _fixed_inputs(["sr=16000", "gain=0.5", "w=1,2,3"]) == {"sr": 16000, "gain": 0.5, "w": [1, 2, 3]}
    assert _fixed_inputs(None) is None
    with pytest.raises(ConfigError, match=r"--fix-input 'sr:16000': expected NAME=VALUE"):
        _fixed_inputs(["sr:16000"])
    onnx.save(rate_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=X)
    cmd = [sys.executable, "-m", "qlinear", "quantize", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "d.npz"),
           "--no-report", "--fix-input"]
    r = subprocess.run(cmd + ["sr=16000", "-o", str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "inputs fixed: sr=16000" in r.stdout + r.stderr
    assert [i.name for i in onnx.load(tmp_path / "out" / "model.qdq.onnx").graph.input] == ["x"]
    r = subprocess.run(cmd + ["sr=1.5", "-o", str(tmp_path / "out2")], capture_output=True, text=True, check=False)
    assert r.returncode != 0 and "input 'sr' is int64; 1.5 is not one" in r.stderr.replace("\n", " ")
    assert not (tmp_path / "out2").exists()


def test_debug_fixes_the_float_model_as_the_quantized_one_was():
    """``qlinear debug`` of the model as shipped against a run with ``fix_inputs``: the float model gets the data's
    value of the input the quantized model lacks, its If is inlined the same way, and the branch's tensors are
    compared one by one (they were hidden inside the If)."""
    from qlinear.ptq.report.debug import compare_models

    m = rate_model()
    data = {"x": X, "sr": np.array(16000, np.int64)}
    qm = qlinear.quantize(m, data, dict(calibration_samples=32, evaluation_samples=16, fix_inputs={"sr": 16000}))
    r = compare_models(m, qm.model, data)
    assert "FLOAT: inputs fixed to the data's values, sr=16000, as the quantized model does not take them" in r.notes
    by = {t.tensor: t for t in r.tensors}
    assert {"hi_c", "h", "y"} <= set(by) and 25 < by["hi_c"].sqnr_db < 80


def test_tflite_refusal_names_the_input_and_the_fixed_model_exports(tmp_path):
    """``--target tflite`` refuses an If and says which input decides it; with that input fixed (and the batch shape
    given) the branch is inlined and the .tflite runs in LiteRT, close to the float model."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    from qlinear.errors import ConfigError

    m = rate_model()
    cfg = dict(calibration_samples=32, evaluation_samples=0, target="tflite", input_shapes={"x": [1, 1, 16]})
    data = {"x": X[:, None]}
    with pytest.raises(ConfigError, match=r"If 'If_rate': its condition depends on the value of input\(s\) sr: "
                                          r"fixing them with --fix-input"):
        qlinear.quantize(m, data, cfg)
    qm = qlinear.quantize(m, data, dict(cfg, fix_inputs={"sr": 16000}))
    qm.save(tmp_path / "out", report=False)
    it = litert.Interpreter(model_path=str(tmp_path / "out" / "model.tflite"))
    it.allocate_tensors()
    (inp,), (out,) = it.get_input_details(), it.get_output_details()
    got = []
    for x in X[32:]:
        it.set_tensor(inp["index"], x[None])
        it.invoke()
        got.append(it.get_tensor(out["index"]))
    f = _run(m, {"x": X[32:], "sr": np.array(16000, np.int64)})
    q = np.concatenate(got)
    assert 10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2)) > 25
