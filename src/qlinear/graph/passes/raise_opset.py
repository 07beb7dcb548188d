"""Raise the default-domain opset of a model to at least a given version, as one ``onnx_ir`` pass.

The conversion is ``onnx.version_converter`` (it adapts every node whose operator changed between the versions; it
works on protos only, so this pass crosses the proto boundary once, and only when the opset must change). A model at
the version or above is left alone.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx import helper

from qlinear.errors import GraphError
from qlinear.graph.ir import to_ir, to_proto

_MODEL_FIELDS = ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string")


class RaiseOpset(ir.passes.InPlacePass):
    """Bring the default-domain opset to ``version`` when it is lower (:class:`GraphError` when the converter
    cannot)."""

    def __init__(self, version: int) -> None:
        super().__init__()
        self.version = version

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        have = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        if have >= self.version:
            return ir.passes.PassResult(model, modified=False)
        from onnx import version_converter

        try:
            converted = version_converter.convert_version(to_proto(model), self.version)
        except Exception as e:  # noqa: BLE001 - the converter raises assorted errors
            raise GraphError(f"the encodings need opset {self.version} (the model has {have}) and onnx's version "
                             f"converter failed: {e}") from None
        if self.version >= 28:  # float6 tensors exist from IR 14 on (onnx.proto); older opsets keep the model's IR
            need_ir = helper.find_min_ir_version_for([helper.make_opsetid("", self.version)])
            converted.ir_version = max(converted.ir_version, need_ir)
        new = to_ir(converted)
        model.graph = new.graph
        for f in _MODEL_FIELDS:
            setattr(model, f, getattr(new, f))
        model.functions.clear()
        model.functions.update(new.functions)
        model.metadata_props.clear()
        model.metadata_props.update(new.metadata_props)
        model.meta.update(new.meta)
        return ir.passes.PassResult(model, modified=True)
