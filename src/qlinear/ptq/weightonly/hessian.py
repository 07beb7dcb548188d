"""The inputs' second moments GPTQ needs, ``H = sum_t x_t x_t^T`` over every calibration token, collected in one
ONNX Runtime pass of the float model (the inputs of every linear are fetched as extra outputs; linears that share
an input share one matrix). Accumulated in float32 (BLAS products per batch, as GPTQ's reference implementation
does; GPTQ dampens ``H`` by 1 % of its mean diagonal before inverting it in float64); memory: one float32 ``K x K``
matrix per distinct input plus ONNX Runtime's session of the float model (its memory arena off: the fetched
activations of one batch are returned after each run)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from qlinear.ptq.data import Dataset
from qlinear.ptq.session import Session


def collect_hessians(m: onnx.ModelProto, base: Path | None, inputs: list[str], ds: Dataset, n: int,
                     batch_size: int, *, label: str = "model",
                     progress: Callable[[int], None] | None = None) -> dict[str, tuple[np.ndarray, int]]:
    """``{input: (X^T X, tokens)}`` over samples ``[0, n)`` of ``ds``."""
    names = list(dict.fromkeys(inputs))
    sess = Session(m, names, level="basic", label=label, external_dir=str(base) if base else None, arena=False)
    acc: dict[str, np.ndarray] = {}
    count: dict[str, int] = {}
    for batch in ds.batches(0, n, batch_size):
        outs = sess.run(names, batch, where=f"{ds.source} (calibration)")
        for name, x in zip(names, outs):
            x2 = np.asarray(x, np.float32).reshape(-1, x.shape[-1])
            if name in acc:
                acc[name] += x2.T @ x2
            else:
                acc[name] = x2.T @ x2
            count[name] = count.get(name, 0) + x2.shape[0]
        if progress:
            progress(len(next(iter(batch.values()))))
    return {k: (v, count[k]) for k, v in acc.items()}
