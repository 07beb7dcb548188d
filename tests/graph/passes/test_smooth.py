"""Smooth on its own, given per-channel statistics measured here with ONNX Runtime: the smoothed model computes the
same (ONNX Runtime), the smoothed activation's channel ranges are flatter, the division folds into a LayerNorm read
only by the smoothed MatMuls and is an explicit Mul otherwise."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper
from onnx_peers import run_ort
from tiny_models import encoder_data, make_model, tiny_encoder

from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.passes.smooth import Smooth, smoothable

RNG = np.random.default_rng(3)


def absmax(m: onnx.ModelProto, names: list[str], feeds: dict) -> dict[str, np.ndarray]:
    """Per-channel (last axis) max |x| of ``names`` over ``feeds``, with ONNX Runtime (names exposed as outputs)."""
    mm = onnx.ModelProto()
    mm.CopyFrom(m)
    for n in names:
        mm.graph.output.append(onnx.ValueInfoProto(name=n))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(mm.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = sess.run(names, feeds)
    return {n: np.abs(x.reshape(-1, x.shape[-1])).max(0) for n, x in zip(names, outs)}


def smooth(m: onnx.ModelProto, stats: dict) -> tuple[onnx.ModelProto, int]:
    model = to_ir(m)
    p = Smooth(stats)
    p(model)
    out = to_proto(model)
    onnx.checker.check_model(out)
    return out, p.smoothed


def test_encoder_same_function_flatter_channels():
    m, d = tiny_encoder(), encoder_data(n=16)
    targets = smoothable(to_ir(m).graph)
    assert set(targets) == {"h", "h2"}
    stats = absmax(m, list(targets), d)
    out, n = smooth(m, stats)
    assert n == 2
    # h and h2 feed the residual too: explicit Muls, the MatMuls read the smoothed tensors
    assert sum(x.op_type == "Mul" for x in out.graph.node) == sum(x.op_type == "Mul" for x in m.graph.node) + 2
    np.testing.assert_allclose(run_ort(out, d)[0], run_ort(m, d)[0], rtol=1e-4, atol=1e-4)
    after = absmax(out, ["h_smoothed", "h2_smoothed"], d)
    for x in ("h", "h2"):
        spread = stats[x].max() / stats[x].min()
        assert after[f"{x}_smoothed"].max() / after[f"{x}_smoothed"].min() < spread


def ln_two_matmuls(shared: bool = False) -> onnx.ModelProto:
    """x -> LayerNorm -> h -> MatMul(Wa), MatMul(Wb) -> Add -> y; channel 0 of x is an outlier."""
    k, n = 8, 6
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["h"], name="ln", axis=-1),
             helper.make_node("MatMul", ["h", "Wa"], ["a"], name="mma"),
             helper.make_node("MatMul", ["h", "Wa" if shared else "Wb"], ["c"], name="mmb"),
             helper.make_node("Add", ["a", "c"], ["y"], name="add")]
    g = (1 + np.arange(k) * 3.0).astype(np.float32)
    inits = {"g": g, "b": RNG.standard_normal(k).astype(np.float32),
             "Wa": RNG.standard_normal((k, n)).astype(np.float32), "Wb": RNG.standard_normal((k, n)).astype(np.float32)}
    if shared:
        del inits["Wb"]
    return make_model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [4, k])],
                      [helper.make_tensor_value_info("y", T.FLOAT, [4, n])], inits, opset=17)


def test_division_folds_into_layernorm():
    m = ln_two_matmuls()
    feeds = {"x": RNG.standard_normal((4, 8)).astype(np.float32)}
    out, n = smooth(m, absmax(m, ["h"], feeds))
    assert n == 1 and [x.op_type for x in out.graph.node] == [x.op_type for x in m.graph.node]
    assert not np.array_equal(out.graph.initializer[0].raw_data, m.graph.initializer[0].raw_data)   # gamma / s
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(m, feeds)[0], rtol=1e-4, atol=1e-4)


def test_shared_weight_or_missing_statistics_not_smoothed():
    m = ln_two_matmuls(shared=True)
    feeds = {"x": RNG.standard_normal((4, 8)).astype(np.float32)}
    out, n = smooth(m, absmax(m, ["h"], feeds))
    assert n == 0 and out.SerializeToString() == m.SerializeToString()
    m = ln_two_matmuls()
    out, n = smooth(m, {})
    assert n == 0 and out.SerializeToString() == m.SerializeToString()
