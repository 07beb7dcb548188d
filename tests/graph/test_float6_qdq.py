"""float6 encodings written as opset-28 Q/DQ nodes: the opset (and IR 14) rise only when a float6 encoding needs
them, the initializers hold qlinear's quantized weights in the onnx.proto 6-bit packing, and onnx.reference runs the
written model exactly as qlinear's own Q/DQ arithmetic predicts (ONNX Runtime 1.32 has no opset-28 Q/DQ)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_peers import bits_equal, run_reference
from tiny_models import make_model

import qlinear
from qlinear import graph as G
from qlinear.encodings.model import Encoding, EncodingSet
from qlinear.errors import UnsupportedError
from qlinear.graph.model import check_model


def _matmul(opset=18, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    return make_model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 6])], {"W": w}, opset=opset), w


def _encodings(wt, xt):
    return EncodingSet([
        Encoding("W", wt, scale=np.linspace(0.05, 0.3, 6), axis=1, role="param"),
        Encoding("x", xt, scale=np.array(0.125)),
    ])


@pytest.mark.parametrize("wt,xt", [("float6e2m3", "float6e3m2"), ("float6e3m2", "float6e2m3")])
def test_apply_writes_opset_28_and_reference_agrees(wt, xt):
    m, w = _matmul()
    es = _encodings(wt, xt)
    q = G.apply(es, m)
    assert [(o.domain, o.version) for o in q.opset_import if o.domain in ("", "ai.onnx")] == [("", 28)]
    assert q.ir_version == 14
    onnx.checker.check_model(q, full_check=True)
    inits = {t.name: t for t in q.graph.initializer}
    ew, ex = es.encodings
    qw = ew.quantize(w)
    assert inits["W_quantized"].data_type == ew.qtype.onnx_type
    assert inits["W_quantized"].raw_data == qlinear.pack(qw).tobytes()  # onnx.proto 6-bit packing
    assert bits_equal(numpy_helper.to_array(inits["W_quantized"]), qw)
    qn = next(n for n in q.graph.node if n.op_type == "QuantizeLinear")
    assert helper.get_attribute_value(next(a for a in qn.attribute if a.name == "output_dtype")) == ex.qtype.onnx_type
    x = (np.random.default_rng(1).standard_normal((3, 8)) * 2).astype(np.float32)
    x[0, :3] = [np.nan, 100.0, -100.0]
    y = run_reference(q, {"x": x})[0]
    want = np.matmul(ex.fake_quantize(x), ew.dequantize(qw))
    assert bits_equal(y, want.astype(np.float32))
    assert G.extract(q) == es


def test_saved_float6_model_reads_back(tmp_path):
    m, _ = _matmul()
    es = _encodings("float6e3m2", "float6e2m3")
    q = G.apply(es, m)
    check_model(q)  # initializer sizes: 48 float6 weights are 36 packed bytes
    onnx.save(q, tmp_path / "q.onnx")
    assert G.extract(str(tmp_path / "q.onnx")) == es


def test_opset_rises_only_when_needed():
    m, _ = _matmul(opset=18)
    q = G.apply(EncodingSet([Encoding("x", "int8", scale=np.array(0.1), zero_point=np.array(0))]), m)
    assert q.opset_import[0].version == 18 and q.ir_version == m.ir_version
    m28, w = _matmul(opset=28)
    m28.ir_version = 14
    q = G.apply(_encodings("float6e2m3", "float6e3m2"), m28)
    assert q.opset_import[0].version == 28 and q.ir_version == 14


def test_extract_refuses_a_nonzero_float6_zero_point():
    # a float zero point is valid ONNX (and onnx.reference applies it for float6), but an encoding of a float
    # type has none: dropping it would change the model's values, so extract refuses; a zero one is dropped
    m, _ = _matmul()
    q = G.apply(_encodings("float6e2m3", "float6e3m2"), m)
    for zval, ok in ((0.0, True), (-0.0, True), (0.5, False)):
        qq = onnx.ModelProto()
        qq.CopyFrom(q)
        z = numpy_helper.from_array(np.array(zval, ml_dtypes.float6_e3m2fn), "x_zp")
        qq.graph.initializer.append(z)
        for n in qq.graph.node:
            if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[0] in ("x", "x_quantized"):
                n.input.append("x_zp")
                for a in list(n.attribute):
                    if a.name == "output_dtype":
                        n.attribute.remove(a)
        if ok:
            assert G.extract(qq)["x"].zero_point is None
        else:
            with pytest.raises(UnsupportedError, match="x: its float6e3m2 zero point holds 0.5"):
                G.extract(qq)
