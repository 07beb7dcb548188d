"""Q/DQ ONNX model -> full-integer ``.tflite`` (LiteRT), operator by operator, with the model's own integers.

The Q/DQ model must follow the TFLite int8 rules (``qlinear quantize --target tflite`` writes such models:
``tflite-int8-spec.md``): int8 (or int16) per-tensor activations, symmetric int8 per-channel weights, int32 biases
at ``s_in * s_w``. Every weight, bias, scale and zero point is copied, not recomputed, so that the ``.tflite`` and
:func:`qlinear.kernels.run_integer` compute on the same numbers.

* **Layout**: ONNX is NCHW, TFLite NHWC. Every 4-D activation becomes NHWC (the graph input too: a ``.tflite``
  takes ``[N, H, W, C]``; an input the model moves from NHWC to NCHW itself, by a Transpose ``[0, 3, 1, 2]``, is
  taken as it is: :func:`input_layout`); Conv weights OIHW become OHWI, depthwise ``[C*m, 1, kh, kw]`` become ``[1, kh, kw, C*m]``
  (quantized dimension 3); a Reshape/Flatten of a 4-D tensor with spatial extent goes through a TRANSPOSE back to
  NCHW first.
* **Operators**: Conv (regular, grouped, depthwise) -> CONV_2D / DEPTHWISE_CONV_2D; Gemm and MatMul with a constant
  weight -> FULLY_CONNECTED; Add/Sub/Mul -> ADD/SUB/MUL; AveragePool/MaxPool -> AVERAGE_POOL_2D/MAX_POOL_2D;
  GlobalAveragePool/ReduceMean -> MEAN; Reshape/Flatten/Squeeze/Unsqueeze -> RESHAPE; Concat -> CONCATENATION; Pad
  -> PAD; Softmax/Sigmoid/Tanh/HardSwish -> SOFTMAX/LOGISTIC/TANH/HARD_SWISH; Relu/Clip after an operator become its
  fused activation (RELU, RELU6, RELU_N1_TO_1), alone RELU/RELU6/RELU_N1_TO_1; graph inputs and outputs get
  QUANTIZE/DEQUANTIZE (``float_io=False``: the ``.tflite`` takes and returns the integers).
* **Padding**: TFLite convolutions and pools know only SAME and VALID; explicit ONNX pads that are neither become a
  PAD (filled with the input's zero point, i.e. real 0) before a VALID operator.

* **Also integer**: ConvTranspose -> TRANSPOSE_CONV; a MatMul of two activations -> BATCH_MATMUL; Softmax over any
  axis (TRANSPOSE to the last); data movement whose input and outputs share their parameters moves the integers
  (:data:`qlinear.tflite.generic.MOVEMENT`: TRANSPOSE, STRIDED_SLICE, SPLIT_V, GATHER, RESIZE_*).
* **Float islands** (:func:`convert` names them; ``full_integer`` refuses them): any other node, or an integer
  operator with a float operand (a constant), is written DEQUANTIZE -> float builtin(s) -> QUANTIZE
  (:data:`qlinear.tflite.generic.ISLANDS`), what ``run_integer`` computes for a node without an integer kernel.
  Integer graph inputs (ids, bytes) are ``.tflite`` inputs as they are.

Anything else raises :class:`~qlinear.errors.UnsupportedError` naming the node. Which op types export, as which
builtins and by which writer (:data:`WRITERS`) is the operator registry's (:mod:`qlinear.graph.ops`,
``OpSpec.tflite_builtins``, ``OpSpec.tflite_writer``, ``OpSpec.tflite_move``, ``OpSpec.tflite_island``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from qlinear.core import dequantize_linear
from qlinear.errors import GraphError, UnsupportedError
from qlinear.graph import ops
from qlinear.graph.model import attr, load_model
from qlinear.graph.qdq import QdqGraph, QOp, QValue, activation_name, clip_bounds, parse
from qlinear.tflite import schema as S
from qlinear.tflite.generic import ISLANDS, MOVEMENT, Ctx, Slot, pad_spec, reshape_target
from qlinear.tflite.recurrent import RECURRENT

#: operator versions LiteRT registers for int8 kernels (and for 16x8 where it differs)
VERSION8 = {"CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 5, "ADD": 2, "SUB": 2, "MUL": 2,
            "AVERAGE_POOL_2D": 2, "MAX_POOL_2D": 2, "MEAN": 2, "RESHAPE": 1, "PAD": 2, "CONCATENATION": 2,
            "SOFTMAX": 2, "LOGISTIC": 2, "TANH": 2, "QUANTIZE": 2, "DEQUANTIZE": 2, "TRANSPOSE": 2, "HARD_SWISH": 1,
            "LEAKY_RELU": 1, "RELU": 2, "RELU6": 2, "RELU_N1_TO_1": 2, "STRIDED_SLICE": 2, "SPLIT_V": 2, "GATHER": 2,
            "RESIZE_BILINEAR": 2, "RESIZE_NEAREST_NEIGHBOR": 2, "TRANSPOSE_CONV": 3, "BATCH_MATMUL": 2,
            "MIRROR_PAD": 2}
VERSION16 = {"CONV_2D": 4, "DEPTHWISE_CONV_2D": 5, "FULLY_CONNECTED": 7, "ADD": 3, "SUB": 3, "MUL": 4,
             "AVERAGE_POOL_2D": 3, "MAX_POOL_2D": 3, "MEAN": 3, "RESHAPE": 1, "PAD": 4, "CONCATENATION": 3,
             "SOFTMAX": 3, "LOGISTIC": 3, "TANH": 3, "QUANTIZE": 3, "DEQUANTIZE": 4, "TRANSPOSE": 5,
             "HARD_SWISH": 1, "LEAKY_RELU": 2, "RELU": 3, "RELU6": 3, "RELU_N1_TO_1": 3, "STRIDED_SLICE": 4,
             "SPLIT_V": 3,
             "GATHER": 6, "RESIZE_BILINEAR": 4, "RESIZE_NEAREST_NEIGHBOR": 4, "TRANSPOSE_CONV": 3,
             "BATCH_MATMUL": 3, "MIRROR_PAD": 3}

#: the op types the exporter writes: those the operator registry gives a TFLite writer (``OpSpec.tflite_writer``)
SUPPORTED = ops.TFLITE_EXPORTED


_T = Slot  # a TFLite tensor being written: its index, ONNX shape and whether it is stored NHWC


def _nhwc(shape: tuple[int, ...]) -> list[int]:
    n, c, h, w = shape
    return [n, h, w, c]


class _Writer:
    def __init__(self, qg: QdqGraph, shapes: dict[str, tuple[int, ...]], float_io: bool,
                 dtypes: dict[str, str] | None = None) -> None:
        self.qg, self.shapes, self.float_io = qg, shapes, float_io
        self.dtypes = dtypes or {}
        self.md = S.ModelDef(description="qlinear: Q/DQ ONNX -> TFLite")
        self.t: dict[str, _T] = {}   # integer tensors by the name of their integer value
        self.f: dict[str, _T] = {}   # non-quantized tensors (float islands, integer graph inputs) by ONNX name
        self.fused_acts: set[int] = set()  # ids of the activation nodes an integer writer fused
        self.islands: list[str] = []  # "node (op type)" of every float-island node

    def opmaker(self, name: str, version: int, ins: list[int], outs: list[int], options: str | None,
                values: dict[str, Any]) -> S.Operator:
        return S.Operator(self.md.opcode(name, version), ins, outs, options, values)

    # ------------------------------------------------------------------------------------------ tensors
    def tensor(self, name: str, shape: list[int], dtype: str, quant: S.Quant | None = None,
               data: np.ndarray | None = None) -> int:
        buf = 0 if data is None else self.md.add_buffer(data)
        self.md.tensors.append(S.Tensor(name, [int(d) for d in shape], dtype, buf, quant))
        return len(self.md.tensors) - 1

    def quant(self, v: QValue, dim: int = 0) -> S.Quant:
        p = v.params
        return S.Quant([float(x) for x in p.scale.reshape(-1)], [int(x) for x in p.zero_point.reshape(-1)], dim)

    def version(self, op: str, v: QValue) -> int:
        return (VERSION16 if v.params.dtype.bits == 16 else VERSION8).get(op, 1)

    def op(self, name: str, v: QValue, ins: list[int], outs: list[int], options: str | None = None,
           **values: Any) -> None:
        self.md.operators.append(S.Operator(self.md.opcode(name, self.version(name, v)), ins, outs, options,
                                            values))

    def activation(self, v: QValue, nhwc: bool, shape: tuple[int, ...]) -> _T:
        """The TFLite tensor of integer value ``v`` (created on first use)."""
        if v.name in self.t:
            return self.t[v.name]
        tshape = _nhwc(shape) if nhwc else list(shape)
        idx = self.tensor(v.float_name or v.name, tshape, v.params.dtype.name, self.quant(v))
        self.t[v.name] = _T(idx, tuple(shape), nhwc)
        return self.t[v.name]

    def input_of(self, op: QOp, i: int) -> _T:
        v = op.inputs[i]
        if v is None or v.name not in self.t:
            raise UnsupportedError(f"node {op.name} ({op.op}): input {i} ({op.node.input[i]!r}) is not an integer "
                                   "tensor of the model; the TFLite export needs a full-integer Q/DQ model "
                                   "(qlinear quantize --target tflite)")
        return self.t[v.name]

    def output_of(self, op: QOp, nhwc: bool) -> _T:
        if op.output is None:
            raise UnsupportedError(f"node {op.name} ({op.op}): its output is not quantized; the TFLite export needs "
                                   "a QuantizeLinear after every operator (quantize_outputs=True)")
        shape = self.shapes.get(op.node.output[0]) or self.shapes.get(op.output.float_name)
        if shape is None:
            raise GraphError(f"node {op.name}: the shape of {op.node.output[0]!r} is unknown (shape inference)")
        return self.activation(op.output, nhwc and len(shape) == 4, shape)

    # ------------------------------------------------------------------------------------------ ops
    def fused(self, op: QOp) -> int:
        """The fused activation of ``op``; a clamp with other bounds whose integer bounds on the output's grid are a
        fused activation's (``Clip(x, 1e-10)`` clamps the integers as RELU does) is that activation."""
        if op.act is None:
            return S.ACTIVATION["NONE"]
        if op.act != "CLIP":
            return S.ACTIVATION[op.act]
        p = op.output.params if op.output is not None else None
        if p is not None and p.per_tensor and p.dtype.is_int:
            def ints(lo: float, hi: float) -> tuple[int, int]:
                def q(f: float) -> int:   # TFLite's CalculateActivationRangeQuantized: TfLiteRound, ties away
                    v = np.float32(f) / np.float32(p.s)
                    return p.z + int(np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)))
                return (max(int(p.dtype.qmin), q(lo)) if np.isfinite(lo) else int(p.dtype.qmin),
                        min(int(p.dtype.qmax), q(hi)) if np.isfinite(hi) else int(p.dtype.qmax))

            got = ints(*op.act_bounds)
            for name, bounds in (("NONE", (-np.inf, np.inf)), ("RELU", (0.0, np.inf)), ("RELU6", (0.0, 6.0)),
                                 ("RELU_N1_TO_1", (-1.0, 1.0))):
                if ints(*bounds) == got:
                    return S.ACTIVATION[name]
        raise UnsupportedError(f"node {op.name}: the clamp {op.act_bounds} after it is not a TFLite fused "
                               "activation (RELU, RELU6, RELU_N1_TO_1) on its output's integer grid")

    def padding(self, op: QOp, x: _T, k: tuple[int, int], stride: tuple[int, int],
                dil: tuple[int, int], pads: list[int]) -> tuple[str, _T]:
        """SAME, VALID, or VALID after an explicit PAD (module docstring); ``pads`` of the 2-D form."""
        node = op.node
        ap = attr(node, "auto_pad", b"NOTSET")
        ap = ap.decode() if isinstance(ap, bytes) else ap
        h, w = x.onnx_shape[2], x.onnx_shape[3]
        same = []
        for size, kk, s, d in ((h, k[0], stride[0], dil[0]), (w, k[1], stride[1], dil[1])):
            out = -(-size // s)
            total = max((out - 1) * s + (kk - 1) * d + 1 - size, 0)
            same.append((total // 2, total - total // 2))
        if ap in ("SAME_UPPER",) or (ap == "NOTSET" and pads == [same[0][0], same[1][0], same[0][1], same[1][1]]
                                      and any(pads)):
            return "SAME", x
        if ap == "VALID" or not any(pads):
            return "VALID", x
        if ap != "NOTSET":
            raise UnsupportedError(f"node {op.name}: auto_pad {ap} has no TFLite padding")
        t, lft, b, r = pads[0], pads[1], pads[2], pads[3]
        v = op.inputs[0]
        shape = (x.onnx_shape[0], x.onnx_shape[1], h + t + b, w + lft + r)
        pv = QValue(f"{v.name}__pad_{op.name}", v.params, float_name=f"{v.float_name}_padded_{op.name}")
        out = self.activation(pv, True, shape)
        pads_t = self.tensor(f"{op.name}_paddings", [4, 2], "int32",
                             data=np.array([[0, 0], [t, b], [lft, r], [0, 0]], np.int32))
        self.op("PAD", v, [x.index, pads_t], [out.index], "PadOptions")
        return "VALID", out

    def conv(self, op: QOp) -> None:
        """Conv -> [PAD,] CONV_2D or DEPTHWISE_CONV_2D; a 1-D Conv as a 2-D one of height 1 (as the TFLite converter
        writes it): TRANSPOSE + RESHAPE to ``[N, 1, L, C]`` before, RESHAPE + TRANSPOSE back after, on the integers."""
        node = op.node
        x = self.input_of(op, 0)
        w = op.inputs[1]
        rank = 0 if x.onnx_shape is None else len(x.onnx_shape)
        if w is None or w.const is None or rank not in (3, 4) or np.ndim(w.const) != rank:
            raise UnsupportedError(f"node {op.name}: only 1-D and 2-D convolutions with constant quantized weights "
                                   "export")
        one_d = rank == 3
        wq = np.asarray(w.const)[:, :, None, :] if one_d else np.asarray(w.const)
        o, cg, kh, kw = wq.shape
        c = x.onnx_shape[1]
        groups = attr(node, "group", 1)
        lead = [1] if one_d else []
        stride = tuple(lead + list(attr(node, "strides", [1] * (2 - len(lead)))))
        dil = tuple(lead + list(attr(node, "dilations", [1] * (2 - len(lead)))))
        pads = list(attr(node, "pads", [0] * (2 * (2 - len(lead)))))
        if one_d:
            pads = [0, pads[0], 0, pads[1]]
            x = self.as_height_one(op, x)
        pad, x = self.padding(op, x, (kh, kw), stride, dil, pads)
        out = self.output_of(op, True)
        if one_d:
            final, out = out, self.activation(QValue(f"{op.output.name}__2d", op.output.params,
                                                     float_name=f"{op.output.float_name}_2d"), True,
                                              (x.onnx_shape[0], o, 1, out.onnx_shape[2]))
        bias = self.bias(op, o)
        depthwise = groups == c and cg == 1 and groups > 1
        if depthwise:
            wt = wq.reshape(o, kh, kw).transpose(1, 2, 0)[None]  # [1, kh, kw, C*m]
            wi = self.tensor(w.float_name or w.name, list(wt.shape), w.params.dtype.name, self.quant(w, 3),
                             np.ascontiguousarray(wt))
            self.op("DEPTHWISE_CONV_2D", op.output, [x.index, wi, bias], [out.index], "DepthwiseConv2DOptions",
                    padding=S.PADDING[pad], stride_w=stride[1], stride_h=stride[0], depth_multiplier=o // c,
                    fused_activation_function=self.fused(op), dilation_w_factor=dil[1], dilation_h_factor=dil[0])
        else:
            wt = wq.transpose(0, 2, 3, 1)  # OHWI
            wi = self.tensor(w.float_name or w.name, list(wt.shape), w.params.dtype.name, self.quant(w, 0),
                             np.ascontiguousarray(wt))
            self.op("CONV_2D", op.output, [x.index, wi, bias], [out.index], "Conv2DOptions", padding=S.PADDING[pad],
                    stride_w=stride[1], stride_h=stride[0], fused_activation_function=self.fused(op),
                    dilation_w_factor=dil[1], dilation_h_factor=dil[0])
        if one_d:
            self.back_from_height_one(op, out, final)

    def as_height_one(self, op: QOp, x: _T) -> _T:
        """``[N, C, L]`` (stored so) as the NHWC tensor ``[N, 1, L, C]`` of a height-1 convolution."""
        v = op.inputs[0]
        n, c, ln = x.onnx_shape
        t = self.activation(QValue(f"{v.name}__nlc_{op.name}", v.params, float_name=f"{v.float_name}_nlc_{op.name}"),
                            False, (n, ln, c))
        perm = self.tensor(f"{op.name}_perm_nlc", [3], "int32", data=np.array([0, 2, 1], np.int32))
        self.op("TRANSPOSE", v, [x.index, perm], [t.index], "TransposeOptions")
        h = self.activation(QValue(f"{v.name}__h1_{op.name}", v.params, float_name=f"{v.float_name}_h1_{op.name}"),
                            True, (n, c, 1, ln))
        self.op("RESHAPE", v, [t.index, self.tensor(f"{op.name}_shape_h1", [4], "int32",
                                                    data=np.array([n, 1, ln, c], np.int32))],
                [h.index], "ReshapeOptions", new_shape=[n, 1, ln, c])
        return h

    def back_from_height_one(self, op: QOp, y: _T, final: _T) -> None:
        """The NHWC ``[N, 1, L', O]`` result of a height-1 convolution into the ``[N, O, L']`` output ``final``."""
        n, o, ln = final.onnx_shape
        v = op.output
        t = self.activation(QValue(f"{v.name}__nlo", v.params, float_name=f"{v.float_name}_nlo"), False, (n, ln, o))
        self.op("RESHAPE", v, [y.index, self.tensor(f"{op.name}_shape_nlo", [3], "int32",
                                                    data=np.array([n, ln, o], np.int32))],
                [t.index], "ReshapeOptions", new_shape=[n, ln, o])
        perm = self.tensor(f"{op.name}_perm_nol", [3], "int32", data=np.array([0, 2, 1], np.int32))
        self.op("TRANSPOSE", v, [t.index, perm], [final.index], "TransposeOptions")

    def bias(self, op: QOp, n: int) -> int:
        if len(op.node.input) < 3 or not op.node.input[2]:
            return self.zero_bias(op, n) if op.op in ("Conv", "ConvTranspose") else -1
        b = op.inputs[2]
        if b is None or b.const is None or b.params.dtype.name not in ("int32", "int64"):
            raise UnsupportedError(f"node {op.name}: its bias is not an int32 DequantizeLinear of a constant")
        bq = np.asarray(b.const).reshape(-1)
        if bq.size == 1 and n > 1:
            bq = np.full(n, bq[0], bq.dtype)
        scale = b.params.scale.reshape(-1)  # a per-tensor bias (of a per-tensor weight) stays per-tensor: XNNPACK
        q = S.Quant([float(s) for s in scale], [0] * scale.size, 0)  # refuses per-channel bias on per-tensor weights
        if op.inputs[0] is not None and op.inputs[0].params.dtype.bits == 16:  # 16x8 kernels take an int64 bias
            return self.tensor(b.float_name or b.name, [n], "int64", q, bq.astype(np.int64))
        return self.tensor(b.float_name or b.name, [n], b.params.dtype.name, q, bq.astype(b.params.dtype.storage))

    def transpose_conv(self, op: QOp) -> None:
        """ConvTranspose (group 1, no dilation, no output_padding) -> TRANSPOSE_CONV, VALID or SAME."""
        node = op.node
        x = self.input_of(op, 0)
        w = op.inputs[1]
        if w is None or w.const is None or len(x.onnx_shape) != 4 or attr(node, "group", 1) != 1 \
                or any(d != 1 for d in attr(node, "dilations", [1, 1])) or any(attr(node, "output_padding", [0, 0])):
            raise UnsupportedError(f"node {op.name}: only 2-D ConvTranspose with constant quantized weights, group 1, "
                                   "no dilation and no output_padding exports as TRANSPOSE_CONV")
        wq = np.asarray(w.const)
        _, o, kh, kw = wq.shape
        out = self.output_of(op, True)
        oh, ow = out.onnx_shape[2], out.onnx_shape[3]
        stride = tuple(attr(node, "strides", [1, 1]))
        pads = list(attr(node, "pads", [0, 0, 0, 0]))
        tot = [(x.onnx_shape[2] - 1) * stride[0] + kh - oh, (x.onnx_shape[3] - 1) * stride[1] + kw - ow]
        if tot == [0, 0] and not any(pads):
            pad = "VALID"
        elif pads == [tot[0] // 2, tot[1] // 2, tot[0] - tot[0] // 2, tot[1] - tot[1] // 2] and \
                [oh, ow] == [x.onnx_shape[2] * stride[0], x.onnx_shape[3] * stride[1]]:
            pad = "SAME"
        else:
            raise UnsupportedError(f"node {op.name}: ConvTranspose pads {pads} are neither TFLite's SAME nor VALID")
        wt = wq.transpose(1, 2, 3, 0)  # [C_in, O, kh, kw] -> [O, kh, kw, C_in]
        wi = self.tensor(w.float_name or w.name, list(wt.shape), w.params.dtype.name, self.quant(w, 0),
                         np.ascontiguousarray(wt))
        shape_t = self.tensor(f"{op.name}_output_shape", [4], "int32",
                              data=np.array(_nhwc(out.onnx_shape), np.int32))
        self.op("TRANSPOSE_CONV", op.output, [shape_t, wi, x.index, self.bias(op, o)], [out.index],
                "TransposeConvOptions", padding=S.PADDING[pad], stride_w=stride[1], stride_h=stride[0],
                fused_activation_function=self.fused(op))

    def batch_matmul(self, op: QOp) -> None:
        """A MatMul of two integer activations -> BATCH_MATMUL, in ONNX's axis order (TRANSPOSE from/to NHWC)."""
        a, b = self.input_of(op, 0), self.input_of(op, 1)
        ctx = Ctx(self, op.node, lambda k, nhwc: self.output_of(op, nhwc), op.output.params.dtype.name,
                  self.quant(op.output), lambda name: self.version(name, op.output))
        a2 = Ctx(self, op.node, None, op.inputs[0].params.dtype.name, self.quant(op.inputs[0])).onnx_order(a)
        b2 = Ctx(self, op.node, None, op.inputs[1].params.dtype.name, self.quant(op.inputs[1])).onnx_order(b)
        if op.act is not None:
            raise UnsupportedError(f"node {op.name}: BATCH_MATMUL takes no fused activation")
        ctx.store(0, lambda o: self.op("BATCH_MATMUL", op.output, [a2.index, b2.index], [o.index],
                                       "BatchMatMulOptions", adj_x=False, adj_y=False))

    def zero_bias(self, op: QOp, n: int) -> int:
        """A zero bias for a Conv without one (LiteRT's integer CONV_2D/DEPTHWISE_CONV_2D require the tensor), at
        ``s_in * s_w`` like a real one."""
        x, w = op.inputs[0], op.inputs[1]
        scale = np.float32(x.params.s) * w.params.scale.reshape(-1).astype(np.float32)
        q = S.Quant([float(s) for s in scale], [0] * scale.size, 0)
        wide = x.params.dtype.bits == 16
        return self.tensor(f"{op.name}_zero_bias", [n], "int64" if wide else "int32", q,
                           np.zeros(n, np.int64 if wide else np.int32))

    def fully_connected(self, op: QOp) -> None:
        node = op.node
        x = self.input_of(op, 0)
        w = op.inputs[1]
        if op.op == "MatMul" and w is not None and w.const is None:
            return self.batch_matmul(op)
        if w is None or w.const is None or np.asarray(w.const).ndim != 2:
            raise UnsupportedError(f"node {op.name} ({op.op}): only a constant 2-D quantized weight exports as "
                                   "FULLY_CONNECTED")
        if op.op == "MatMul" and x.nhwc:   # a 4-D input stored NHWC: back to ONNX's order on the integers first
            x = self.in_onnx_order(op, x)
        if len(x.onnx_shape) != 2 and (op.op != "MatMul" or x.nhwc or len(x.onnx_shape) < 2):
            raise UnsupportedError(f"node {op.name} ({op.op}): FULLY_CONNECTED needs a 2-D input (or a MatMul's "
                                   f"N-D input not stored NHWC) here, got {list(x.onnx_shape)}")
        wq = np.asarray(w.const)
        if op.op == "Gemm":
            if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
                raise UnsupportedError(f"node {op.name}: Gemm with transA/alpha/beta has no FULLY_CONNECTED form")
            wt = wq if attr(node, "transB", 0) else wq.T
            axis_ok = w.params.per_tensor or w.params.axis == (0 if attr(node, "transB", 0) else 1)
        else:
            wt = wq.T
            axis_ok = w.params.per_tensor or w.params.axis == 1
        if not axis_ok:
            raise UnsupportedError(f"node {op.name}: per-channel weight scales must run along the output features")
        out = final = self.output_of(op, True)
        if out.nhwc:   # a 4-D result: computed in ONNX's order, then stored NHWC as every 4-D tensor is
            v = op.output
            out = self.activation(QValue(f"{v.name}__nchw", v.params, float_name=f"{v.float_name}_nchw"), False,
                                  final.onnx_shape)
        wi = self.tensor(w.float_name or w.name, list(wt.shape), w.params.dtype.name, self.quant(w, 0),
                         np.ascontiguousarray(wt))
        bias = self.bias(op, wt.shape[0]) if op.op == "Gemm" else -1
        keep = {"keep_num_dims": True} if len(x.onnx_shape) > 2 else {}  # [.., K] -> [.., N]: MatMul's leading dims
        self.op("FULLY_CONNECTED", op.output, [x.index, wi, bias], [out.index], "FullyConnectedOptions",
                fused_activation_function=self.fused(op), **keep)
        if out is not final:
            perm = self.tensor(f"{op.name}_perm_nhwc", [4], "int32", data=np.array([0, 2, 3, 1], np.int32))
            self.op("TRANSPOSE", op.output, [out.index, perm], [final.index], "TransposeOptions")

    def in_onnx_order(self, op: QOp, x: _T) -> _T:
        """The NHWC-stored input 0 of ``op`` in ONNX's axis order (a TRANSPOSE moving its integers)."""
        v = op.inputs[0]
        t = self.activation(QValue(f"{v.name}__nchw_{op.name}", v.params, float_name=f"{v.float_name}_nchw_{op.name}"),
                            False, x.onnx_shape)
        perm = self.tensor(f"{op.name}_perm_nchw", [4], "int32", data=np.array([0, 3, 1, 2], np.int32))
        self.op("TRANSPOSE", v, [x.index, perm], [t.index], "TransposeOptions")
        return t

    def operand(self, op: QOp, i: int, other: int) -> _T:
        """Input ``i`` of an elementwise ``op``: an integer tensor, or its quantized constant operand written as a
        constant tensor broadcast to the rank of the other input (NHWC when that input is)."""
        if not _constant_operand(op, i):
            return self.input_of(op, i)
        v, ref = op.inputs[i], self.input_of(op, other)
        rank = len(ref.onnx_shape)
        q = np.asarray(v.const)
        q = q.reshape((1,) * (rank - q.ndim) + q.shape) if q.ndim < rank else q
        data = np.transpose(q, (0, 2, 3, 1)) if ref.nhwc and q.ndim == 4 else q
        idx = self.tensor(v.float_name or v.name, list(data.shape), v.params.dtype.name, self.quant(v),
                          np.ascontiguousarray(data))
        return _T(idx, tuple(q.shape), ref.nhwc and q.ndim == 4)

    def binary(self, op: QOp) -> None:
        a = self.operand(op, 0, 1) if _constant_operand(op, 0) else self.input_of(op, 0)
        b = self.operand(op, 1, 0)
        nhwc = a.nhwc or b.nhwc
        if a.nhwc != b.nhwc and (len(a.onnx_shape) == 4) == (len(b.onnx_shape) == 4):
            raise UnsupportedError(f"node {op.name}: inputs in different layouts")
        if (len(a.onnx_shape) == 4) != (len(b.onnx_shape) == 4):
            raise UnsupportedError(f"node {op.name}: broadcasting between ranks {len(a.onnx_shape)} and "
                                   f"{len(b.onnx_shape)} is not exported")
        out = self.output_of(op, nhwc)
        name, opts = _builtin(op), f"{op.op}Options"
        extra = {"pot_scale_int16": False} if op.op != "Mul" and op.output.params.dtype.bits == 16 else {}
        self.op(name, op.output, [a.index, b.index], [out.index], opts, fused_activation_function=self.fused(op),
                **extra)

    def pool(self, op: QOp) -> None:
        node = op.node
        x = self.input_of(op, 0)
        if op.op == "GlobalAveragePool":
            return self.mean(op, (2, 3), True)
        k = tuple(attr(node, "kernel_shape"))
        stride = tuple(attr(node, "strides", [1, 1]))
        if attr(node, "ceil_mode", 0) or any(d != 1 for d in attr(node, "dilations", [1, 1])):
            raise UnsupportedError(f"node {op.name}: ceil_mode/dilations have no TFLite pool")
        pad, x2 = self.padding(op, x, k, stride, (1, 1), list(attr(node, "pads", [0, 0, 0, 0])))
        if x2 is not x:
            raise UnsupportedError(f"node {op.name}: pool padding that is neither SAME nor VALID")
        if op.op == "AveragePool" and pad == "SAME" and attr(node, "count_include_pad", 0):
            raise UnsupportedError(f"node {op.name}: count_include_pad=1 differs from TFLite's SAME average pool")
        out = self.output_of(op, True)
        self.op(_builtin(op), op.output, [x.index], [out.index], "Pool2DOptions", padding=S.PADDING[pad], stride_w=stride[1],
                stride_h=stride[0], filter_width=k[1], filter_height=k[0], fused_activation_function=self.fused(op))

    def mean(self, op: QOp, axes: tuple[int, ...], keep: bool) -> None:
        x = self.input_of(op, 0)
        rank = len(x.onnx_shape)
        axes = tuple(a % rank for a in axes)
        if x.nhwc:
            axes = tuple({0: 0, 1: 3, 2: 1, 3: 2}[a] for a in axes)
        out = self.output_of(op, keep and x.nhwc)
        ai = self.tensor(f"{op.name}_axes", [len(axes)], "int32", data=np.array(sorted(axes), np.int32))
        self.op("MEAN", op.output, [x.index, ai], [out.index], "ReducerOptions", keep_dims=keep)

    def reduce_mean(self, op: QOp) -> None:
        n = op.node
        axes = attr(n, "axes")
        if axes is None and len(n.input) > 1 and n.input[1]:
            axes = [int(a) for a in np.asarray(self.qg.consts[n.input[1]]).reshape(-1)]
        if axes is None:
            raise UnsupportedError(f"node {op.name}: ReduceMean over all axes is not exported")
        self.mean(op, tuple(axes), bool(attr(n, "keepdims", 1)))

    def reshape(self, op: QOp) -> None:
        x = self.input_of(op, 0)
        shape = self.shapes.get(op.node.output[0]) or self.shapes.get(op.output.float_name if op.output else "")
        if shape is None:
            raise GraphError(f"node {op.name}: the shape of its output is unknown")
        if x.nhwc and not all(d == 1 for d in x.onnx_shape[2:]):  # back to NCHW order first
            v = op.inputs[0]
            tv = QValue(f"{v.name}__nchw", v.params, float_name=f"{v.float_name}_nchw")
            tt = self.activation(tv, False, x.onnx_shape)
            perm = self.tensor(f"{op.name}_perm", [4], "int32", data=np.array([0, 3, 1, 2], np.int32))
            self.op("TRANSPOSE", v, [x.index, perm], [tt.index], "TransposeOptions")
            x = tt
        out = self.output_of(op, len(shape) == 4)
        spatial = len(shape) == 4 and not all(d == 1 for d in shape[2:])
        # the batch dimension stays free so that LiteRT can resize the input
        const = self.qg.consts.get(op.node.input[1]) if op.op == "Reshape" and len(op.node.input) > 1 else None
        target = reshape_target(tuple(shape), x.onnx_shape, const, int(attr(op.node, "allowzero", 0)))
        if len(shape) == 4 and not spatial:   # stored NHWC
            target = [target[i] for i in (0, 2, 3, 1)]
        si = self.tensor(f"{op.name}_shape", [len(target)], "int32", data=np.array(target, np.int32))
        if not spatial:
            self.op("RESHAPE", op.output, [x.index, si], [out.index], "ReshapeOptions", new_shape=target)
            return
        # a 4-D result with spatial extent: reshaped in NCHW order, then moved to NHWC
        tv = QValue(f"{op.output.name}__nchw", op.output.params, float_name=f"{op.output.float_name}_nchw")
        tt = self.activation(tv, False, shape)
        self.op("RESHAPE", op.output, [x.index, si], [tt.index], "ReshapeOptions", new_shape=target)
        perm = self.tensor(f"{op.name}_perm_nhwc", [4], "int32", data=np.array([0, 2, 3, 1], np.int32))
        self.op("TRANSPOSE", op.output, [tt.index, perm], [out.index], "TransposeOptions")

    def concat(self, op: QOp) -> None:
        xs = [self.input_of(op, i) for i in range(len(op.inputs))]
        rank = len(xs[0].onnx_shape)
        axis = attr(op.node, "axis") % rank
        nhwc = xs[0].nhwc
        if any(t.nhwc != nhwc for t in xs):
            raise UnsupportedError(f"node {op.name}: Concat of tensors in different layouts")
        if nhwc:
            axis = {0: 0, 1: 3, 2: 1, 3: 2}[axis]
        out = self.output_of(op, nhwc)
        self.op("CONCATENATION", op.output, [t.index for t in xs], [out.index], "ConcatenationOptions", axis=axis,
                fused_activation_function=self.fused(op))

    def pad(self, op: QOp) -> None:
        x = self.input_of(op, 0)
        r = len(x.onnx_shape)

        def const(i: int) -> Any:
            return self.qg.consts.get(op.node.input[i])

        mode, pr = pad_spec(op.node, const, r, x.nhwc, op.name)
        out = self.output_of(op, x.nhwc)
        pi = self.tensor(f"{op.name}_paddings", [r, 2], "int32", data=pr)
        if mode == "reflect":
            self.op("MIRROR_PAD", op.output, [x.index, pi], [out.index], "MirrorPadOptions", mode=0)
            return
        self.op("PAD", op.output, [x.index, pi], [out.index], "PadOptions")

    def softmax(self, op: QOp) -> None:
        x = self.input_of(op, 0)
        r = len(x.onnx_shape)
        axis = attr(op.node, "axis", -1) % r
        stored = ([0, 2, 3, 1] if x.nhwc else list(range(r))).index(axis)
        if stored == r - 1:
            out = self.output_of(op, x.nhwc)
            self.op("SOFTMAX", op.output, [x.index], [out.index], "SoftmaxOptions", beta=1.0)
            return
        # SOFTMAX runs over the last axis: move the axis there and back (TRANSPOSE moves integers)
        perm = list(range(r))
        perm[stored], perm[-1] = perm[-1], perm[stored]
        t_shape = [self.md.tensors[x.index].shape[i] for i in perm]
        v = op.inputs[0]
        t_in = self.tensor(f"{op.name}_axis_last", t_shape, v.params.dtype.name, self.quant(v))
        self.op("TRANSPOSE", v, [x.index, self.tensor(f"{op.name}_perm", [r], "int32", data=np.array(perm, np.int32))],
                [t_in], "TransposeOptions")
        t_out = self.tensor(f"{op.name}_softmax", t_shape, op.output.params.dtype.name, self.quant(op.output))
        self.op("SOFTMAX", op.output, [t_in], [t_out], "SoftmaxOptions", beta=1.0)
        out = self.output_of(op, x.nhwc)
        self.op("TRANSPOSE", op.output, [t_out, self.tensor(f"{op.name}_perm_back", [r], "int32",
                                                            data=np.array(perm, np.int32))], [out.index],
                "TransposeOptions")

    def clamp(self, op: QOp) -> None:
        """A Relu/Clip not fused into the operator before it: RELU, RELU6 or RELU_N1_TO_1."""
        x = self.input_of(op, 0)
        out = self.output_of(op, x.nhwc)
        b = clip_bounds(op.node, self.qg.consts)
        name = activation_name(*b) if b is not None else "CLIP"
        if name == "CLIP":
            raise UnsupportedError(f"node {op.name}: Clip{b} is not RELU/RELU6/RELU_N1_TO_1")
        self.op(name, op.output, [x.index], [out.index])

    def identity(self, op: QOp) -> None:
        x = self.input_of(op, 0)
        out = self.output_of(op, x.nhwc)
        self.op("RESHAPE", op.output, [x.index], [out.index], "ReshapeOptions",
                new_shape=_nhwc(x.onnx_shape) if x.nhwc else list(x.onnx_shape))

    def unary(self, op: QOp) -> None:
        """LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU."""
        x = self.input_of(op, 0)
        out = self.output_of(op, x.nhwc)
        name = _builtin(op)
        if name == "HARD_SWISH" and op.output.params.dtype.bits != 8:
            raise UnsupportedError(f"node {op.name}: HARD_SWISH has int8 kernels only in LiteRT (no 16-bit kernel)")
        if name == "LEAKY_RELU":
            self.op(name, op.output, [x.index], [out.index], "LeakyReluOptions",
                    alpha=float(attr(op.node, "alpha", 0.01)))
            return
        self.op(name, op.output, [x.index], [out.index], "HardSwishOptions" if name == "HARD_SWISH" else None)

    # ------------------------------------------------------------------------------------------ float islands
    def float_in(self, name: str, n: onnx.NodeProto) -> _T:
        """The non-quantized tensor ``name`` read by ``n``: a float-island output, an integer graph input, the
        DEQUANTIZE of an integer tensor (written once), or a constant (written when an emitter uses it)."""
        if name in self.f:
            return self.f[name]
        v = self.qg.value_of_dq(name)
        if v is not None and v.const is None and v.name in self.t:
            x = self.t[v.name]
            shape = [x.onnx_shape[i] for i in (0, 2, 3, 1)] if x.nhwc else list(x.onnx_shape)
            t = _T(self.tensor(name, shape, "float32"), x.onnx_shape, x.nhwc)
            self.op("DEQUANTIZE", v, [x.index], [t.index])
            self.f[name] = t
            return t
        if v is not None and v.const is not None:
            p = v.params
            c = dequantize_linear(v.const, p.scale, p.zero_point.astype(p.dtype.storage) if p.dtype.is_int else None,
                                  axis=1 if p.axis is None else p.axis, block_size=p.block_size)
            return _T(-1, tuple(np.shape(c)), False, np.asarray(c))
        if name in self.qg.consts:
            c = np.asarray(self.qg.consts[name])
            return _T(-1, tuple(c.shape), False, c)
        raise UnsupportedError(f"node {n.name or n.output[0]} ({n.op_type}): input {name!r} is neither an integer "
                               "tensor, a float-island value nor a constant of the model")

    def island(self, n: onnx.NodeProto) -> None:
        """``n`` in float (DEQUANTIZE -> float builtin -> QUANTIZE: the QuantizeLinear after it writes the integers)."""
        key = n.name or n.output[0]
        s = ops.spec(n.op_type)
        emit = {**ISLANDS, **RECURRENT}.get(s.tflite_island or "") if s is not None else None
        if emit is None:
            raise UnsupportedError(f"node {key}: operator {n.op_type} is neither in the TFLite int8 set qlinear exports "
                                   f"({', '.join(SUPPORTED)}) nor among its float islands "
                                   f"({', '.join(ops.TFLITE_ISLANDS)})")
        ins = [self.float_in(x, n) if x else None for x in n.input]

        def out(k: int, nhwc: bool) -> _T:
            name = n.output[k]
            shape = self.shapes.get(name)
            if shape is None:
                raise GraphError(f"node {key}: the shape of {name!r} is unknown (shape inference)")
            t = _T(self.tensor(name, _nhwc(shape) if nhwc else list(shape), self.dtypes.get(name, "float32")),
                   shape, nhwc)
            self.f[name] = t
            return t

        emit(Ctx(self, n, out, self.dtypes.get(n.output[0], "float32")), ins)
        self.islands.append(f"{key} ({n.op_type})")

    def movement(self, n: onnx.NodeProto, op: QOp | None) -> bool:
        """``n`` (data movement) on the integers when its input is an integer tensor and every output is quantized
        by one QuantizeLinear with the input's parameters; False when it is not so (it then runs as a float island)."""
        g = self.qg.index
        x = op.inputs[0] if op is not None and op.inputs else None
        if x is None or x.name not in self.t or any(self.qg.value_of_dq(i) is not None for i in n.input[1:] if i):
            return False
        outs = []
        for o in n.output:
            cons = g.consumers.get(o, [])
            if len(cons) != 1 or o in g.outputs or cons[0][0].op_type != "QuantizeLinear":
                return False
            qv = self.qg.values.get(cons[0][0].output[0])
            if qv is None or not _same_params(qv, x):
                return False
            outs.append(qv)

        def out(k: int, nhwc: bool) -> _T:
            return self.activation(outs[k], nhwc, self.shapes[n.output[k]])

        ins = [self.t[x.name]] + [self.float_in(i, n) if i else None for i in n.input[1:]]
        MOVEMENT[ops.spec(n.op_type).tflite_move](Ctx(self, n, out, x.params.dtype.name, self.quant(x),
                                lambda name: self.version(name, x)), ins)
        return True

    def quantize_node(self, n: onnx.NodeProto) -> None:
        """A QuantizeLinear of a float-island value: QUANTIZE (the others are written with their operator)."""
        qv = self.qg.values.get(n.output[0])
        if qv is None or qv.name in self.t or n.input[0] not in self.f:
            return
        x = self.f[n.input[0]]
        q = self.activation(qv, x.nhwc, x.onnx_shape)
        self.op("QUANTIZE", qv, [x.index], [q.index])

    def integer_ok(self, op: QOp) -> bool:
        """``op`` exports as its integer builtin: it is in the set, its output and data inputs are integers."""
        if op.op not in SUPPORTED or op.output is None:
            return False
        kind = ops.tflite_writer_of(op.op)
        data = range(len(op.inputs)) if kind in ("binary", "concat") else (0,)
        if op.op == "MatMul" and len(op.inputs) > 1 and (op.inputs[1] is None or op.inputs[1].const is None):
            data = (0, 1)  # BATCH_MATMUL of two integer activations
        if not all(i < len(op.inputs) and op.inputs[i] is not None
                   and (op.inputs[i].name in self.t or (kind == "binary" and _constant_operand(op, i)))
                   for i in data):
            return False
        # RESHAPE, PAD and CONCATENATION move the integers: with other parameters the values must be requantized
        # (in float: a float island, as run_integer's LiteRT profiles do)
        if kind == "concat":
            return all(_same_params(v, op.output) for v in op.inputs)
        if kind == "clamp":   # a Clip of other (or computed) bounds runs as a float island
            b = clip_bounds(op.node, self.qg.consts)
            return b is not None and activation_name(*b) != "CLIP"
        return kind not in ("reshape", "identity", "pad") or _same_params(op.inputs[0], op.output)


#: TFLite writer (the operator registry's ``OpSpec.tflite_writer``) -> the :class:`_Writer` method emitting it
WRITERS = {"conv": _Writer.conv, "transpose_conv": _Writer.transpose_conv, "fully_connected": _Writer.fully_connected, "binary": _Writer.binary,
           "pool": _Writer.pool, "reduce_mean": _Writer.reduce_mean, "reshape": _Writer.reshape,
           "identity": _Writer.identity, "concat": _Writer.concat, "pad": _Writer.pad, "softmax": _Writer.softmax,
           "clamp": _Writer.clamp, "unary": _Writer.unary}


def _constant_operand(op: QOp, i: int) -> bool:
    """Input ``i`` of ``op`` is a quantized per-tensor constant (an elementwise operator's constant operand)."""
    v = op.inputs[i] if i < len(op.inputs) else None
    return v is not None and v.const is not None and v.params.per_tensor and op.op in ops.CONSTANT_OPERAND_OPS


def _same_params(a: QValue, b: QValue) -> bool:
    pa, pb = a.params, b.params
    return pa.per_tensor and pb.per_tensor and pa.dtype == pb.dtype and np.float32(pa.s) == np.float32(pb.s) \
        and pa.z == pb.z


def _builtin(op: QOp) -> str:
    """The TFLite builtin of ``op`` (the first of the registry's ``tflite_builtins``)."""
    return ops.spec(op.op).tflite_builtins[0]


def _static_shapes(m: onnx.ModelProto, batch: int) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """Static shapes and TFLite element types of every tensor (the batch dimension fixed to ``batch``)."""
    mm = onnx.ModelProto()
    mm.CopyFrom(m)
    inits = {t.name for t in mm.graph.initializer}
    for v in mm.graph.input:
        if v.name in inits:
            continue
        for i, d in enumerate(v.type.tensor_type.shape.dim):
            if not d.HasField("dim_value") or d.dim_value <= 0:
                if i != 0:
                    raise GraphError(f"input {v.name!r}: dimension {i} is dynamic; a .tflite needs a static shape "
                                     f"(fix it with --input-shape {v.name}=D0,D1,...)")
                d.ClearField("dim_param")
                d.dim_value = batch
    del mm.graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(mm, strict_mode=False, data_prop=True)
    out: dict[str, tuple[int, ...]] = {}
    types: dict[str, str] = {}
    for v in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = v.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            out[v.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
        if tt.elem_type:
            types[v.name] = _TYPES.get(tt.elem_type, "float32")
    return out, types


_TYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT32: "int32", onnx.TensorProto.INT64: "int64",
          onnx.TensorProto.BOOL: "bool", onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8",
          onnx.TensorProto.INT16: "int16"}


@dataclass
class Converted:
    """A written ``.tflite``: its bytes and the nodes that run as float islands (``"name (OpType)"``)."""

    data: bytes
    islands: list[str] = field(default_factory=list)


def export(model: Any, *, float_io: bool = True, batch: int = 1) -> bytes:
    """The ``.tflite`` bytes of a TFLite-conforming Q/DQ model (module docstring). ``batch`` fixes a dynamic batch
    dimension (LiteRT can resize it at run time)."""
    return convert(model, float_io=float_io, batch=batch).data


def convert(model: Any, *, float_io: bool = True, batch: int = 1, full_integer: bool = False) -> Converted:
    """:func:`export`, with the float islands it wrote named; ``full_integer`` refuses any float island instead."""
    qg = parse(model)
    m = qg.model
    shapes, types = _static_shapes(m, batch)
    w = _Writer(qg, shapes, float_io, types)
    _inputs(w)
    for n in m.graph.node:
        key = n.name or (n.output[0] if n.output else "")
        if n.op_type == "QuantizeLinear":
            w.quantize_node(n)
            continue
        if n.op_type in ops.QDQ_STRUCTURE or id(n) in w.fused_acts:
            continue
        op = qg.ops.get(key)
        if op is not None and w.integer_ok(op):
            WRITERS[ops.tflite_writer_of(op.op)](w, op)
            if op.act_node is not None:
                w.fused_acts.add(id(op.act_node))
            continue
        if n.op_type in ops.TFLITE_MOVED and w.movement(n, op):
            continue
        if full_integer:
            raise UnsupportedError(f"node {key} ({n.op_type}) has no integer TFLite form here and would run as a float "
                                   "island (DEQUANTIZE -> float -> QUANTIZE); drop --full-integer (full_integer) to "
                                   "allow float islands, or use target ort")
        w.island(n)
    _outputs(w)
    return Converted(S.serialize(w.md), w.islands)


def island_note(islands: list[str], shown: int = 8) -> str:
    """The note naming the float islands of a ``.tflite`` ("" when there are none)."""
    if not islands:
        return ""
    kinds = sorted({i.rsplit(" (", 1)[1].rstrip(")") for i in islands})
    return (f"target tflite: {len(islands)} node(s) run as float islands (DEQUANTIZE -> float builtin -> QUANTIZE; "
            f"--full-integer refuses them): {', '.join(kinds)}: " + ", ".join(islands[:shown])
            + (" ..." if len(islands) > shown else ""))


def _inputs(w: _Writer) -> None:
    """Graph inputs: a float input quantized by one QuantizeLinear (QUANTIZE, or the integers with ``float_io`` off);
    any other input (an integer input read by GATHER/CAST, a float input read in float) is passed through."""
    qg, m, g = w.qg, w.qg.model, w.qg.index
    for v in m.graph.input:
        if v.name in g.initializers:
            continue
        cons = g.consumers.get(v.name, [])
        qn = [n for n, _ in cons if n.op_type == "QuantizeLinear"]
        shape = w.shapes[v.name]
        nhwc = len(shape) == 4 and not moved_to_nchw(m, v.name)
        if len(qn) != 1 or len(cons) != 1 or qn[0].output[0] not in qg.values:
            dtype = w.dtypes.get(v.name, "float32")
            if dtype == "float32" and not w.float_io:
                raise UnsupportedError(f"graph input {v.name!r} must feed exactly one QuantizeLinear for integer "
                                       "inputs (float_io=False)")
            t = _T(w.tensor(v.name, _nhwc(shape) if nhwc else list(shape), dtype), shape, nhwc)
            w.f[v.name] = t
            w.md.inputs.append(t.index)
            continue
        qv = qg.values[qn[0].output[0]]
        if w.float_io:
            fi = w.tensor(v.name, _nhwc(shape) if nhwc else list(shape), "float32")
            qt = w.activation(qv, nhwc, shape)
            w.op("QUANTIZE", qv, [fi], [qt.index])
            w.md.inputs.append(fi)
        else:
            qt = w.activation(qv, nhwc, shape)
            w.md.inputs.append(qt.index)


def _outputs(w: _Writer) -> None:
    qg, m, g = w.qg, w.qg.model, w.qg.index
    for o in m.graph.output:
        p = g.producer.get(o.name)
        if o.name in w.f:  # a float-island value or a passed-through input
            w.md.outputs.append(w.f[o.name].index)
            continue
        if p is None or p.op_type != "DequantizeLinear" or p.input[0] not in qg.values or \
                p.input[0] not in w.t:
            raise UnsupportedError(f"graph output {o.name!r} must be the DequantizeLinear of an integer tensor")
        qt = w.t[p.input[0]]
        if w.float_io:
            shape = _nhwc(qt.onnx_shape) if qt.nhwc else list(qt.onnx_shape)
            fo = w.tensor(o.name, shape, "float32")
            w.op("DEQUANTIZE", qg.values[p.input[0]], [qt.index], [fo])
            w.md.outputs.append(fo)
        else:
            w.md.outputs.append(qt.index)


def moved_to_nchw(m: onnx.ModelProto, name: str) -> bool:
    """Whether the model itself moves graph input ``name`` from NHWC to NCHW: every node reading it, directly or
    through its QuantizeLinear / DequantizeLinear pair, is a Transpose with ``perm [0, 3, 1, 2]`` (a Keras or
    TensorFlow export fed images as they are). Such an input is already NHWC: the ``.tflite`` takes it as it is
    (moving it again would make a ``[N, W, C, H]`` input the user has to build)."""
    cons: dict[str, list[onnx.NodeProto]] = {}
    for n in m.graph.node:
        for i in n.input:
            cons.setdefault(i, []).append(n)
    todo, readers = [name], []
    while todo:
        for n in cons.get(todo.pop(), []):
            if n.op_type in ops.QDQ_PAIR and len(todo) + len(readers) < 16:
                todo.append(n.output[0])
            else:
                readers.append(n)
    return bool(readers) and all(n.op_type == "Transpose" and list(attr(n, "perm", [])) == [0, 3, 1, 2]
                                 for n in readers)


def input_layout(model: Any) -> dict[str, str]:
    """How each graph input is laid out in the exported ``.tflite``: ``NHWC`` for a 4-D input moved there from
    ONNX's NCHW, ``same`` for any other (one the model moves to NCHW itself is NHWC already: :func:`moved_to_nchw`)."""
    m = load_model(model)
    inits = {t.name for t in m.graph.initializer}
    return {v.name: "NHWC" if len(v.type.tensor_type.shape.dim) == 4 and not moved_to_nchw(m, v.name) else "same"
            for v in m.graph.input if v.name not in inits}


__all__ = ["SUPPORTED", "Converted", "convert", "export", "input_layout", "island_note", "moved_to_nchw"]
