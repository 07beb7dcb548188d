"""Logarithms of values that span more decades than a linear grid resolves (:mod:`qlinear.graph.log_inputs`).

After calibration, a ``Log`` whose input took values more than ``WIDE`` (2^16) times apart on the calibration data
(its largest over its smallest, or a smallest of zero) is **wide**: its small values lie below one step of even a
16-bit grid over that range, and the grid would send them to zero and the logarithm to the graph's floor.

* Target ``ort`` (ONNX Runtime computes ``Log`` in float in any case): the input and the tensors it is computed from
  through range-keeping operators (:func:`~qlinear.graph.log_inputs.log_cones`, back to the graph input for a
  spectrogram front end) are left in float, and so are the weights of the layers that compute them (ONNX Runtime runs
  a layer with a float input in float; an 8-bit weight there adds its error as a floor about 48 dB under the loudest
  component: a short-time Fourier transform's leakage), with a note naming them all. On openwakeword's
  ``melspectrogram.onnx`` the dB output goes from 29 dB average error (W8A8, 18 % of the values within 1 dB of float)
  to 0.4 dB with the weights at 8 bits and 0.2 dB with them float; the graph's head after the ``Log`` stays
  quantized. onnx-asr's front ends (OnnxScript: pre-emphasis by ``GatherElements``/``ScatterElements``, power by
  ``ReduceSumSquare`` or the ``STFT`` operator, padding masked by ``Where``), output SQNR on 32 windows of speech:
  Kaldi fbank 8.3 dB with the cone stopping at the power, 50.8 dB through to the waveform (ONNX Runtime's
  ``quantize_static``: ``-inf``, the log of a power rounded to zero), NeMo 32.8 dB (ORT: NaN), Whisper 20.7 dB
  (ORT 12.2).
* Target ``tflite`` does the same unless ``full_integer`` is asked: the cone becomes float islands of the
  ``.tflite`` (float CONV_2D for the short-time Fourier transform's convolutions, POW, ADD, FULLY_CONNECTED, LOG...),
  as the TFLite converter runs an operator it cannot quantize. openwakeword ships this front end as a ``.tflite``.
* Other targets (qnn, full-integer tflite) run every tensor in integers: the pipeline warns, naming the ``Log``,
  and quantizes as planned.

An ``overrides`` rule setting a tensor's type keeps it quantized.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlinear.graph.log_inputs import log_cones
from qlinear.graph.plan import Plan, resolve_inherit

#: a Log input whose calibrated largest / smallest value exceeds this is wide (below one step of a 16-bit grid)
WIDE = 2.0 ** 16
#: targets where a wide Log's cone is left in float (the runtime computes Log in float)
FLOAT_LOG_TARGETS = ("ort", "tflite")


def wide_logs(plan: Plan, nodes: list[Any], obs: dict[str, Any]) -> dict[str, tuple[float, float, list[str]]]:
    """The wide logarithms' inputs: name -> (smallest, largest calibrated value, cone) (module docstring)."""
    out = {}
    for t, cone in log_cones(nodes).items():
        o = obs.get(resolve_inherit(plan, t))
        if getattr(o, "min", None) is None:
            continue
        lo, hi = float(np.min(o.min)), float(np.max(o.max))
        if lo >= 0 and hi > 0 and hi > WIDE * lo:
            out[t] = (lo, hi, cone)
    return out


def float_log_cones(plan: Plan, nodes: list[Any], obs: dict[str, Any], target: str, resolved: Any,
                    notes: list[str], full_integer: bool = False) -> list[str]:
    """Leave the cones of the wide logarithms in float on ``FLOAT_LOG_TARGETS`` (the plan's activations lose them;
    call after calibration, before the encodings are built), warn on other targets; returns the tensors left float.
    ``resolved``: the tensors an ``overrides`` rule set, which keep their quantization."""
    dropped: list[str] = []
    for t, (lo, hi, cone) in wide_logs(plan, nodes, obs).items():
        span = "zero" if lo == 0 else f"{lo:.3g}"
        what = f"Log of '{t}': its values span {span} to {hi:.3g} on the calibration data"
        if target not in FLOAT_LOG_TARGETS or (target == "tflite" and full_integer):
            notes.append(f"WARNING: {what}, more than a 16-bit grid resolves: its small values are rounded to zero "
                         "and their logarithms to the floor; target ort (and tflite without --full-integer) leaves "
                         "such a spectrum in float")
            continue
        roots = {resolve_inherit(plan, c) for c in cone} - set(resolved)
        drop = [a for a in plan.activations if resolve_inherit(plan, a) in roots]
        followers = plan.followers()
        drop += [k for r in roots for k in followers.get(r, [])]
        if not drop:
            continue
        gone = set(drop)
        plan.leave_float(gone, f"computed into the Log of '{t}' ({span} to {hi:.3g}): left in float")
        plan.concats = [c for c in plan.concats if c.output not in gone]
        named = [a for a in cone if a in gone]
        weights = _float_weights(plan, nodes, set(cone), resolved)
        notes.append(f"{what}, more than a 16-bit grid resolves (its small values would be rounded to zero and their "
                     f"logarithms to the floor): it and the {len(named) - 1} tensors it is computed from are left in "
                     f"float ({', '.join(named[:6])}{' ...' if len(named) > 6 else ''})"
                     + (f", and the weights of the layers computing them: {', '.join(weights[:6])}"
                        + (f" ... ({len(weights)} in all)" if len(weights) > 6 else "") if weights else ""))
        dropped += drop
    return dropped


def _float_weights(plan: Plan, nodes: list[Any], cone: set[str], resolved: Any) -> list[str]:
    """Take out of ``plan`` the weights (and biases) of the layers that compute a tensor of ``cone``, except those an
    ``overrides`` rule set; returns their names."""
    names = {n.inputs[1].name for n in nodes if len(n.inputs) > 1 and n.inputs[1] is not None
             and any(o.name in cone for o in n.outputs)} - set(resolved)
    taken = list(dict.fromkeys(w.name for w in plan.weights if w.name in names))   # a shared weight once
    plan.weights = [w for w in plan.weights if w.name not in names]
    plan.biases = [b for b in plan.biases if b.weight not in names]
    for w in taken:
        plan.skipped[w] = "weight of a layer computing a wide logarithm's input: left in float"
    return taken


__all__ = ["FLOAT_LOG_TARGETS", "WIDE", "float_log_cones", "wide_logs"]
