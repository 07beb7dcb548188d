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

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

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


@dataclass
class Scaled:
    """AWQ's choice for the weights ``names`` sharing input ``x`` (read by the linear nodes ``nodes``): scales
    ``s[K]`` of exponent ``alpha`` (0: round to nearest, nothing to scale)."""

    x: str
    names: list[str]
    nodes: set[str]
    s: np.ndarray
    alpha: float

    @property
    def inv(self) -> np.ndarray:
        """``1/s`` as folded into the graph (float32)."""
        return (1.0 / self.s.astype(np.float64)).astype(np.float32)


def awq_inputs(by_weight: dict[str, list[Any]], skip: set[str] = frozenset()) -> dict[str, list[str]]:
    """Input -> the weights AWQ scales together: the groups of weights sharing one input, less those with a weight
    in ``skip`` (read by other nodes too) or read through several inputs (they keep their group unscaled)."""
    groups: dict[str, list[str]] = {}
    for name, lins in by_weight.items():
        ins = {lin.input for lin in lins}
        key = lins[0].input if len(ins) == 1 and name not in skip else None
        for i in ins:
            groups.setdefault(i, []).append(name if key else "")
    return {x: names for x, names in groups.items() if "" not in names}


def search_group(read: Callable[[str], np.ndarray], by_weight: dict[str, list[Any]], x: str, names: list[str],
                 gram: tuple[np.ndarray, int], quantize: Quantizer,
                 alphas: np.ndarray = ALPHAS) -> tuple[Scaled, list[np.ndarray]]:
    """:func:`search_scales` for the weights ``names`` reading ``x`` (Gram matrix ``gram``); with the weights read
    (``[N_i, K]`` float32)."""
    h, rows = gram
    ws = [_nk(read(nm), by_weight[nm][0].k_first) for nm in names]
    x_mag = np.sqrt(np.maximum(np.diag(h).astype(np.float64), 0) / max(rows, 1))
    s, alpha, _ = search_scales(ws, h, x_mag, quantize, alphas)
    return Scaled(x, list(names), {lin.node for nm in names for lin in by_weight[nm]}, s, alpha), ws


def scaled_weights(by_weight: dict[str, list[Any]], sc: Scaled,
                   ws: list[np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, W diag(s))`` in the initializer's layout for the weights of ``sc`` (``ws``: as read, ``[N, K]``)."""
    for nm, w in zip(sc.names, ws):
        ws_ = w * sc.s[None, :]
        yield nm, (ws_.T if by_weight[nm][0].k_first else ws_)


def scale_weights(m: onnx.ModelProto, by_weight: dict[str, list[Any]], sc: Scaled, ws: list[np.ndarray]) -> None:
    """Write ``W diag(s)`` into ``m``'s initializers (inline) for the weights of ``sc`` (``ws``: as read)."""
    inits = {t.name: t for t in m.graph.initializer}
    for nm, a in scaled_weights(by_weight, sc, ws):
        _replace(inits[nm], a)


def scaled_gram(gram: tuple[np.ndarray, int], s: np.ndarray) -> tuple[np.ndarray, int]:
    """The Gram matrix of the scaled input ``x diag(s)^-1``: ``diag(s)^-1 G diag(s)^-1``."""
    h, rows = gram
    inv = (1.0 / s).astype(np.float32)
    return (h * inv[:, None] * inv[None, :]).astype(np.float32), rows


def awq_note(alphas_used: list[float], where: dict[str, int]) -> str:
    """The run's note on AWQ: groups, mean exponent, where the scales went (``where``: ``folded`` / ``mul``)."""
    return (f"AWQ: {len(alphas_used)} input groups, alpha mean {np.mean(alphas_used) if alphas_used else 0:.2f}"
            f" ({sum(a > 0 for a in alphas_used)} scaled: {where.get('folded', 0)} folded into a norm, "
            f"{where.get('mul', 0)} through an inserted Mul); the weights in the output are W diag(s), the "
            "encodings apply to the scaled model, not to the input model")


def fold(m: onnx.ModelProto, sc: Scaled, read: Callable[[str], np.ndarray], where: dict[str, int]) -> None:
    """:func:`fold_input_scale` of ``sc``'s ``1/s``, counted in ``where`` (``folded`` / ``mul``)."""
    kind = "folded" if fold_input_scale(m, sc.x, sc.nodes, sc.inv, read).startswith("folded") else "mul"
    where[kind] = where.get(kind, 0) + 1


def apply_awq(m: onnx.ModelProto, read: Callable[[str], np.ndarray], by_weight: dict[str, list[Any]],
              grams: dict[str, tuple[np.ndarray, int]], quantize: Quantizer, *, skip: set[str] = frozenset(),
              alphas: np.ndarray = ALPHAS) -> tuple[dict[str, tuple[np.ndarray, int]], list[str]]:
    """AWQ on every group of weights sharing one input (``by_weight``: weight -> its linears, objects with
    ``weight``, ``node``, ``input``, ``k_first``): scales searched (:func:`search_scales`), folded into ``m``
    (:func:`fold_input_scale`), weights ``W diag(s)`` written back into ``m``'s initializers (inline), Gram matrices
    of the scaled inputs returned (with the notes). Weights in ``skip`` (read by other nodes too, a tied embedding)
    and weights read through several inputs keep their group unscaled (:func:`awq_inputs`)."""
    out = dict(grams)
    alphas_used: list[float] = []
    where: dict[str, int] = {}
    for x, names in awq_inputs(by_weight, skip).items():
        if x not in grams:
            continue
        sc, ws = search_group(read, by_weight, x, names, grams[x], quantize, alphas)
        alphas_used.append(sc.alpha)
        if sc.alpha == 0:
            continue
        fold(m, sc, read, where)
        scale_weights(m, by_weight, sc, ws)
        out[x] = scaled_gram(grams[x], sc.s)
    return out, [awq_note(alphas_used, where)]


def _nk(a: np.ndarray, k_first: bool) -> np.ndarray:
    return np.ascontiguousarray(a.T if k_first else a, np.float32)


__all__ = ["ALPHAS", "Scaled", "apply_awq", "awq_inputs", "awq_note", "awq_scales", "fold", "fold_input_scale",
           "output_error", "rtn_quantizer", "scale_weights", "scaled_error", "scaled_gram", "scaled_weights",
           "search_group", "search_scales"]
