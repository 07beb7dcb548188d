"""16x8 kernels (int16 activations, int8 weights) against LiteRT 2.3.0's reference kernels, one operator at a time,
over every int16 input value where the operator is elementwise (issue 14 item 4). Whole 16x8 models are covered by
``tests/tflite/test_export.py`` (bits=16)."""

from __future__ import annotations

import numpy as np
import pytest

from qlinear.kernels import activation as A

LP = pytest.importorskip("litert_peer")
if not LP.available():  # pragma: no cover
    pytest.skip("ai-edge-litert is not installed (pip install '.[test]')", allow_module_level=True)

ALL16 = np.arange(-32768, 32768, dtype=np.int16)


def _unary(op: str, x: np.ndarray, s_in: float) -> np.ndarray:
    mb = LP.Builder()
    ti = mb.tensor([x.size], np.int16, s_in, 0)
    to = mb.tensor([x.size], np.int16, 1 / 32768, 0)
    mb.op(getattr(LP.S.BuiltinOperator, op), [ti], [to], version=3)
    return LP.run(mb.build([ti], [to]), [x], "ref")


def test_sigmoid_table_is_litert_own():
    """The table was read out of LiteRT by this probe: TANH at scale 8/3*2^-14 returns table[i] - 32768 at 128 i."""
    x = np.array([128 * i for i in range(255)], np.int16)
    assert np.array_equal(_unary("TANH", x, 8 / 3 * 2.0**-14) + 32768, A.SIGMOID_TABLE_U16[:255])


# power-of-two scales (the kernels' special case), scales near it, and general ones
SCALES = [2.0**-12, 2.0**-11, 2.0**-13, 1 / 3000, 0.00037, 0.0011, 8 / 3 * 2.0**-14, 2.0**-12 * 1.0005]


@pytest.mark.parametrize("s_in", SCALES)
def test_logistic16_every_input(s_in):
    assert np.array_equal(A.logistic16(ALL16, s_in=s_in), _unary("LOGISTIC", ALL16, s_in))


@pytest.mark.parametrize("s_in", SCALES)
def test_tanh16_every_input(s_in):
    assert np.array_equal(A.tanh16(ALL16, s_in=s_in), _unary("TANH", ALL16, s_in))


@pytest.mark.parametrize("s_in", [1e-4, 3e-4, 2.0**-10, 0.002])
@pytest.mark.parametrize("depth", [1, 7, 64, 1000])
def test_softmax16(s_in, depth):
    rng = np.random.default_rng(depth)
    x = rng.integers(-32768, 32768, (16, depth)).astype(np.int16)
    x[0] = 0  # equal logits
    x[1, :] = -32768
    x[1, 0] = 32767  # one dominant logit
    mb = LP.Builder()
    ti = mb.tensor(x.shape, np.int16, s_in, 0)
    to = mb.tensor(x.shape, np.int16, 1 / 32768, 0)
    opt = LP.S.SoftmaxOptionsT()
    opt.beta = 1.0
    mb.op(LP.S.BuiltinOperator.SOFTMAX, [ti], [to], LP.S.BuiltinOptions.SoftmaxOptions, opt, version=3)
    y = LP.run(mb.build([ti], [to]), [x], "ref")
    assert np.array_equal(A.softmax16(x, s_in=s_in), y)


def test_checked_log2():
    assert A.checked_log2(2.0**-12) == (-12, True)
    assert A.checked_log2(1 / 3000)[1] is False
