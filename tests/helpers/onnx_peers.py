"""Run single-node ONNX models on the two independent peers: onnx.reference and ONNX Runtime.

ORT's Python ``run()`` rejects ml_dtypes arrays and cannot return 4/2-bit tensors as NumPy, so inputs
and outputs go through OrtValues: sub-byte tensors as ONNX-packed bytes (ORT keeps the same layout in
memory), float8/bfloat16 as their bit patterns with the ONNX element type.
"""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PACKED = {TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1, TensorProto.INT2, TensorProto.UINT2}


def onnx_type(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def single_node_model(op: str, inputs: dict[str, np.ndarray | None], out_type: int, out_shape,
                      opset: int = 25, domain: str = "", n_out: int = 1, out_types=None, **attrs) -> onnx.ModelProto:
    names, vis = [], []
    for name, a in inputs.items():
        if a is None:
            names.append("")
            continue
        names.append(name)
        vis.append(helper.make_tensor_value_info(name, onnx_type(a), list(a.shape)))
    outs = [f"y{i}" for i in range(n_out)]
    out_types = out_types or [out_type] * n_out
    ovis = [helper.make_tensor_value_info(o, t, out_shape if i == 0 else None) for i, (o, t) in enumerate(zip(outs, out_types))]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, outs, domain=domain, **{k: v for k, v in attrs.items() if v is not None})
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    m = helper.make_model(helper.make_graph([node], "g", vis, ovis), opset_imports=opsets)
    m.ir_version = helper.find_min_ir_version_for([o for o in m.opset_import if o.domain in ("", "ai.onnx")])
    return m


def run_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]


_SESSIONS: dict[bytes, object] = {}


def _session(model: onnx.ModelProto, threads: int = 1):
    import onnxruntime as ort

    key = model.SerializeToString()
    sess = _SESSIONS.get(key)
    if sess is None:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 4
        so.intra_op_num_threads = threads
        sess = ort.InferenceSession(key, so, providers=["CPUExecutionProvider"])
        if len(_SESSIONS) > 256:
            _SESSIONS.clear()
        _SESSIONS[key] = sess
    return sess


def to_ortvalue(a: np.ndarray):
    import onnxruntime as ort

    t = onnx_type(a)
    a = np.ascontiguousarray(a)
    if t in PACKED:
        data = np.frombuffer(numpy_helper.from_array(a).raw_data, np.uint8)
        ov = ort.OrtValue.ortvalue_from_shape_and_type(list(a.shape), t, "cpu", 0)
        if data.size:
            ctypes.memmove(ov.data_ptr(), data.ctypes.data, data.size)
        return ov, data
    if a.dtype.type.__module__ == "numpy":
        return ort.OrtValue.ortvalue_from_numpy(a), a
    view = a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(view, t), view


def from_ortvalue(ov) -> np.ndarray:
    t = TensorProto()
    t.data_type = ov.element_type()
    t.dims.extend(ov.shape())
    t.raw_data = ctypes.string_at(ov.data_ptr(), ov.tensor_size_in_bytes())
    return numpy_helper.to_array(t)


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1) -> list[np.ndarray]:
    sess = _session(model, threads)
    keep = {k: to_ortvalue(v) for k, v in feeds.items()}
    return [from_ortvalue(o) for o in sess.run_with_ort_values(None, {k: v[0] for k, v in keep.items()})]


def constant_value(m: onnx.ModelProto, name: str) -> np.ndarray:
    """The value of tensor ``name`` of ``m`` computed by ONNX Runtime from initializers only (e.g. a weight's DQ):
    the nodes it depends on, run as their own model."""
    import onnxruntime as ort

    keep, nodes = {name}, []
    for n in reversed(m.graph.node):
        if any(o in keep for o in n.output):
            nodes.insert(0, n)
            keep |= set(n.input)
    g = helper.make_graph(nodes, "w", [], [onnx.ValueInfoProto(name=name)],
                          [t for t in m.graph.initializer if t.name in keep])
    mm = helper.make_model(g, opset_imports=m.opset_import)
    return ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaN payloads and -0 included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def values_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype and shape, equal values with NaN == NaN (sub-byte canonical bit patterns may differ)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.itemsize == 1 and a.dtype.kind not in "iu":  # float8/float4: compare bit patterns masked
        return np.array_equal(a.astype(np.float32), b.astype(np.float32), equal_nan=True) and \
            np.array_equal(np.signbit(a.astype(np.float32)), np.signbit(b.astype(np.float32)))
    return np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True) and \
        np.array_equal(np.signbit(a.astype(np.float64)), np.signbit(b.astype(np.float64)))
