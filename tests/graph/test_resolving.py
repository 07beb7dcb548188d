"""The graph layer's side of encodings: ``qlinear.graph.resolve`` / ``load_encodings`` give files without axes the
model's axes (checked against the axes AIMET itself wrote into its 2.0.0 files of the same model), and
``validate``/``apply``/``extract`` are exported from ``qlinear.graph``."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qlinear import encodings as E
from qlinear import graph as G
from qlinear.errors import EncodingError, GraphError
from qlinear.graph import bridge


@pytest.fixture(scope="module")
def golden(shared_dir):
    return shared_dir / "aimet-golden"


@pytest.mark.parametrize("case", ["per_channel_tf", "blockwise_tf", "lpbq_tf"])
def test_resolve_gives_the_axes_aimet_wrote_in_2_0_0(golden, case):
    tiny = golden / "tiny_model.onnx"
    legacy = E.load(golden / f"aimet-onnx-2.42.0_{case}_v1.0.0.encodings")
    aimet2 = E.load(golden / f"aimet-onnx-2.42.0_{case}_v2.0.0.encodings")  # AIMET states the axes here
    assert any(not e.resolved for e in legacy)
    got = G.resolve(legacy, tiny)
    assert all(e.resolved for e in got)
    common = [e for e in aimet2.params if e.name in got and e.granularity != "per_tensor"]
    assert common
    for e in common:
        assert got[e.name].axis == e.axis, e.name
        assert got[e.name] == G.resolve(aimet2, tiny)[e.name], e.name
    assert G.load_encodings(golden / f"aimet-onnx-2.42.0_{case}_v1.0.0.encodings", tiny) == got


def test_resolve_tells_params_from_activations_in_2_0_0(golden):
    tiny = golden / "tiny_model.onnx"
    es = E.load(golden / "aimet-onnx-2.42.0_per_tensor_tf_v2.0.0.encodings")
    m = onnx.load(tiny)
    inits = {i.name for i in m.graph.initializer}
    got = G.resolve(es, m)
    assert {e.name for e in got.params} == {e.name for e in got if e.name in inits}
    assert {e.name for e in got.activations} == {e.name for e in got if e.name not in inits}


def test_resolve_accepts_proto_path_and_bytes_and_leaves_the_model_alone(golden):
    tiny = golden / "tiny_model.onnx"
    es = E.load(golden / "aimet-onnx-2.42.0_per_channel_tf_v1.0.0.encodings")
    m = onnx.load(tiny)
    before = m.SerializeToString()
    a = G.resolve(es, m)
    assert m.SerializeToString() == before
    assert a == G.resolve(es, str(tiny)) == G.resolve(es, tiny.read_bytes())
    assert G.load_encodings(io.BytesIO((golden / "aimet-onnx-2.42.0_per_channel_tf_v1.0.0.encodings").read_bytes()),
                            m) == a


def test_resolve_refuses_bad_arguments(golden, tmp_path):
    tiny = golden / "tiny_model.onnx"
    with pytest.raises(EncodingError, match=r"es must be an EncodingSet, got str"):
        G.resolve("x.encodings", tiny)
    with pytest.raises(EncodingError, match=r"model is None"):
        G.resolve(E.EncodingSet(), None)
    with pytest.raises(GraphError, match="not found"):
        G.resolve(E.EncodingSet(), tmp_path / "missing.onnx")


def test_resolve_refuses_scales_that_do_not_fit_the_model():
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    es = E.loads(E.dumps(E.EncodingSet([E.Encoding("w", "int8", scale=np.full(5, 0.1), axis=0, role="param")]),
                         "1.0.0"))
    with pytest.raises(EncodingError, match=r"w: 5 per-channel scales.*3 channels"):
        G.resolve(es, m)
    ok = G.resolve(E.loads(E.dumps(E.EncodingSet([E.Encoding("w", "int8", scale=np.full(3, 0.1), axis=0,
                                                                  role="param")]), "1.0.0")), m)
    assert ok["w"].axis == 1  # MatMul weights: the output channel is the last axis


def test_graph_exports_the_bridge():
    assert G.validate is bridge.validate and G.apply is bridge.apply and G.extract is bridge.extract
    assert G.Report is bridge.Report and G.Problem is bridge.Problem
    for name in ("resolve", "load_encodings", "validate", "apply", "extract", "check_integer"):
        assert name in G.__all__
