"""Loading a model to quantize, for every mode: read, check (opset 7..25, ``onnx.checker``), normalize."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from qlinear.errors import GraphError
from qlinear.graph.model import check_model, checker_message, load_model, opset
from qlinear.graph.passes.normalize import normalize, text_notes


def load_checked(model: Any, notes: list[str] | None = None, *, load_external: bool = True,
                 given: list[onnx.ModelProto] | None = None, keep: bool = False,
                 read: list[onnx.ModelProto] | None = None) -> tuple[onnx.ModelProto, str]:
    """The model and a label naming it, after :func:`~qlinear.graph.model.check_model` and the opset check (7..25),
    normalized (:func:`qlinear.graph.passes.normalize.normalize`: opset below 13 upgraded, Constant weights made
    initializers...); what normalizing changed is appended to ``notes``. ``load_external=False`` reads a model file
    without its external data (weight-only quantization reads the weights one at a time); ``given`` receives the
    model as read when normalizing upgraded its opset, ``read`` too when its text needed no repair (then it is the
    model exactly as read: no second read or copy of it). ``keep``: a model file's result is also kept for the next
    call on the same unchanged file, which takes it instead of reading and checking again (the command line settles
    its options on the model, then quantizes it): the same model, not a copy (194 MB of tree ensemble copied in
    0.7 s), so the caller keeping it must not change it."""
    key = _file_key(model, load_external)
    hit = _KEPT.pop(key, None) if key is not None else None
    if hit is None:
        hit = _load_checked(model, load_external)
    m, changed, original, repaired = hit
    label = str(model) if isinstance(model, (str, Path)) else "model"
    refuse_quantized(m, label)
    refuse_unknown_ops(m, label)
    if keep and key is not None:
        _KEPT.clear()  # one model at a time
        _KEPT[key] = (m, list(changed), original, repaired)
    if given is not None and original is not None:
        given.append(original)
    if read is not None and original is not None and not repaired:
        read.append(original)
    if notes is not None:
        notes += changed
    return m, label


def refuse_quantized(m: onnx.ModelProto, label: str) -> None:
    """A model that is quantized already (QuantizeLinear/DequantizeLinear, ONNX Runtime's integer operators) is a
    :class:`GraphError` before any work: quantizing it again would put a grid on values that are on one."""
    from qlinear.graph.ops import QUANTIZED_MODEL_OPS

    found = [n.op_type for n in m.graph.node if n.op_type in QUANTIZED_MODEL_OPS]
    if not found:
        return
    kinds = ", ".join(f"{found.count(k)} {k}" for k in dict.fromkeys(found))
    producer = f" (producer {m.producer_name} {m.producer_version})".replace("  ", " ") if m.producer_name else ""
    qdq = any(k in ("QuantizeLinear", "DequantizeLinear") for k in found)
    raise GraphError(f"{label}: the model is quantized already{producer}: {kinds}; qlinear quantizes float models: "
                     "give the float model it was made from (qlinear debug FLOAT.onnx THIS.onnx compares the two"
                     + (", qlinear encodings extract reads its parameters)" if qdq else
                        "; ONNX Runtime's integer operators keep their parameters as inputs, not Q/DQ pairs: "
                        "qlinear encodings extract finds none)"))


#: domains whose operators ``onnx.checker`` checks against their schemas
_CHECKED_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})


def refuse_unknown_ops(m: onnx.ModelProto, label: str) -> None:
    """A node of another domain (``com.microsoft``, a custom one) that is neither a function of the model nor an
    operator ONNX Runtime has is a :class:`GraphError` before any work: qlinear runs the model in ONNX Runtime to
    calibrate it, and a written model must load there. ONNX Runtime's operator list is read only when such a node
    exists (it takes 0.08 s)."""
    from qlinear.graph.model import all_nodes

    local = {(f.domain, f.name) for f in m.functions}
    other = [n for n in all_nodes(m.graph) if n.domain not in _CHECKED_DOMAINS and (n.domain, n.op_type) not in local]
    if not other:
        return
    known = _ort_ops()
    for n in other:
        if (n.domain, n.op_type) not in known:
            which = f"node {n.name!r}" if n.name else "an unnamed node"
            raise GraphError(f"{label}: {which} is {n.domain}:{n.op_type}, an operator ONNX Runtime does "
                             "not have and the model does not define as a function; qlinear runs the model in "
                             "ONNX Runtime to calibrate it: give the model with that operator expressed in ONNX "
                             "operators (or as a function in the model)")


def _ort_ops() -> set[tuple[str, str]]:
    """(domain, operator) of every operator schema ONNX Runtime registers."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ortc

    return {(s.domain, s.name) for s in ortc.get_all_operator_schema()}


_KEPT: dict[tuple, tuple[onnx.ModelProto, list[str], onnx.ModelProto | None, bool]] = {}


def _file_key(model: Any, load_external: bool) -> tuple | None:
    """What identifies a model file's content for :func:`load_checked`'s ``keep`` (None: not a file)."""
    if not isinstance(model, (str, Path)):
        return None
    try:
        st = Path(model).stat()
    except OSError:
        return None
    return str(Path(model).resolve()), st.st_mtime_ns, st.st_size, load_external


def _load_checked(model: Any, load_external: bool) -> tuple[onnx.ModelProto, list[str], onnx.ModelProto | None,
                                                           bool]:
    """Read, check and normalize ``model``: the model, the notes of what normalizing changed, the model as read
    when normalizing upgraded its opset (else None) and whether text in it was repaired (then in place)."""
    label = str(model) if isinstance(model, (str, Path)) else "model"
    m = load_model(model, load_external=load_external)
    ops = opset(m)
    if ops and not 7 <= ops <= 25:  # before onnx.checker, whose complaints about an old opset would not say this
        raise GraphError(f"{label}: opset {ops} is outside the supported range 7..25; re-export the model at "
                         "opset 13 or newer")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer) and not load_external:
        _check_file(Path(model), label)  # external data not loaded: onnx.checker resolves it beside the file
    else:
        check_model(m, label)
    original = m if ops < 13 else None
    text = text_notes(m, label)  # before normalizing (which then finds nothing to repair): in place, in ``original``
    m, changed = normalize(m, label, copy=False)  # an upgrade makes a new model: ``original`` keeps the one read
    return m, text + changed, original, bool(text)


def _check_file(p: Path, label: str) -> None:
    """``onnx.checker`` on the model file ``p`` (external data checked where it is), as a :class:`GraphError`
    worded as :func:`~qlinear.graph.model.check_model`'s."""
    try:
        onnx.checker.check_model(str(p))
    except Exception as e:  # noqa: BLE001 - ValidationError and protobuf errors
        raise GraphError(f"{label}: invalid ONNX model: {checker_message(e)}") from None


def model_dir(model: Any) -> Path | None:
    """The folder of a model given as a path (where its external data is), else ``None``."""
    return Path(model).parent if isinstance(model, (str, Path)) else None


__all__ = ["load_checked", "model_dir"]
