"""Single-operator int8 .tflite models written in pure Python (the flatbuffer object API that ai-edge-litert ships)
and run by the LiteRT interpreter under each op resolver: ``ref`` (reference kernels), ``opt`` (optimized, ruy),
``auto`` (XNNPACK delegate). Approach of ../shared/tools/litert_probe.py."""

from __future__ import annotations

import numpy as np

try:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as S
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
except ModuleNotFoundError:  # pragma: no cover - the test extra installs it
    S = None

_TT = None


def available() -> bool:
    return S is not None


def _tt():
    return {np.dtype(np.int8): S.TensorType.INT8, np.dtype(np.int32): S.TensorType.INT32,
            np.dtype(np.float32): S.TensorType.FLOAT32, np.dtype(np.uint8): S.TensorType.UINT8,
            np.dtype(np.int16): S.TensorType.INT16}


class Builder:
    def __init__(self):
        self.tensors, self.buffers, self.codes, self.ops = [], [S.BufferT()], [], []

    def tensor(self, shape, dtype, scale=None, zp=0, qdim=0, data=None):
        t = S.TensorT()
        t.name, t.shape, t.type = f"t{len(self.tensors)}", list(shape), _tt()[np.dtype(dtype)]
        if scale is not None:
            q = S.QuantizationParametersT()
            q.scale = [float(s) for s in np.atleast_1d(scale)]
            zps = [int(z) for z in np.atleast_1d(zp)]
            q.zeroPoint = zps * len(q.scale) if len(zps) == 1 else zps
            q.quantizedDimension = qdim
            t.quantization = q
        t.buffer = 0
        if data is not None:
            b = S.BufferT()
            b.data = np.ascontiguousarray(np.asarray(data, dtype)).view(np.uint8).ravel()
            self.buffers.append(b)
            t.buffer = len(self.buffers) - 1
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, code, inputs, outputs, opt_type=0, opt=None, version=1):
        keys = [(c.builtinCode, c.version) for c in self.codes]
        if (code, version) not in keys:
            oc = S.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), version
            self.codes.append(oc)
            keys.append((code, version))
        o = S.OperatorT()
        o.opcodeIndex = keys.index((code, version))
        o.inputs, o.outputs = list(inputs), list(outputs)
        o.builtinOptionsType, o.builtinOptions = opt_type, opt
        self.ops.append(o)

    def build(self, inputs, outputs) -> bytes:
        sg = S.SubGraphT()
        sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = self.tensors, inputs, outputs, self.ops, "main"
        m = S.ModelT()
        m.version, m.operatorCodes, m.subgraphs, m.buffers = 3, self.codes, [sg], self.buffers
        b = flatbuffers.Builder(1024)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def run(model: bytes, feeds: list[np.ndarray], resolver: str) -> np.ndarray:
    r = {"ref": OpResolverType.BUILTIN_REF, "opt": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
         "auto": OpResolverType.AUTO}[resolver]
    it = Interpreter(model_content=model, experimental_op_resolver_type=r, num_threads=1)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).astype(np.int64)
