"""One representation per concept: the config's granularity and dtypes are core objects (``qlinear.core``), parsed
once from the user's spellings, which stay what the CLI, config files and report.json use."""

from __future__ import annotations

import numpy as np
import pytest

from qlinear.core import granularity as G
from qlinear.core.types import TABLE, Kind, int_type, qtype
from qlinear.errors import AxisError, ConfigError, DTypeError
from qlinear.graph.plan import WeightSpec
from qlinear.ptq.config import (
    ACTIVATION_TYPES,
    GRANULARITIES,
    LPBQ_SCALE_BITS,
    WEIGHT_TYPES,
    QuantizeConfig,
    granularity_name,
    granularity_of,
)
from qlinear.ptq.encode import weight_encoding
from qlinear.ptq.settle import per_channel_instead, settle

CORE_CLASSES = (G.PerTensor, G.PerAxis, G.PerBlock, G.LPBQ)


def _cfg(weights: str, **kw) -> QuantizeConfig:
    if weights == "lpbq":
        kw.setdefault("weight_type", "int4")
    return QuantizeConfig(weights=weights, **kw)


def test_every_cli_spelling_maps_to_one_core_granularity():
    expected = {"per-tensor": G.PerTensor(), "per-channel": G.PerAxis(None), "per-block": G.PerBlock(None, 16),
                "lpbq": G.LPBQ(None, 16, LPBQ_SCALE_BITS)}
    assert set(expected) == set(GRANULARITIES)
    seen = []
    for s in GRANULARITIES:
        g = _cfg(s, block_size=16).weight_granularity
        assert type(g) in CORE_CLASSES and g == expected[s]
        assert granularity_name(g) == s and granularity_of(s, 16) == g
        seen.append(g)
    assert len(set(seen)) == len(GRANULARITIES)  # distinct objects (LPBQ is not equal to PerBlock)
    assert isinstance(expected["lpbq"], G.PerBlock)  # LPBQ is blocked (its effective scale has the blocked shape)


def test_user_spelling_kept_in_files_and_dicts():
    for s in GRANULARITIES:
        cfg = QuantizeConfig.from_dict({"weights": s, "weight_type": "int4" if s == "lpbq" else "int8"})
        assert cfg.to_dict()["weights"] == s and cfg.weights == s
        assert cfg.replace(block_size=64).weight_granularity == granularity_of(s, 64)
    with pytest.raises(ConfigError, match="weights"):
        QuantizeConfig(weights="per_channel")  # the AIMET file spelling is not a config spelling
    with pytest.raises(ConfigError, match="weights"):
        granularity_of("per-row", 32)


def test_config_dtypes_are_core_types():
    for t in WEIGHT_TYPES:
        assert QuantizeConfig(weight_type=t).weight_qtype is qtype(t)
    for t in ACTIVATION_TYPES:
        cfg = QuantizeConfig(activation_type=t, weights="per-channel")
        assert cfg.activation_qtype is qtype(t) and cfg.activation_qtype in TABLE
        assert cfg.weight_only == (cfg.activation_qtype.kind is Kind.REAL) == (t == "float")


def test_int_type_is_the_table_row():
    for t in TABLE:
        if t.is_int:
            assert int_type(t.bits, t.signed) is t
    with pytest.raises(DTypeError):
        int_type(32, False)
    with pytest.raises(DTypeError):
        int_type(3, True)


def test_unbound_axis_refused_by_the_core_math():
    g = G.PerBlock(None, 4)
    with pytest.raises(AxisError):
        G.param_shape((8, 6), g)
    with pytest.raises(AxisError):
        G.layout((8, 6), G.PerAxis(None))
    assert G.param_shape((8, 6), G.with_axis(g, 1)) == (8, 2)
    assert G.with_axis(G.PerTensor(), 1) == G.PerTensor()
    assert G.with_axis(G.LPBQ(None, 4, 4), 0) == G.LPBQ(0, 4, 4)


@pytest.mark.parametrize("weights", GRANULARITIES)
@pytest.mark.parametrize("op", ["Gemm", "Conv"])
def test_weight_encoding_has_the_config_granularity(weights, op):
    """The weight encoding's scale shape resolves (core ``resolve``, the ONNX rule) to the config's granularity
    on the weight's axis; 8-bit blocked Conv weights are per-channel (settle's rule)."""
    rng = np.random.default_rng(0)
    if op == "Gemm":
        w, spec = rng.normal(size=(8, 12)), WeightSpec("w", op, "n", 0, 1)
    else:
        w, spec = rng.normal(size=(8, 12, 3, 3)), WeightSpec("w", op, "n", 0, 1)
    cfg = _cfg(weights, block_size=4)
    e = weight_encoding("w", w.astype(np.float32), spec, cfg)
    want = cfg.weight_granularity
    if per_channel_instead(cfg, op):
        want = G.PerAxis(None)
    want = G.with_axis(want, spec.block_axis if isinstance(want, G.PerBlock) else spec.channel_axis)
    scale = e.effective_scale if isinstance(want, G.LPBQ) else e.scale
    got = G.resolve(w.shape, np.shape(scale), e.axis if e.axis is not None else 0, e.block_size)
    assert got == (G.PerBlock(want.axis, want.block_size) if isinstance(want, G.LPBQ) else want)
    assert (e.int_scale is not None) == isinstance(want, G.LPBQ)
    assert e.qtype is cfg.weight_qtype


@pytest.mark.parametrize("target, asked, want", [
    ("qnn", "float", "float"),        # weight-only keeps the config spelling (not the table's float32)
    ("qnn", "int16", "uint16"), ("qnn", "int8", "uint8"), ("qnn", "float8e4m3fn", "float8e4m3fn"),
    ("tflite", "uint16", "int16"), ("tflite", "uint8", "int8"), ("ort", "int16", "int16"),
])
def test_settled_activation_types(target, asked, want):
    weight_only = {"weights": "per-block", "weight_type": "int4"} if asked == "float" else {}
    cfg = QuantizeConfig(target=target, activation_type=asked, **weight_only)
    used, notes = settle(cfg)
    assert used.activation_type == want and used.activation_qtype is qtype(want)
    changed = [n for n in notes if "CPU session has no 16-bit kernels" not in n]   # that one states a fact
    assert bool(changed) == (want != asked)  # a requested type changed only with a note


def test_lpbq_defaults_settle_to_core_types():
    used, _ = settle(QuantizeConfig(target="qnn", weights="lpbq"))
    assert used.weight_qtype is int_type(4, True) and used.activation_qtype is int_type(16, False)
    assert used.weight_granularity == G.LPBQ(None, 32, LPBQ_SCALE_BITS)
    used, notes = settle(QuantizeConfig(target="tflite", weights="per-block"))
    assert used.weight_granularity == G.PerAxis(None) and notes
