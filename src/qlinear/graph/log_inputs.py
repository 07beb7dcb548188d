"""What a logarithm reads: a power or magnitude spectrum before ``10 log10``, a probability before ``log``.

A ``Log`` turns relative error into absolute error: a value ``x`` that a linear grid of step ``s`` rounds moves
``log x`` by up to ``s / 2x``, so every value within a few steps of zero comes out wrong, and a value rounded to zero
comes out as the floor the graph clips to. A spectrum spans 60 to 100 dB (10^6 to 10^10 in power): one 8-bit grid
over it (48 dB), or a 16-bit one (96 dB), leaves its quiet bins at zero. On openwakeword's ``melspectrogram.onnx``
(STFT as two ``Conv``, ``Pow`` 2, a mel ``MatMul``, ``Clip``, ``Log``) W8A8 left the dB output 29 dB off on
average, every tensor at 16 bits 14 dB off, and ONNX Runtime's ``quantize_static`` 34 dB off.

:func:`log_cones` finds, for each ``Log``, its input and the tensors it is computed from through operators that keep
the values' dynamic range (``LOG_THROUGH``: linear layers, elementwise arithmetic, powers, layout), back to a graph
input or an operator that squashes (``Relu``, ``Sigmoid``, ``Exp``...). Whether such a cone needs more than a linear
grid is a question for the calibration data (:mod:`qlinear.ptq.logs`).
"""

from __future__ import annotations

import onnx_ir as ir

from qlinear.graph.ops import LOG_THROUGH, LOGS


def _constant(v: ir.Value) -> bool:
    p = v.producer()
    return v.const_value is not None or v.is_initializer() or (p is not None and p.op_type == "Constant")


def log_cones(nodes: list[ir.Node]) -> dict[str, list[str]]:
    """For each logarithm among ``nodes`` (a graph's nodes in topological order): its input's name -> that input and
    the tensors it is computed from through ``LOG_THROUGH`` operators, nearest first (constants left out)."""
    cones: dict[str, list[str]] = {}
    for n in nodes:
        if n.op_type not in LOGS or not n.inputs or n.inputs[0] is None or not n.inputs[0].name:
            continue
        start = n.inputs[0]
        if start.name in cones:
            continue
        cone, todo, seen = [], [start], {start.name}
        while todo:
            v = todo.pop(0)
            cone.append(v.name)
            p = v.producer()
            if p is None or p.op_type not in LOG_THROUGH:
                continue
            for x in p.inputs:
                if x is not None and x.name and x.name not in seen and not _constant(x):
                    seen.add(x.name)
                    todo.append(x)
        cones[start.name] = cone
    return cones


__all__ = ["log_cones"]
