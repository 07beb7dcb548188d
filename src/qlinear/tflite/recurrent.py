"""ONNX ``LSTM`` and ``GRU`` as TFLite float islands, unrolled over their (static) time steps.

TFLite's fused ``UNIDIRECTIONAL_SEQUENCE_LSTM`` keeps its state in variable tensors and returns only the output
sequence, while an exported streaming model (silero-vad, openwakeword's wake-word heads) takes the state as an input
and returns the final ``Y_h``/``Y_c``. So each step is written out in float builtins, as the ONNX definition reads
(default activations): one ``FULLY_CONNECTED`` of the whole input sequence by ``W`` (bias ``Wb + Rb``; GRU: ``Wb``
plus the ``Rb`` of the update and reset gates), then per step a ``FULLY_CONNECTED`` of the state by ``R``, ``ADD``,
``SPLIT`` into the gates, ``LOGISTIC``/``TANH``, ``MUL``/``ADD`` for the cell and the state; ``CONCATENATION`` and
``RESHAPE`` make ``Y``, ``Y_h``, ``Y_c``. Forward, reverse and bidirectional; layout 0 (time first); an LSTM without
peepholes, clip or ``input_forget``; ``sequence_lens`` absent or the full length for every sample. Float sums run in
the kernels' order, so the island agrees with ``run_integer`` (the ONNX reference in float32) to float rounding, not
bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx

from qlinear.errors import UnsupportedError
from qlinear.graph.model import attr
from qlinear.tflite.generic import Ctx, Slot

#: gate order of the ONNX weights: LSTM i, o, f, c; GRU z, r, h
GATES = {"LSTM": 4, "GRU": 3}
DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


class _Cell:
    """The tensors of one unrolled recurrent node: new float tensors and the builtins between them."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx, self.k = ctx, 0
        self.weights: dict[str, tuple[int, int]] = {}   # key -> (weight, bias) tensor indices, written once

    def new(self, shape: tuple[int, ...]) -> Slot:
        self.k += 1
        return self.ctx.new(f"r{self.k}", shape, False)

    def fc(self, x: Slot, w: np.ndarray, b: np.ndarray | None, key: str) -> Slot:
        """``x @ w.T + b`` (FULLY_CONNECTED; the weight and bias of ``key`` written the first time)."""
        ctx = self.ctx
        if key not in self.weights:
            wi = ctx.w.tensor(f"{ctx.name}_{key}_w", list(w.shape), "float32",
                              data=np.ascontiguousarray(w, np.float32))
            bi = -1 if b is None else ctx.w.tensor(f"{ctx.name}_{key}_b", [len(b)], "float32",
                                                    data=np.asarray(b, np.float32))
            self.weights[key] = (wi, bi)
        wi, bi = self.weights[key]
        o = self.new((x.onnx_shape[0], w.shape[0]))
        ctx.op("FULLY_CONNECTED", [ctx.index(x), wi, bi], [o.index], "FullyConnectedOptions",
               fused_activation_function=0)
        return o

    def binary(self, name: str, a: Slot, b: Slot) -> Slot:
        o = self.new(tuple(np.broadcast_shapes(a.onnx_shape, b.onnx_shape)))
        self.ctx.op(name, [self.ctx.index(a), self.ctx.index(b, a)], [o.index], f"{name.title()}Options",
                    fused_activation_function=0)
        return o

    def unary(self, name: str, a: Slot) -> Slot:
        o = self.new(a.onnx_shape)
        self.ctx.op(name, [a.index], [o.index])
        return o

    def split(self, x: Slot, n: int, axis: int) -> list[Slot]:
        shape = list(x.onnx_shape)
        shape[axis] //= n
        outs = [self.new(tuple(shape)) for _ in range(n)]
        self.ctx.op("SPLIT", [self.ctx.param(f"axis{self.k}", axis), x.index], [o.index for o in outs],
                    "SplitOptions", num_splits=n)
        return outs

    def reshape(self, x: Slot, shape: tuple[int, ...], out: Slot | None = None) -> Slot:
        o = out or self.new(shape)
        self.k += 1
        self.ctx.op("RESHAPE", [x.index, self.ctx.param(f"shape{self.k}", list(shape))], [o.index], "ReshapeOptions",
                    new_shape=list(shape))
        return o

    def concat(self, xs: list[Slot], axis: int, out: Slot | None = None) -> Slot:
        if len(xs) == 1 and out is None:
            return xs[0]
        shape = list(xs[0].onnx_shape)
        shape[axis] = sum(x.onnx_shape[axis] for x in xs)
        o = out or self.new(tuple(shape))
        self.ctx.op("CONCATENATION", [x.index for x in xs], [o.index], "ConcatenationOptions", axis=axis,
                    fused_activation_function=0)
        return o


def refusal(node: onnx.NodeProto, consts: Mapping[str, np.ndarray]) -> str | None:
    """What of an ``LSTM``/``GRU`` node the unrolled form does not write (None: nothing), from the node and the
    model's constants (``consts``: name -> value): checked before any work (:mod:`qlinear.ptq.settle`) and again
    when writing."""
    op, ins = node.op_type, list(node.input) + [""] * (8 - len(node.input))
    acts = [a.decode() if isinstance(a, bytes) else a for a in attr(node, "activations", [])]
    lens = consts.get(ins[4]) if ins[4] else None
    if attr(node, "layout", 0) != 0:
        return "layout 1 (batch first)"
    if attr(node, "clip", None) is not None:
        return "a clip"
    if attr(node, "input_forget", 0):
        return "input_forget"
    if op == "LSTM" and ins[7] and (ins[7] not in consts or np.any(consts[ins[7]])):
        return "peepholes"
    if acts not in ([], DEFAULT_ACTS[op], DEFAULT_ACTS[op] * 2):
        return "activations other than the defaults"
    if any(x not in consts for x in ins[1:3]) or (ins[3] and ins[3] not in consts):
        return "weights that are not constants"
    if ins[4] and lens is None:
        return "sequence_lens that are not a constant"
    return None


def _checked(ctx: Ctx, ins: list[Slot | None]) -> tuple[int, int, int, int]:
    """Steps, batch, hidden size and directions of the node; what the unrolled form does not write is refused."""
    n, op = ctx.node, ctx.node.op_type
    x = ins[0]
    consts = {name: s.const for name, s in zip(n.input, ins) if name and s is not None and s.const is not None}
    why = refusal(n, consts)
    if why is None and len(x.onnx_shape) != 3:
        why = "an input that is not [steps, batch, features]"
    if why is None and len(ins) > 4 and ins[4] is not None and np.any(np.asarray(ins[4].const) != x.onnx_shape[0]):
        why = "sequence_lens other than the full length"
    if why:
        raise UnsupportedError(f"node {ctx.name} ({op}): the TFLite float island unrolls the default {op}; this one "
                               f"has {why}")
    d = 2 if attr(n, "direction", b"forward") in (b"bidirectional", "bidirectional") else 1
    return x.onnx_shape[0], x.onnx_shape[1], int(attr(n, "hidden_size")), d


def _state0(c: _Cell, s: Slot | None, d: int, batch: int, hidden: int) -> list[Slot]:
    """The initial state of each direction, ``[batch, hidden]`` (zeros when not given)."""
    if s is None:
        return [Slot(-1, (batch, hidden), False, np.zeros((batch, hidden), np.float32)) for _ in range(d)]
    if s.const is not None:
        return [Slot(-1, (batch, hidden), False, np.asarray(s.const, np.float32)[k]) for k in range(d)]
    parts = c.split(s, d, 0) if d > 1 else [s]
    return [c.reshape(p, (batch, hidden)) for p in parts]


def _lstm_step(c: _Cell, g: Slot, cs: Slot) -> tuple[Slot, Slot]:
    """The state and cell after one LSTM step from its gates' pre-activations ``g`` and the cell ``cs``."""
    i, o, f, cc = c.split(g, 4, 1)
    i, o, f, cc = c.unary("LOGISTIC", i), c.unary("LOGISTIC", o), c.unary("LOGISTIC", f), c.unary("TANH", cc)
    cs = c.binary("ADD", c.binary("MUL", f, cs), c.binary("MUL", i, cc))
    return c.binary("MUL", o, c.unary("TANH", cs)), cs


def _gru_step(c: _Cell, xg: Slot, h: Slot, r_w: np.ndarray, r_b: np.ndarray, lbr: bool, key: str) -> Slot:
    """One GRU step from the input's projection ``xg`` (bias: ``Wb``, and ``Rb`` of z and r) and the state ``h``."""
    hidden = h.onnx_shape[1]
    xz, xr, xh = c.split(xg, 3, 1)
    hz, hr = c.split(c.fc(h, r_w[:2 * hidden], None, key + "zr"), 2, 1)
    z, r = c.unary("LOGISTIC", c.binary("ADD", xz, hz)), c.unary("LOGISTIC", c.binary("ADD", xr, hr))
    if lbr:
        rh = c.binary("MUL", r, c.fc(h, r_w[2 * hidden:], r_b[2 * hidden:], key + "h"))
    else:
        rh = c.fc(c.binary("MUL", r, h), r_w[2 * hidden:], r_b[2 * hidden:], key + "h")
    hh = c.unary("TANH", c.binary("ADD", xh, rh))
    one_minus_z = c.binary("SUB", Slot(-1, (1,), False, np.ones(1, np.float32)), z)
    return c.binary("ADD", c.binary("MUL", one_minus_z, hh), c.binary("MUL", z, h))


def _direction(c: _Cell, x: Slot, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: Slot, cs: Slot | None,
               k: int, reverse: bool, lbr: bool) -> tuple[list[Slot], Slot, Slot | None]:
    """Direction ``k`` over the steps of ``x`` (``[steps * batch, input]``): the state at every step in time order,
    the last state and (LSTM) the last cell."""
    op = c.ctx.node.op_type
    hidden, n_in, batch = r.shape[1], w.shape[0], h.onnx_shape[0]
    steps = x.onnx_shape[0] // batch
    xb = b[:n_in] + b[n_in:] if op == "LSTM" else np.concatenate([b[:2 * hidden] + b[n_in:n_in + 2 * hidden],
                                                                   b[2 * hidden:n_in]])
    xw = c.fc(x, w, xb, f"W{k}")       # the input's projection for every step at once
    xgs = c.split(xw, steps, 0) if steps > 1 else [xw]
    hs: list[Slot] = list(xgs)
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        if op == "LSTM":
            h, cs = _lstm_step(c, c.binary("ADD", xgs[t], c.fc(h, r, None, f"R{k}")), cs)
        else:
            h = _gru_step(c, xgs[t], h, r, b[n_in:], lbr, f"R{k}")
        hs[t] = h
    return hs, h, cs


def recurrent(ctx: Ctx, ins: list[Slot | None]) -> None:
    """An ``LSTM`` or ``GRU`` node unrolled in float builtins (module docstring)."""
    n, op = ctx.node, ctx.node.op_type
    ins = list(ins) + [None] * (8 - len(ins))
    steps, batch, hidden, d = _checked(ctx, ins)
    c = _Cell(ctx)
    x = ctx.onnx_order(ins[0])
    x2 = c.reshape(x, (steps * batch, x.onnx_shape[2]))
    w, r = np.asarray(ins[1].const, np.float32), np.asarray(ins[2].const, np.float32)
    b = np.zeros((d, 2 * GATES[op] * hidden), np.float32) if ins[3] is None else np.asarray(ins[3].const, np.float32)
    h0 = _state0(c, ins[5], d, batch, hidden)
    c0 = _state0(c, ins[6], d, batch, hidden) if op == "LSTM" else [None] * d
    reverse = attr(n, "direction", b"forward") in (b"reverse", "reverse")
    lbr = bool(attr(n, "linear_before_reset", 0))
    runs = [_direction(c, x2, w[k], r[k], b[k], h0[k], c0[k], k, reverse or k == 1, lbr) for k in range(d)]
    outs = list(n.output) + [""] * 3
    if outs[0]:   # Y [steps, directions, batch, hidden]
        per_t = [c.concat([c.reshape(hs[t], (1, 1, batch, hidden)) for hs, _, _ in runs], 1) for t in range(steps)]
        if steps > 1:
            c.concat(per_t, 0, ctx.out(0, False))
        else:
            c.reshape(per_t[0], (steps, d, batch, hidden), ctx.out(0, False))
    for k in (1, 2):   # Y_h, Y_c [directions, batch, hidden]
        if not outs[k] or (k == 2 and op != "LSTM"):
            continue
        if d == 1:
            c.reshape(runs[0][k], (1, batch, hidden), ctx.out(k, False))
        else:
            c.concat([c.reshape(run[k], (1, batch, hidden)) for run in runs], 0, ctx.out(k, False))


#: emitter name (the operator registry's ``OpSpec.tflite_island``) -> the emitter
RECURRENT: dict[str, Callable[[Ctx, list[Slot | None]], None]] = {"recurrent": recurrent}

__all__ = ["RECURRENT", "recurrent", "refusal"]
