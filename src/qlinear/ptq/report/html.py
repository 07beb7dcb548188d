"""``report.json`` and ``report.html`` of a quantization run: tables plus inline SVG plots (per-layer SQNR bars,
histograms of the worst tensors with the chosen range marked). No plotting dependency: the SVG is written here."""

from __future__ import annotations

import html
import json
import math
from typing import Any

from qlinear.ptq.report.deployed import weight_stats
from qlinear.ptq.report.evaluate import Report
from qlinear.ptq.report.svg import Bar, bar_chart, budget_chart, histogram, scatter, table, text_of, ticks


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
           "weights": _weights_of(qm, rep),
           **({"sensitivity": rep.sensitivity} if getattr(rep, "sensitivity", None) else {}),
           **({"budget": qm.budget} if getattr(qm, "budget", None) else {}),
           "integer_check": None if qm.integer_check is None else {
               "ok": qm.integer_check.ok, "layers": [lc.as_dict() for lc in qm.integer_check.layers]}}
    return json.dumps(_finite(doc), indent=2, allow_nan=False)


def _hist(name: str, h: dict, width: int = 420, height: int = 160) -> str:
    """Histogram (log counts) of a tensor's float values over a span covering the data and the chosen range; the
    range [lo, hi] is marked in red where it lies, the data's extent in grey."""
    counts, edges = h["counts"], h["edges"]
    lo, hi = edges[0], edges[-1]
    span = (hi - lo) or 1.0
    cmax = max(max(counts), 1)
    bw = (width - 20) / len(counts)
    p = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="9" '
         f'font-family="sans-serif"><text x="10" y="12">{html.escape(name[:40])}</text>']
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
    for v in (t for t in ticks(lo, hi) if lo <= t <= hi):
        p.append(f'<line x1="{at(v):.1f}" y1="{height - 20}" x2="{at(v):.1f}" y2="{height - 17}" stroke="#000"/>'
                 f'<text class="ticklabel" x="{at(v):.1f}" y="{height - 9}" text-anchor="middle">{v:g}</text>')
    p.append(f'<line x1="10" y1="{height - 20}" x2="{width - 10}" y2="{height - 20}" stroke="#000"/>'
             f'<text x="{width - 10}" y="12" text-anchor="end">range [{h["lo"]:.3g}, {h["hi"]:.3g}] (red), data '
             "(grey); log counts</text></svg>")
    return "".join(p)


def _mixed_html(rows: list[dict]) -> str:
    """The Concats whose parts' ranges differ by more than 16x, each part's SQNR (on the output's grid where the
    output is quantized); red with the remedy where the target made the parts share one scale."""
    if not rows:
        return ""
    body = []
    for r in rows:
        parts = "; ".join(f"{html.escape(p['tensor'])} |x|&le;{p['range']:.3g}: "
                          + ("n/a" if p["sqnr_db"] is None else f"{p['sqnr_db']:.1f} dB") for p in r["parts"])
        how = f'one scale (target rule): {html.escape(r["remedy"])}' if r["tied"] else \
            "each part keeps its parameters; the output is quantized on one grid (each part's SQNR on it)" \
            if r.get("output_grid") else "each part keeps its parameters"
        style = ' style="color:#c0392b"' if r["tied"] else ""
        body.append(f"<tr{style}><td>{html.escape(r['concat'])}</td><td>{html.escape(', '.join(r['graph_outputs']))}"
                    f"</td><td>{r['ratio']:.0f}x</td><td>{parts}</td><td>{how}</td></tr>")
    return ("<table><tr><th>Concat</th>"
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
    return (f"{budget_chart(curve)}<table><tr><th>candidate</th><th>int4 weights</th>"
            "<th>size (of float)</th><th>bits per weight</th><th>within budget</th><th>metric</th><th>SQNR dB</th>"
            f"</tr>{rows}</table>")


# ------------------------------------------------------------------------------------------------ shared sections
STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;font-size:12px}"
         "td,th{border:1px solid #ccc;padding:2px 6px}h2{margin-top:1.5em}.set{font-weight:bold}"
         ".plots svg{margin-right:1em;vertical-align:top}")


def _page(title: str, intro: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole page: each section ``(id, heading, body)`` with a body (the empty ones are left out)."""
    body = "".join(f'<section id="{sid}"><h2>{html.escape(head)}</h2>{b}</section>' for sid, head, b in sections
                   if b)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{STYLE}'
            f"</style></head><body><h1>{html.escape(title)}</h1>{intro}{body}</body></html>")


def _config_section(qm: Any) -> str:
    """The configuration actually used (after the target's rules), the options the user set in bold, and every note
    (what a rule changed, what was left out)."""
    requested = set(getattr(qm.config, "requested", ()) or ())
    cfg = qm.config
    chosen = {"weight_method": lambda: cfg.w_method, "activation_method": lambda: cfg.a_method}
    rows = []
    for k, v in qm.config_report().items():
        text = html.escape(json.dumps(_finite(v)) if not isinstance(v, str) else v)
        if v is None and k in chosen:   # the method the policy chose
            text = f"{html.escape(str(chosen[k]()))} (default of policy {html.escape(str(cfg.policy))})"
        rows.append([f'<span class="set">{html.escape(k)}</span>' if k in requested else html.escape(k), text])
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in qm.notes)
    return ("<p>Every setting the run used, after the target's rules (bold: set by you; the others are defaults)."
            "</p>" + (f"<p>Notes:</p><ul class=\"notes\">{notes}</ul>" if notes else "")
            + table(["option", "value"], rows, "config"))


def _outputs_section(rep: Report, what: str) -> str:
    heads = rep.headlines or {}
    kinds = rep.kinds or {}

    def cell(o: str, k: str, v: float) -> str:
        text = f"{html.escape(k)}: {_num(v, '.4f')}"
        return f"<b>{text}</b>" if heads.get(o) == k else text

    rows = [[html.escape(o), html.escape(kinds.get(o, "")),
             " &nbsp; ".join(cell(o, k, v) for k, v in r.items()) or "skipped: the quantization does not reach it"]
            for o, r in rep.outputs.items()]
    return (f"<p>{rep.samples} held-out samples; {what}; each output judged by the metric of its kind (bold).</p>"
            + table(["output", "kind", "metrics"], rows, "outputs"))


def _deployed_section(rep: Report) -> str:
    d = getattr(rep, "deployed", None) or {}
    if not d:
        return ""
    what = f"<p><code>{html.escape(d['artifact'])}</code> run by {html.escape(d['runtime'])}"
    if d.get("skipped"):
        return what + f": not measured, {html.escape(d['skipped'])}.</p>"
    if d.get("error"):
        return what + f": <b>failed</b>, {html.escape(d['error'])}.</p>"
    if d.get("same_as_outputs"):
        size = f" ({d['file_bytes'] / 2**20:.2f} MiB on disk)" if d.get("file_bytes") else ""
        return what + f"{size}: the outputs above are this file's own, on {d['samples']} held-out samples." \
            + _latency(d.get("latency") or {}) + "</p>"
    heads = d.get("headlines", {})
    rows = [[html.escape(o), " &nbsp; ".join((f"<b>{html.escape(k)}: {_num(v, '.4f')}</b>" if heads.get(o) == k
                                              else f"{html.escape(k)}: {_num(v, '.4f')}") for k, v in r.items())]
            for o, r in d["outputs"].items()]
    took = f" ({d['seconds']:.1f} s)" if d.get("seconds") is not None else ""
    gone = d.get("not_in_tflite") or []
    gone_text = f" Not in the file (not compared): {html.escape(', '.join(gone))}." if gone else ""
    return (what + f" on {d['samples']} held-out samples{took}, against the float model (the Q/DQ model's figures "
            f"are above).{gone_text}</p>" + table(["output", "metrics of the deployed file"], rows, "deployed"))


def _latency(lat: dict) -> str:
    """The sentence on the written model's ONNX Runtime latency against the float model's (:func:`ort_latency`)."""
    if "quantized_ms" not in lat:
        return ""
    return (f" In {html.escape(lat['runtime'])} on this machine: <b>{lat['quantized_ms']:.3g} ms</b> per sample, the "
            f"float model {lat['float_ms']:.3g} ms ({lat['ratio']:.2f}x; {lat['samples']} samples, medians of "
            f"{lat['passes']} passes).")


def _plots_section(rep: Report) -> str:
    """Per float output: scatter of quantized against float values, histogram of their difference, worst samples."""
    parts = []
    for o, p in (getattr(rep, "plots", None) or {}).items():
        sc, er = p["scatter"], p["errors"]
        worst = table(["held-out sample", "SQNR dB", "max |error|"],
                      [[str(w["sample"]), text_of(w["sqnr_db"]), _num(w["max_abs_error"], ".4g")] for w in p["worst"]],
                      "worst")
        parts.append(f'<h3>{html.escape(o)}</h3><div class="plots">'
                     + scatter(sc["float"], sc["quantized"], f"{len(sc['float'])} sampled values", "float",
                               "quantized")
                     + histogram(er["counts"], er["edges"], f"quantized - float ({er['values']} of {er['of']} values)",
                                 "error")
                     + f"</div><p>Worst held-out samples (lowest SQNR of the sample's output):</p>{worst}")
    return "".join(parts)


def _sqnr_color(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "#2e86c1"
    return "#c0392b" if v < 15 else ("#e67e22" if v < 25 else "#2e86c1")


# --------------------------------------------------------------------------------------------------- full-integer
def _weights_of(qm: Any, rep: Report) -> list[dict[str, Any]]:
    """The per-weight statistics of a full-integer run (computed once per report)."""
    got = getattr(rep, "_weight_rows", None)
    if got is None:
        got = weight_stats(qm)
        rep._weight_rows = got  # type: ignore[attr-defined]
    return got


def tensor_rows(qm: Any, rep: Report) -> list[dict[str, Any]]:
    """Weights and activations in one list by tensor name (lowest SQNR first, non-finite last): role, layer (the
    weight's consumer, the activation's producer), type, granularity, scale, zero point, range (an activation's
    quantization grid, a weight's float values), SQNR."""
    rows: dict[str, dict[str, Any]] = {}
    made_by = {o: nd.name or nd.op_type for nd in qm.reference_model.graph.node for o in nd.output}
    for s in rep.tensors:
        rows[s.name] = {"name": s.name, "role": "activation", "layer": made_by.get(s.name, "(graph input)"),
                        "dtype": s.dtype,
                        "granularity": "per-tensor", "scale": f"{s.scale:.4g}", "zero_point": str(s.zero_point),
                        "lo": s.lo, "hi": s.hi, "sqnr_db": s.sqnr_db}
    for w in _weights_of(qm, rep):
        sc = (f"{w['scale_min']:.4g}" if w["scale_min"] == w["scale_max"]
              else f"{w['scale_min']:.3g} .. {w['scale_max']:.3g}")
        row = {"name": w["name"], "role": w["role"], "layer": w["layer"], "dtype": w["dtype"],
               "granularity": w["granularity"], "scale": sc, "zero_point": "", "lo": w["lo"], "hi": w["hi"],
               "sqnr_db": w["sqnr_db"]}
        rows[w["name"]] = {**rows[w["name"]], **row, "role": "activation+" + w["role"]} if w["name"] in rows else row
    return sorted(rows.values(), key=lambda r: (not math.isfinite(r["sqnr_db"]), r["sqnr_db"], r["name"]))


ROLE_COLORS = {"activation": "#2e86c1", "weight": "#8e44ad", "bias": "#16a085"}


def _tensors_section(qm: Any, rep: Report) -> str:
    rows = tensor_rows(qm, rep)
    if not rows:
        return ""
    bars = [Bar(f"{r['name']} ({r['role'][0]})", r["sqnr_db"], ROLE_COLORS.get(r["role"], "#7f8c8d"),
                text=text_of(r["sqnr_db"], " dB")) for r in rows]
    cells = [[html.escape(r["name"]), r["role"], html.escape(r["layer"]), r["dtype"], html.escape(r["granularity"]),
              r["scale"], r["zero_point"], f"[{r['lo']:.4g}, {r['hi']:.4g}]", _num(r["sqnr_db"])] for r in rows]
    return ("<p>SQNR of each tensor's own quantization, <code>10 log10(sum x^2 / sum (x - DQ(Q(x)))^2)</code>: "
            f"activations on the first {rep.stat_samples} held-out samples (range: the quantization grid), weights and "
            "biases on their float values (range: the values); <code>inf</code> means exactly represented. Colours: "
            "activation (a) blue, weight (w) violet, bias (b) green.</p>"
            + bar_chart(bars, "SQNR per tensor (dB, higher is better), lowest first", "SQNR (dB)", cls="sqnr")
            + table(["tensor", "role", "layer", "type", "granularity", "scale", "zero point", "range", "SQNR dB"],
                    cells, "tensors"))


def _integer_section(qm: Any) -> str:
    """The integer accumulators, least headroom first (float accumulators last), with each layer's weight."""
    ic = qm.integer_check
    if ic is None or not ic.layers:
        return ""
    layers = sorted(ic.layers, key=lambda lc: (lc.accumulator == "float", lc.headroom_bits, lc.node))
    red = ' style="color:#c0392b"'
    rows = "".join(
        f"<tr{'' if lc.ok else red}><td>{html.escape(lc.node)}</td><td>{lc.op}</td><td>{html.escape(lc.weight)}</td>"
        f"<td>{lc.accumulator}</td><td>{'' if lc.accumulator == 'float' else lc.bound}</td>"
        f"<td>{'' if lc.accumulator == 'float' else text_of(lc.headroom_bits) if not math.isfinite(lc.headroom_bits) else f'{lc.headroom_bits:.2f}'}</td>"
        f"<td>{html.escape(lc.note)}</td></tr>" for lc in layers)
    return (f"<p>{html.escape(str(ic))}</p><table class=\"integer\"><tr><th>layer</th><th>op</th><th>weight</th>"
            "<th>accumulator</th><th>worst |acc|</th><th>headroom (bits)</th><th>note</th></tr>" + rows + "</table>")


def _decisions_section(qm: Any) -> str:
    decisions = getattr(qm, "decisions", None) or []
    rows = [[str(i + 1), html.escape(str(d.get("tensor", ""))), html.escape(str(d.get("change", ""))),
             html.escape(str(d.get("reason", ""))), "" if d.get("metric") is None else format(d["metric"], ".4f")]
            for i, d in enumerate(decisions)]
    return table(["#", "tensor", "change", "why", "output metric after (calibration samples)"], rows, "decisions")


def _sensitivity_chart(items: list[dict[str, Any]], limit: int = 60) -> str:
    """The ranking (:mod:`qlinear.ptq.report.sensitivity`): per tensor the output SQNR with only it quantized (bar) and with
    only it left float (tick), most harmful first, on a ticked axis; inf as text."""
    bars = [Bar(f"{r['tensor']} ({r['role'][0]})", r["only_quantized"], ROLE_COLORS.get(r["role"], "#7f8c8d"),
                mark=r["only_float"], text=f"{text_of(r['only_quantized'])} / {text_of(r['only_float'])} dB")
            for r in items[:limit]]
    return bar_chart(bars, "output SQNR (dB) with only this tensor quantized (bar, lowest = most harmful) and with "
                     "only it left float (black tick)", "output SQNR (dB)", cls="sensitivity")


def to_html(qm: Any, rep: Report) -> str:
    """The report page: configuration, outputs, the deployed file's accuracy, output plots, tensors (weights and
    activations), then the sections that have content (mixed ranges, sensitivity, size budget, precision decisions,
    histograms of the worst tensors, integer accumulators)."""
    if qm.config.weight_only:
        return weight_only_html(qm, rep)
    engine = ("ONNX Runtime's int8 kernels (exact on this CPU)" if rep.engine == "ort-int8"
              else "the Q/DQ model as ONNX defines it")
    times = ", ".join(f"{k} {v:.2f} s" for k, v in qm.timings.items())
    intro = f"<p>{len(qm.encodings)} encodings; timings: {html.escape(times)}</p>"
    sens = getattr(rep, "sensitivity", None) or []
    sections = [
        ("config", "Configuration", _config_section(qm)),
        ("outputs", "Outputs against the float model", _outputs_section(rep, f"outputs computed by {engine}")),
        ("deployed", "Deployed artifact", _deployed_section(rep)),
        ("plots", "Outputs: quantized against float", _plots_section(rep)),
        ("mixed", "Concats of mixed ranges (parts differ by more than 16x)", _mixed_html(rep.mixed or [])),
        ("tensors", "Tensors: weights and activations (lowest SQNR first)", _tensors_section(qm, rep)),
        ("sensitivity", f"Sensitivity: output {sens[0]['metric']} with only one tensor quantized / left float (most "
         "harmful first)" if sens else "", _sensitivity_chart(sens)),
        ("budget", "Mixed precision: size against metric of the measured candidates (held-back calibration "
         "samples; chosen in red)", _budget(qm)),
        ("decisions", "Precision decisions", _decisions_section(qm)),
        ("histograms", "Worst tensors: float histogram and chosen range",
         "".join(_hist(n, h) for n, h in rep.histograms.items())),
        ("integer", "Integer accumulators, least headroom first (worst case over all inputs)", _integer_section(qm))]
    return _page("qlinear quantization report", intro, sections)


# --------------------------------------------------------------------------------------------------- weight-only
def weight_only_doc(qm: Any, rep: Report) -> dict[str, Any]:
    """The weight-only ``report.json``: the options the mode uses (settled), notes, timings, the report (outputs,
    per-weight SQNR against round to nearest, sizes, coverage, the deployed file, output plots); no activation
    sections."""
    return {"mode": "weight-only", "config": qm.config_report(), "requested": sorted(qm.config.requested),
            "notes": qm.notes, "timings": qm.timings, "encodings": len(qm.encodings), "report": rep.to_dict()}


def _num(v: Any, fmt: str = ".2f") -> str:
    return format(v, fmt) if isinstance(v, float) and math.isfinite(v) else (
        text_of(v) if isinstance(v, float) else html.escape(str(v)))


def _weights_section(rep: Report) -> str:
    ws = sorted(rep.weights, key=lambda w: (not math.isfinite(w["sqnr_db"]), w["sqnr_db"]))
    if not ws:
        return ""
    bars = [Bar(w["weight"], w["sqnr_db"], _sqnr_color(w["sqnr_db"]), mark=w["rtn_sqnr_db"],
                text=f"{text_of(w['sqnr_db'])} / RTN {text_of(w['rtn_sqnr_db'])} dB") for w in ws]
    rows = [[html.escape(w["weight"]), w["dtype"], html.escape(w["grid"]), w["method"], _num(w["sqnr_db"]),
             _num(w["rtn_sqnr_db"]), _num(w["sqnr_db"] - w["rtn_sqnr_db"]) if math.isfinite(w["sqnr_db"])
             and math.isfinite(w["rtn_sqnr_db"]) else "n/a", html.escape(w.get("lm_head", ""))] for w in ws]
    return ("<p>SQNR of each weight's quantization, <code>10 log10(sum w^2 / sum (w - DQ(Q(w)))^2)</code>, with the "
            "run's method (bar) and with round to nearest on the same grid (black tick).</p>"
            + bar_chart(bars, "SQNR per weight (dB): chosen method (bar), round to nearest (tick)", "SQNR (dB)",
                        cls="sqnr")
            + table(["weight", "type", "grid", "method", "SQNR dB", "round to nearest dB", "gain dB", "lm_head"],
                    rows, "weights"))


def _size_section(rep: Report) -> str:
    if not rep.sizes:
        return ""
    f, q = rep.sizes["float_bytes"], rep.sizes["quantized_bytes"]
    disk = (rep.deployed or {}).get("file_bytes")
    bars = [Bar("float", f / 2**20, "#7f8c8d", text=f"{f / 2**20:.2f} MiB"),
            Bar("quantized", q / 2**20, "#2e86c1", text=f"{q / 2**20:.2f} MiB ({q / max(f, 1):.1%})")]
    return (f"<p>initializers: {f / 2**20:.2f} MiB float, {q / 2**20:.2f} MiB quantized ({q / max(f, 1):.1%})"
            + (f"; the written model file(s): {disk / 2**20:.2f} MiB on disk" if disk else "") + "</p>"
            + bar_chart(bars, "initializer bytes (MiB)", "MiB", width=600, cls="sizes"))


def weight_only_html(qm: Any, rep: Report) -> str:
    """The weight-only ``report.html``: only sections with content."""
    cov = rep.coverage
    cov_html = ""
    if cov:
        left = [[html.escape(k), str(v)] for k, v in cov.get("left_float", {}).items()]
        cov_html = (f"<p>quantized {cov['quantized']} of {cov['total']} weights</p>"
                    + table(["left float", "weights"], left, "coverage"))
    times = ", ".join(f"{k} {v:.2f} s" for k, v in qm.timings.items())
    sections = [
        ("config", "Configuration", _config_section(qm)),
        ("outputs", "Outputs against the float model",
         _outputs_section(rep, "the quantized model as written, run by ONNX Runtime")),
        ("deployed", "Deployed artifact", _deployed_section(rep)),
        ("plots", "Outputs: quantized against float", _plots_section(rep)),
        ("size", "Size", _size_section(rep)),
        ("coverage", "Coverage", cov_html),
        ("weights", "Weights (lowest SQNR first)", _weights_section(rep))]
    return _page("qlinear weight-only quantization report",
                 f"<p>{len(qm.encodings)} weight encodings; timings: {html.escape(times)}</p>", sections)
