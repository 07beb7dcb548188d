import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("qlinear", deadline=None, max_examples=150,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", deadline=None, max_examples=2000,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("QLINEAR_HYPOTHESIS", "qlinear"))

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared (specs, golden files, models, data); tests that need it skip when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: these tests need the shared developer folder next to the project")
    return SHARED


@pytest.fixture
def cle_relu6():
    """A model whose ReLU6 cross-layer equalization wrote as per-channel bounds, and data for it:
    ``Conv -> Max(0) -> Min(bound per channel) -> Conv`` (tests of the clamps on target ort)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng, c = np.random.default_rng(0), 8
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (c, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros((c, 1, 1), np.float32), "lo"),
             numpy_helper.from_array(rng.uniform(0.5, 3.0, (c, 1, 1)).astype(np.float32), "hi"),
             numpy_helper.from_array(rng.normal(0, 0.3, (4, c, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Max", ["c1", "lo"], ["m"], name="max"),
             helper.make_node("Min", ["m", "hi"], ["r"], name="min"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), \
        {"x": rng.normal(0, 1, (40, 3, 8, 8)).astype(np.float32)}


@pytest.fixture(scope="session")
def peer_outputs():
    """``f(model, feed)``: the outputs of ONNX Runtime at its default and at no optimization level, then of the ONNX
    reference evaluator, in one list (to check that a rewrite changes no value in any peer)."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    def run(m, feed):
        res = []
        for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
            so = ort.SessionOptions()
            so.graph_optimization_level = level
            res += ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)
        return res + list(ReferenceEvaluator(m).run(None, feed))

    return run
