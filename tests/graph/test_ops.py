"""The operator registry (qlinear.graph.ops) is the single source of operator knowledge, and it is consistent with
the integer executor (kernels.steps.KERNELS) and the TFLite exporter (tflite.export.WRITERS) that dispatch on it."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import qlinear
from qlinear.graph import ops
from qlinear.graph.ops.spec import ROLES, Registry
from qlinear.kernels.steps import KERNELS
from qlinear.tflite.export import VERSION8, VERSION16, WRITERS

SRC = Path(qlinear.__file__).parent
OPS_DIR = SRC / "graph" / "ops"

#: literals of >= 3 op types that stay outside the registry, with the reason
ALLOWED = {
    ("ptq/targets.py", frozenset({"Conv", "Gemm", "MatMul"})):
        "check_tflite's bias rule: only the FIXED/SAME_SCALE tables of ptq/targets.py moved in this change",
}

#: ops the TFLite exporter writes that run_integer runs in float (DQ -> op -> Q): exact for both, no kernel needed
FLOAT_IN_RUN_INTEGER = {
    "Pad": "zero padding of integers is DQ -> Pad -> Q with the same parameters: the float path is exact",
}


def _onnx_op_types() -> set[str]:
    names = {s.name for s in onnx.defs.get_all_schemas_with_history()}
    return names | set(ops.REGISTRY.specs)  # contrib ops the registry knows (FastGelu, BiasGelu...)


def _op_type_literals(path: Path, known: set[str]) -> list[tuple[int, frozenset[str]]]:
    """(line, op types) of every tuple/list/set literal or dict-key set naming >= 3 ONNX op types in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        names = {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in known}
        if len(names) >= 3:
            out.append((node.lineno, frozenset(names)))
    return out


def test_registry_is_the_only_operator_table():
    known = _onnx_op_types()
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if OPS_DIR in path.parents:
            continue
        rel = path.relative_to(SRC).as_posix()
        for line, names in _op_type_literals(path, known):
            if (rel, names) not in ALLOWED:
                found.append(f"{rel}:{line} {sorted(names)}")
    assert not found, "operator tables outside qlinear.graph.ops (add them to the registry): " + "; ".join(found)


def test_allow_list_is_not_stale():
    known = _onnx_op_types()
    for (rel, names), reason in ALLOWED.items():
        assert names in {n for _, n in _op_type_literals(SRC / rel, known)}, f"{rel}: no longer needed ({reason})"


def test_scan_finds_tables(tmp_path):
    """The scan itself works: tuples, sets and dict keys of op types are reported; two names or other words are not."""
    f = tmp_path / "m.py"
    f.write_text('A = ("Conv", "Gemm", "MatMul")\nB = {"Relu": 1, "Clip": 2, "Tanh": 3}\nC = ("Conv", "Gemm")\n'
                 'D = ("alpha", "beta", "gamma")\nE = {"Add", "Sub", "Mul"}\n')
    found = _op_type_literals(f, _onnx_op_types())
    assert [line for line, _ in found] == [1, 2, 5]


def test_every_exported_op_has_builtins_a_writer_and_a_kernel():
    assert ops.TFLITE_EXPORTED
    for t in ops.TFLITE_EXPORTED:
        s = ops.spec(t)
        assert s.tflite_builtins, t
        assert s.tflite_writer in WRITERS, (t, s.tflite_writer)
        for b in s.tflite_builtins:
            assert b in VERSION8 and b in VERSION16, (t, b)
        if t not in FLOAT_IN_RUN_INTEGER:
            assert s.kernel in KERNELS, f"{t} is exported to TFLite but has no integer kernel"
    assert set(FLOAT_IN_RUN_INTEGER) <= set(ops.TFLITE_EXPORTED)
    assert all(ops.kernel_of(t) is None for t in FLOAT_IN_RUN_INTEGER)


def test_dispatch_tables_match_the_registry():
    used_kernels = {s.kernel for s in ops.REGISTRY.specs.values() if s.kernel}
    used_writers = {s.tflite_writer for s in ops.REGISTRY.specs.values() if s.tflite_writer}
    assert used_kernels == set(KERNELS)
    assert used_writers == set(WRITERS)
    assert set(ops.INTEGER_KERNEL_OPS) == {t for t, s in ops.REGISTRY.specs.items() if s.kernel in KERNELS}


def test_every_kernel_family_is_known_to_plan():
    """What run_integer runs on integers is what the plan quantizes: weighted layers with their weights, data movement
    inheriting its input's encoding, fused clamps, and no non-float op."""
    for t in ops.INTEGER_KERNEL_OPS:
        s = ops.spec(t)
        assert t not in ops.NON_FLOAT_OPS, t
        if s.kernel == "linear":
            assert t in ops.WEIGHTED and t in ops.FUSING_PRODUCERS and s.weight_input == 1
        if s.kernel == "move":
            assert t in ops.DATA_MOVEMENT
        if s.kernel == "clamp":
            assert t in ops.FUSABLE_ACT and t in ops.QDQ_FUSED_ACTIVATIONS
    assert set(ops.QDQ_FUSED_ACTIVATIONS) <= set(ops.FUSABLE_ACT)
    assert set(ops.WEIGHTED) <= set(ops.FUSING_PRODUCERS)
    for t in ops.WEIGHTED:
        assert ops.spec(t).weight_input == 1


def test_fixed_outputs():
    """16-bit fixed outputs are the 16x8 kernels' 1/32768, 0 (kernels.run checks exactly that), and every op with a
    16-bit fixed output has an int8 one; int8 fixed outputs cover the int8 range [qmin, qmax] of the function."""
    assert set(ops.FIXED_TFLITE16) <= set(ops.FIXED_TFLITE)
    for t, (s, z) in ops.FIXED_TFLITE16.items():
        assert (s, z) == (1 / 32768, 0), t
    for t, (s, z) in ops.FIXED_TFLITE.items():
        assert -128 <= z <= 127 and s > 0, t
    # Sigmoid/Softmax output [0, 1): zero point -128 puts 0 at qmin; Tanh (-1, 1): symmetric around 0
    assert ops.FIXED_TFLITE["Sigmoid"][1] == -128 and ops.FIXED_TFLITE["Tanh"][1] == 0
    assert math.isclose(ops.FIXED_TFLITE["Tanh"][0] * 128, 1.0)


def test_registry_refuses_duplicates_and_unknown_roles():
    r = Registry()
    r.add("x", ("A", "B"), ("weighted",))
    with pytest.raises(ValueError, match="registered twice"):
        r.add("y", "A")
    with pytest.raises(ValueError, match="unknown operator roles"):
        r.add("x", "C", ("wieghted",))
    with pytest.raises(ValueError, match="unknown operator role"):
        ops.with_role("no_such_role")
    assert all(ops.with_role(role) is not None for role in ROLES)


def test_views_are_registry_lookups():
    from qlinear.graph import plan, qdq
    from qlinear.ptq import targets
    from qlinear.tflite.export import SUPPORTED

    assert plan.WEIGHTED is ops.WEIGHTED and plan.DATA_MOVEMENT is ops.DATA_MOVEMENT
    assert targets.FIXED_TFLITE is ops.FIXED_TFLITE and targets.SAME_SCALE_TFLITE is ops.SAME_SCALE_TFLITE
    assert targets.FIXED_TFLITE16 is ops.FIXED_TFLITE16
    assert qdq.ACTIVATIONS is ops.QDQ_FUSED_ACTIVATIONS and SUPPORTED is ops.TFLITE_EXPORTED
    assert set(ops.SAME_SCALE_TFLITE) <= set(ops.REGISTRY.specs) and set(ops.FAMILIES) == {
        s.family for s in ops.REGISTRY.specs.values()}


@pytest.mark.parametrize("op, kw, idx, rank, want", [
    ("Conv", {}, 1, 4, (0, 1)), ("ConvTranspose", {}, 1, 4, (1, 0)), ("Gemm", {"transB": 1}, 1, 2, (0, 1)),
    ("Gemm", {}, 1, 2, (1, 0)), ("Gemm", {}, 0, 2, (0, 1)), ("Gemm", {"transA": 1}, 0, 2, (1, 0)),
    ("MatMul", {}, 1, 3, (2, 1)), ("MatMul", {}, 0, 3, (1, 2)), ("Conv", {}, 0, 4, None), ("Relu", {}, 0, 2, None),
])
def test_input_axes(op, kw, idx, rank, want):
    node = helper.make_node(op, ["a", "b", "c"][:max(idx + 1, 2)], ["y"], **kw)
    assert ops.input_axes(node, idx, rank) == want
    if idx == 1 and want is not None:
        assert ops.weight_channel_axis(node, rank) == want[0]


def test_weight_axes_agree_with_onnx_reference():
    """The channel axis the registry gives Gemm/MatMul weights is the output-feature axis ONNX computes along."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    for op, kw, wshape in (("Gemm", {"transB": 1}, (5, 3)), ("Gemm", {}, (3, 5)), ("MatMul", {}, (3, 5))):
        node = helper.make_node(op, ["x", "w"], ["y"], **kw)
        ax = ops.weight_channel_axis(node, 2)
        w = rng.standard_normal(wshape).astype(np.float32)
        x = rng.standard_normal((2, 3)).astype(np.float32)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
        ev = ReferenceEvaluator(helper.make_model(g))
        y0 = ev.run(None, {"x": x})[0]
        w2 = w.copy()
        np.moveaxis(w2, ax, 0)[1] = 0  # zero output channel 1: only output feature 1 changes
        g2 = helper.make_graph([node], "g", list(g.input), list(g.output), [numpy_helper.from_array(w2, "w")])
        y1 = ReferenceEvaluator(helper.make_model(g2)).run(None, {"x": x})[0]
        changed = np.flatnonzero(np.any(y0 != y1, axis=0))
        assert changed.tolist() == [1], (op, kw)


def test_graph_layer_imports_no_upper_layer():
    """The registry describes operators; kernels and TFLite writers register against it, never the reverse."""
    upper = ("qlinear.kernels", "qlinear.tflite", "qlinear.ptq", "qlinear.cli")
    bad = []
    for path in sorted((SRC / "graph").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            bad += [f"{path.relative_to(SRC)}: {n}" for n in names if n.startswith(upper)]
    assert not bad, bad


def test_no_private_name_crosses_packages():
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        pkg = path.relative_to(SRC).parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qlinear."):
                other = node.module.split(".")[1]
                for a in node.names:
                    if a.name.startswith("_") and other != pkg:
                        bad.append(f"{path.relative_to(SRC)}: {node.module}.{a.name}")
    assert not bad, bad


def test_constant_clamp():
    """Max/Min of a tensor and a constant is a clamp (fused like Relu by the plan); of two tensors it is not."""
    assert ops.is_constant_clamp(helper.make_node("Max", ["x", "lo"], ["y"]), {"lo"})
    assert ops.is_constant_clamp(helper.make_node("Min", ["x", "hi"], ["y"]), {"hi"})
    assert not ops.is_constant_clamp(helper.make_node("Max", ["x", "z"], ["y"]), {"lo"})
    assert not ops.is_constant_clamp(helper.make_node("Add", ["x", "lo"], ["y"]), {"lo"})
