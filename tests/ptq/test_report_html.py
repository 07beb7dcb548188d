"""The report people read (issue 23 item 4), checked by parsing the written report.html / report.json and against
independent peers (ONNX Runtime on the saved files, LiteRT on the .tflite): the configuration first with its notes,
one per-tensor table joining weights and activations by name with ticked SQNR bars (non-finite values as text, never
a bar), only non-empty sections, the integer table by headroom with weight names, the output plots (scatter, error
histogram, worst samples), the deployed artifact's own accuracy, and the page rendered by headless Chromium."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from onnx_peers import constant_value

import qlinear
from qlinear.examples import DATA, MODEL
from qlinear.ptq.report.html import to_html
from qlinear.ptq.report.svg import ticks

SVG = "{http://www.w3.org/2000/svg}"
RUN = dict(calibration_samples=20, evaluation_samples=20)


class Page(HTMLParser):
    """Sections (id -> heading, tables as lists of rows of cell texts, raw SVG sources) of a report page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.sections: dict[str, dict] = {}
        self.cur: dict | None = None
        self.cell: list[str] | None = None
        self.in_h2 = False
        self.feed(text)
        for sid, sec in self.sections.items():
            body = re.search(rf'<section id="{sid}">(.*?)</section>', text, re.S).group(1)
            sec["svgs"] = [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", body, re.S)]

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.cur = self.sections.setdefault(a["id"], {"h2": "", "tables": [], "bold": []})
        elif self.cur is not None and tag == "h2":
            self.in_h2 = True
        elif self.cur is not None and tag == "table":
            self.cur["tables"].append([])
        elif self.cur is not None and tag == "tr" and self.cur["tables"]:
            self.cur["tables"][-1].append([])
        elif self.cur is not None and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "section":
            self.cur = None
        elif tag == "h2":
            self.in_h2 = False
        elif tag in ("td", "th") and self.cell is not None and self.cur is not None:
            self.cur["tables"][-1][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data):
        if self.in_h2:
            self.cur["h2"] += data
        if self.cell is not None:
            self.cell.append(data)


def _rows(table: list[list[str]]) -> list[dict[str, str]]:
    return [dict(zip(table[0], r)) for r in table[1:]]


@pytest.fixture(scope="module")
def tfl(tmp_path_factory):
    """The example quantized for target tflite and saved (model.tflite written, the report measures it)."""
    out = tmp_path_factory.mktemp("rep") / "out"
    qm = qlinear.quantize(MODEL, DATA, {**RUN, "target": "tflite"})
    qm.save(out)
    return qm, out, Page((out / "report.html").read_text()), json.loads((out / "report.json").read_text())


def _num(s: str) -> float:
    return {"inf (exact)": math.inf, "inf": math.inf, "-inf": -math.inf, "n/a": math.nan}.get(s, None) or float(s)


def test_configuration_first_with_notes_and_requested_in_bold(tmp_path):
    qm = qlinear.quantize(MODEL, DATA, {**RUN, "target": "qnn", "activation_type": "int8"})
    page = (qm.save(tmp_path / "o"), (tmp_path / "o" / "report.html").read_text())[1]
    assert re.findall(r'<section id="(\w+)"', page)[0] == "config"
    p = Page(page)
    cfg = p.sections["config"]
    rows = {r["option"]: r["value"] for r in _rows(cfg["tables"][0])}
    settled = qm.config_report()
    assert set(rows) == set(settled)
    assert rows["activation_type"] == settled["activation_type"] == "uint8"   # the qnn rule changed int8
    assert rows["target"] == "qnn" and json.loads(rows["calibration_samples"]) == 20
    bold = re.findall(r'<span class="set">(\w+)</span>', page)
    assert set(bold) == set(qm.config.requested) and "activation_type" in bold
    notes = re.findall(r"<li>(.*?)</li>", re.search(r'<ul class="notes">(.*?)</ul>', page, re.S).group(1))
    assert len(notes) == len(qm.notes) and any("uint8" in n for n in notes)


def test_one_tensor_table_joins_weights_and_activations(tfl):
    qm, out, page, doc = tfl
    sec = page.sections["tensors"]
    rows = _rows(sec["tables"][0])
    by_name = {r["tensor"]: r for r in rows}
    assert len(by_name) == len(rows)
    acts = {t["name"] for t in doc["report"]["tensors"]}
    weights = {e.name for e in qm.encodings.params if e.scale is not None}
    assert acts <= set(by_name) and weights <= set(by_name)
    assert {by_name[a]["role"] for a in acts} == {"activation"} and {"weight", "bias"} >= {
        by_name[w]["role"] for w in weights}
    # lowest SQNR first, then the non-finite ones
    vals = [_num(r["SQNR dB"]) for r in rows]
    fin = [v for v in vals if math.isfinite(v)]
    assert fin == sorted(fin) and vals[:len(fin)] == fin
    # a weight's SQNR against its float value and the Q/DQ model's dequantized weight (ONNX Runtime)
    fl = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(out / "model.float.onnx")).graph.initializer}
    qdq = onnx.load(str(out / "model.qdq.onnx"))
    made_by = {o: n.name for n in onnx.load(str(out / "model.float.onnx")).graph.node for o in n.output}
    assert all(by_name[a]["layer"] == made_by.get(a, "(graph input)") for a in acts)
    assert all(by_name[a]["granularity"] == "per-tensor" for a in acts)
    assert {by_name[w]["granularity"] for w in weights} == {"per-channel"}
    convs = {n.name: n for n in qdq.graph.node if n.op_type == "Conv"}
    entry = {w["name"]: w for w in doc["weights"]}
    assert set(entry) == weights
    checked = 0
    for w in weights:
        r = by_name[w]
        if r["layer"] not in convs:
            continue
        src = convs[r["layer"]].input[1 if r["role"] == "weight" else 2]
        x, y = fl[w].astype(np.float64), constant_value(qdq, src).astype(np.float64)
        want = 10 * np.log10(np.sum(x * x) / np.sum((x - y) ** 2))
        assert entry[w]["sqnr_db"] == pytest.approx(want, abs=1e-6), w
        assert float(r["SQNR dB"]) == pytest.approx(want, abs=0.006), w
        assert r["range"] == f"[{fl[w].min():.4g}, {fl[w].max():.4g}]"
        assert r["type"] == ("int8" if r["role"] == "weight" else "int32")
        checked += 1
    assert checked >= 6


def test_sqnr_bars_have_ticks_and_inf_is_text(tfl):
    qm, _, _, _ = tfl
    rep = qm.report()
    first = rep.tensors[0]
    old = first.sqnr_db
    try:
        first.sqnr_db = math.inf
        page = Page(to_html(qm, rep))
    finally:
        first.sqnr_db = old
    svg = page.sections["tensors"]["svgs"][0]
    labels = [float(t.text) for t in svg.iter(f"{SVG}text") if t.get("class") == "ticklabel"]
    assert len(labels) >= 3 and labels == sorted(labels)
    assert [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "axislabel"] == ["SQNR (dB)"]
    values = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "value"]
    rects = list(svg.iter(f"{SVG}rect"))
    assert values.count("inf (exact)") == 1 and len(rects) == len(values) - 1
    assert all(math.isfinite(float(r.get("width"))) and float(r.get("width")) >= 0 for r in rects)
    # the tick positions cover every bar
    xs = [float(ln.get("x1")) for ln in svg.iter(f"{SVG}line") if ln.get("class") == "tick"]
    assert all(min(xs) - 0.1 <= float(r.get("x")) and float(r.get("x")) + float(r.get("width")) <= max(xs) + 0.1
               for r in rects)


def test_ticks_are_round_and_cover():
    for lo, hi in [(0, 43.4), (-7.2, 81), (0.001, 0.0042), (5, 5)]:
        t = ticks(lo, hi)
        assert t[0] <= lo and t[-1] >= hi and 2 <= len(t) <= 12
        steps = {round(b - a, 9) for a, b in zip(t, t[1:])}
        assert len(steps) == 1


def test_only_sections_with_content(tfl):
    _, _, page, _ = tfl
    assert {"decisions", "sensitivity", "budget", "mixed"}.isdisjoint(page.sections)  # nothing to show: left out
    for sid, sec in page.sections.items():
        assert sec["h2"] and (sec["tables"] or sec["svgs"] or sid == "deployed"), sid
        for t in sec["tables"]:
            assert len(t) >= 2, sid   # a header and at least one row


def test_integer_table_by_headroom_with_weight_names(tfl):
    qm, _, page, doc = tfl
    rows = _rows(page.sections["integer"]["tables"][0])
    layers = {lc.node: lc for lc in qm.integer_check.layers}
    assert [r["layer"] for r in rows] and set(r["layer"] for r in rows) == set(layers)
    heads = [float(r["headroom (bits)"]) for r in rows if r["accumulator"] != "float"]
    assert heads == sorted(heads)
    inits = {t.name for t in qm.encoded_model.graph.initializer}
    for r in rows:
        assert r["weight"] == layers[r["layer"]].weight and r["weight"] in inits
        assert int(r["worst |acc|"]) == layers[r["layer"]].bound


def test_output_plots_against_onnxruntime(tfl):
    qm, out, page, doc = tfl
    plots = doc["report"]["output_plots"]
    assert set(plots) == {"logits"}
    p = plots["logits"]
    sec = page.sections["plots"]
    sc = [s for s in sec["svgs"] if s.get("class") == "scatter"][0]
    assert len(list(sc.iter(f"{SVG}circle"))) == len(p["scatter"]["float"]) > 20
    hist = [s for s in sec["svgs"] if s.get("class") == "histogram"][0]
    assert len(list(hist.iter(f"{SVG}rect"))) == len(p["errors"]["counts"])
    assert sum(p["errors"]["counts"]) == p["errors"]["values"] == p["errors"]["of"]  # small: every value counted
    # worst samples: per-sample SQNR of the saved Q/DQ model's logits against the float model's (ONNX Runtime)
    start, stop = qm.held_out()
    x = np.load(DATA)["input"][start:stop]
    fs = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])  # the user's float model
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_quant_qdq", "1")  # report engine "onnx": every Q/DQ as an operator
    assert doc["report"]["engine"] == "onnx"
    qs = ort.InferenceSession(str(out / "model.qdq.onnx"), so, providers=["CPUExecutionProvider"])
    f = np.concatenate([fs.run(["logits"], {"input": x[i:i + 1]})[0] for i in range(len(x))]).astype(np.float64)
    q = np.concatenate([qs.run(["logits"], {"input": x[i:i + 1]})[0] for i in range(len(x))]).astype(np.float64)
    per = 10 * np.log10(np.sum(f * f, 1) / np.sum((f - q) ** 2, 1))
    order = np.argsort(per, kind="stable")[:5]
    worst = _rows(page.sections["plots"]["tables"][0])
    assert [int(r["held-out sample"]) for r in worst] == [start + int(i) for i in order]
    assert [float(r["SQNR dB"]) for r in worst] == pytest.approx(per[order], abs=0.2)
    lim = max(abs(e) for e in p["errors"]["edges"])
    assert lim == pytest.approx(np.abs(q - f).max(), rel=0.05)


def test_deployed_tflite_measured_by_litert(tfl):
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed: the .tflite cannot be run")
    from ai_edge_litert.interpreter import Interpreter

    qm, out, page, doc = tfl
    d = doc["report"]["deployed"]
    assert d["artifact"] == "model.tflite" and d["runtime"].startswith("LiteRT") and not d["same_as_outputs"]
    start, stop = qm.held_out()
    x = np.load(DATA)["input"][start:stop]
    it = Interpreter(model_path=str(out / "model.tflite"))
    it.allocate_tensors()
    fs = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])  # the user's float model
    agree = []
    for i in range(len(x)):
        it.set_tensor(it.get_input_details()[0]["index"], x[i:i + 1].transpose(0, 2, 3, 1))
        it.invoke()
        t = it.get_tensor(it.get_output_details()[0]["index"])
        agree.append(t.argmax() == fs.run(["logits"], {"input": x[i:i + 1]})[0].argmax())
    assert d["samples"] == len(x) and d["outputs"]["logits"]["top1_agreement"] == pytest.approx(np.mean(agree))
    cells = _rows(page.sections["deployed"]["tables"][0])
    assert cells[0]["output"] == "logits" and f"top1_agreement: {np.mean(agree):.4f}" in cells[0][
        "metrics of the deployed file"]


def test_deployed_onnx_is_the_evaluated_file(tmp_path):
    qm = qlinear.quantize(MODEL, DATA, RUN)
    qm.save(tmp_path / "o")
    d = json.loads((tmp_path / "o" / "report.json").read_text())["report"]["deployed"]
    assert d["artifact"] == "model.qdq.onnx" and d["same_as_outputs"]
    assert d["file_bytes"] == (tmp_path / "o" / "model.qdq.onnx").stat().st_size
    assert d["outputs"]["logits"]["top1_agreement"] == qm.report().outputs["logits"]["top1_agreement"]
    assert "latency" not in d   # timing both models again is asked for (--latency): the report's own time counts
    qm.save(tmp_path / "o", latency=True)
    d = json.loads((tmp_path / "o" / "report.json").read_text())["report"]["deployed"]
    lat = d["latency"]   # target ort: the written model and the float model timed in ONNX Runtime's default session
    assert lat["samples"] == 8 and lat["passes"] >= 1 and lat["float_ms"] > 0 and lat["quantized_ms"] > 0
    assert lat["ratio"] == pytest.approx(lat["quantized_ms"] / lat["float_ms"])
    assert f"{lat['quantized_ms']:.3g} ms</b> per sample" in (tmp_path / "o" / "report.html").read_text()


def test_slower_than_float_is_a_note():
    """A written model slower than the float model in ONNX Runtime (by 10 %, the float model taking 1 ms or more)
    gets a note with the measured times; a faster one, or one whose float model runs in microseconds, none."""
    from qlinear.ptq.report.deployed import slower_note

    lat = {"samples": 8, "passes": 5, "float_ms": 14.5, "quantized_ms": 19.4}
    note = slower_note(lat)
    assert note is not None and "took 19.4 ms per sample, the float model 14.5 ms" in note and "slower" in note
    assert slower_note(dict(lat, quantized_ms=8.3)) is None
    assert slower_note(dict(lat, float_ms=0.05, quantized_ms=0.08)) is None
    assert slower_note({"skipped": "no held-out samples"}) is None


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH: the headless rendering check needs it "
                                             "(Debian: apt-get install chromium)")
def test_rendered_by_headless_chromium(tfl, tmp_path):
    """Chromium parses the page (the DOM it dumps has every section and SVG) and draws the charts (the screenshot
    has the bars' colour)."""
    _, out, page, _ = tfl
    url = (out / "report.html").resolve().as_uri()
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    assert re.findall(r'<section id="(\w+)"', dom) == list(page.sections)
    assert dom.count("<svg") == sum(len(s["svgs"]) for s in page.sections.values()) >= 4
    shot = tmp_path / "shot.png"
    subprocess.run(common + [f"--screenshot={shot}", "--window-size=1200,6000", url], capture_output=True,
                   timeout=120, check=True)
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    colours = {tuple(c) for c in np.unique(img, axis=0)}
    assert (0x2e, 0x86, 0xc1) in colours and (0x8e, 0x44, 0xad) in colours   # activation and weight bars drawn


def test_weight_only_matmulnbits_report(tmp_path):
    """Weight-only, MatMulNBits output: the deployed file is the evaluated one (its size on disk), per-weight SQNR
    bars with the round-to-nearest tick and the gain, sizes, and the worst samples of the MatMulNBits model in ONNX
    Runtime against the float model."""
    from tiny_models import lm_data, tiny_lm

    m, d = tiny_lm(), lm_data(n=12)
    qm = qlinear.quantize(m, d, {"activation_type": "float", "weight_type": "int4", "weights": "per-block",
                                 "block_size": 32, "weight_method": "mse", "output_format": "matmulnbits",
                                 "evaluation_samples": 8})
    out = tmp_path / "out"
    qm.save(out)
    doc = json.loads((out / "report.json").read_text())
    page = Page((out / "report.html").read_text())
    dep = doc["report"]["deployed"]
    files = [p for p in out.iterdir() if p.name.startswith("model.matmulnbits.onnx")]
    assert dep["artifact"] == "model.matmulnbits.onnx" and dep["same_as_outputs"]
    assert dep["file_bytes"] == sum(p.stat().st_size for p in files)
    qmodel = onnx.load(str(out / "model.matmulnbits.onnx"), load_external_data=False)
    assert any(n.op_type == "MatMulNBits" for n in qmodel.graph.node)
    # weights: a bar per weight, a tick for round to nearest, the gain column
    svg = page.sections["weights"]["svgs"][0]
    ws = doc["report"]["weights"]
    assert len(list(svg.iter(f"{SVG}rect"))) == len(ws)
    assert len([ln for ln in svg.iter(f"{SVG}line") if ln.get("class") == "mark"]) == len(ws)
    for r in _rows(page.sections["weights"]["tables"][0]):
        assert float(r["gain dB"]) == pytest.approx(float(r["SQNR dB"]) - float(r["round to nearest dB"]), abs=0.011)
        assert float(r["gain dB"]) >= -0.005   # mse never worse than round to nearest
    sizes = doc["report"]["sizes"]
    fl_rect, q_rect = list(page.sections["size"]["svgs"][0].iter(f"{SVG}rect"))
    assert float(q_rect.get("width")) / float(fl_rect.get("width")) == pytest.approx(
        sizes["quantized_bytes"] / sizes["float_bytes"], abs=0.01) and sizes["quantized_bytes"] < sizes["float_bytes"]
    # worst samples of the MatMulNBits model (ONNX Runtime) against the float model
    start, stop = qm.held_out()
    ids = d["input_ids"][start:stop]
    fl = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input_ids": ids})[0]
    ql = ort.InferenceSession(str(out / "model.matmulnbits.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids})[0]
    f, q = fl.reshape(len(ids), -1).astype(np.float64), ql.reshape(len(ids), -1).astype(np.float64)
    per = 10 * np.log10(np.sum(f * f, 1) / np.sum((f - q) ** 2, 1))
    order = np.argsort(per, kind="stable")[:5]
    worst = doc["report"]["output_plots"]["logits"]["worst"]
    assert [w["sample"] for w in worst] == [start + int(i) for i in order]
    assert [w["sqnr_db"] for w in worst] == pytest.approx(per[order], abs=1e-3)
    assert doc["report"]["outputs"]["logits"]["kind"] == "token_logits"


def test_deployed_tflite_without_litert_says_so(tfl, monkeypatch):
    from qlinear.ptq.report import deployed

    qm, out, _, _ = tfl
    monkeypatch.setattr(deployed, "litert_available", lambda: False)
    rep = qm.report()
    d = deployed.deployed(qm, rep, out, "model.qdq.onnx")
    assert d["artifact"] == "model.tflite" and "ai-edge-litert is not installed" in d["skipped"]
    assert "outputs" not in d
    old = rep.deployed
    try:
        rep.deployed = d
        page = Page(to_html(qm, rep))
    finally:
        rep.deployed = old
    assert page.sections["deployed"]["h2"] == "Deployed artifact" and not page.sections["deployed"]["tables"]


def test_worst_tensor_histograms_have_an_axis(tfl):
    qm, _, page, doc = tfl
    svgs = page.sections["histograms"]["svgs"]
    assert len(svgs) == len(doc["report"]["histograms"]) >= 1
    for svg, h in zip(svgs, doc["report"]["histograms"].values()):
        labels = [float(t.text) for t in svg.iter(f"{SVG}text") if t.get("class") == "ticklabel"]
        assert len(labels) >= 2 and labels == sorted(labels)
        assert h["edges"][0] <= labels[0] and labels[-1] <= h["edges"][-1]


def test_output_plot_accumulates_batches_of_any_shape():
    """Batches of different sequence lengths; an exactly reproduced sample has SQNR inf and is never among the
    worst; the worst samples are the ones with the most noise, by their index in the held-out set."""
    from qlinear.ptq.report.plots import OutputPlot

    rng = np.random.default_rng(0)
    p = OutputPlot()
    a1, a2 = rng.standard_normal((3, 5, 7)).astype(np.float32), rng.standard_normal((2, 9, 7)).astype(np.float32)
    noise = [0.1, 0.0, 0.3, 0.05, 0.2]
    b1 = a1 + np.asarray(noise[:3], np.float32)[:, None, None] * rng.standard_normal(a1.shape).astype(np.float32)
    b2 = a2 + np.asarray(noise[3:], np.float32)[:, None, None] * rng.standard_normal(a2.shape).astype(np.float32)
    p.add(a1, b1, 100, 3)
    p.add(a2, b2, 103, 2)
    r = p.result()
    assert [w["sample"] for w in r["worst"]][:4] == [102, 104, 100, 103] and r["worst"][-1]["sqnr_db"] == math.inf
    want = 10 * np.log10(np.sum(a1[2].astype(np.float64) ** 2) / np.sum((b1[2] - a1[2]).astype(np.float64) ** 2))
    assert r["worst"][0]["sqnr_db"] == pytest.approx(want, rel=1e-9)
    assert sum(r["errors"]["counts"]) == r["errors"]["values"] == r["errors"]["of"] == a1.size + a2.size
    assert len(r["scatter"]["float"]) == len(r["scatter"]["quantized"]) <= a1.size + a2.size
    ints = OutputPlot()
    ints.add(np.arange(4), np.arange(4), 0, 4)   # integer outputs are not plotted
    assert ints.result() is None
    scalar = OutputPlot()   # a 0-d output, one call per sample (PLCMOS's MOS with --target tflite: IndexError)
    for i, (x, y) in enumerate([(3.0, 3.1), (2.5, 2.5), (4.0, 3.0)]):
        scalar.add(np.array(x, np.float32), np.array(y, np.float32), 10 + i, 1)
    assert [w["sample"] for w in scalar.result()["worst"]][:2] == [12, 10]


def test_deployed_output_missing_from_the_tflite_is_not_compared(tfl, monkeypatch):
    """An output the .tflite does not have (or of another size) is listed, never compared with another tensor."""
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed: the .tflite cannot be run")
    from qlinear.ptq.report import deployed

    qm, out, _, _ = tfl
    real = deployed._invoke
    monkeypatch.setattr(deployed, "_invoke", lambda it, feed, names, *rest: {
        k: v for k, v in real(it, feed, names, *rest).items() if k != "logits"})
    d = deployed.tflite_artifact(qm, qm.report(), out / "model.tflite")
    assert d["not_in_tflite"] == ["logits"] and d["outputs"] == {}


def test_deployed_run_over_its_time_is_cut_and_said(tfl, monkeypatch):
    """LiteRT's 16x8 kernels took 10 s per sample of DNSMOS (32 held-out samples: over 5 minutes): past its time the
    deployed file's run stops, its figures cover the samples it ran, and a note says how many and why."""
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed: the .tflite cannot be run")
    from qlinear.ptq.report import deployed

    qm, out, _, _ = tfl
    full = deployed.tflite_artifact(qm, qm.report(), out / "model.tflite")
    notes = list(qm.notes)
    monkeypatch.setattr(deployed, "DEPLOYED_SECONDS", 0.0)
    monkeypatch.setattr(qm, "notes", notes)
    d = deployed.tflite_artifact(qm, qm.report(), out / "model.tflite")
    assert full["samples"] == qm.report().samples > 1 and d["samples"] == 1 and d["outputs"]["logits"]
    assert notes[-1].startswith(f"the .tflite ran on 1 of {full['samples']} held-out samples in LiteRT: ")


def test_sensitivity_chart_ticked_and_inf_as_text(tfl):
    qm, _, _, _ = tfl
    rep = qm.report()
    items = [{"tensor": "a", "role": "activation", "metric": "sqnr_db", "only_quantized": 12.5, "only_float": 30.0},
             {"tensor": "w", "role": "weight", "metric": "sqnr_db", "only_quantized": math.inf, "only_float": 9.0}]
    old = rep.sensitivity
    try:
        rep.sensitivity = items
        page = Page(to_html(qm, rep))
    finally:
        rep.sensitivity = old
    svg = page.sections["sensitivity"]["svgs"][0]
    assert len(list(svg.iter(f"{SVG}rect"))) == 1   # inf: no bar
    assert len([ln for ln in svg.iter(f"{SVG}line") if ln.get("class") == "mark"]) == 2
    values = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "value"]
    assert values == ["12.5 / 30.0 dB", "inf (exact) / 9.0 dB"]
    labels = [float(t.text) for t in svg.iter(f"{SVG}text") if t.get("class") == "ticklabel"]
    assert labels[0] <= 0 and labels[-1] >= 30
