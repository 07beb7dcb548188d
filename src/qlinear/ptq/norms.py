"""A decomposed normalization's statistics on a target that quantizes them (:mod:`qlinear.graph.norm_stats`).

Targets ``ort`` and ``tflite`` leave them float (the plan skips them). QNN's HTP runs every tensor in integers, as
AIMET's configs quantize them, so there the plan keeps them (``Plan.norm_stats``) and :func:`wide_statistics`
quantizes them at 16 bits over their calibrated range, a type the HTP runs natively: at 8 bits magika's jax2tf
LayerNorm (variance ``E[x^2] - E[x]^2``) left top-1 agreement 0.000, at 16 bits 0.938-0.969. An ``overrides`` rule
setting a tensor's type keeps it.
"""

from __future__ import annotations

from typing import Any

from qlinear.encodings import Encoding
from qlinear.graph.plan import Plan
from qlinear.ptq.mixed import widen


def wide_statistics(encs: list[Encoding], plan: Plan, m: Any, tcfg: Any, notes: list[str],
                    obs: dict[str, Any]) -> list[Encoding]:
    """``encs`` with the normalization statistics the plan quantizes (``plan.norm_stats``) at 16 bits over their
    calibrated min-max range (:func:`qlinear.ptq.mixed.widen`), and a note naming them."""
    if not plan.norm_stats:
        return encs
    by_name = {e.name: e for e in encs}
    narrow = [t for t in plan.norm_stats if t in by_name and by_name[t].qtype.is_int and by_name[t].qtype.bits < 16]
    raised, wide = widen(by_name, narrow, plan, m, tcfg, obs, 1.0)
    if raised:
        notes.append(f"{len(raised)} statistics of decomposed normalizations (mean, variance, square root) are "
                     f"quantized at {wide} over their calibrated ranges, not 8 bits (a variance written as "
                     f"E[x^2] - E[x]^2 is the difference of two close numbers): {', '.join(raised[:6])}"
                     + (" ..." if len(raised) > 6 else ""))
    return list(by_name.values())


__all__ = ["wide_statistics"]
