"""TFLite export for real models (issue 21, Deliver 4): data movement on integers (TRANSPOSE, STRIDED_SLICE, SPLIT_V,
GATHER, RESIZE_NEAREST_NEIGHBOR), float islands (DEQUANTIZE -> float builtin -> QUANTIZE) for operators outside the
integer set and for constant operands also read by such an operator (the others are quantized int8 symmetric
per-tensor, as the converter does), each run by LiteRT 2.3.0 and compared bit for bit with run_integer in the
matching profile; ``--full-integer`` refuses islands, naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.errors import ConfigError, UnsupportedError
from qlinear.kernels.run import IntegerModel
from qlinear.tflite import schema as S
from qlinear.tflite.export import convert

litert = pytest.importorskip("ai_edge_litert.interpreter")
G = pytest.importorskip("ai_edge_litert.schema_py_generated")

RESOLVERS = {"ref": litert.OpResolverType.BUILTIN_REF, "auto": litert.OpResolverType.AUTO}
RNG = np.random.default_rng(1)
X = RNG.normal(0, 2, (40, 4, 8, 8)).astype(np.float32)
N_CAL = 32


def _model(nodes, inits, outputs=("y",)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    inferred = onnx.shape_inference.infer_shapes(m)
    for i, o in enumerate(inferred.graph.output):
        m.graph.output[i].CopyFrom(o)
    return m


def _n(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, **kw)


def _i64(*v):
    return np.array(v, np.int64)


# case -> (nodes, initializers, TFLite builtins that must be in the file, whether it has float islands)
CASES = {
    "transpose": ([_n("Transpose", ["x"], ["y"], perm=[0, 1, 3, 2])], {}, {"TRANSPOSE"}, False),
    "transpose_to_3d": ([_n("Reshape", ["x", "s"], ["r"]), _n("Transpose", ["r"], ["y"], perm=[0, 2, 1])],
                        {"s": _i64(-1, 4, 64)}, {"TRANSPOSE"}, False),
    "slice": ([_n("Slice", ["x", "st", "en", "ax"], ["y"])], {"st": _i64(1, 2), "en": _i64(3, 7), "ax": _i64(1, 3)},
              {"STRIDED_SLICE"}, False),
    "slice_step_reverse": ([_n("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
                           {"st": _i64(-1, 0), "en": _i64(-100, 8), "ax": _i64(2, 1), "sp": _i64(-2, 3)},
                           {"STRIDED_SLICE"}, False),
    "split_concat": ([_n("Split", ["x", "sz"], ["a", "b"], axis=1), _n("Concat", ["b", "a"], ["y"], axis=1)],
                     {"sz": _i64(1, 3)}, {"SPLIT_V"}, False),
    "gather": ([_n("Gather", ["x", "i"], ["y"], axis=1)], {"i": _i64(2, 0, -1)}, {"GATHER"}, False),
    "gather_scalar_3d": ([_n("Gather", ["x", "i"], ["y"], axis=2)], {"i": np.array(3, np.int64)}, {"GATHER"}, False),
    "resize_nearest": ([_n("Resize", ["x", "", "sc"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
                           nearest_mode="floor")], {"sc": np.array([1, 1, 2, 2], np.float32)},
                       {"RESIZE_NEAREST_NEIGHBOR"}, False),
    "resize_bilinear_half_pixel": ([_n("Resize", ["x", "", "sc"], ["y"], mode="linear",
                                       coordinate_transformation_mode="half_pixel")],
                                   {"sc": np.array([1, 1, 2, 2], np.float32)}, {"RESIZE_BILINEAR"}, False),
    "resize_bilinear_align_corners": ([_n("Resize", ["x", "", "sc"], ["y"], mode="linear",
                                          coordinate_transformation_mode="align_corners")],
                                      {"sc": np.array([1, 1, 1.625, 1.375], np.float32)}, {"RESIZE_BILINEAR"}, False),
    "hard_sigmoid": ([_n("HardSigmoid", ["x"], ["y"], alpha=0.2, beta=0.5)], {}, {"DEQUANTIZE", "MINIMUM"}, True),
    "div_const": ([_n("Div", ["x", "c"], ["y"])], {"c": np.float32(6.0)}, {"DIV"}, True),
    "add_const_channel": ([_n("Add", ["x", "c"], ["y"])], {"c": RNG.normal(0, 1, (1, 4, 1, 1)).astype(np.float32)},
                          {"ADD"}, False),
    "mul_const_relu": ([_n("Mul", ["x", "c"], ["m"]), _n("Relu", ["m"], ["y"])], {"c": np.float32(0.37)},
                       {"MUL"}, False),
    "sub_const_row": ([_n("Sub", ["c", "x"], ["y"])], {"c": RNG.normal(0, 1, (8,)).astype(np.float32)}, {"SUB"},
                      False),
    "shared_const_add_mul": ([_n("Add", ["x", "c"], ["a"]), _n("Mul", ["a", "c"], ["y"])],
                             {"c": np.float32(-0.75)}, {"ADD", "MUL"}, False),
    "hardswish_decomposed": ([_n("Add", ["x", "three"], ["a"]), _n("Clip", ["a", "lo", "hi"], ["c"]),
                              _n("Mul", ["x", "c"], ["m"]), _n("Div", ["m", "six"], ["y"])],
                             {"three": np.float32(3), "lo": np.float32(0), "hi": np.float32(6), "six": np.float32(6)},
                             {"DIV", "MUL"}, True),
    "sqrt_abs": ([_n("Abs", ["x"], ["a"]), _n("Sqrt", ["a"], ["y"])], {}, {"ABS", "SQRT"}, True),
    "exp": ([_n("Exp", ["x"], ["y"])], {}, {"EXP"}, True),
    "conv_transpose_k2s2": ([_n("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], kernel_shape=[2, 2])],
                            {"w": RNG.normal(0, 0.5, (4, 6, 2, 2)).astype(np.float32)}, {"TRANSPOSE_CONV"}, False),
    "conv_transpose_same_bias_relu": ([_n("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[0, 0, 1, 1]),
                                       _n("Relu", ["c"], ["y"])],
                                      {"w": RNG.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32),
                                       "b": RNG.normal(0, 0.5, (3,)).astype(np.float32)}, {"TRANSPOSE_CONV"}, False),
    # folded into the ConvTranspose since 2026-11-28 (CenterFace's upsampling): no island
    "batchnorm_after_conv_transpose": ([_n("ConvTranspose", ["x", "w"], ["c"], strides=[2, 2], kernel_shape=[2, 2]),
                                        _n("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"], momentum=0.9)],
                                       {"w": RNG.normal(0, 0.5, (4, 3, 2, 2)).astype(np.float32),
                                        "s": np.float32([0.5, 2, 1.5]), "bb": np.float32([0.1, -0.2, 0.3]),
                                        "mu": np.float32([0.2, 0, -0.1]), "var": np.float32([1, 2, 0.5])},
                                       {"TRANSPOSE_CONV"}, False),
    # a BatchNormalization after a Relu cannot fold: a float island
    "batchnorm_after_relu": ([_n("ConvTranspose", ["x", "w"], ["c"], strides=[2, 2], kernel_shape=[2, 2]),
                              _n("Relu", ["c"], ["r"]),
                              _n("BatchNormalization", ["r", "s", "bb", "mu", "var"], ["y"], momentum=0.9)],
                             {"w": RNG.normal(0, 0.5, (4, 3, 2, 2)).astype(np.float32),
                              "s": np.float32([0.5, 2, 1.5]), "bb": np.float32([0.1, -0.2, 0.3]),
                              "mu": np.float32([0.2, 0, -0.1]), "var": np.float32([1, 2, 0.5])},
                             {"TRANSPOSE_CONV", "DIV"}, True),
    "matmul_activations_4d": ([_n("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]), _n("MatMul", ["x", "t"], ["y"])], {},
                              {"BATCH_MATMUL"}, False),
    "matmul_activations_3d": ([_n("Reshape", ["x", "s"], ["r"]), _n("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
                               _n("MatMul", ["r", "t"], ["y"])], {"s": _i64(-1, 4, 64)}, {"BATCH_MATMUL"}, False),
    "reduce_max_expand": ([_n("ReduceMax", ["x"], ["m"], axes=[1], keepdims=1), _n("Expand", ["m", "s"], ["e"]),
                           _n("Sub", ["x", "e"], ["y"])], {"s": _i64(1, 4, 8, 8)}, {"REDUCE_MAX", "BROADCAST_TO"},
                          True),
    "global_max_pool": ([_n("GlobalMaxPool", ["x"], ["y"])], {}, {"REDUCE_MAX"}, True),
    # basic-pitch's normalized log (tf.math.divide_no_nan): x - min over channels, divided by the range, 0 where the
    # range is 0 (REDUCE_MIN, EQUAL, SELECT_V2)
    "reduce_min_divide_no_nan": ([_n("ReduceMin", ["x"], ["lo"], axes=[1], keepdims=1), _n("Sub", ["x", "lo"], ["d"]),
                                  _n("ReduceMax", ["d"], ["r"], axes=[1], keepdims=1), _n("Equal", ["r", "zero"], ["z"]),
                                  _n("Div", ["d", "r"], ["q"]), _n("Where", ["z", "zero", "q"], ["y"])],
                                 {"zero": np.array(0, np.float32)}, {"REDUCE_MIN", "SELECT_V2", "EQUAL"}, True),
    # LayerNormalization (opset 17, torch's export of transformers): float builtins in the reference's order
    "layer_norm_3d": ([_n("Reshape", ["x", "s"], ["r"]), _n("LayerNormalization", ["r", "g", "b"], ["y"], epsilon=1e-5)],
                      {"s": _i64(-1, 16, 16), "g": RNG.normal(1, 0.2, (16,)).astype(np.float32),
                       "b": RNG.normal(0, 0.2, (16,)).astype(np.float32)}, {"SUM", "SQRT", "DIV"}, True),
    "layer_norm_chw_no_bias": ([_n("LayerNormalization", ["x", "g"], ["y"], axis=1)],
                               {"g": RNG.normal(1, 0.2, (4, 8, 8)).astype(np.float32)}, {"SUM", "SQRT"}, True),
    # a learned slope per channel (MTCNN's P-Net, keras2onnx): PRELU in float
    "prelu_channels": ([_n("PRelu", ["x", "a"], ["y"])], {"a": RNG.uniform(0.05, 0.5, (4, 1, 1)).astype(np.float32)},
                       {"PRELU"}, True),
    # a mask inverted (khmersm's padding mask): LOGICAL_NOT of a comparison selects between the tensor and a constant
    "not_where": ([_n("Less", ["x", "c"], ["l"]), _n("Not", ["l"], ["n"]), _n("Where", ["n", "x", "c"], ["y"])],
                  {"c": np.array(0.25, np.float32)}, {"LOGICAL_NOT", "SELECT_V2"}, True),
    "reduce_sum_channels": ([_n("ReduceSum", ["x", "a"], ["y"], keepdims=0)], {"a": _i64(1)}, {"SUM"}, True),
    # a decomposed normalization over the channels: its statistics (mean, variance, square root) stay float islands
    "layernorm_statistics": ([_n("ReduceMean", ["x"], ["mu"], axes=[1], keepdims=1), _n("Sub", ["x", "mu"], ["d"]),
                              _n("Mul", ["d", "d"], ["dd"]), _n("ReduceMean", ["dd"], ["var"], axes=[1], keepdims=1),
                              _n("Add", ["var", "eps"], ["ve"]), _n("Sqrt", ["ve"], ["sd"]),
                              _n("Div", ["d", "sd"], ["y"])], {"eps": np.array(1e-5, np.float32)},
                             {"MEAN", "SQRT"}, True),
    "softmax_channels": ([_n("Softmax", ["x"], ["y"], axis=1)], {}, {"SOFTMAX"}, False),  # NHWC: already last
    "softmax_axis2": ([_n("Softmax", ["x"], ["y"], axis=2)], {}, {"SOFTMAX", "TRANSPOSE"}, False),
    "reshape_3d_to_4d": ([_n("Reshape", ["x", "s1"], ["r"]), _n("Reshape", ["r", "s2"], ["y"])],
                         {"s1": _i64(-1, 4, 64), "s2": _i64(-1, 4, 16, 4)}, {"RESHAPE", "TRANSPOSE"}, False),
    "matmul_3d": ([_n("Reshape", ["x", "s"], ["r"]), _n("MatMul", ["r", "w"], ["y"])],
                  {"s": _i64(-1, 16, 16), "w": RNG.normal(0, 0.5, (16, 5)).astype(np.float32)},
                  {"FULLY_CONNECTED"}, False),
    # a MatMul over the last axis of a 4-D tensor stored NHWC (openwakeword's mel filterbank): TRANSPOSE back first;
    # the Clip(1e-10) after it clamps the integers as RELU does: fused as RELU
    "matmul_4d_nhwc_clip_floor": ([_n("Conv", ["x", "wc"], ["c"]), _n("MatMul", ["c", "w"], ["m"]),
                                   _n("Clip", ["m", "floor", ""], ["y"])],
                                  {"wc": RNG.normal(0, 0.5, (4, 4, 1, 1)).astype(np.float32),
                                   "w": RNG.normal(0, 0.5, (8, 5)).astype(np.float32),
                                   "floor": np.array(1e-10, np.float32)}, {"TRANSPOSE", "FULLY_CONNECTED"}, False),
    # a Clip whose lower bound the graph computes (max - 4: a dB floor): MAXIMUM with that tensor, a float island
    # GELU as torch exports it (x * 0.5 * (1 + erf(x / sqrt 2))): the Erf as float builtins (TFLite has no ERF)
    "erf_gelu": ([_n("Div", ["x", "sqrt2"], ["xs"]), _n("Erf", ["xs"], ["e"]), _n("Add", ["e", "one"], ["e1"]),
                  _n("Mul", ["x", "e1"], ["xe"]), _n("Mul", ["xe", "half"], ["y"])],
                 {"sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
                  "half": np.array(0.5, np.float32)}, {"SIGN", "EXP", "ABS"}, True),
    "clip_computed_floor": ([_n("ReduceMax", ["x"], ["mx"], keepdims=0), _n("Sub", ["mx", "four"], ["lo"]),
                             _n("Clip", ["x", "lo", ""], ["y"])], {"four": np.array(4, np.float32)},
                            {"MAXIMUM", "REDUCE_MAX"}, True),
}


#: cases whose graph reduces over the batch axis too (a scalar bound): run_integer runs them one sample at a time,
#: as the batch-1 .tflite does
PER_SAMPLE = {"clip_computed_floor"}
#: cases LiteRT's default resolver computes otherwise (run_integer reproduces its reference kernels there)
REF_ONLY = {"resize_bilinear_half_pixel": "XNNPACK's int8 bilinear resize is not reproduced",
            "resize_bilinear_align_corners": "XNNPACK's int8 bilinear resize is not reproduced"}


def _builtins(data: bytes) -> set[str]:
    m = G.ModelT.InitFromPackedBuf(data, 0)
    names = {v: k for k, v in S.OP.items()}
    return {names.get(c.builtinCode, str(c.builtinCode)) for c in m.operatorCodes}


def _litert(data: bytes, x: np.ndarray, resolver: str) -> np.ndarray:
    """LiteRT's output for the samples ``x``, one sample per call (the .tflite is written for batch 1)."""
    it = litert.Interpreter(model_content=data, experimental_op_resolver_type=RESOLVERS[resolver])
    it.allocate_tensors()
    ys = []
    for xi in x:
        it.set_tensor(it.get_input_details()[0]["index"], xi[None].transpose(0, 2, 3, 1))
        it.invoke()
        ys.append(it.get_tensor(it.get_output_details()[0]["index"]))
    y = np.concatenate(ys)
    return y.transpose(0, 3, 1, 2) if y.ndim == 4 else y


@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_bit_exact_against_litert(case):
    nodes, inits, must, islands = CASES[case]
    qm = qlinear.quantize(_model(nodes, inits), {"x": X},
                          dict(calibration_samples=N_CAL, evaluation_samples=0, target="tflite"))
    out = convert(qm.model)
    used = _builtins(out.data)
    assert must <= used, sorted(used)
    assert bool(out.islands) == islands, out.islands
    x = X[N_CAL:]
    for resolver, mode in (("ref", "litert_ref"), ("auto", "litert_xnnpack"))[:1 if case in REF_ONLY else 2]:
        y = _litert(out.data, x, resolver)
        im = IntegerModel(qm.model, mode)
        z = np.concatenate([im.run({"x": xi[None]})["y"] for xi in x]) if case in PER_SAMPLE else \
            im.run({"x": x})["y"]
        assert y.shape == z.shape and np.array_equal(y, z), \
            f"{resolver}: {int((y != z).sum())} of {y.size} differ from run_integer {mode}"


def test_islands_are_named_in_a_note_and_full_integer_refuses_them(tmp_path):
    m = _model(*CASES["hard_sigmoid"][:2])
    qm = qlinear.quantize(m, {"x": X}, dict(calibration_samples=N_CAL, evaluation_samples=0, target="tflite"))
    islands = convert(qm.model).islands
    assert len(islands) == 1 and islands[0].endswith("(HardSigmoid)")
    qm.save(tmp_path / "out", report=False)
    assert any("float islands" in n and "HardSigmoid" in n for n in qm.notes)
    with pytest.raises(ConfigError, match=r"full_integer: node y \(HardSigmoid\) is not among the operators "
                                          r"qlinear.s TFLite export writes in integers.*drop --full-integer"):
        qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, target="tflite",
                                           full_integer=True))
    with pytest.raises(UnsupportedError, match=r"node \S+ \(HardSigmoid\).*float island"):
        convert(qm.model, full_integer=True)
    m = _model(*CASES["add_const_channel"][:2])  # a constant operand is quantized (int8 symmetric per-tensor)
    qm = qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, target="tflite",
                                            full_integer=True))
    assert convert(qm.model, full_integer=True).islands == []
    m = _model([_n("Add", ["x", "c"], ["a"]), _n("Div", ["a", "c"], ["y"])], {"c": np.float32(0.5)})
    with pytest.raises(ConfigError, match=r"node a \(Add\) has a constant operand"):  # also read by a Div: float
        qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, target="tflite",
                                           full_integer=True))
    m = _model(*CASES["transpose"][:2])  # data movement is integer: allowed with full_integer
    qm = qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, target="tflite",
                                            full_integer=True))
    assert convert(qm.model, full_integer=True).islands == []


def test_operator_without_island_is_refused_before_work():
    m = _model([_n("Sin", ["x"], ["y"])], {})
    with pytest.raises(ConfigError, match="cannot express operator.*Sin"):
        qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, target="tflite"))


def test_three_d_convolution_is_refused_before_work():
    """A Conv3d (RivaGAN's decoder, a one-frame video [N, 3, 1, H, W]) passed the operator check and failed in the
    export after calibration with 'only 1-D and 2-D convolutions ... export', no fix named."""
    x = RNG.normal(0, 1, (8, 3, 1, 8, 8)).astype(np.float32)
    w = RNG.normal(0, 0.3, (4, 3, 1, 3, 3)).astype(np.float32)
    g = helper.make_graph([_n("Conv", ["x", "w"], ["y"], pads=[0, 1, 1, 0, 1, 1], name="conv3d")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 1, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 1, 8, 8])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ConfigError, match=r"target: tflite writes 1-D and 2-D Conv only, but node conv3d has a 3-D "
                                          r"kernel \(weight 'w' is 5-D\); use target ort"):
        qlinear.quantize(m, {"x": x}, dict(calibration_samples=8, evaluation_samples=0, target="tflite"))
    qm = qlinear.quantize(m, {"x": x}, dict(calibration_samples=8, evaluation_samples=0))   # target ort: as before
    assert qm.model is not None


def test_integer_input_passes_through_to_a_one_hot_matmul():
    """An int32 graph input (magika's bytes) is a .tflite input as it is: RESHAPE, EQUAL, CAST, FULLY_CONNECTED in
    float (one non-zero product per row: exact), then the integer output; LiteRT equals run_integer bit for bit."""
    w = RNG.normal(0, 1, (10, 5)).astype(np.float32)
    g = helper.make_graph(
        [_n("Reshape", ["ids", "s"], ["r"]), _n("Equal", ["r", "classes"], ["e"]), _n("Cast", ["e"], ["f"], to=1),
         _n("MatMul", ["f", "w"], ["m"]), _n("Relu", ["m"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT32, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(_i64(-1, 16, 1), "s"), numpy_helper.from_array(np.arange(10, dtype=np.int32)[None, None],
                                                                                 "classes"),
         numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.graph.output[0].CopyFrom(onnx.shape_inference.infer_shapes(m).graph.output[0])
    ids = RNG.integers(0, 10, (24, 16)).astype(np.int32)
    qm = qlinear.quantize(m, {"ids": ids}, dict(calibration_samples=16, evaluation_samples=0, target="tflite",
                                                input_shapes={"ids": [1, 16]}))
    out = convert(qm.model)
    assert {"EQUAL", "CAST"} <= _builtins(out.data)
    for resolver, mode in (("ref", "litert_ref"), ("auto", "litert_xnnpack")):
        it = litert.Interpreter(model_content=out.data, experimental_op_resolver_type=RESOLVERS[resolver])
        it.allocate_tensors()
        assert it.get_input_details()[0]["dtype"] == np.int32
        im = IntegerModel(qm.model, mode)
        for x in ids[16:]:
            it.set_tensor(it.get_input_details()[0]["index"], x[None])
            it.invoke()
            y = it.get_tensor(it.get_output_details()[0]["index"])
            assert np.array_equal(y, im.run({"ids": x[None]})["y"])


def test_embedding_table_of_a_float_gather_is_in_the_file(tmp_path):
    """An int64 token input read by a Gather of a float table (LAC's 58224 x 128 embedding, left float): the table
    must be written into the .tflite. It was not (GATHER read tensor -1), LiteRT could not load the file, and the
    run still exited 0. Now the file loads and equals run_integer; ``save`` refuses a file LiteRT cannot load."""
    table = RNG.normal(0, 1, (50, 8)).astype(np.float32)
    w = RNG.normal(0, 0.5, (8, 6)).astype(np.float32)
    g = helper.make_graph([_n("Gather", ["table", "ids"], ["e"]), _n("MatMul", ["e", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10, 6])],
                          [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    ids = RNG.integers(0, 50, (24, 10)).astype(np.int64)
    qm = qlinear.quantize(m, {"ids": ids}, dict(calibration_samples=16, evaluation_samples=8, target="tflite",
                                                input_shapes={"ids": [1, 10]}))
    qm.save(tmp_path / "out")
    data = (tmp_path / "out" / "model.tflite").read_bytes()
    assert "GATHER" in _builtins(data)
    it = litert.Interpreter(model_content=data, experimental_op_resolver_type=RESOLVERS["ref"])
    it.allocate_tensors()
    im = IntegerModel(qm.model, "litert_ref")
    for x in ids[16:]:
        it.set_tensor(it.get_input_details()[0]["index"], x[None])
        it.invoke()
        assert np.array_equal(it.get_tensor(it.get_output_details()[0]["index"]), im.run({"ids": x[None]})["y"])
    import json
    dep = json.loads((tmp_path / "out" / "report.json").read_text())["report"]["deployed"]
    assert dep["outputs"]["y"]["cosine_mean"] > 0.99


def test_a_tflite_litert_cannot_load_is_not_written(tmp_path, monkeypatch):
    """The load check before writing: a broken file is an OutputError and earlier outputs stay as they were."""
    import importlib

    from qlinear.errors import OutputError

    export = importlib.import_module("qlinear.tflite.export")
    m = _model([_n("Relu", ["x"], ["y"])], {})
    qm = qlinear.quantize(m, {"x": X}, dict(calibration_samples=8, evaluation_samples=0, target="tflite",
                                            input_shapes={"x": [1, 4, 8, 8]}))
    good = convert(qm.model)
    monkeypatch.setattr(export, "convert", lambda *a, **k: export.Converted(good.data[:-64], []))
    with pytest.raises(OutputError, match="does not load in LiteRT"):
        qm.save_tflite(tmp_path / "m.tflite")
    assert not (tmp_path / "m.tflite").exists()


@pytest.mark.parametrize("mode,pads", [("reflect", (0, 0, 2, 1, 0, 0, 1, 3)), ("constant", (0, 0, 1, 1, 0, 0, 1, 1))])
def test_float_pad_island(mode, pads):
    """A Pad left in float (basic-pitch's reflect padding inside the CQT front end, which stays float because its
    Log reads values over too wide a range): MIRROR_PAD / PAD as a float island, equal to run_integer in both
    resolvers."""
    m = _model([_n("Pad", ["x", "p"], ["pd"], mode=mode), _n("Add", ["pd", "one"], ["a"]), _n("Log", ["a"], ["y"])],
               {"p": _i64(*pads), "one": np.float32(1e-9)})
    m.graph.node[0].name = "pad"
    xw = np.exp(RNG.normal(0, 4, X.shape)).astype(np.float32)   # 1e-7 .. 1e7: the Log's input stays float
    qm = qlinear.quantize(m, {"x": xw}, dict(calibration_samples=N_CAL, evaluation_samples=0, target="tflite"))
    out = convert(qm.model)
    assert "pad (Pad)" in out.islands and ("MIRROR_PAD" if mode == "reflect" else "PAD") in _builtins(out.data)
    x = xw[N_CAL:]
    for resolver, rmode in (("ref", "litert_ref"), ("auto", "litert_xnnpack")):
        y = _litert(out.data, x, resolver)
        z = IntegerModel(qm.model, rmode).run({"x": x})["y"]
        assert y.shape == z.shape and np.array_equal(y, z), f"{resolver}: {int((y != z).sum())} differ"


@pytest.mark.parametrize("case", ["conv_transpose_k2s2", "conv_transpose_same_bias_relu",
                                  "batchnorm_after_conv_transpose"])
def test_transpose_conv_16x8_bit_exact_against_litert(case):
    """16-bit activations, int8 weights, int64 bias: LiteRT's TRANSPOSE_CONV 16x8 kernel (its reference integer
    TransposeConv, int64 accumulation); it was refused ("exported for int8 activations only")."""
    nodes, inits, _, _ = CASES[case]
    qm = qlinear.quantize(_model(nodes, inits), {"x": X}, dict(calibration_samples=N_CAL, evaluation_samples=0,
                                                               target="tflite", activation_type="int16"))
    out = convert(qm.model)
    m = G.ModelT.InitFromPackedBuf(out.data, 0)
    sg, names = m.subgraphs[0], {v: k for k, v in S.OP.items()}
    tc = [o for o in sg.operators if names.get(m.operatorCodes[o.opcodeIndex].builtinCode) == "TRANSPOSE_CONV"]
    assert len(tc) == 1 and [sg.tensors[i].type for i in tc[0].inputs] == [
        S.TENSOR_TYPE["int32"], S.TENSOR_TYPE["int8"], S.TENSOR_TYPE["int16"], S.TENSOR_TYPE["int64"]][:len(tc[0].inputs)]
    x = X[N_CAL:]
    for resolver, mode in (("ref", "litert_ref"), ("auto", "litert_xnnpack")):
        y, z = _litert(out.data, x, resolver), IntegerModel(qm.model, mode).run({"x": x})["y"]
        assert y.shape == z.shape and np.array_equal(y, z), \
            f"{resolver}: {int((y != z).sum())} of {y.size} differ from run_integer {mode}"
