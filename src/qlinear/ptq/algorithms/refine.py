"""Data-driven weight quantization inside :func:`qlinear.quantize`: sequential MSE ranges and AdaRound rounding,
layer by layer, each layer seeing the inputs that the already-refined layers before it give.

The float model and its Q/DQ model (activation encodings, min-max weight encodings) run side by side, piece by piece
(:class:`qlinear.ptq.stats.staged.Staged`), over the calibration samples. At each weighted layer, in topological order:

1. the layer's input in both models gives its Gram matrices (:class:`qlinear.ptq.layers.Layer`): ``X_f`` from the
   float model, ``X_q`` from the Q/DQ model, which carries the quantization of everything before the layer;
2. ``seqmse``: per-channel clipping ranges that minimize ``||(W - Q(W)) X_q||``
   (:mod:`qlinear.ptq.algorithms.seqmse`);
3. ``adaround``: on those ranges, the learned rounding that minimizes ``||W X_f - Q(W) X_q||``
   (:mod:`qlinear.ptq.algorithms.adaround`), kept only where it lowers that error; the float model's weights are
   replaced by the rounded grid values, so the Q/DQ model stores the learned integers. Two opt-in guards against
   overfitting (off by default: on EfficientNet-Lite0 W4A8 both lowered held-out top-1 and agreement, see the
   README): with ``adaround_holdout`` (e.g. 0.2) that last fraction of the calibration samples is held back from
   its fit: every 10 iterations the hard rounding is scored on them and the best checkpoint (nearest rounding is the
   first) is kept, and the keep-or-not test is made on them too; with ``adaround_augment`` every calibration sample
   whose inputs include an NCHW image batch (:func:`image_like`) is also fed mirrored left to right, doubling the
   data that the fit (and the held-back score) sees. SeqMSE ranges, gains and bias correction use every sample
   (with the mirrored ones);
4. with bias correction on, the layer's bias absorbs the mean of ``W X_f - Q(W) X_q`` over the samples (empirical
   bias correction with the real quantized inputs);
5. the Q/DQ model continues with the refined weight and bias.

Time is one pass of each model over the calibration samples plus, per layer, the Gram matrices (``K^2 P``) and the
search (``out K^2`` per candidate or iteration); memory is the activations alive across one layer boundary, for all
calibration samples, plus one layer's ``K x K`` statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.core.granularity import PerTensor
from qlinear.encodings import EncodingSet
from qlinear.graph.plan import Plan
from qlinear.ptq.config import QuantizeConfig
from qlinear.ptq.layers import Layer

#: AdaRound fits a layer only with at least this many input positions per weight column (``P >= 20 K``): with fewer
#: (EfficientNet-Lite0's classifier after global pooling on 100 images: 100 rows for 1,280 inputs; its 7 x 7 stage,
#: 4,900 rows for 1,152) the learned rounding reproduces the calibration images' outputs (logits at 21 dB) and not
#: unseen ones (8.0 dB). Left at nearest rounding on the SeqMSE grid there, held-out SQNR 8.5 dB (W4A8) and 24.6 dB
#: against 23.7 (W8A8), in 60 % of the time (README, "Do the fitted methods generalise?")
MIN_POSITIONS = 20


@dataclass
class Refined:
    """What :func:`refine_weights` changed."""

    encodings: EncodingSet
    biases: set[str] = field(default_factory=set)   # bias initializers already corrected (skip the later pass)
    layers: int = 0
    adaround_kept: int = 0
    thin: int = 0   # AdaRound layers with fewer than MIN_POSITIONS input positions per weight column (not fitted)
    error_ratio: list[float] = field(default_factory=list)  # per layer: output error before / after


def refine_weights(es: EncodingSet, m: onnx.ModelProto, plan: Plan, ds: Any, n_cal: int, cfg: QuantizeConfig,
                   methods: dict[str, str], *,
                   label: str = "model", progress: Callable[[str, int], Callable[[int], None]] | None = None,
                   notes: list[str] | None = None) -> Refined:
    """Refine the integer weight encodings of ``es`` whose method (``methods``: weight name -> method) is ``seqmse``
    or ``adaround`` (module docstring). ``m`` (the float model being quantized) receives the rewritten weights and
    the corrected biases."""
    from qlinear.graph import apply
    from qlinear.ptq.algorithms.seqmse import seqmse
    from qlinear.ptq.layers import layers_of
    from qlinear.ptq.stats.staged import Staged

    encs = {e.name: e for e in es}
    specs = [s for s in plan.weights if s.name in encs and encs[s.name].qtype.is_int
             and methods.get(s.name) in ("seqmse", "adaround")]
    layers = layers_of(m, specs)
    left = [s for s in specs if s.name not in {ly.spec.name for ly in layers}]
    if left and notes is not None:
        notes.append(_left_note(left, methods, encs))
    if not layers:
        return Refined(es)
    qdq = apply(es, m)
    n_ada = sum(methods[ly.spec.name] == "adaround" for ly in layers)
    n_hold = held_back(n_cal, cfg.adaround_holdout) if n_ada else 0
    fit, hold, mirrored = _batches(ds, n_cal, n_hold, cfg, bool(n_ada))
    batches = fit + hold
    qkeys = quantized_keys(qdq, layers)
    fs = Staged(m, [ly.spec.node for ly in layers], batches, label=f"the float {label}")
    qs = Staged(qdq, qkeys, batches, label=f"the quantized {label}", disable_qdq_fusion=True)
    del batches
    qnodes = {n.name or n.output[0]: n for n in qdq.graph.node}
    inits = {t.name: t for t in m.graph.initializer}
    out = Refined(es, layers=len(layers))
    changed: dict[str, np.ndarray] = {}  # written into m at the end: the float model runs unchanged meanwhile
    adv = progress("AdaRound" if n_ada else "SeqMSE", len(layers)) if progress else None
    for i, ly in enumerate(layers):
        fs.advance(i)
        qs.advance(i)
        name = ly.spec.name
        q_in = qnodes[qkeys[i]].input[0]
        w = numpy_helper.to_array(inits[name])
        hd = Layer(ly.spec, ly.node, ly.kind, ly.shape, ly.groups, ly.transposed) if hold else None
        for j, (xf, xq) in enumerate(zip(fs.tensor(ly.node.input[0]), qs.tensor(q_in))):
            (ly if j < len(fit) else hd).accumulate(xf, xq)
        al = merged(ly, hd)  # every calibration sample: ranges, gains, errors and bias correction
        w32 = w.astype(np.float32)
        e, wq = seqmse(al, w32, encs[name], asymmetric=cfg.seqmse_asymmetric)
        Wm = ly.to_matrix(w32.astype(np.float64))
        before = al.error(Wm, al.to_matrix(encs[name].fake_quantize(w32).astype(np.float64))).sum()
        err = al.error(Wm, al.to_matrix(wq.astype(np.float64))).sum()
        thin = methods[name] == "adaround" and ly.P < MIN_POSITIONS * ly.K
        out.thin += thin
        if methods[name] == "adaround" and not thin:
            kept = _adaround_layer(ly, hd, al, w32, Wm, e, wq, cfg)
            if kept is not None:
                e, wq, err = kept
                out.adaround_kept += 1
        if not np.array_equal(wq, w32):
            changed[name] = wq.astype(w.dtype)
        out.error_ratio.append(float(before / max(err, 1e-30)))
        encs[name] = e
        qs.set_constant(name, wq)
        if cfg.bias_correction and ly.spec.bias and ly.spec.bias in inits:
            b = numpy_helper.to_array(inits[ly.spec.bias])
            shift = al.output_shift(Wm, ly.to_matrix(wq.astype(np.float64)))
            if shift.size == b.size:
                nb = (b.astype(np.float64) + shift.reshape(b.shape)).astype(b.dtype)
                changed[ly.spec.bias] = nb
                qs.set_constant(ly.spec.bias, nb)
                out.biases.add(ly.spec.bias)
        for x in filter(None, (ly, hd, al)):
            x.free()
        if adv:
            adv(1)
    for k, v in changed.items():
        inits[k].CopyFrom(numpy_helper.from_array(v, k))
    out.encodings = es.with_encodings(encs.values())
    if notes is not None:
        notes.append(_note(out, cfg, n_ada, n_cal, n_hold, mirrored))
    return out


def _left_note(left: list[Any], methods: dict[str, str], encs: dict[str, Any]) -> str:
    """The weights a data-driven method was asked for that it does not fit (another operator, a 3-D convolution)."""
    how = sorted({methods[s.name] for s in left})
    ops = sorted({s.op for s in left})
    names = " and ".join(m.replace("adaround", "AdaRound").replace("seqmse", "SeqMSE") for m in how)
    return (f"{names} fit{'s' if len(how) == 1 else ''} 1-D and 2-D Conv, Gemm and MatMul layers: {len(left)} "
            f"weight(s) of {', '.join(ops)} keep "
            f"{encs[left[0].name].qtype.name} min-max ranges with nearest rounding: "
            + ", ".join(s.name for s in left[:6]) + (" ..." if len(left) > 6 else ""))


def quantized_keys(qdq: onnx.ModelProto, layers: list[Layer]) -> list[str]:
    """Each layer's node in the Q/DQ model (its name, or its first output's), found by the weight it reads: an
    unnamed node is known by its output, which the Q/DQ model renames where it is a graph output (CenterFace's
    heads: "no node named '538'")."""
    readers: dict[tuple[str, str], list[str]] = {}
    for n in qdq.graph.node:
        if len(n.input) > 1:
            readers.setdefault((n.op_type, n.input[1]), []).append(n.name or n.output[0])
    seen: dict[tuple[str, str], int] = {}
    out = []
    for ly in layers:
        k = (ly.node.op_type, ly.spec.name)
        i = seen[k] = seen.get(k, -1) + 1
        keys = readers.get(k, [])
        out.append(ly.spec.node if ly.spec.node in keys or i >= len(keys) else keys[i])
    return out


def _adaround_layer(ly: Layer, hd: Layer | None, al: Layer, w32: np.ndarray, Wm: np.ndarray, e: Any,
                    wq: np.ndarray, cfg: QuantizeConfig) -> tuple[Any, np.ndarray, float] | None:
    """AdaRound on one layer from the SeqMSE grid ``e`` (rounding ``wq``): ``(encoding, weights, error)`` when the
    learned rounding lowers the layer's output error (on the held-back samples when there are some), else None."""
    from qlinear.ptq.algorithms.adaround import AdaRoundOptions, adaround
    from qlinear.ptq.algorithms.seqmse import gains, regrid

    w2 = adaround(ly, w32, e, AdaRoundOptions(iterations=cfg.adaround_iterations), held=hd)
    e2, w2 = regrid(al, e, w2, gains(al, w32, w2, asymmetric=True, per_tensor=isinstance(e.grain, PerTensor)))
    judge = hd if hd is not None else ly  # the held-back samples when there are some
    if judge.error(Wm, ly.to_matrix(w2.astype(np.float64))).sum() >= \
            judge.error(Wm, ly.to_matrix(wq.astype(np.float64))).sum():
        return None
    return e2, w2, al.error(Wm, ly.to_matrix(w2.astype(np.float64))).sum()


def _batches(ds: Any, n_cal: int, n_hold: int, cfg: QuantizeConfig,
             ada: bool) -> tuple[list[dict], list[dict], bool | None]:
    """The fitting and held-back batches (each followed by its mirrored copies with ``adaround_augment`` in an
    AdaRound run), and whether an input was mirrored (None: augmentation off)."""
    fit = list(ds.batches(0, n_cal - n_hold, cfg.batch_size))
    hold = list(ds.batches(n_cal - n_hold, n_cal, cfg.batch_size)) if n_hold else []
    if not (ada and cfg.adaround_augment):
        return fit, hold, None
    fit_m, hold_m = mirror_images(fit), mirror_images(hold)
    return fit + fit_m, hold + hold_m, bool(fit_m)


def _note(out: Refined, cfg: QuantizeConfig, n_ada: int, n_cal: int, n_hold: int, mirrored: bool | None) -> str:
    what = "SeqMSE ranges" + (f" and AdaRound rounding ({cfg.adaround_iterations} iterations, kept in "
                              f"{out.adaround_kept} of {n_ada}" + (
                                  f"; {out.thin} layer(s) with fewer than {MIN_POSITIONS} input positions per weight "
                                  "column kept nearest rounding (too few to fit without overfitting)"
                                  if out.thin else "") + (
                                  f"; fitted on {n_cal - n_hold} samples, each layer's stopping point chosen "
                                  f"on the other {n_hold}" if n_hold else "") + (
                                  {None: "", True: "; calibration images and their mirror images",
                                   False: "; adaround_augment: no image-like (NCHW) input to mirror"}[mirrored])
                              + ")" if n_ada else "")
    return (f"{what} for {out.layers} layers, sequentially on {n_cal} calibration samples; median layer output "
            f"error {np.median(out.error_ratio):.2f}x lower than min-max")


def held_back(n_cal: int, fraction: float) -> int:
    """How many of ``n_cal`` calibration samples AdaRound holds back to choose its stopping point: ``fraction`` of
    them, none when that leaves fewer than 2 on either side."""
    n = int(round(n_cal * fraction))
    return n if n >= 2 and n_cal - n >= 2 else 0


def image_like(x: Any) -> bool:
    """A float batch of images in NCHW layout: 4-D, 1, 3 or 4 channels on axis 1, wider than 4 on the last."""
    return isinstance(x, np.ndarray) and x.ndim == 4 and x.dtype.kind == "f" and x.shape[1] in (1, 3, 4) \
        and x.shape[3] > 4


def mirror_images(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The batches whose image-like inputs (:func:`image_like`) are mirrored left to right, the other inputs as they
    are; no batch when no input is image-like (augmentation that only makes sense for pictures)."""
    out = []
    for b in batches:
        if any(image_like(v) for v in b.values()):
            out.append({k: np.ascontiguousarray(v[..., ::-1]) if image_like(v) else v for k, v in b.items()})
    return out


def merged(a: Layer, b: Layer | None) -> Layer:
    """``a`` with ``b``'s statistics added (the Gram matrices and sums; the columns dropped)."""
    if b is None or b.G is None:
        return a
    return replace(a, G=a.G + b.G, M=a.M + b.M, F=a.F + b.F, P=a.P + b.P, sum_f=a.sum_f + b.sum_f,
                   sum_q=a.sum_q + b.sum_q, cols_f=None, cols_q=None)


__all__ = ["MIN_POSITIONS", "Refined", "held_back", "image_like", "merged", "mirror_images", "refine_weights"]
