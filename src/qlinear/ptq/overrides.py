"""Per-tensor overrides of the configuration: by tensor or node name (``fnmatch`` globs) or by operator type.

A rule in the config's ``overrides`` list::

    {"op_type": "Softmax", "type": "uint16"}                       # the Softmax outputs in 16 bits
    {"name": "*depthwise*", "role": "weight", "type": "int8"}      # depthwise weights stay 8-bit in a W4A8 model
    {"name": "/lm_head/MatMul", "type": "float"}                   # leave this layer's weight unquantized
    {"op_type": "Gemm", "role": "weight", "granularity": "per-tensor", "method": "mse"}

``name`` matches a tensor's name or the name of its node (a weight's consuming node, an activation's producer);
``op_type`` matches that node's operator; ``role`` (``weight`` or ``activation``) restricts the rule. ``type`` is a
weight or activation type, or ``float`` (no quantization). ``granularity``, ``block_size`` and ``method`` apply to
what the rule matches. Rules apply in order; a later rule wins for the fields it sets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from fnmatch import fnmatchcase
from typing import Any

from qlinear.errors import ConfigError

ROLES = ("weight", "activation")


@dataclass(frozen=True)
class Override:
    """One override rule (module docstring)."""

    name: str | None = None
    op_type: str | None = None
    role: str | None = None
    type: str | None = None
    granularity: str | None = None
    block_size: int | None = None
    method: str | None = None

    @classmethod
    def parse(cls, d: Any, where: str) -> "Override":
        if isinstance(d, Override):
            return d
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: expected a mapping such as {{\"name\": \"conv1.weight\", \"type\": \"int8\"}}, "
                              f"got {d!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; an override has {', '.join(sorted(known))}")
        for k, v in d.items():
            if k == "block_size":
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                    raise ConfigError(f"{where}.block_size: expected a positive integer, got {v!r}")
            elif v is not None and not isinstance(v, str):
                raise ConfigError(f"{where}.{k}: expected a string, got {v!r}")
        o = cls(**d)
        if o.name is None and o.op_type is None:
            raise ConfigError(f"{where}: give \"name\" (a tensor or node name, globs allowed) or \"op_type\"")
        if o.role is not None and o.role not in ROLES:
            raise ConfigError(f"{where}.role: {o.role!r} is not one of {', '.join(ROLES)}")
        if all(getattr(o, f) is None for f in ("type", "granularity", "block_size", "method")):
            raise ConfigError(f"{where}: sets nothing; give \"type\", \"granularity\", \"block_size\" or \"method\"")
        return o

    def matches(self, tensor: str, node_name: str | None, op_type: str | None, role: str) -> bool:
        if self.role is not None and self.role != role:
            return False
        if self.op_type is not None and self.op_type != op_type:
            return False
        if self.name is not None and not (fnmatchcase(tensor, self.name)
                                          or (node_name is not None and fnmatchcase(node_name, self.name))):
            return False
        return True


def validate(rules: tuple[Override, ...], *, weight_types: tuple[str, ...], activation_types: tuple[str, ...],
             granularities: tuple[str, ...], weight_methods: tuple[str, ...],
             activation_methods: tuple[str, ...]) -> None:
    """Check each rule's values against what its role allows (both roles when the rule has none)."""
    for i, o in enumerate(rules):
        where = f"overrides[{i}]"
        roles = (o.role,) if o.role else ROLES
        if o.type is not None and o.type != "float":
            ok = [r for r in roles if o.type in (weight_types if r == "weight" else activation_types)]
            if not ok:
                allowed = sorted(set((weight_types if "weight" in roles else ()) +
                                     (activation_types if "activation" in roles else ())) - {"float"})
                raise ConfigError(f"{where}.type: {o.type!r} is not one of float, {', '.join(allowed)}")
        if o.granularity is not None and o.granularity not in granularities:
            raise ConfigError(f"{where}.granularity: {o.granularity!r} is not one of {', '.join(granularities)}")
        if o.method is not None:
            ok = [r for r in roles if o.method in (weight_methods if r == "weight" else activation_methods)]
            if not ok:
                raise ConfigError(f"{where}.method: {o.method!r} is not a calibration method for "
                                  f"{' or '.join(r + 's' for r in roles)}")


@dataclass(frozen=True)
class Resolved:
    """What the rules give one tensor: ``None`` fields keep the run's configuration."""

    float: bool = False
    type: str | None = None
    granularity: str | None = None
    block_size: int | None = None
    method: str | None = None
    rules: tuple[int, ...] = ()   # which rules matched (for the report)


def resolve(rules: tuple[Override, ...], tensor: str, node_name: str | None, op_type: str | None,
            role: str, types: tuple[str, ...] = (), methods: tuple[str, ...] = ()) -> Resolved:
    """The combined effect of the matching rules on one tensor of ``role`` (later rules win field by field). A
    rule without a role sets only the types and methods valid for this role (``types``, ``methods``)."""
    return combine(rules, [i for i, o in enumerate(rules) if o.matches(tensor, node_name, op_type, role)], role,
                   types, methods)


def combine(rules: tuple[Override, ...], hit: list[int], role: str, types: tuple[str, ...] = (),
            methods: tuple[str, ...] = ()) -> Resolved:
    """The effect of the rules numbered ``hit`` (in order, later rules win field by field) on a tensor of ``role``."""
    out: dict[str, Any] = {}
    for i in hit:
        o = rules[i]
        for f in ("type", "granularity", "block_size", "method"):
            v = getattr(o, f)
            if v is None:
                continue
            if f == "type" and v != "float" and types and v not in types:
                continue
            if f == "method" and methods and v not in methods:
                continue
            if role == "activation" and f in ("granularity", "block_size"):
                continue
            out[f] = v
    if not hit:
        return Resolved()
    t = out.pop("type", None)
    return Resolved(float=t == "float", type=None if t == "float" else t, rules=tuple(hit), **out)


def apply_to_plan(rules: tuple[Override, ...], m: Any, plan: Any, *, weight_types: tuple[str, ...],
                  activation_types: tuple[str, ...], weight_methods: tuple[str, ...],
                  activation_methods: tuple[str, ...], notes: list[str] | None = None) -> dict[str, Resolved]:
    """Resolve the rules for every weight and activation of ``plan`` (a :class:`qlinear.graph.plan.Plan` of the
    model ``m``); tensors a rule leaves in float are taken out of the plan (with their biases). Returns the
    resolution of every tensor some rule matched.

    A tensor that reuses another's encoding through data movement (``Transpose``, ``Squeeze``, ``Reshape``: the
    plan's ``inherit``) holds the same values in another layout, so a rule that names it applies to the tensor whose
    encoding it reuses, and to every other tensor reusing it; ``notes`` says so, and names each rule that matches no
    tensor the plan quantizes (a misspelt name, or a tensor the placement leaves in float)."""
    if not rules:
        return {}
    from qlinear.graph.model import GraphIndex

    g = GraphIndex.build(m, infer_shapes=False)
    out: dict[str, Resolved] = {}
    used: set[int] = set()
    for spec in plan.weights:
        r = resolve(rules, spec.name, spec.node, spec.op, "weight", weight_types, weight_methods)
        if r.rules:
            out[spec.name] = r
            used.update(r.rules)
    followers = plan.followers()
    said = _two_bit_notes(out)
    for t in plan.activations:
        hits = {t: _hits(rules, g, t)} | {f: _hits(rules, g, f) for f in followers.get(t, ())}
        hit = sorted(set().union(*hits.values()))
        if not hit:
            continue
        out[t] = combine(rules, hit, "activation", activation_types, activation_methods)
        used.update(hit)
        via = sorted(f for f, h in hits.items() if f != t and set(h) - set(hits[t]))
        if via:
            said.append(f"overrides naming {', '.join(map(repr, via[:3]))}{' ...' if len(via) > 3 else ''} apply "
                        f"to {t!r}, whose encoding {'it reuses' if len(via) == 1 else 'they reuse'} through data "
                        f"movement (the same values in another layout), and to the {len(followers[t])} tensor(s) "
                        "reusing it")
    unused = [i for i in range(len(rules)) if i not in used]
    if notes is not None:
        notes += said + [f"overrides[{i}] {_show(rules[i])} matches no tensor this run quantizes (check the name; "
                         "the placement may leave that tensor in float)" for i in unused]
    floats = {k for k, r in out.items() if r.float}
    if floats:
        plan.weights = [s for s in plan.weights if s.name not in floats]
        plan.biases = [b for b in plan.biases if b.weight not in floats]
        plan.activations = [t for t in plan.activations if t not in floats]
        for t in floats:
            plan.skipped[t] = "left in float by an override"
    return out


def _two_bit_notes(weights: dict[str, Resolved]) -> list[str]:
    """The storage note of the weights the rules give a 2-bit type, one per type."""
    from qlinear.core.types import qtype
    from qlinear.graph.storage import two_bit_note

    by: dict[str, list[str]] = {}
    for name, r in weights.items():
        if r.type is not None and not r.float and qtype(r.type).bits == 2:
            by.setdefault(r.type, []).append(name)
    return [two_bit_note(f"overrides give {len(v)} weight(s) {t} ({', '.join(map(repr, v[:3]))}"
                         f"{' ...' if len(v) > 3 else ''})", t) for t, v in by.items()]


def _hits(rules: tuple[Override, ...], g: Any, t: str) -> list[int]:
    """The rules matching activation ``t`` (by its name, its producer's name or operator)."""
    p = g.producer.get(t)
    return [i for i, o in enumerate(rules) if o.matches(t, (p.name or None) if p is not None else None,
                                                        p.op_type if p is not None else None, "activation")]


def _show(o: Override) -> str:
    return "{" + ", ".join(f"{f.name}: {getattr(o, f.name)!r}" for f in fields(o) if getattr(o, f.name) is not None) \
        + "}"


__all__ = ["Override", "Resolved", "apply_to_plan", "combine", "resolve", "validate"]
