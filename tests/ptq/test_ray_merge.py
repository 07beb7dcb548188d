"""The exact merge the distributed statistics pass relies on (no Ray needed): folding the states of one batch each,
in batch order, with ``merge`` gives byte for byte the state that ``update`` batch by batch gives, for every
accumulator the pipeline uses (every calibration method's observer, channel means, Gram matrices). And the
``workers`` / ``ray_address`` options checked without Ray."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qlinear
from qlinear.calibration import Grouping, make_observer
from qlinear.calibration.observers import METHODS
from qlinear.errors import ConfigError
from qlinear.ptq.stats import ChannelMean, Gram


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.dtype.str, v.shape, v.tobytes()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _state(a) -> dict:
    """Everything an accumulator holds (arrays by dtype, shape and bytes)."""
    return {k: _plain(v) for k, v in vars(a).items() if k != "grouping"}


def _fresh(kind: str):
    if kind == "mean":
        return ChannelMean()
    if kind == "gram":
        return Gram()
    return make_observer(kind, Grouping())


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from([*METHODS, "mean", "gram"]), sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
       scales=st.lists(st.floats(1e-3, 1e3), min_size=5, max_size=5), seed=st.integers(0, 10_000))
def test_merging_one_batch_states_in_order_equals_updating(kind, sizes, scales, seed):
    rng = np.random.default_rng(seed)
    batches = [(rng.standard_normal((b, 3, 7)) * s).astype(np.float32) for b, s in zip(sizes, scales)]
    seq, merged, empty = _fresh(kind), _fresh(kind), _fresh(kind)
    for x in batches:
        seq.update(x)
        one = copy.deepcopy(empty)
        one.update(x)
        merged.merge(pickle.loads(pickle.dumps(one)))  # as the state travels back from a Ray actor
    assert _state(merged) == _state(seq)


@pytest.mark.parametrize("kind", ["gram", "mean"])
def test_merge_of_nothing_changes_nothing(kind):
    a = _fresh(kind)
    a.update(np.arange(12, dtype=np.float32).reshape(2, 2, 3))
    before = _state(a)
    a.merge(_fresh(kind))
    assert _state(a) == before


def test_bad_options_refused_in_one_line():
    with pytest.raises(ConfigError, match="ray_address: 'nowhere' is not a Ray address"):
        qlinear.QuantizeConfig(ray_address="nowhere")
    with pytest.raises(ConfigError, match="workers: expected a positive integer, got 0"):
        qlinear.QuantizeConfig(workers=0)


def test_one_worker_never_imports_ray():
    code = ("import sys, qlinear; from qlinear.examples import DATA, MODEL; "
            "qlinear.quantize(MODEL, DATA, {'calibration_samples': 4, 'evaluation_samples': 0, 'workers': 1}); "
            "print('ray' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-500:]
    assert r.stdout.strip().splitlines()[-1] == "False"
