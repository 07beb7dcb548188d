"""The report runs the quantized model in the session the pipeline's load check built (ONNX Runtime's default level,
what the ``ort-int8`` engine runs) instead of building a second one: the same numbers as a session of its own."""

from __future__ import annotations

import json

import pytest

import qlinear
from qlinear.examples import DATA, MODEL
from qlinear.ptq.report import evaluate as ev
from qlinear.ptq.stats import session as sessions


def _report(qm, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    built: list[str] = []
    real = sessions.Session

    def counting(*a, **k):
        built.append(k.get("label", ""))
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(ev, "output_engine", lambda qm: "ort-int8")   # the engine that runs the load check's session
        m.setattr(sessions, "Session", counting)
        d = ev.evaluate(qm).to_dict()
    d.pop("timings")
    return json.dumps(d, sort_keys=True, default=str), built


def test_report_reuses_the_load_check_session(monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 held-out samples: the statistics pass's 16 give their float outputs, the float model's session runs 4
    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=8, evaluation_samples=20, batch_size=4))
    kept_model, kept = qm._quant_session
    assert kept_model is qm.model and isinstance(kept, sessions.Session)
    reused, built = _report(qm, monkeypatch)
    assert "the quantized model" not in built and "the float model" in built
    assert qm._quant_session is None   # taken once: its memory goes with the report's run
    fresh, built = _report(qm, monkeypatch)
    assert "the quantized model" in built
    assert reused == fresh and json.loads(fresh)["outputs"]


def test_no_reuse_for_another_engine_or_model() -> None:
    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=8, evaluation_samples=4))
    assert ev.loaded_session(qm, "onnx") is None and qm._quant_session is None   # dropped all the same
    qm._quant_session = (qm.model.__class__(), object())   # a session of another model
    assert ev.loaded_session(qm, "ort-int8") is None


def test_save_without_report_drops_the_session(tmp_path) -> None:
    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=8, evaluation_samples=4))
    assert qm._quant_session is not None
    qm.save(tmp_path / "out", report=False)
    assert qm._quant_session is None


def test_sessions_sleep_when_idle_with_the_same_outputs() -> None:
    """ONNX Runtime's worker threads do not spin by default (qlinear runs sessions beside numpy work and three at
    once in the report); the outputs are those of a spinning session."""
    import numpy as np

    qm = qlinear.quantize(MODEL, DATA, dict(calibration_samples=4, evaluation_samples=4))
    feed = next(qm.dataset.batches(0, 4, 4))
    outs = [o.name for o in qm.model.graph.output]
    got = {}
    for spin in (False, True):
        s = sessions.Session(qm.model, level="all", spin=spin)
        assert s.sess.get_session_options().get_session_config_entry(
            "session.intra_op.allow_spinning") == ("1" if spin else "0")
        got[spin] = s.run(outs, feed)
    default = sessions.Session(qm.model, level="all")
    assert default.sess.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert all(np.array_equal(a, b) for a, b in zip(got[False], got[True]))


@pytest.mark.parametrize("level", ["basic", "all"])
def test_sessions_take_large_weights_as_arrays_with_the_same_outputs(level: str, monkeypatch) -> None:
    """A model with many bytes of weights hands them to ONNX Runtime as arrays (``add_external_initializers``)
    instead of serializing them: the float and the Q/DQ model compute the very same outputs and exposed tensors."""
    import numpy as np

    from qlinear.examples.make_example import build
    from qlinear.graph.model import weights_apart

    model, x = build(channels=192)   # weights of tens of kB (int8: a few kB): taken apart
    qm = qlinear.quantize(model, {"input": x[:12]}, dict(calibration_samples=8, evaluation_samples=4))
    feed = qm.dataset.sample(8)
    for m in (qm.reference_model, qm.model):
        light, taken = weights_apart(m)
        assert taken and all(t.data_location == 1 for t in light.graph.initializer if t.name in {x.name for x in taken})
        inner = [n.output[0] for n in m.graph.node][len(m.graph.node) // 2]
        names = [o.name for o in m.graph.output] + [inner]
        got = {}
        for share in (False, True):
            monkeypatch.setattr(sessions, "SHARE_ABOVE", 0 if share else 1 << 62)
            s = sessions.Session(m, [inner], level=level)
            assert bool(s._weights) == share
            got[share] = s.run(names, feed)
        for a, b in zip(got[False], got[True]):
            np.testing.assert_array_equal(a, b)


def test_large_weights_that_nothing_reads_do_not_break_the_session(monkeypatch) -> None:
    """An initializer nothing reads (a piece of a model cut for the sensitivity runs kept all of them) in a model
    whose weights go to ONNX Runtime as arrays: ONNX Runtime dropped it, then failed to find it among the arrays
    ("Failed to find existing initializer", seen on ppocr-v4-rec's --sensitivity). Unread ones are left out; the
    outputs are those of the model as written, and a weight read only inside an If branch is still handed over."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from qlinear.graph.model import weights_apart

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    v = rng.standard_normal((64, 64)).astype(np.float32)
    branch = lambda name, t: helper.make_graph([helper.make_node("MatMul", ["x", t], [name])], name, [],  # noqa: E731
                                               [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("yt", "W"), else_branch=branch("ye", "V"))], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V"),
         numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "unused")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    light, taken = weights_apart(m)
    assert {t.name for t in taken} == {"W", "V"} and "unused" not in {t.name for t in light.graph.initializer}
    monkeypatch.setattr(sessions, "SHARE_ABOVE", 0)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    for c, want in ((True, x @ w), (False, x @ v)):
        for level in ("disable", "basic", "all"):
            got = sessions.Session(m, level=level).run(["y"], {"x": x, "c": np.array(c)})[0]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
