"""Concats of parts with very different ranges (issue 21: a detector's box coordinates in pixels next to sigmoid class
scores in [0, 1]).

* After calibration each Concat of the plan (:class:`qlinear.graph.plan.ConcatSpec`) gets its parts' ranges (the
  largest ``|x|`` each input took on the calibration data, :func:`fill_ranges`); a Concat is **mixed** when the widest
  part's range is more than ``MIXED_RATIO`` (16) times the narrowest's: one 8-bit grid over both leaves the narrow
  part a handful of levels.
* Targets ``ort`` and ``qnn`` keep each input's own parameters (the plan does not tie them); the output of a mixed
  Concat that is a graph output (directly or through data movement) is left in float, with a note
  (:func:`keep_parts`): one grid there would undo what the inputs kept. So is, on target ort, the output of one that
  only operators ONNX Runtime runs in float read (``ConcatSpec.float_readers``: a BatchNorm written out as a Mul and
  an Add of constants): no integer kernel reads that grid, it would only round the narrow parts (deepcut, 16
  calibration / 32 held-out Thai texts: the narrow parts at 0.9 and 3.0 dB on the output's uint8 grid, the word
  breaks of 0.656 of the texts as float's, 0.969 with the output in float; ONNX Runtime's ``quantize_static``
  0.719). A mixed Concat whose output an integer kernel reads keeps its output encoding (that kernel needs one input
  grid): a note names the output, how many steps of its grid the narrowest part's largest ``|x|`` is, and the
  ``overrides`` rule that keeps the narrow parts (float on ort, 16 bits on qnn); the report gives each part's SQNR
  on that grid.
* A part of such an output computed by a bounded function (``BOUNDED``: Sigmoid, Softmax, HardSigmoid in [0, 1], Tanh
  in [-1, 1]), seen through data movement and read by nothing else, is quantized over the function's whole range at
  16 bits on target qnn (:func:`bounded_parts`): its encoding is the output's, and the calibration maximum of a score
  is the strongest detection of the calibration images, which a confident detection on another image exceeds
  (clipped to it under min-max). 16 bits keep the step of the whole range far below that of the calibrated 8-bit
  range. On target ort it is left in float: ONNX Runtime's CPU session has no 16-bit kernels and runs a 16-bit
  tensor's layers in float between Q/DQ pairs, so float is exact and faster (:func:`unquantize`).
* The activations such a part is computed from (its producers back to the graph inputs: in a detector the whole
  backbone and neck) are quantized at 16 bits over ``HEADROOM`` (2) times their calibrated min-max range (a
  ``BOUNDED`` function's outputs, e.g. a SiLU's Sigmoid, over the function's range) on target qnn, and left in float
  on target ort (their layers' weights stay quantized): the scores' error is carried from the shared network, not
  made at the Concat, the Sigmoid or the head. A score ``sigmoid(z)`` below ~0.5 turns
  an absolute error of its logit into the same relative error; the 8-bit activations leave the logits ~0.5 off.
  Measured on nudenet-320n (YOLOv8n, 16 calibration / 32 held-out images, ``benchmarks/mixed_scores.py``): scores
  SQNR (plain, every element against float) 5.5 dB under W8A8, 25.5 dB with this rule; with the head's activations
  in float 5.7, with the first three layers at 16 bits 13, with the 57 activations of the worst 8-bit own SQNR at 16
  bits 13.6, with every activation at 16 bits over min-max ranges 13.4-13.9 (held-out activations beyond the
  calibrated ranges are clipped): no smaller set reached 15. The cost at 16 bits: ONNX Runtime's CPU session runs
  16-bit layers in float, ~3.3x the W8A8 latency (1.5x the float model's), 18.2 ms per image; with those tensors
  float instead (target ort since 2026-11-28) 8.5 ms (float model 6.5 ms) and scores 25.9 dB; with those layers'
  weights written float too (:mod:`qlinear.graph.float_weights`: ONNX Runtime ran their weights' DequantizeLinear at
  every inference) the float model's time (21.5 ms against 22.2 in a 1-thread run, W8A8 9.7). Narrower float cones
  (W8A8 with the activations of some layers float, weights float): the class branch ``/model.22/cv3`` 5.6 dB, the
  head 5.7, neck and head 5.9, the backbone ``/model.0-9/`` 13.4 (14.4 ms), ``/model.0-4/`` 12.8 (12.1 ms), with
  the class branch 14.7, all but the head 15.9 (20.4 ms): the scores need the early backbone's activations in float,
  so the rule keeps the whole cone. QNN's HTP runs 16-bit activations natively. An
  ``overrides`` rule setting a tensor's type keeps it (``{"name": "*", "role": "activation", "type": "uint8"}``: W8A8
  throughout).
* Target ``tflite`` requires one scale in and out: nothing changes; every mixed Concat is noted here and flagged in
  the report with each part's SQNR and the remedy (``REMEDY``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from qlinear import calibration as C
from qlinear.core.types import int_type
from qlinear.encodings import Encoding
from qlinear.graph import ops
from qlinear.graph.plan import ConcatSpec, Plan, resolve_inherit

MIXED_RATIO = 16.0
#: how many times its calibrated range a 16-bit activation feeding a bounded part covers (:func:`bounded_parts`)
HEADROOM = 2.0
#: functions whose output range is known whatever their input: (low, high) (the operator registry's ``output_range``)
BOUNDED = ops.OUTPUT_RANGES
REMEDY = ("use target ort or qnn (each Concat input keeps its own parameters), or split the output / quantize the "
          "parts with 16-bit activations")


def fill_ranges(plan: Plan, obs: dict[str, Any]) -> None:
    """Each Concat's parts' ranges from the observers (before tied groups are merged); a Concat with a part that
    was not observed keeps no ranges."""
    for c in plan.concats:
        rs = []
        for t in c.inputs:
            o = obs.get(resolve_inherit(plan, t))
            if o is None or getattr(o, "min", None) is None:
                rs = []
                break
            rs.append(float(max(np.max(np.abs(o.min)), np.max(np.abs(o.max)))))
        c.ranges = rs


def mixed(plan: Plan, ratio: float = MIXED_RATIO) -> list[ConcatSpec]:
    """The Concats whose parts' ranges differ by more than ``ratio``."""
    return [c for c in plan.concats if c.ratio() > ratio]


def output_of(plan: Plan, c: ConcatSpec, graph_outputs: set[str]) -> list[str]:
    """The graph outputs that reuse the Concat output's encoding (the output itself or data movement after it)."""
    return [o for o in graph_outputs if resolve_inherit(plan, o) == c.output]


def keep_parts(plan: Plan, m: Any, target: str, notes: list[str], obs: dict[str, Any] | None = None,
               tcfg: Any = None) -> list[ConcatSpec]:
    """Settle the mixed Concats for ``target`` (call after :func:`fill_ranges`, before the encodings are built);
    returns the Concats whose graph output was left in float. An output that only operators ONNX Runtime runs in
    float read (``ConcatSpec.float_readers``, target ort) is left in float too, unless an ``overrides`` rule of
    ``tcfg`` sets it; one that stays quantized is named in a note with its narrow parts' share of its grid
    (``obs``: the calibration observers) and the remedy."""
    outs = {o.name for o in m.graph.output}
    floated = []
    for c in mixed(plan):
        what = f"Concat {c.node!r}: its parts' ranges differ by {_x(c.ratio())} (" + ", ".join(
            f"{t} |x|<={r:.3g}" for t, r in zip(c.inputs, c.ranges)) + ")"
        if target == "tflite":
            notes.append(f"WARNING: {what} but TFLite requires one scale for all of them: the narrow parts lose "
                         f"precision (per-part SQNR in the report); {REMEDY} (on target tflite: "
                         "--activation-type int16, every layer 16x8)")
            continue
        if c.output not in plan.activations:
            continue
        reach = output_of(plan, c, outs)
        drop = set(reach) | {c.output}
        if reach and not _feeds_compute(m, plan, c.output, drop):
            plan.leave_float(drop, "output of a Concat of mixed ranges: left in float (each part keeps its "
                             "parameters)")
            notes.append(f"{what}: each input keeps its own parameters and the output {', '.join(sorted(reach))} is "
                         "left in float (one grid over all parts would undo them)")
            floated.append(c)
        elif c.float_readers and c.output not in getattr(tcfg, "resolved", {}):
            plan.leave_float(drop | set(plan.followers().get(c.output, [])), "output of a Concat of mixed ranges "
                             "that only operators ONNX Runtime runs in float read: left in float (target ort)")
            notes.append(f"{what}: each input keeps its own parameters and the output {c.output} is left in float: "
                         f"only operators ONNX Runtime runs in float read it ({_readers(m, plan, c.output)}), so one "
                         "grid over all parts would only round the narrow ones")
        else:
            notes.append(_one_grid_note(what, c, m, plan, target, obs, tcfg))
    return floated


def _one_grid_note(what: str, c: ConcatSpec, m: Any, plan: Plan, target: str, obs: dict[str, Any] | None,
                   tcfg: Any) -> str:
    """The note on a mixed Concat whose output stays on one grid (target ort/qnn): its readers, how many steps of
    that grid the narrowest part's largest ``|x|`` is (when ``obs`` has the output's range) and the remedy."""
    o = (obs or {}).get(c.output)
    span, bits = "", 8
    if tcfg is not None and getattr(o, "min", None) is not None and c.ranges:
        a = tcfg.activation(c.output)
        q, bits = a.activation_qtype, a.activation_qtype.bits
        lo, hi = min(float(np.min(o.min)), 0.0), max(float(np.max(o.max)), 0.0)
        width = (2 * max(-lo, hi) if a.activation_symmetric else hi - lo) if q.is_int else 0.0
        if width > 0:
            narrow = int(np.argmin(c.ranges))
            steps = c.ranges[narrow] * (2 ** q.bits - 1) / width
            span = f"; the largest |x| of {c.inputs[narrow]} is about {steps:.3g} steps of its {q.name} grid"
    wide = "uint16" if target == "qnn" and bits < 16 else "float"
    return (f"{what}: each input keeps its own parameters, but the output {c.output} is quantized on one grid for "
            f"the nodes reading it ({_readers(m, plan, c.output)}){span}: the narrow parts lose precision (their SQNR "
            f'on that grid in the report\'s mixed ranges); an overrides rule {{"name": "{c.output}", "type": '
            f'"{wide}"}} keeps them (those nodes then read {"16-bit" if wide == "uint16" else "float"} input)')


def _readers(m: Any, plan: Plan, t: str) -> str:
    """The nodes reading ``t`` or data movement of it that do not just move it (by name, at most 3)."""
    users = set(plan.followers().get(t, [])) | {t}
    names = [n.name or n.output[0] for n in m.graph.node if users & set(n.input) and not set(n.output) <= users]
    return ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")


def bounded_parts(encs: list[Encoding], floated: list[ConcatSpec], plan: Plan, m: Any, tcfg: Any,
                  notes: list[str], obs: dict[str, Any]) -> list[Encoding]:
    """``encs`` with the parts of the Concats left in float (:func:`keep_parts`) that a ``BOUNDED`` function computes
    quantized over the function's range at 16 bits, and the activations they are computed from at 16 bits with
    headroom (module docstring; ``obs``: the calibration observers). A part read by another operator, set by an
    ``overrides`` rule or of a non-integer type keeps its encoding."""
    by_name = {e.name: e for e in encs}
    prod = {o: n for n in m.graph.node for o in n.output}
    parts = []
    ort = tcfg.cfg.target == "ort"
    for c in floated:
        for t in c.inputs:
            src = resolve_inherit(plan, t)
            n = prod.get(src)
            if n is None or n.op_type not in BOUNDED or src not in by_name or src in tcfg.resolved \
                    or _feeds_compute(m, plan, src, {c.output}):
                continue
            cfg = tcfg.activation(src)
            q = cfg.activation_qtype
            if not q.is_int:
                continue
            if ort:   # ONNX Runtime's CPU session runs a 16-bit tensor's consumers in float anyway: float is exact
                unquantize(by_name, [src], plan, tcfg, obs, f"a part ({n.op_type}) of the output of Concat "
                           f"{c.node!r} left in float: left in float too (target ort)")
                notes.append(f"{src} ({n.op_type}, a part of the output of Concat {c.node!r} left in float) is left "
                             "in float too (target ort; 16 bits over the function's range on target qnn)")
                parts.append(n)
                continue
            lo, hi = BOUNDED[n.op_type]
            wide = int_type(max(16, q.bits), q.signed).name
            e = C.calibrate(np.array([lo, hi], np.float32), wide, method="minmax", policy=cfg.policy,
                            symmetric=cfg.activation_symmetric, name=src)
            old = by_name[src]
            for k in [src] + plan.followers().get(src, []):
                if k in by_name:
                    by_name[k] = e.replace(name=k)
            notes.append(f"{src} ({n.op_type}, a part of the output of Concat {c.node!r} left in float) is quantized "
                         f"at {wide} over the {n.op_type} range [{lo:g}, {hi:g}], not {old.dtype} over its calibrated "
                         f"range up to {_hi(old):.3g}: values above the calibration maximum (e.g. a more confident "
                         "score on another input) are not clipped")
            parts.append(n)
    if parts:
        _wide_cone(by_name, parts, plan, m, tcfg, notes, obs)
    return list(by_name.values())


def _wide_cone(by_name: dict[str, Encoding], parts: list[Any], plan: Plan, m: Any, tcfg: Any,
               notes: list[str], obs: dict[str, Any]) -> None:
    """The activations the ``parts`` nodes are computed from (their producers back to the graph inputs) at 16 bits
    (the run's integer type widened) over ``HEADROOM`` times their observed range (``obs``: minimum and maximum on
    the calibration data), or a ``BOUNDED`` function's range (module docstring); :func:`widen` says which keep their
    encodings."""
    done = {resolve_inherit(plan, n.output[0]) for n in parts}
    cone = [t for t in _cone(parts, {o: n for n in m.graph.node for o in n.output})
            if resolve_inherit(plan, t) not in done]
    names = ", ".join(sorted(n.output[0] for n in parts))
    if tcfg.cfg.target == "ort":
        left = unquantize(by_name, cone, plan, tcfg, obs, f"computed into the scores {names}: left in float")
        if left:
            notes.append(f"{len(left)} activations that {names} {'is' if len(parts) == 1 else 'are'} computed from "
                         "(back to the graph inputs) are left in float (a layer reading only them keeps its float "
                         "weight): a score sigmoid(z) below ~0.5 has the relative error of the absolute error of "
                         "z, which the 8-bit noise of every layer before it makes large; float, not 16 bits, on "
                         "target ort: ONNX Runtime's CPU session runs a 16-bit layer in float between its Q/DQ "
                         "pairs, so float is exact and faster (target qnn: 16 bits, which its HTP runs natively); an "
                         "overrides rule setting a tensor's type keeps it")
        return
    raised, wide = widen(by_name, cone, plan, m, tcfg, obs, HEADROOM)
    if raised:
        notes.append(f"{len(raised)} activations that {', '.join(sorted(n.output[0] for n in parts))} "
                     f"{'is' if len(parts) == 1 else 'are'} computed from (back to the graph inputs) are quantized at "
                     f"{wide} over {HEADROOM:g}x their calibrated ranges (a bounded function's outputs over its "
                     "range): a score sigmoid(z) below ~0.5 has the relative error of the absolute error of z, which "
                     "the 8-bit noise of every layer before it makes large; ONNX Runtime's CPU session runs 16-bit "
                     "layers in float (slower than 8-bit); an overrides rule setting a tensor's type keeps it")


def widen(by_name: dict[str, Encoding], tensors: list[str], plan: Plan, m: Any, tcfg: Any, obs: dict[str, Any],
          headroom: float) -> tuple[list[str], str]:
    """Re-encode ``tensors`` (each once, through the tensors sharing its encoding) at 16 bits (the run's integer type
    widened) over ``headroom`` times their observed range, or a ``BOUNDED`` function's range, in ``by_name``;
    returns those raised and the new type. Activations set by an ``overrides`` rule, of a non-integer type, tied to
    others, per-channel, wider than 16 bits or not observed keep their encodings (:func:`_roots`)."""
    prod = {o: n for n in m.graph.node for o in n.output}
    followers = plan.followers()
    raised, wide = [], ""
    for root in _roots(by_name, tensors, plan, tcfg, obs):
        cfg = tcfg.activation(root)
        q, o = cfg.activation_qtype, obs[root]
        n = prod.get(root)
        lo, hi = BOUNDED[n.op_type] if n is not None and n.op_type in BOUNDED else \
            (headroom * min(float(np.min(o.min)), 0.0), headroom * max(float(np.max(o.max)), 0.0))
        wide = int_type(16, q.signed).name
        e = C.calibrate(np.array([lo, hi], np.float32), wide, method="minmax", policy=cfg.policy,
                        symmetric=cfg.activation_symmetric, name=root)
        for k in [root] + followers.get(root, []):
            if k in by_name:
                by_name[k] = e.replace(name=k)
        raised.append(root)
    return raised, wide


def unquantize(by_name: dict[str, Encoding], tensors: list[str], plan: Plan, tcfg: Any, obs: dict[str, Any],
               reason: str) -> list[str]:
    """Leave ``tensors`` (each once, with the tensors sharing its encoding) in float, as :func:`widen` would have
    raised them (the same ones keep their encodings); returns those left float."""
    followers = plan.followers()
    roots = _roots(by_name, tensors, plan, tcfg, obs)
    drop = {k for r in roots for k in [r] + followers.get(r, [])}
    for k in drop:
        by_name.pop(k, None)
    plan.leave_float(drop, reason)
    return roots


def _roots(by_name: dict[str, Encoding], tensors: list[str], plan: Plan, tcfg: Any,
           obs: dict[str, Any]) -> list[str]:
    """The encodings ``tensors`` use (each once) that a precision change may touch (see :func:`widen`)."""
    tied = {t for g in plan.tied for t in g}
    acts = set(plan.activations)
    out, done = [], set()
    for t in tensors:
        root = resolve_inherit(plan, t)
        if root in done or root not in acts or root not in by_name or root in tcfg.resolved or root in tied:
            continue
        done.add(root)
        q, o = tcfg.activation(root).activation_qtype, obs.get(root)
        if not q.is_int or q.bits > 16 or np.asarray(by_name[root].scale).size != 1 \
                or getattr(o, "min", None) is None:
            continue
        out.append(root)
    return out


def _cone(parts: list[Any], prod: dict[str, Any]) -> list[str]:
    """The tensors the ``parts`` nodes read, directly or through other nodes (graph inputs and initializers
    included), each once, nearest first."""
    seen: set[str] = set()
    out: list[str] = []
    todo = deque(t for n in parts for t in n.input if t)
    while todo:
        t = todo.popleft()
        if t in seen:
            continue
        seen.add(t)
        out.append(t)
        n = prod.get(t)
        if n is not None:
            todo.extend(x for x in n.input if x and x not in seen)
    return out


def _hi(e: Encoding) -> float:
    """The largest value an activation encoding represents."""
    s = float(np.asarray(e.scale).reshape(-1)[0])
    z = int(np.asarray(e.zero_point_or_zeros).reshape(-1)[0])
    return (int(e.qtype.qmax) - z) * s


def _feeds_compute(m: Any, plan: Plan, t: str, drop: set[str]) -> bool:
    """``t`` (or data movement of it) is read by a node whose output does not just reuse its encoding: an operator
    that needs ``t`` quantized as one tensor."""
    users = set(plan.followers().get(t, [])) | {t}
    return any(n.output and not set(n.output) <= users | drop for n in m.graph.node if users & set(n.input))


def _x(r: float) -> str:
    return "more than 1e6x" if not np.isfinite(r) or r > 1e6 else f"{r:.0f}x"


def part_slices(m: Any, output: str, shapes: dict[str, tuple]) -> tuple[int, list[tuple[str, int, int]]] | None:
    """For a graph output of the float model ``m`` computed by a Concat (directly or through ``Identity``): the
    concat axis (non-negative) and each data part's ``(input, start, stop)`` along it, from the static ``shapes`` of
    the inputs; None for another output or when a part's extent is unknown."""
    prod = {o: n for n in m.graph.node for o in n.output}
    inits = {t.name for t in m.graph.initializer}
    n = prod.get(output)
    while n is not None and n.op_type == "Identity":
        n = prod.get(n.input[0])
    if n is None or n.op_type != "Concat":
        return None
    dims = [shapes.get(t) for t in n.input if t]
    if any(d is None for d in dims) or len({len(d) for d in dims}) != 1:
        return None
    rank = len(dims[0])
    axis = next((int(a.i) for a in n.attribute if a.name == "axis"), 0)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or any(not isinstance(d[axis], int) for d in dims):
        return None
    out, a = [], 0
    for t, d in zip([t for t in n.input if t], dims):
        if t not in inits:
            out.append((t, a, a + int(d[axis])))
        a += int(d[axis])
    return axis, out
