"""LiteRT's integer LEAKY_RELU (qlinear.kernels.leaky_relu) against LiteRT 2.3.0 itself: every int8 input value and
a sweep of int16 ones, for slopes below and above 1 and scales that make both multipliers shift left, right and not
at all, in the reference kernels and the default resolver."""

from __future__ import annotations

import numpy as np
import pytest

from qlinear.kernels.leaky_relu import leaky_relu, xnnpack_leaky_relu, xnnpack_scales
from qlinear.tflite import schema as S

litert = pytest.importorskip("ai_edge_litert.interpreter")
RESOLVERS = {"ref": litert.OpResolverType.BUILTIN_REF, "auto": litert.OpResolverType.AUTO}


def _one_op(dtype: str, n: int, s_in: float, zp_in: int, s_out: float, zp_out: int, alpha: float) -> bytes:
    md = S.ModelDef()
    md.tensors.append(S.Tensor("x", [1, n], dtype, 0, S.Quant([s_in], [zp_in])))
    md.tensors.append(S.Tensor("y", [1, n], dtype, 0, S.Quant([s_out], [zp_out])))
    md.operators.append(S.Operator(md.opcode("LEAKY_RELU", 1), [0], [1], "LeakyReluOptions", {"alpha": alpha}))
    md.inputs, md.outputs = [0], [1]
    return S.serialize(md)


PARAMS = [(0.05, 0, 0.04, -100, 0.2), (0.1, -20, 0.03, -120, 0.01), (0.9, 10, 0.5, -128, 0.3),
          (0.003, 3, 0.002, 0, 0.1), (0.02347, -128, 0.0213, -127, 0.2), (0.3, 60, 0.28, -90, 1.7),
          (1.7, 0, 0.9, -128, 0.2), (0.0117, 12, 0.0117, -3, 0.333),
          (0.001, 0, 0.5, 0, 0.2), (0.05, 3, 0.04, 1, 0.001)]   # the last two: scales XNNPACK refuses


def _litert(model: bytes, x: np.ndarray, resolver: str) -> np.ndarray:
    it = litert.Interpreter(model_content=model, experimental_op_resolver_type=RESOLVERS[resolver])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("resolver", sorted(RESOLVERS))
@pytest.mark.parametrize("s_in, zp_in, s_out, zp_out, alpha", PARAMS)
def test_every_int8_value_matches_litert(s_in, zp_in, s_out, zp_out, alpha, resolver):
    x = np.arange(-128, 128, dtype=np.int8)[None]
    y = _litert(_one_op("int8", 256, s_in, zp_in, s_out, zp_out, alpha), x, resolver)
    fn = leaky_relu if resolver == "ref" else xnnpack_leaky_relu
    want = fn(x, s_in=s_in, zp_in=zp_in, s_out=s_out, zp_out=zp_out, alpha=alpha)
    assert np.array_equal(y, want), f"{int((y != want).sum())} of 256 differ"


@pytest.mark.parametrize("resolver", sorted(RESOLVERS))
@pytest.mark.parametrize("s_in, s_out, alpha", [(0.001, 0.0008, 0.2), (3e-5, 2e-5, 0.01), (0.02, 0.03, 1.3)])
def test_int16_values_match_litert(s_in, s_out, alpha, resolver):
    x = np.arange(-32768, 32768, 7, dtype=np.int16)[None]
    y = _litert(_one_op("int16", x.size, s_in, 0, s_out, 0, alpha), x, resolver)
    want = leaky_relu(x, s_in=s_in, zp_in=0, s_out=s_out, zp_out=0, alpha=alpha, qmin=-32768, qmax=32767)
    assert np.array_equal(y, want), f"{int((y != want).sum())} of {x.size} differ"


def test_xnnpack_takes_the_ordinary_scales_and_refuses_the_tiny_ones():
    assert all(xnnpack_scales(a, c, e) is not None for a, _, c, _, e in PARAMS[:8])
    assert xnnpack_scales(0.001, 0.5, 0.2) is None and xnnpack_scales(0.05, 0.04, 0.001) is None


def test_close_to_the_real_function():
    s_in, zp_in, s_out, zp_out, alpha = 0.05, 0, 0.04, -100, 0.2
    x = np.arange(-128, 128)
    xr = (x - zp_in) * s_in
    want = np.clip(np.round(np.where(xr >= 0, xr, alpha * xr) / s_out) + zp_out, -128, 127)
    assert np.abs(leaky_relu(x, s_in=s_in, zp_in=zp_in, s_out=s_out, zp_out=zp_out, alpha=alpha) - want).max() <= 1
