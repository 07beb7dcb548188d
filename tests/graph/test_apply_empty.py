"""``apply`` of an empty encoding set (a model with nothing to quantize: luscinia's 194 MB tree ensemble) is the model
with the encodings' metadata: it no longer reads the model into ``onnx_ir``, shape-infers it and writes it back
(seconds for luscinia) to insert nothing."""

from __future__ import annotations

import onnx
from tiny_models import lgbm_classifier

from qlinear.encodings import EncodingSet
from qlinear.graph import bridge
from qlinear.graph.load import load_checked


def test_applying_no_encoding_does_not_read_the_model_into_the_ir(monkeypatch):
    m = load_checked(lgbm_classifier())[0]
    dup = onnx.ModelProto()
    dup.CopyFrom(m)
    dup.opset_import.add(domain="", version=13)   # twice, as some exporters write it: once in the result
    via_ir = bridge.apply(EncodingSet(()), dup)

    def boom(*a, **k):
        raise AssertionError("to_ir called")

    monkeypatch.setattr(bridge, "to_ir", boom)
    got = bridge.apply(EncodingSet(()), dup)
    assert got == via_ir and [o.domain for o in got.opset_import].count("") == 1
    assert got.metadata_props[0].key == bridge.META_KEY and dup.metadata_props == []
