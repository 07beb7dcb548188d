"""``report.json`` and ``report.html`` of a quantization run: tables plus inline SVG plots (per-layer SQNR bars,
histograms of the worst tensors with the chosen range marked). No plotting dependency: the SVG is written here."""

from __future__ import annotations

import html
import json
import math
from typing import Any

from qlinear.ptq.budget import chart as budget_chart
from qlinear.ptq.evaluate import Report
from qlinear.ptq.sensitivity import chart


def _finite(v: Any) -> Any:
    """JSON has no NaN or infinities: they become null (the HTML report shows them as text)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # NumPy scalars
        return _finite(v.item())
    return v


def to_json(qm: Any, rep: Report) -> str:
    """The report as strict JSON (non-finite numbers, e.g. the SQNR of an exactly represented tensor, are null):
    ``config`` is the configuration used (settled for the target), ``requested`` the options the user set, ``notes``
    every change the target's rules made to them."""
    if qm.config.weight_only:
        return json.dumps(_finite(weight_only_doc(qm, rep)), indent=2, allow_nan=False)
    doc = {"config": qm.config.to_dict(), "requested": sorted(getattr(qm.config, "requested", ())), "notes": qm.notes, "timings": qm.timings,
           "encodings": len(qm.encodings), "report": rep.to_dict(), "decisions": list(qm.decisions),
           **({"sensitivity": rep.sensitivity} if getattr(rep, "sensitivity", None) else {}),
           **({"budget": qm.budget} if getattr(qm, "budget", None) else {}),
           "integer_check": None if qm.integer_check is None else {
               "ok": qm.integer_check.ok, "layers": [lc.as_dict() for lc in qm.integer_check.layers]}}
    return json.dumps(_finite(doc), indent=2, allow_nan=False)


def _bars(stats: list, width: int = 900) -> str:
    if not stats:
        return ""
    h_bar, gap = 10, 3
    vals = [max(min(s.sqnr_db, 80.0), -20.0) if math.isfinite(s.sqnr_db) else 80.0 for s in stats]
    vmax = max(max(vals), 1.0)
    left = 230
    height = len(stats) * (h_bar + gap) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="9" '
             f'font-family="sans-serif">']
    for i, (s, v) in enumerate(zip(stats, vals)):
        y = 20 + i * (h_bar + gap)
        w = max(0.0, v) / vmax * (width - left - 60)
        color = "#c0392b" if v < 15 else ("#e67e22" if v < 25 else "#2e86c1")
        parts.append(f'<text x="{left - 4}" y="{y + 8}" text-anchor="end">{html.escape(s.name[:40])}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{h_bar}" fill="{color}"/>')
        parts.append(f'<text x="{left + w + 3:.1f}" y="{y + 8}">{s.sqnr_db:.1f} dB</text>')
    parts.append(f'<text x="{left}" y="12">SQNR of each activation\'s quantization (dB, higher is better)</text>')
    parts.append("</svg>")
    return "".join(parts)


def _hist(name: str, h: dict, width: int = 420, height: int = 160) -> str:
    """Histogram (log counts) of a tensor's float values over a span covering the data and the chosen range; the
    range [lo, hi] is marked in red where it lies, the data's extent in grey."""
    counts, edges = h["counts"], h["edges"]
    lo, hi = edges[0], edges[-1]
    span = (hi - lo) or 1.0
    cmax = max(max(counts), 1)
    bw = (width - 20) / len(counts)
    p = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="9" '
         f'font-family="sans-serif"><text x="10" y="12">{html.escape(name)}</text>']
    for i, c in enumerate(counts):
        bh = (math.log1p(c) / math.log1p(cmax)) * (height - 40)
        p.append(f'<rect x="{10 + i * bw:.1f}" y="{height - 20 - bh:.1f}" width="{bw * 0.9:.1f}" height="{bh:.1f}" '
                 f'fill="#7f8c8d"/>')

    def at(v: float) -> float:
        return 10 + (v - lo) / span * (width - 20)

    for key, col, dash in (("data_lo", "#7f8c8d", "3,2"), ("data_hi", "#7f8c8d", "3,2"), ("lo", "#c0392b", ""),
                           ("hi", "#c0392b", "")):
        v = h.get(key)
        if v is None or not math.isfinite(v):
            continue
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        p.append(f'<line x1="{at(v):.1f}" y1="18" x2="{at(v):.1f}" y2="{height - 20}" stroke="{col}" '
                 f'stroke-width="2"{extra}/>')
    p.append(f'<text x="10" y="{height - 6}">{lo:.3g}</text><text x="{width - 60}" y="{height - 6}">{hi:.3g}</text>')
    p.append(f'<text x="{width / 2 - 90:.0f}" y="{height - 6}">range [{h["lo"]:.3g}, {h["hi"]:.3g}] (red), data '
             "(grey); log counts</text></svg>")
    return "".join(p)


def _sensitivity(rep: Report) -> str:
    items = getattr(rep, "sensitivity", None) or []
    if not items:
        return ""
    return (f"<h2>Sensitivity: output {html.escape(items[0]['metric'])} with only one tensor quantized / left float "
            f"(most harmful first)</h2>{chart(items)}")


def _mixed_html(rows: list[dict]) -> str:
    """The Concats whose parts' ranges differ by more than 16x, each part's SQNR; red with the remedy where the
    target made the parts share one scale."""
    if not rows:
        return ""
    body = []
    for r in rows:
        parts = "; ".join(f"{html.escape(p['tensor'])} |x|&le;{p['range']:.3g}: "
                          + ("n/a" if p["sqnr_db"] is None else f"{p['sqnr_db']:.1f} dB") for p in r["parts"])
        how = f'one scale (target rule): {html.escape(r["remedy"])}' if r["tied"] else "each part keeps its parameters"
        style = ' style="color:#c0392b"' if r["tied"] else ""
        body.append(f"<tr{style}><td>{html.escape(r['concat'])}</td><td>{html.escape(', '.join(r['graph_outputs']))}"
                    f"</td><td>{r['ratio']:.0f}x</td><td>{parts}</td><td>{how}</td></tr>")
    return ("<h2>Concats of mixed ranges (parts differ by more than 16x)</h2><table><tr><th>Concat</th>"
            "<th>graph output</th><th>range ratio</th><th>parts: SQNR</th><th>parameters</th></tr>"
            + "".join(body) + "</table>")


def _budget(qm: Any) -> str:
    curve = getattr(qm, "budget", None) or []
    if not curve:
        return ""
    red = ' style="color:#c0392b"'
    rows = "".join(f"<tr{red if c.get('chosen') else ''}><td>{html.escape(c['candidate'])}"
                   f"</td><td>{c['int4_weights']}</td><td>{c['size_fraction']:.4f}</td><td>{c['average_bits']:.2f}"
                   f"</td><td>{'yes' if c['within_budget'] else 'no'}</td><td>{c['metric']:.4f}</td>"
                   f"<td>{c['sqnr_db']:.2f}</td></tr>" for c in curve)
    return ("<h2>Mixed precision: size against metric of the measured candidates (held-back calibration samples; "
            f"chosen in red)</h2>{budget_chart(curve)}<table><tr><th>candidate</th><th>int4 weights</th>"
            "<th>size (of float)</th><th>bits per weight</th><th>within budget</th><th>metric</th><th>SQNR dB</th>"
            f"</tr>{rows}</table>")


def to_html(qm: Any, rep: Report) -> str:
    cfg = qm.config
    if cfg.weight_only:
        return weight_only_html(qm, rep)
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in cfg.to_dict().items())
    kinds = getattr(rep, "kinds", None) or {}
    heads = getattr(rep, "headlines", None) or {}

    def cell(o: str, k: str, v: float) -> str:
        text = f"{k}: {v:.4f}"
        return f"<td><b>{text}</b></td>" if heads.get(o) == k else f"<td>{text}</td>"

    outs = "".join(
        f"<tr><td>{html.escape(o)}</td><td>{html.escape(kinds.get(o, ''))}</td>"
        + ("".join(cell(o, k, v) for k, v in r.items()) or "<td>skipped: the quantization does not reach it</td>")
        + "</tr>" for o, r in rep.outputs.items())
    worst = sorted(rep.tensors, key=lambda s: s.sqnr_db)
    trows = "".join(f"<tr><td>{html.escape(s.name)}</td><td>{s.dtype}</td><td>{s.scale:.4g}</td><td>{s.zero_point}</td>"
                    f"<td>[{s.lo:.4g}, {s.hi:.4g}]</td><td>{s.sqnr_db:.2f}</td></tr>" for s in worst)
    decisions = getattr(qm, "decisions", None) or []
    srows = "".join(f"<tr><td>{i + 1}</td><td>{html.escape(str(d.get('tensor', '')))}</td>"
                    f"<td>{html.escape(str(d.get('change', '')))}</td><td>{html.escape(str(d.get('reason', '')))}</td>"
                    f"<td>{'' if d.get('metric') is None else format(d['metric'], '.4f')}</td></tr>"
                    for i, d in enumerate(decisions))
    hists = "".join(_hist(n, h) for n, h in rep.histograms.items())
    times = ", ".join(f"{k} {v:.2f} s" for k, v in qm.timings.items())
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in qm.notes)
    ic = qm.integer_check
    red = ' style="color:#c0392b"'
    irows = "" if ic is None else "".join(
        f"<tr{'' if lc.ok else red}><td>{html.escape(lc.node)}</td><td>{lc.op}</td>"
        f"<td>{lc.accumulator}</td><td>{'' if lc.accumulator == 'float' else lc.bound}</td>"
        f"<td>{'' if lc.accumulator == 'float' else f'{lc.headroom_bits:.2f}'}</td><td>{html.escape(lc.note)}</td></tr>"
        for lc in ic.layers)
    isum = "" if ic is None else html.escape(str(ic))
    mixed = _mixed_html(getattr(rep, "mixed", None) or [])
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>qlinear quantization report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px}}h2{{margin-top:1.5em}}</style></head><body>
<h1>qlinear quantization report</h1>
<p>{rep.samples} held-out samples (per-tensor statistics on the first {rep.stat_samples}); outputs computed by
{"ONNX Runtime's int8 kernels (exact on this CPU)" if rep.engine == "ort-int8" else "the Q/DQ model as ONNX defines it"};
{len(qm.encodings)} encodings; timings: {times}</p><ul>{notes}</ul>
<h2>Outputs against the float model</h2><p>Each output is judged by the metric of its kind (bold).</p>
<table><tr><th>output</th><th>kind</th><th colspan="6">metrics</th></tr>{outs}</table>{mixed}
<h2>Per-tensor SQNR of its own quantization (lowest first)</h2>{_bars(worst)}
{_sensitivity(rep)}
{_budget(qm)}
<h2>Precision decisions</h2><table><tr><th>#</th><th>tensor</th><th>change</th><th>why</th>
<th>output metric after (calibration samples)</th></tr>{srows}
</table>
<h2>Worst tensors: float histogram and chosen range</h2>{hists}
<h2>All quantized activations</h2><table><tr><th>tensor</th><th>type</th><th>scale</th><th>zero point</th>
<th>range</th><th>SQNR dB</th></tr>{trows}</table>
<h2>Integer accumulators (worst case over all inputs)</h2><p>{isum}</p><table><tr><th>layer</th><th>op</th>
<th>accumulator</th><th>worst |acc|</th><th>headroom (bits)</th><th>note</th></tr>{irows}</table>
<h2>Configuration</h2><table>{rows}</table></body></html>"""


# --------------------------------------------------------------------------------------------------- weight-only
def weight_only_doc(qm: Any, rep: Report) -> dict[str, Any]:
    """The weight-only ``report.json``: the options the mode uses (settled), notes, timings, the report (outputs,
    per-weight SQNR against round to nearest, sizes, coverage); no activation sections."""
    return {"mode": "weight-only", "config": qm.config_report(), "requested": sorted(qm.config.requested),
            "notes": qm.notes, "timings": qm.timings, "encodings": len(qm.encodings), "report": rep.to_dict()}


def _num(v: Any, fmt: str = ".2f") -> str:
    return format(v, fmt) if isinstance(v, float) and math.isfinite(v) else html.escape(str(v))


def weight_only_html(qm: Any, rep: Report) -> str:
    """The weight-only ``report.html``: only sections with content."""
    esc = html.escape
    heads = rep.headlines or {}

    def cell(o: str, k: str, v: float) -> str:
        text = f"{k}: {_num(v, '.4f')}"
        return f"<td><b>{text}</b></td>" if heads.get(o) == k else f"<td>{text}</td>"

    outs = "".join(f"<tr><td>{esc(o)}</td><td>{esc(rep.kinds.get(o, ''))}</td>"
                   + "".join(cell(o, k, v) for k, v in r.items()) + "</tr>" for o, r in rep.outputs.items())
    sections = [f"<h2>Outputs against the float model</h2><p>{rep.samples} held-out samples; the quantized model as "
                "written, run by ONNX Runtime; each output judged by the metric of its kind (bold).</p>"
                f"<table><tr><th>output</th><th>kind</th><th colspan=\"6\">metrics</th></tr>{outs}</table>"]
    if rep.sizes:
        f, q = rep.sizes["float_bytes"], rep.sizes["quantized_bytes"]
        sections.append(f"<h2>Size</h2><p>initializers: {f / 2**20:.1f} MiB float, {q / 2**20:.1f} MiB quantized "
                        f"({q / max(f, 1):.1%})</p>")
    cov = rep.coverage
    if cov:
        left = "".join(f"<tr><td>{esc(k)}</td><td>{v}</td></tr>" for k, v in cov.get("left_float", {}).items())
        sections.append(f"<h2>Coverage</h2><p>quantized {cov['quantized']} of {cov['total']} weights</p>"
                        + (f"<table><tr><th>left float</th><th>weights</th></tr>{left}</table>" if left else ""))
    if rep.weights:
        rows = "".join(f"<tr><td>{esc(w['weight'])}</td><td>{w['dtype']}</td><td>{esc(w['grid'])}</td>"
                       f"<td>{w['method']}</td><td>{_num(w['sqnr_db'])}</td><td>{_num(w['rtn_sqnr_db'])}</td>"
                       f"<td>{esc(w.get('lm_head', ''))}</td></tr>"
                       for w in sorted(rep.weights, key=lambda w: w["sqnr_db"]))
        sections.append("<h2>Weights (lowest SQNR first)</h2><p>SQNR of each weight's quantization, "
                        "<code>10 log10(sum w^2 / sum (w - DQ(Q(w)))^2)</code>, with the run's method and with "
                        "round to nearest on the same grid.</p><table><tr><th>weight</th><th>type</th><th>grid</th>"
                        f"<th>method</th><th>SQNR dB</th><th>round to nearest dB</th><th>lm_head</th></tr>{rows}"
                        "</table>")
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(str(v))}</td></tr>" for k, v in qm.config_report().items())
    sections.append(f"<h2>Configuration</h2><table>{rows}</table>")
    notes = "".join(f"<li>{esc(n)}</li>" for n in qm.notes)
    times = ", ".join(f"{k} {v:.2f} s" for k, v in qm.timings.items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>qlinear weight-only report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px}}h2{{margin-top:1.5em}}</style></head><body>
<h1>qlinear weight-only quantization report</h1>
<p>{len(qm.encodings)} weight encodings; timings: {times}</p>{f"<ul>{notes}</ul>" if notes else ""}
{"".join(sections)}</body></html>"""
