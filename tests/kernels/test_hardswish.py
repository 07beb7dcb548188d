"""LiteRT's int8 HARD_SWISH (qlinear.kernels.hardswish) against LiteRT 2.3.0 itself: every int8 input value, for
input/output scales that make the relu-ish multiplier shift left, right and not at all, in the reference kernels and
the default resolver."""

from __future__ import annotations

import numpy as np
import pytest

from qlinear.kernels.hardswish import hard_swish, hard_swish_table
from qlinear.tflite import schema as S

litert = pytest.importorskip("ai_edge_litert.interpreter")
RESOLVERS = {"ref": litert.OpResolverType.BUILTIN_REF, "auto": litert.OpResolverType.AUTO}


def _one_op(s_in: float, zp_in: int, s_out: float, zp_out: int) -> bytes:
    md = S.ModelDef()
    md.tensors.append(S.Tensor("x", [1, 256], "int8", 0, S.Quant([s_in], [zp_in])))
    md.tensors.append(S.Tensor("y", [1, 256], "int8", 0, S.Quant([s_out], [zp_out])))
    md.operators.append(S.Operator(md.opcode("HARD_SWISH", 1), [0], [1], "HardSwishOptions", {}))
    md.inputs, md.outputs = [0], [1]
    return S.serialize(md)


PARAMS = [(0.05, 0, 0.04, -100), (0.1, -20, 0.03, -120), (0.9, 10, 0.5, -128), (0.003, 3, 0.002, 0),
          (0.02347, -128, 0.0213, -127), (0.3, 60, 0.28, -90), (1.7, 0, 0.9, -128), (0.0117, 12, 0.0117, -3)]


@pytest.mark.parametrize("resolver", sorted(RESOLVERS))
@pytest.mark.parametrize("s_in, zp_in, s_out, zp_out", PARAMS)
def test_every_int8_value_matches_litert(s_in, zp_in, s_out, zp_out, resolver):
    it = litert.Interpreter(model_content=_one_op(s_in, zp_in, s_out, zp_out),
                            experimental_op_resolver_type=RESOLVERS[resolver])
    it.allocate_tensors()
    x = np.arange(-128, 128, dtype=np.int8)[None]
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"])
    want = hard_swish(x, s_in=s_in, zp_in=zp_in, s_out=s_out, zp_out=zp_out)
    assert np.array_equal(y, want), f"{int((y != want).sum())} of 256 differ"


def test_close_to_the_real_function():
    s_in, zp_in, s_out, zp_out = 0.05, 0, 0.04, -100
    t = hard_swish_table(s_in, zp_in, s_out, zp_out)
    xr = (np.arange(-128, 128) - zp_in) * s_in
    yr = xr * np.clip(xr + 3, 0, 6) / 6
    want = np.clip(np.round(yr / s_out) + zp_out, -128, 127)
    assert np.abs(t - want).max() <= 1
