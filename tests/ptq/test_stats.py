"""The one statistics pass (qlinear.ptq.stats): accumulators against NumPy on the whole data at once, and the
streaming pass against onnx.reference evaluating the model sample by sample."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from tiny_models import make_model

from qlinear.calibration import Grouping, make_observer
from qlinear.ptq.data import load_dataset, model_inputs
from qlinear.ptq.stats import ChannelMean, Gram, accumulate
from qlinear.ptq.stats.session import Session
from qlinear.ptq.stats.stream import fetched


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(1, 6), st.integers(0, 1000))
def test_gram_and_mean_equal_numpy_on_all_batches(sizes, k, seed):
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal((b, 3, k)).astype(np.float32) for b in sizes]
    g, mean = Gram(), ChannelMean()
    for x in batches:
        g.update(x)
        mean.update(x)
    rows = np.concatenate([x.reshape(-1, k) for x in batches]).astype(np.float64)
    assert g.rows == len(rows)
    np.testing.assert_allclose(g.matrix, rows.T @ rows, rtol=1e-4, atol=1e-4)
    allx = np.concatenate(batches).astype(np.float64)
    np.testing.assert_allclose(mean.mean, allx.mean(axis=(0, 2)), rtol=1e-5, atol=1e-6)


def _model():
    w = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], {"W": w})


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_one_pass_feeds_every_accumulator_of_graph_inputs_and_inner_tensors(batch_size):
    m = _model()
    x = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)
    ds = load_dataset({"x": x}, model_inputs(m))
    inputs = ["x"]
    watched = ["x", "h", "y"]
    obs = {t: make_observer("minmax", Grouping()) for t in watched}
    grams = {t: Gram() for t in ("x", "h")}
    accs = {t: [obs[t]] + ([grams[t]] if t in grams else []) for t in watched}
    seen = []
    sess = Session(m, fetched(inputs, watched), level="basic")
    fetch = accumulate(sess, ds, 2, 9, batch_size, accs, inputs=inputs, progress=seen.append)
    assert fetch == ["h", "y"] and sum(seen) == 7 and len(seen) == -(-7 // batch_size)
    ref = ReferenceEvaluator(m)
    rows = {t: [] for t in watched}
    for i in range(2, 9):
        h, y = ref.run(["h", "y"], {"x": x[i:i + 1]})
        for t, v in (("x", x[i:i + 1]), ("h", h), ("y", y)):
            rows[t].append(v)
    for t in watched:
        a = np.concatenate(rows[t]).astype(np.float64)
        np.testing.assert_allclose(obs[t].min, a.min(), rtol=1e-6)
        np.testing.assert_allclose(obs[t].max, a.max(), rtol=1e-6)
        if t in grams:
            np.testing.assert_allclose(grams[t].matrix, a.T @ a, rtol=1e-4, atol=1e-5)
            assert grams[t].rows == 7


def test_fetch_batches_size_the_rest_by_the_first_sample() -> None:
    """The statistics passes run the first sample alone, then as many samples per call (at most batch_size) as keep
    the fetched bytes under the limit; small tensors keep batch_size; the cuts cover every sample once, in order."""
    import numpy as np

    from qlinear.ptq.data import Dataset
    from qlinear.ptq.stats.batching import FetchBatches

    x = np.arange(23, dtype=np.float32).reshape(23, 1)
    ds = Dataset(23, None, "t", get=lambda i: {"x": x[i:i + 1]})
    for per_sample, limit, want in ((10, 35, 3), (1000, 35, 1), (1, 10 ** 6, 8)):
        cuts, seen = FetchBatches(8, limit), []
        for feed in cuts.batches(ds, 0, 23):
            n = ds.batch_len(feed)
            cuts.fetched([np.zeros(per_sample * n, np.uint8)], n)
            seen.append(feed["x"][:, 0].astype(int).tolist())
        assert [len(s) for s in seen[1:-1]] == [want] * (len(seen) - 2) and len(seen[0]) == 1
        assert sum(seen, []) == list(range(23))
    plain = FetchBatches(8, None)
    assert [ds.batch_len(f) for f in plain.batches(ds, 0, 23)] == [8, 8, 7]
