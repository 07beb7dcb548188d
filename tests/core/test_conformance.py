"""Every QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear case of the ONNX backend node tests.

The cases are generated in memory by ``onnx.backend.test.case.node.collect_testcases(None)`` (onnx >= 1.23
wheels no longer ship ``backend/test/data/node``). The gotcha (notes/peers-and-style.md B.5): filtering by
*name* pattern mixes QuantizeLinear with DequantizeLinear, DynamicQuantizeLinear and QLinear* cases, so
Q/DQ cases are selected by the op type of their single node; DynamicQuantizeLinear cases, including the
three ``_expanded`` function-body variants (same inputs and expected outputs), by name.
qlinear's output must equal the expected output bit for bit.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_peers import bits_equal

import qlinear


def _arr(v):
    return numpy_helper.to_array(v) if isinstance(v, TensorProto) else np.asarray(v)


def _load():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    picked = []
    for c in cases:
        nodes = c.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in ("QuantizeLinear", "DequantizeLinear") and nodes[0].domain in ("", "ai.onnx"):
            picked.append((nodes[0].op_type, c))
        elif c.name.startswith("test_dynamicquantizelinear"):
            picked.append(("DynamicQuantizeLinear", c))
    return picked


CASES = _load()


def test_case_count():
    ops = [op for op, _ in CASES]
    assert (ops.count("QuantizeLinear"), ops.count("DequantizeLinear"), ops.count("DynamicQuantizeLinear")) == (13, 14, 6)


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("op,case", CASES, ids=[c.name for _, c in CASES])
def test_backend_case(op, case):
    inputs, expected = case.data_sets[0]
    inputs = [_arr(v) for v in inputs]
    expected = [_arr(v) for v in expected]
    if op == "DynamicQuantizeLinear":
        got = qlinear.dynamic_quantize_linear(inputs[0])
    else:
        node = case.model.graph.node[0]
        attrs = _attrs(node)
        names = list(node.input)
        feeds = dict(zip([i.name for i in case.model.graph.input], inputs))
        args = [feeds.get(n) if n else None for n in names]
        fn = qlinear.quantize_linear if op == "QuantizeLinear" else qlinear.dequantize_linear
        got = [fn(*args, **attrs)]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert bits_equal(g.reshape(e.shape), e), f"{case.name}: got {g.tolist()} expected {e.tolist()}"
