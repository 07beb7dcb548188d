"""Inline SVG charts of the report (no plotting dependency, no script, no external style): horizontal bars with an
axis of ticks, a scatter plot with both axes and the line y = x, a histogram with an axis. Every drawn number is
finite; a non-finite value is written as text in place of its bar."""

from __future__ import annotations

import html
import math
from typing import Any, NamedTuple

FONT = 'font-size="9" font-family="sans-serif"'


class Bar(NamedTuple):
    label: str
    value: float | None
    color: str = "#2e86c1"
    mark: float | None = None      #: a second value drawn as a black tick (e.g. round to nearest)
    text: str = ""                 #: shown after the bar (default: the value)


def ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """About ``n`` round tick values covering ``[lo, hi]`` (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n - 1, 1)
    p = 10 ** math.floor(math.log10(raw))
    step = next(m * p for m in (1, 2, 5, 10) if m * p >= raw)
    first = math.floor(lo / step) * step
    out, k = [round(first, 12)], 1
    while out[-1] < hi - step * 1e-9:
        out.append(round(first + k * step, 12))
        k += 1
    return out


def text_of(v: float | None, unit: str = "") -> str:
    """A value as text: ``inf`` (exact: no error), ``-inf``, ``n/a`` (NaN or unknown)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if math.isinf(v):
        return ("inf" if v > 0 else "-inf") + (" (exact)" if v > 0 else "")
    return f"{v:.1f}{unit}"


def bar_chart(bars: list[Bar], title: str, axis: str, width: int = 900, cls: str = "bars") -> str:
    """Horizontal bars from 0 (or the lowest finite value below it) with a tick axis at the top and bottom; a
    non-finite or missing value gets no bar, its text instead."""
    if not bars:
        return ""
    fin = [v for b in bars for v in (b.value, b.mark) if v is not None and math.isfinite(v)]
    top = max(fin + [0.0])
    t = ticks(min(fin + [0.0]), top if top > 0 else 1.0)
    lo, hi = t[0], t[-1]
    left, right, h, gap, top = 240, 90, 10, 3, 34
    span = width - left - right

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * span

    height = top + len(bars) * (h + gap) + 24
    p = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" width="{width}" height="{height}" {FONT}>'
         f'<text x="{left}" y="11">{html.escape(title)}</text>']
    bottom = top + len(bars) * (h + gap)
    for v in t:
        p.append(f'<line class="tick" x1="{x(v):.1f}" y1="{top - 4}" x2="{x(v):.1f}" y2="{bottom}" stroke="#ddd"/>'
                 f'<text class="ticklabel" x="{x(v):.1f}" y="{top - 7}" text-anchor="middle">{v:g}</text>'
                 f'<text x="{x(v):.1f}" y="{bottom + 10}" text-anchor="middle">{v:g}</text>')
    p.append(f'<text class="axislabel" x="{left + span / 2:.0f}" y="{bottom + 21}" text-anchor="middle">'
             f'{html.escape(axis)}</text>')
    for i, b in enumerate(bars):
        y = top + i * (h + gap)
        p.append(f'<text x="{left - 4}" y="{y + 8}" text-anchor="end">{html.escape(b.label[:44])}</text>')
        end = x(0.0 if lo <= 0 <= hi else lo)
        if b.value is not None and math.isfinite(b.value):
            a, z = sorted((end, x(b.value)))
            p.append(f'<rect x="{a:.1f}" y="{y}" width="{z - a:.1f}" height="{h}" fill="{b.color}"/>')
            end = max(z, end)
        if b.mark is not None and math.isfinite(b.mark):
            p.append(f'<line class="mark" x1="{x(b.mark):.1f}" y1="{y - 1}" x2="{x(b.mark):.1f}" y2="{y + h + 1}" '
                     'stroke="#000" stroke-width="2"/>')
        p.append(f'<text class="value" x="{end + 3:.1f}" y="{y + 8}">{html.escape(b.text or text_of(b.value))}'
                 "</text>")
    p.append("</svg>")
    return "".join(p)


def scatter(xs: list[float], ys: list[float], title: str, xlabel: str, ylabel: str, size: int = 300) -> str:
    """Points ``(x, y)`` with both axes ticked and the line ``y = x`` (grey); non-finite points are left out."""
    pts = [(a, b) for a, b in zip(xs, ys) if a is not None and b is not None and math.isfinite(a)
           and math.isfinite(b)]
    if not pts:
        return ""
    t = ticks(min(min(a, b) for a, b in pts), max(max(a, b) for a, b in pts))
    lo, hi = t[0], t[-1]
    m0, m1 = 45, size - 15

    def px(v: float) -> float:
        return m0 + (v - lo) / (hi - lo) * (m1 - m0)

    def py(v: float) -> float:
        return m1 - (v - lo) / (hi - lo) * (m1 - m0) + 10

    p = [f'<svg xmlns="http://www.w3.org/2000/svg" class="scatter" width="{size}" height="{size + 30}" {FONT}>'
         f'<text x="{m0}" y="9">{html.escape(title)}</text>'
         f'<line x1="{px(lo):.1f}" y1="{py(lo):.1f}" x2="{px(hi):.1f}" y2="{py(hi):.1f}" stroke="#bbb"/>']
    for v in t:
        p.append(f'<text class="ticklabel" x="{px(v):.1f}" y="{m1 + 22}" text-anchor="middle">{v:g}</text>'
                 f'<line x1="{px(v):.1f}" y1="{m1 + 10}" x2="{px(v):.1f}" y2="{m1 + 13}" stroke="#000"/>'
                 f'<text class="ticklabel" x="{m0 - 4}" y="{py(v) + 3:.1f}" text-anchor="end">{v:g}</text>'
                 f'<line x1="{m0 - 3}" y1="{py(v):.1f}" x2="{m0}" y2="{py(v):.1f}" stroke="#000"/>')
    p.append(f'<line x1="{m0}" y1="{m1 + 10}" x2="{m1}" y2="{m1 + 10}" stroke="#000"/>'
             f'<line x1="{m0}" y1="20" x2="{m0}" y2="{m1 + 10}" stroke="#000"/>')
    p.extend(f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="1.5" fill="#2e86c1"/>' for a, b in pts)
    p.append(f'<text class="axislabel" x="{(m0 + m1) / 2:.0f}" y="{size + 26}" text-anchor="middle">'
             f'{html.escape(xlabel)}</text><text class="axislabel" x="10" y="{(m0 + m1) / 2:.0f}" '
             f'transform="rotate(-90 10 {(m0 + m1) / 2:.0f})" text-anchor="middle">{html.escape(ylabel)}</text></svg>')
    return "".join(p)


def histogram(counts: list[int], edges: list[float], title: str, xlabel: str, width: int = 420,
              height: int = 200) -> str:
    """Bars of ``counts`` over ``edges`` (linear counts) with a ticked x axis and the largest count on the y axis."""
    if not counts or not sum(counts) or not all(math.isfinite(e) for e in edges):
        return ""
    lo, hi = edges[0], edges[-1]
    t = [v for v in ticks(lo, hi) if lo <= v <= hi]
    left, right, top, base = 40, 10, 18, height - 32
    cmax = max(counts)

    def x(v: float) -> float:
        return left + (v - lo) / ((hi - lo) or 1.0) * (width - left - right)

    p = [f'<svg xmlns="http://www.w3.org/2000/svg" class="histogram" width="{width}" height="{height}" {FONT}>'
         f'<text x="{left}" y="10">{html.escape(title)}</text>']
    for c, a, b in zip(counts, edges, edges[1:]):
        bh = c / cmax * (base - top)
        p.append(f'<rect x="{x(a):.1f}" y="{base - bh:.1f}" width="{max(x(b) - x(a) - 0.5, 0.5):.1f}" '
                 f'height="{bh:.1f}" fill="#7f8c8d"/>')
    p.append(f'<line x1="{left}" y1="{base}" x2="{width - right}" y2="{base}" stroke="#000"/>'
             f'<text class="ticklabel" x="{left - 3}" y="{top + 3}" text-anchor="end">{cmax}</text>'
             f'<text class="ticklabel" x="{left - 3}" y="{base}" text-anchor="end">0</text>')
    for v in t:
        p.append(f'<line x1="{x(v):.1f}" y1="{base}" x2="{x(v):.1f}" y2="{base + 3}" stroke="#000"/>'
                 f'<text class="ticklabel" x="{x(v):.1f}" y="{base + 12}" text-anchor="middle">{v:g}</text>')
    p.append(f'<text class="axislabel" x="{(left + width - right) / 2:.0f}" y="{height - 6}" text-anchor="middle">'
             f"{html.escape(xlabel)}</text></svg>")
    return "".join(p)


def table(head: list[str], rows: list[list[Any]], cls: str = "") -> str:
    """An HTML table of already-escaped cells; "" without rows (a section with no rows is left out)."""
    if not rows:
        return ""
    c = f' class="{cls}"' if cls else ""
    return (f"<table{c}><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{v}</td>" for v in r) + "</tr>" for r in rows) + "</table>")


def budget_chart(curve: list[dict], width: int = 520, height: int = 260) -> str:
    """An inline SVG of the measured candidates: size (fraction of float) against the metric, the chosen one red."""
    pts = [c for c in curve if math.isfinite(c["metric"])]
    if not pts:
        return ""
    xs, ys = [c["size_fraction"] for c in pts], [c["metric"] for c in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1e-3
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1e-3
    p = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="9" '
         'font-family="sans-serif"><text x="40" y="12">metric (calibration samples held back) against size '
         '(fraction of float)</text>']
    for c in sorted(pts, key=lambda c: c["size_fraction"]):
        x = 40 + (c["size_fraction"] - x0) / (x1 - x0) * (width - 80)
        y = height - 30 - (c["metric"] - y0) / (y1 - y0) * (height - 60)
        col = "#c0392b" if c.get("chosen") else "#2e86c1"
        p.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{col}"/><text x="{x + 6:.1f}" y="{y + 3:.1f}">'
                 f'{c["size_fraction"]:.3f}, {c["metric"]:.4f}</text>')
    p.append(f'<text x="40" y="{height - 8}">size {x0:.3f} .. {x1:.3f}; metric {y0:.4f} .. {y1:.4f}</text></svg>')
    return "".join(p)
