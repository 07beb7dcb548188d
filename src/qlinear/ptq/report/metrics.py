"""Accuracy targets ``METRIC>=VALUE`` over a model's outputs (the report's output metrics): parsed by the
configuration, used by precision repair (:mod:`qlinear.ptq.algorithms.repair`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from qlinear.errors import ConfigError

METRICS = ("top1_agreement", "sequence_agreement", "ctc_agreement", "cosine_mean", "cosine_min", "sqnr_db")
#: the metrics that count agreeing samples (``top1_agreement`` of a classifier; of a sequence output it counts
#: positions)
AGREEMENT_METRICS = ("top1_agreement", "sequence_agreement", "ctc_agreement")
#: one-sided confidence of :func:`agreement_bound`
CONFIDENCE = 0.95


def agreement_bound(k: int, n: int, confidence: float = CONFIDENCE) -> float:
    """The agreement rate that ``k`` agreeing of ``n`` independent samples bound from below at this one-sided
    confidence (Clopper-Pearson: the rate at which ``k`` or more agree with probability ``1 - confidence``); all ``n``
    agreeing bound it only above ``(1 - confidence) ** (1 / n)``: 0.69 for 8 samples, 0.95 for 59."""
    if n <= 0 or k <= 0:
        return 0.0
    if k >= n:
        return (1 - confidence) ** (1 / n)
    lo, hi = 0.0, 1.0
    for _ in range(60):   # P(at least k agree | p) grows with p: bisect for the p where it is 1 - confidence
        p = (lo + hi) / 2
        tail = sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))
        lo, hi = (p, hi) if tail < 1 - confidence else (lo, p)
    return lo


def samples_for(rate: float, confidence: float = CONFIDENCE) -> int:
    """The fewest samples that, all agreeing, bound the agreement above ``rate`` (< 1) at this confidence."""
    return max(1, math.ceil(math.log(1 - confidence) / math.log(rate)))


@dataclass(frozen=True)
class Target:
    """An accuracy target ``metric >= value`` over every output."""

    metric: str
    value: float

    @classmethod
    def parse(cls, text: str, where: str = "accuracy_target") -> "Target":
        if not isinstance(text, str):
            raise ConfigError(f"{where}: expected a string such as \"top1_agreement>=0.99\", got {text!r}")
        m = re.fullmatch(r"\s*([a-z0-9_]+)\s*(>=|=)\s*([-+0-9.eE]+)\s*", text)
        if not m or m.group(1) not in METRICS:
            raise ConfigError(f"{where}: {text!r} is not METRIC>=VALUE with METRIC one of {', '.join(METRICS)} "
                              "(for example \"top1_agreement>=0.99\" or \"sqnr_db>=20\")")
        try:
            v = float(m.group(3))
        except ValueError:
            raise ConfigError(f"{where}: {m.group(3)!r} is not a number") from None
        if m.group(1) != "sqnr_db" and not -1 <= v <= 1:
            raise ConfigError(f"{where}: {m.group(1)} is between -1 and 1 (agreement and cosine are fractions), "
                              f"got {v}")
        return cls(m.group(1), v)

    def value_of(self, metrics: dict[str, dict[str, float]]) -> float:
        """The worst output's value of the metric (``sqnr_db``: of an output of mixed ranges, its worst part's)."""
        key = (lambda d: "sqnr_db_worst_part" if "sqnr_db_worst_part" in d else "sqnr_db") \
            if self.metric == "sqnr_db" else (lambda d: self.metric)
        vals = [d[key(d)] for d in metrics.values() if key(d) in d]
        if not vals:
            raise ConfigError(f"accuracy_target: no output has the metric {self.metric!r} (top-1 agreement needs a "
                              "classifier output [N, classes] or softmax rows [N, positions, classes], sequence "
                              "and CTC agreement the latter); use cosine_mean or sqnr_db")
        return min(vals)

    def __str__(self) -> str:
        return f"{self.metric}>={self.value:g}"


__all__ = ["AGREEMENT_METRICS", "CONFIDENCE", "METRICS", "Target", "agreement_bound", "samples_for"]
