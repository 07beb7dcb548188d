"""The list attributes of a tree ensemble (luscinia's LightGBM classifier: 194 MB of node tables) are kept aside by
``qlinear.graph.ir.to_ir``: ``onnx_ir`` read them into Python tuples (7-9 s for luscinia, at each of two reads) for
passes that never touch such an operator. The IR node holds them empty, the proto given is left as it was, and
``to_proto`` writes the same bytes."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import lgbm_classifier

import qlinear
from qlinear.graph import ir
from qlinear.graph.ir import to_ir, to_proto
from qlinear.graph.load import load_checked

X = np.random.default_rng(0).normal(0, 1, (24, 3)).astype(np.float32)


@pytest.fixture
def short_limit(monkeypatch):
    """Every list of more than 4 values counts as long (luscinia's hold millions)."""
    monkeypatch.setattr(ir, "LONG_ATTRIBUTE", 4)


def test_long_attributes_skip_the_ir_and_come_back(short_limit):
    m = load_checked(lgbm_classifier())[0]
    before = m.SerializeToString()
    model = to_ir(m)
    assert m.SerializeToString() == before
    tree = next(n for n in model.graph if n.op_type == "TreeEnsembleClassifier")
    assert list(tree.attributes["nodes_modes"].value) == [] and list(tree.attributes["nodes_values"].value) == []
    assert list(tree.attributes["classlabels_int64s"].value) == [0, 1, 2]
    assert to_proto(model).SerializeToString() == before


def test_a_quantized_tree_model_keeps_its_tables(short_limit):
    """Target qnn quantizes the input: the Q/DQ model is built through the IR, its tables put back."""
    qm = qlinear.quantize(lgbm_classifier(), {"x": X}, dict(calibration_samples=8, evaluation_samples=8,
                                                            target="qnn"))
    assert len(qm.encodings)
    tree = next(n for n in qm.model.graph.node if n.op_type == "TreeEnsembleClassifier")
    want = next(n for n in lgbm_classifier().graph.node if n.op_type == "TreeEnsembleClassifier")
    assert tree.attribute == want.attribute
