"""Data-driven weight quantization inside :func:`qlinear.quantize`: sequential MSE ranges and AdaRound rounding,
layer by layer, each layer seeing the inputs that the already-refined layers before it give.

The float model and its Q/DQ model (activation encodings, min-max weight encodings) run side by side, piece by piece
(:class:`qlinear.ptq.staged.Staged`), over the calibration samples. At each weighted layer, in topological order:

1. the layer's input in both models gives its Gram matrices (:class:`qlinear.ptq.layers.Layer`): ``X_f`` from the
   float model, ``X_q`` from the Q/DQ model, which carries the quantization of everything before the layer;
2. ``seqmse``: per-channel clipping ranges that minimize ``||(W - Q(W)) X_q||``
   (:mod:`qlinear.ptq.algorithms.seqmse`);
3. ``adaround``: on those ranges, the learned rounding that minimizes ``||W X_f - Q(W) X_q||``
   (:mod:`qlinear.ptq.algorithms.adaround`), kept only where it lowers that error; the float model's weights are
   replaced by the rounded grid values, so the Q/DQ model stores the learned integers;
4. with bias correction on, the layer's bias absorbs the mean of ``W X_f - Q(W) X_q`` over the samples (empirical
   bias correction with the real quantized inputs);
5. the Q/DQ model continues with the refined weight and bias.

Time is one pass of each model over the calibration samples plus, per layer, the Gram matrices (``K^2 P``) and the
search (``out K^2`` per candidate or iteration); memory is the activations alive across one layer boundary, for all
calibration samples, plus one layer's ``K x K`` statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper

from qlinear.core.granularity import PerTensor
from qlinear.encodings import EncodingSet
from qlinear.graph.plan import Plan
from qlinear.ptq.config import QuantizeConfig


@dataclass
class Refined:
    """What :func:`refine_weights` changed."""

    encodings: EncodingSet
    biases: set[str] = field(default_factory=set)   # bias initializers already corrected (skip the later pass)
    layers: int = 0
    adaround_kept: int = 0
    error_ratio: list[float] = field(default_factory=list)  # per layer: output error before / after


def refine_weights(es: EncodingSet, m: onnx.ModelProto, plan: Plan, ds: Any, n_cal: int, cfg: QuantizeConfig,
                   methods: dict[str, str], *,
                   label: str = "model", progress: Callable[[str, int], Callable[[int], None]] | None = None,
                   notes: list[str] | None = None) -> Refined:
    """Refine the integer weight encodings of ``es`` whose method (``methods``: weight name -> method) is ``seqmse``
    or ``adaround`` (module docstring). ``m`` (the float model being quantized) receives the rewritten weights and
    the corrected biases."""
    from qlinear.graph import apply
    from qlinear.ptq.algorithms.adaround import AdaRoundOptions, adaround
    from qlinear.ptq.algorithms.seqmse import gains, regrid, seqmse
    from qlinear.ptq.layers import layers_of
    from qlinear.ptq.staged import Staged

    encs = {e.name: e for e in es}
    specs = [s for s in plan.weights if s.name in encs and encs[s.name].qtype.is_int
             and methods.get(s.name) in ("seqmse", "adaround")]
    layers = layers_of(m, specs)
    if not layers:
        return Refined(es)
    qdq = apply(es, m)
    batches = list(ds.batches(0, n_cal, cfg.batch_size))
    cuts = [ly.spec.node for ly in layers]
    fs = Staged(m, cuts, batches, label=f"the float {label}")
    qs = Staged(qdq, cuts, batches, label=f"the quantized {label}", disable_qdq_fusion=True)
    del batches
    qnodes = {n.name or n.output[0]: n for n in qdq.graph.node}
    inits = {t.name: t for t in m.graph.initializer}
    out = Refined(es, layers=len(layers))
    changed: dict[str, np.ndarray] = {}  # written into m at the end: the float model runs unchanged meanwhile
    n_ada = sum(methods[ly.spec.name] == "adaround" for ly in layers)
    adv = progress("AdaRound" if n_ada else "SeqMSE", len(layers)) if progress else None
    for i, ly in enumerate(layers):
        fs.advance(i)
        qs.advance(i)
        name = ly.spec.name
        q_in = qnodes[ly.spec.node].input[0]
        w = numpy_helper.to_array(inits[name])
        for xf, xq in zip(fs.tensor(ly.node.input[0]), qs.tensor(q_in)):
            ly.accumulate(xf, xq)
        w32 = w.astype(np.float32)
        e, wq = seqmse(ly, w32, encs[name], asymmetric=cfg.seqmse_asymmetric)
        Wm = ly.to_matrix(w32.astype(np.float64))
        before = ly.error(Wm, ly.to_matrix(encs[name].fake_quantize(w32).astype(np.float64))).sum()
        err = ly.error(Wm, ly.to_matrix(wq.astype(np.float64))).sum()
        if methods[name] == "adaround":
            w2 = adaround(ly, w32, e, AdaRoundOptions(iterations=cfg.adaround_iterations))
            e2, w2 = regrid(ly, e, w2, gains(ly, w32, w2, asymmetric=True, per_tensor=isinstance(e.grain, PerTensor)))
            err2 = ly.error(Wm, ly.to_matrix(w2.astype(np.float64))).sum()
            if err2 < err:  # keep the learned rounding only where it lowers the layer's output error
                e, wq, err = e2, w2, err2
                out.adaround_kept += 1
        if not np.array_equal(wq, w32):
            changed[name] = wq.astype(w.dtype)
        out.error_ratio.append(float(before / max(err, 1e-30)))
        encs[name] = e
        qs.set_constant(name, wq)
        if cfg.bias_correction and ly.spec.bias and ly.spec.bias in inits:
            b = numpy_helper.to_array(inits[ly.spec.bias])
            shift = ly.output_shift(Wm, ly.to_matrix(wq.astype(np.float64)))
            if shift.size == b.size:
                nb = (b.astype(np.float64) + shift.reshape(b.shape)).astype(b.dtype)
                changed[ly.spec.bias] = nb
                qs.set_constant(ly.spec.bias, nb)
                out.biases.add(ly.spec.bias)
        ly.free()
        if adv:
            adv(1)
    for k, v in changed.items():
        inits[k].CopyFrom(numpy_helper.from_array(v, k))
    out.encodings = es.with_encodings(encs.values())
    if notes is not None:
        what = "SeqMSE ranges" + (f" and AdaRound rounding ({cfg.adaround_iterations} iterations, kept in "
                                  f"{out.adaround_kept} of {n_ada})" if n_ada else "")
        notes.append(f"{what} for {len(layers)} layers, sequentially on {n_cal} calibration samples; median layer "
                     f"output error {np.median(out.error_ratio):.2f}x lower than min-max")
    return out


__all__ = ["Refined", "refine_weights"]
