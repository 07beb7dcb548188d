"""The layout of a file as read, so that re-saving it in the same version keeps what qlinear's writers would not
reproduce: the order of the top-level keys and of each entry's keys, and the values of entries whose parameters did
not change (aimet-torch writes 0.6.1 ``min``/``max`` as float32 values widened to double, where a writer would
recompute them from scale and offset in float64; its 1.0.0 LPBQ files put ``producer`` and ``version`` first; its
2.0.0 LPBQ entries put ``axis`` and ``block_size`` before ``per_block_int_scale``).

:func:`record` notes, for every entry of the parsed document, the :class:`~qlinear.encodings.model.Encoding` read
from it and the entry itself (or, for the fast reader of large files, only its key order). :func:`restore` puts the
recorded entries back into a freshly written document of the same version wherever the encoding is unchanged, and
reorders keys as the file had them. Any changed, added or converted encoding is written the writer's way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SECTIONS = ("activation_encodings", "param_encodings", "encodings")


@dataclass
class Layout:
    version: str
    top_keys: list[str]
    entries: dict[tuple[str, str], tuple[Any, Any, list[str] | None]] = field(default_factory=dict)
    # (section, tensor) -> (Encoding read, original entry or None, key order of the entry (first dict) or None)


def _named(section: Any) -> list[tuple[str, Any]]:
    if isinstance(section, dict):  # 0.6.1: name -> [per-channel dicts]
        return list(section.items())
    if isinstance(section, list):  # 1.0.0 / 2.x: entries with "name"
        return [(e["name"], e) for e in section if isinstance(e, dict) and isinstance(e.get("name"), str)]
    return []


def _keys(entry: Any) -> list[str] | None:
    if isinstance(entry, dict):
        return list(entry)
    if isinstance(entry, list) and entry and isinstance(entry[0], dict):
        return list(entry[0])
    return None


def record(doc: dict, version: str, encodings: Any, *, keep_values: bool = True) -> Layout:
    """The layout of ``doc`` (parsed, of ``version``) whose encodings are ``encodings`` (an EncodingSet)."""
    lay = Layout(version, list(doc))
    for sec in SECTIONS:
        for name, entry in _named(doc.get(sec)):
            if name in encodings:
                lay.entries[(sec, name)] = (encodings[name], entry if keep_values else None, _keys(entry))
    return lay


def _unchanged(e: Any, read: Any) -> bool:
    if e is read:
        return True
    if read.axis is None and e.axis is not None:  # axes resolved against a model since: the file never had them
        try:
            e = e.replace(axis=None)
        except Exception:  # noqa: BLE001 - a replacement the model forbids: treat as changed
            return False
    return e == read


def _reorder(d: dict, keys: list[str]) -> dict:
    out = {k: d[k] for k in keys if k in d}
    out.update((k, v) for k, v in d.items() if k not in out)
    return out


def restore(doc: dict, lay: Layout, encodings: Any) -> dict:
    """``doc`` (written by qlinear in ``lay.version``) with the recorded layout put back (module docstring)."""
    for sec in SECTIONS:
        section = doc.get(sec)
        if isinstance(section, dict):
            for name in list(section):
                rec = lay.entries.get((sec, name))
                if rec is None or name not in encodings:
                    continue
                read, entry, keys = rec
                if entry is not None and _unchanged(encodings[name], read):
                    section[name] = entry
                elif keys is not None and isinstance(section[name], list):
                    section[name] = [_reorder(x, keys) if isinstance(x, dict) else x for x in section[name]]
        elif isinstance(section, list):
            for i, gen in enumerate(section):
                name = gen.get("name") if isinstance(gen, dict) else None
                rec = lay.entries.get((sec, name)) if name is not None else None
                if rec is None or name not in encodings:
                    continue
                read, entry, keys = rec
                if entry is not None and _unchanged(encodings[name], read):
                    section[i] = entry
                elif keys is not None:
                    section[i] = _reorder(gen, keys)
    return _reorder(doc, lay.top_keys)


__all__ = ["Layout", "record", "restore"]
