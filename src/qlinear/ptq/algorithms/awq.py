"""AWQ (Lin et al. 2023, "AWQ: Activation-aware Weight Quantization", arXiv:2306.00978, §3.2) for blocked
weight-only quantization.

For linears ``y_i = x W_i^T`` (``W_i[N_i, K]``) that share one input ``x`` (q/k/v after one norm, gate/up), a
per-input-channel scale ``s[K]`` is moved from the input to the weights: ``x W^T = (x diag(s)^-1) (W diag(s))^T``;
quantizing ``W diag(s)`` instead of ``W`` protects the channels with large activations. The paper's search space is
``s = s_x^alpha`` with ``s_x`` the channel's average activation magnitude and ``alpha`` on a grid in ``[0, 1)``
(normalized so that ``sqrt(max(s) min(s)) = 1``, as the reference implementation does), ``alpha`` chosen by the
outputs' error

    L(s) = sum_i || Q(W_i diag(s)) (diag(s)^-1 x) - W_i x ||^2.

qlinear evaluates ``L`` without storing ``X``: with ``G = X^T X`` (the :class:`qlinear.ptq.stats.Gram` of the input,
GPTQ's Hessian) and ``dW_i = W_i - Q(W_i diag(s)) diag(s)^-1``, ``L(s) = sum_i tr(dW_i G dW_i^T)``
(:func:`output_error`). ``alpha = 0`` is ``s = 1``, round to nearest: the chosen scales are never worse than it on
``L``. ``s_x`` is the channel's root mean square ``sqrt(G_jj / T)`` (from the Gram diagonal; the paper's mean
``|x|`` needs another statistic and ranks channels alike).

The scales are folded (:func:`fold_input_scale`) into the producer of ``x`` when it is a normalization whose output
only the group's linears read (``LayerNormalization``, ``SimplifiedLayerNormalization``, ``RMSNormalization``: scale
and bias divided by ``s``; a decomposed RMSNorm's final ``Mul`` by a constant ``[K]`` weight), otherwise a ``Mul`` by
``1/s`` is inserted before the linears; the weights become ``W diag(s)`` and the Gram matrix ``diag(s)^-1 G
diag(s)^-1`` (the scaled input's), so GPTQ (``awq+gptq``) runs on the scaled problem.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.graph.ops import AFFINE_NORMS
from qlinear.ptq.algorithms.grids import FLOAT32, BlockQuant, quantize_rtn

ALPHAS = np.arange(20) / 20  #: the reference implementation's grid of 20 exponents in [0, 1)
AFFINE = (1, 2)  #: scale and (where present) bias inputs of an AFFINE_NORMS normalization (the registry's role)


def awq_scales(x_mag: np.ndarray, alpha: float) -> np.ndarray:
    """``s = s_x^alpha`` (``s_x`` clamped at 1e-4), normalized by ``sqrt(max(s) min(s))``; float32 ``[K]``."""
    s = np.maximum(np.asarray(x_mag, np.float64), 1e-4) ** float(alpha)
    s = s / np.sqrt(s.max() * s.min())
    return s.astype(np.float32)


def output_error(w: np.ndarray, wq: np.ndarray, h: np.ndarray) -> float:
    """``tr((W - W_q) G (W - W_q)^T) = ||X W^T - X W_q^T||^2`` for ``G = X^T X`` (float32 product, float64 sum)."""
    d = np.asarray(w, np.float32) - np.asarray(wq, np.float32)
    return float(np.einsum("nk,nk->", d @ np.asarray(h, np.float32), d, dtype=np.float64))


Quantizer = Callable[[np.ndarray], np.ndarray]


def rtn_quantizer(bits: int, block: int, grid: str, scale_dtype: np.dtype = FLOAT32) -> Quantizer:
    """``W -> Q(W)`` (dequantized) by round to nearest on ``grid``: the quantizer AWQ's search uses."""
    def q(w: np.ndarray) -> np.ndarray:
        bq: BlockQuant = quantize_rtn(w, bits, block, grid, scale_dtype=scale_dtype)
        return bq.dequantize()
    return q


def scaled_error(ws: Sequence[np.ndarray], h: np.ndarray, s: np.ndarray, quantize: Quantizer) -> float:
    """``L(s) = sum_i tr(dW_i G dW_i^T)``, ``dW_i = W_i - Q(W_i diag(s)) diag(s)^-1``."""
    return sum(output_error(w, quantize(w * s[None, :]) / s[None, :], h) for w in ws)


def search_scales(ws: Sequence[np.ndarray], h: np.ndarray, x_mag: np.ndarray, quantize: Quantizer,
                  alphas: np.ndarray = ALPHAS) -> tuple[np.ndarray, float, list[float]]:
    """AWQ's grid search: the scales ``s = s_x^alpha`` of ``alphas`` with the least :func:`scaled_error` for the
    weights ``ws`` (``[N_i, K]`` each) sharing one input of Gram matrix ``h`` and channel magnitudes ``x_mag``.
    Returns the scales, the chosen ``alpha`` and the error of every ``alpha``."""
    errs = [scaled_error(ws, h, awq_scales(x_mag, a), quantize) for a in alphas]
    i = int(np.argmin(errs))
    return awq_scales(x_mag, alphas[i]), float(alphas[i]), errs


def _replace(t: onnx.TensorProto, a: np.ndarray) -> None:
    """Overwrite initializer ``t`` in place with ``a`` (inline data; same name and type)."""
    new = numpy_helper.from_array(a.astype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)), t.name)
    t.CopyFrom(new)


def fold_input_scale(m: onnx.ModelProto, x: str, linears: set[str], inv_s: np.ndarray,
                     read: Callable[[str], np.ndarray]) -> str:
    """Make the linears ``linears`` (node names) read ``x diag(inv_s)`` instead of ``x``: folded into the producing
    normalization's scale (and bias) when only these linears read ``x``, else through a new ``Mul`` node. Returns
    where it went (for the run's notes)."""
    g = m.graph
    readers = [n for n in g.node if x in n.input]
    inits = {t.name: t for t in g.initializer}
    uses = {}
    for n in g.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    prod = next((n for n in g.node if x in n.output), None)
    only = all((n.name in linears) for n in readers) and x not in {o.name for o in g.output}
    k = inv_s.size
    if prod is not None and only:
        idx: tuple[int, ...] = ()
        if prod.op_type in AFFINE_NORMS and prod.output[0] == x:
            idx = tuple(i for i in AFFINE if i < len(prod.input) and prod.input[i])
        elif prod.op_type == "Mul":
            idx = tuple(i for i in (0, 1) if prod.input[i] in inits
                        and int(np.prod(inits[prod.input[i]].dims)) == k and inits[prod.input[i]].dims[-1] == k)[:1]
        if idx and all(prod.input[i] in inits and uses.get(prod.input[i]) == 1
                       and int(np.prod(inits[prod.input[i]].dims)) == k for i in idx):
            for i in idx:
                t = inits[prod.input[i]]
                a = read(t.name).astype(np.float32)
                _replace(t, a * inv_s.reshape(a.shape))
            return f"folded into {prod.op_type} {prod.name or prod.output[0]}"
    first = min(i for i, n in enumerate(g.node) if n.name in linears)
    y, c = f"{x}_awq", f"{x}_awq_inv_scale"
    dt = _float_type(readers, inits)
    g.initializer.append(numpy_helper.from_array(inv_s.astype(onnx.helper.tensor_dtype_to_np_dtype(dt)), c))
    g.node.insert(first, onnx.helper.make_node("Mul", [x, c], [y], name=f"{x}_awq_mul"))
    for n in g.node:
        if n.name in linears:
            for j, i in enumerate(n.input):
                if i == x:
                    n.input[j] = y
    return "a Mul inserted"


def _float_type(readers: list, inits: dict) -> int:
    """The element type of ``x``: the type of the weights its linears read (float32 or float16)."""
    for n in readers:
        for i in n.input[1:]:
            if i in inits and inits[i].data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
                return inits[i].data_type
    return onnx.TensorProto.FLOAT


def apply_awq(m: onnx.ModelProto, read: Callable[[str], np.ndarray], by_weight: dict[str, list[Any]],
              grams: dict[str, tuple[np.ndarray, int]], quantize: Quantizer, *, skip: set[str] = frozenset(),
              alphas: np.ndarray = ALPHAS) -> tuple[dict[str, tuple[np.ndarray, int]], list[str]]:
    """AWQ on every group of weights sharing one input (``by_weight``: weight -> its linears, objects with
    ``weight``, ``node``, ``input``, ``k_first``): scales searched (:func:`search_scales`), folded into ``m``
    (:func:`fold_input_scale`), weights ``W diag(s)`` written back into ``m``'s initializers (inline), Gram matrices
    of the scaled inputs returned (with the notes). Weights in ``skip`` (read by other nodes too, a tied embedding)
    and weights read through several inputs keep their group unscaled."""
    groups: dict[str, list[str]] = {}
    for name, lins in by_weight.items():
        ins = {lin.input for lin in lins}
        key = lins[0].input if len(ins) == 1 and name not in skip else None
        for i in ins:
            groups.setdefault(i, []).append(name if key else "")
    out = dict(grams)
    notes: list[str] = []
    alphas_used: list[float] = []
    where: dict[str, int] = {}
    for x, names in groups.items():
        if "" in names or x not in grams:
            continue
        h, rows = grams[x]
        lins = [(by_weight[nm][0], nm) for nm in names]
        ws = [_nk(read(nm), lin.k_first) for lin, nm in lins]
        x_mag = np.sqrt(np.maximum(np.diag(h).astype(np.float64), 0) / max(rows, 1))
        s, alpha, _ = search_scales(ws, h, x_mag, quantize, alphas)
        alphas_used.append(alpha)
        if alpha == 0:
            continue
        nodes = {lin.node for nm in names for lin in by_weight[nm]}
        kind = fold_input_scale(m, x, nodes, (1.0 / s.astype(np.float64)).astype(np.float32), read)
        kind = "folded" if kind.startswith("folded") else "mul"
        where[kind] = where.get(kind, 0) + 1
        inits = {t.name: t for t in m.graph.initializer}
        for (lin, nm), w in zip(lins, ws):
            ws_ = w * s[None, :]
            _replace(inits[nm], ws_.T if lin.k_first else ws_)
        inv = (1.0 / s).astype(np.float32)
        out[x] = ((h * inv[:, None] * inv[None, :]).astype(np.float32), rows)
    notes.append(f"AWQ: {len(alphas_used)} input groups, alpha mean {np.mean(alphas_used) if alphas_used else 0:.2f}"
                 f" ({sum(a > 0 for a in alphas_used)} scaled: {where.get('folded', 0)} folded into a norm, "
                 f"{where.get('mul', 0)} through an inserted Mul); the weights in the output are W diag(s), the "
                 "encodings apply to the scaled model, not to the input model")
    return out, notes


def _nk(a: np.ndarray, k_first: bool) -> np.ndarray:
    return np.ascontiguousarray(a.T if k_first else a, np.float32)


__all__ = ["ALPHAS", "apply_awq", "awq_scales", "fold_input_scale", "output_error", "rtn_quantizer",
           "scaled_error", "search_scales"]
