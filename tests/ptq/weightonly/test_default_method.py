"""The weight-only method when none is given (:func:`qlinear.ptq.weightonly.api.default_method`): per-block weights
get ``mse`` (its scales are the search's) without data and ``aag+gptq`` with data, named in a note; a given method,
per-channel and LPBQ weights are left as they are."""

import numpy as np
import pytest
from tiny_models import lm_data, tiny_lm

import qlinear
from qlinear.ptq.algorithms.grids import padded, params, quantize_rtn

WO = {"activation_type": "float", "weight_type": "int4"}


def _methods(qm):
    return {r["weight"]: r["method"] for r in qm.streamed.weight_stats()}


def test_no_data_default_is_the_mse_scale_search_never_worse_than_round_to_nearest():
    qm = qlinear.quantize(tiny_lm(), None, {**WO, "weights": "per-block", "block_size": 16})
    assert qm.config.weight_method == "mse"
    assert any(n.startswith("weight_method mse (the default without data") for n in qm.notes)
    assert set(_methods(qm).values()) == {"mse"}
    for r in qm.streamed.weight_stats():
        assert r["sqnr_db"] >= r["rtn_sqnr_db"] - 1e-9  # the search keeps round to nearest where nothing is better
    assert any(r["sqnr_db"] > r["rtn_sqnr_db"] for r in qm.streamed.weight_stats())
    # the scales written are the search's, not round to nearest's
    w = np.ascontiguousarray(qm.streamed.tensors.array("mlp.up.weight").T)  # [N, K]
    want = quantize_rtn(w, 4, 16, "full", method="mse").scale
    np.testing.assert_array_equal(np.asarray(qm.encodings["mlp.up.weight"].scale, np.float32).T, want)
    assert not np.array_equal(want, params(padded(w, 16), 4, "full")[0])


def test_data_default_is_aag_gptq():
    qm = qlinear.quantize(tiny_lm(), lm_data(n=8), {**WO, "weights": "per-block", "block_size": 16,
                                                    "calibration_samples": 6, "evaluation_samples": 2})
    assert qm.config.weight_method == "aag+gptq"
    assert any(n.startswith("weight_method aag+gptq (the default with data") for n in qm.notes)


@pytest.mark.parametrize("cfg", [{"weights": "per-block", "block_size": 16, "weight_method": "minmax"},
                                 {"weights": "per-block", "block_size": 64},
                                 {"weights": "per-channel"}, {"weights": "lpbq", "block_size": 16}])
def test_given_method_per_channel_and_lpbq_keep_round_to_nearest(cfg):
    qm = qlinear.quantize(tiny_lm(), None, {**WO, **cfg})
    assert qm.config.w_method == "minmax"
    assert set(_methods(qm).values()) == {"minmax"}
    assert not any(n.startswith("weight_method ") for n in qm.notes)
