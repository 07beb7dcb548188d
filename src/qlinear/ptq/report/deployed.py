"""What the report adds around :func:`qlinear.ptq.report.evaluate.evaluate`: the SQNR of each quantized weight of a
full-integer run (the report joins it with the activations' by tensor name) and the accuracy of the deployed artifact
itself, the file written: the ``.tflite`` run by LiteRT (``ai-edge-litert``, default resolver) on the held-out samples
against the float model, judged by each output's kind; the ONNX model (Q/DQ or MatMulNBits) is what the report's
outputs already measure in ONNX Runtime."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import numpy as np
from onnx import numpy_helper

from qlinear.graph.model import tensor_outputs
from qlinear.ptq.report.evaluate import HEADLINE, Report, kind_metrics, ties_note


def weight_stats(qm: Any) -> list[dict[str, Any]]:
    """Per weight/bias encoding of a full-integer run: its type, granularity, scale range, the weight's range and the
    SQNR of its own quantization on the float values the encodings apply to (``encoded_model``)."""
    inits = {t.name: t for t in qm.encoded_model.graph.initializer}
    users: dict[str, str] = {}
    for nd in qm.encoded_model.graph.node:
        for i in nd.input:
            users.setdefault(i, nd.name or nd.op_type)
    rows = []
    for e in qm.encodings.params:
        if e.scale is None or e.name not in inits:
            continue
        w = numpy_helper.to_array(inits[e.name]).astype(np.float32)
        d = _noise(e, w)
        if d is None:
            continue
        s = np.asarray(e.scale, np.float64).reshape(-1)
        rows.append({"name": e.name, "role": "bias" if e.qtype.bits == 32 else "weight", "layer": users.get(e.name, ""),
                     "dtype": e.dtype, "granularity": str(e.granularity).replace("_", "-"), "scale_min": float(s.min()),
                     "scale_max": float(s.max()), "lo": float(w.min()) if w.size else 0.0,
                     "hi": float(w.max()) if w.size else 0.0,
                     "sqnr_db": sqnr_db(float(np.sum(w.astype(np.float64) ** 2)), float(np.sum(d * d)))})
    return rows


def _noise(e: Any, w: np.ndarray) -> np.ndarray | None:
    """``w - DQ(Q(w))`` in float64: an int32 bias (no QuantizeLinear type) rounded to nearest even on its scale
    (per channel along axis 0 of a 1-D bias); None for a layout the encoding cannot apply to alone."""
    if e.qtype.bits == 32 and e.qtype.is_int:
        s = np.asarray(e.scale, np.float64).reshape(-1)
        if w.ndim > 1 or s.size not in (1, w.size):
            return None
        q = np.clip(np.rint(w.astype(np.float64) / s), -2.0**31, 2.0**31 - 1)
        return w.astype(np.float64) - (q.astype(np.float32) * s.astype(np.float32)).astype(np.float64)  # DQ: float32
    try:
        return w.astype(np.float64) - e.fake_quantize(w).astype(np.float64)
    except Exception:  # noqa: BLE001 - a layout the encoding cannot apply to alone (the report leaves it out)
        return None


def sqnr_db(sig: float, noise: float) -> float:
    """``10 log10(sig / noise)``: inf for an exactly represented tensor, -inf for an all-zero one with noise."""
    if noise <= 0:
        return float("inf")
    return float(10 * np.log10(sig / noise)) if sig > 0 else float("-inf")


def litert_available() -> bool:
    return importlib.util.find_spec("ai_edge_litert") is not None


def onnx_artifact(qm: Any, rep: Report, model_file: str) -> dict[str, Any]:
    """The written ONNX model is what the report's outputs measure: say so (runtime, file, headline metrics)."""
    how = "" if qm.config.weight_only else (" (fused int8 kernels)" if rep.engine == "ort-int8"
                                            else " (every Q/DQ as ONNX defines it)")
    return {"artifact": model_file, "runtime": "ONNX Runtime" + how,
            "samples": rep.samples, "same_as_outputs": True,
            "outputs": {o: {k: v for k, v in r.items() if k == rep.headlines.get(o)} for o, r in rep.outputs.items()}}


#: seconds the report spends running the ``.tflite`` on the held-out samples: past half of it, a run projected to
#: exceed it stops and says on how many samples it ran (DNSMOS at 16x8: LiteRT's kernels took minutes per sample)
DEPLOYED_SECONDS = 60.0


def tflite_artifact(qm: Any, rep: Report, path: Path) -> dict[str, Any]:
    """The ``.tflite`` at ``path`` run by LiteRT on the report's held-out samples against the float model's outputs,
    every output judged like the Q/DQ model's (its kind); ``skipped`` with the reason when LiteRT is not installed."""
    if not litert_available():
        return {"artifact": path.name, "runtime": "LiteRT", "skipped": "ai-edge-litert is not installed "
                "(pip install ai-edge-litert): the .tflite was not run"}
    from ai_edge_litert.interpreter import Interpreter

    from qlinear.ptq.stats.session import Session
    from qlinear.tflite.export import input_layout

    ds = qm.dataset
    start, stop = qm.held_out()
    stop = min(stop, start + rep.samples)
    names = tensor_outputs(qm.reference_model)
    fs = Session(qm.reference_model, (), level="all", label="the float model")
    it = Interpreter(model_content=path.read_bytes(), num_threads=1)
    as_is = frozenset(k for k, v in input_layout(qm.model).items() if v == "same")
    out_f: dict[str, list[np.ndarray]] = {o: [] for o in names}
    out_t: dict[str, list[np.ndarray]] = {o: [] for o in names}
    counts, at, t0 = [], start, time.perf_counter()
    for feed in ds.batches(start, stop, 1):
        if counts and (time.perf_counter() - t0) / len(counts) * (stop - start) > DEPLOYED_SECONDS \
                and time.perf_counter() - t0 > DEPLOYED_SECONDS / 2:
            break   # LiteRT's reference kernels (16x8) on a large model: minutes per sample
        where = f"{ds.source}, sample {at}"
        for o, v in zip(names, fs.run(names, feed, where=where)):
            out_f[o].append(v)
        try:
            got = _invoke(it, feed, names, as_is)
        except Exception as e:  # noqa: BLE001 - LiteRT's RuntimeError / ValueError: said in the report, not raised
            return {"artifact": path.name, "runtime": f"LiteRT {_litert_version()} (default resolver)",
                    "error": f"LiteRT failed on {where}: {' '.join(str(e).split())[:300]}"}
        for o in got:   # an output of another size is not the same tensor: left out (not_in_tflite)
            if got[o].size == out_f[o][-1].size:
                out_t[o].append(got[o].reshape(out_f[o][-1].shape))
        counts.append(1)
        at += 1
    if len(counts) < stop - start:
        per = (time.perf_counter() - t0) / len(counts)
        note = (f"the .tflite ran on {len(counts)} of {stop - start} held-out samples in LiteRT: {per:.1f} s per "
                f"sample (its 16x8 and reference kernels are slow) over the report's {DEPLOYED_SECONDS:.0f} s for the "
                "deployed file; the Q/DQ model's figures cover them all")
        qm.notes.append(note)
        stop = start + len(counts)
    labels = None if ds.labels is None else ds.labels[start:stop]
    outs, missing = {}, [o for o in names if len(out_t[o]) != len(counts)]
    for o in names:
        if o in missing:
            continue
        outs[o] = kind_metrics(rep.kinds.get(o, "generic"), out_f[o], out_t[o], counts, labels, o, ds.source)
        if outs[o].get("top1_ties") and rep.kinds.get(o) == "classifier":
            note = ties_note(o, outs[o]["top1_ties"], ".tflite", qm.config)
            if note not in qm.notes:
                qm.notes.append(note)
    return {"artifact": path.name, "runtime": f"LiteRT {_litert_version()} (default resolver)",
            "samples": len(counts), "same_as_outputs": False, "outputs": outs,
            **({"not_in_tflite": missing} if missing else {}),
            "headlines": {o: HEADLINE.get(rep.kinds.get(o, "generic")) for o in names}}


def _invoke(it: Any, feed: dict[str, np.ndarray], names: list[str],
            as_is: frozenset[str] = frozenset()) -> dict[str, np.ndarray]:
    """One LiteRT run of a float-I/O ``.tflite`` (NHWC where the ONNX input is NCHW; the inputs named in ``as_is``,
    NHWC already, as they are): outputs by ONNX name (by position where the ``.tflite`` names them otherwise),
    NCHW."""
    ins = it.get_input_details()
    keys = [d["name"] if d["name"] in feed else list(feed)[k] for k, d in enumerate(ins)]
    xs = [np.asarray(feed[k]) for k in keys]
    xs = [x.transpose(0, 2, 3, 1) if x.ndim == 4 and k not in as_is else x for k, x in zip(keys, xs)]
    for d, x in zip(ins, xs):
        if list(d["shape"]) != list(x.shape):
            it.resize_tensor_input(d["index"], list(x.shape))
    it.allocate_tensors()
    for d, x in zip(ins, xs):
        it.set_tensor(d["index"], x.astype(d["dtype"]))
    it.invoke()
    outs = it.get_output_details()
    by_name = {d["name"]: d for d in outs}
    if not all(o in by_name for o in names) and len(outs) == len(names):
        by_name = {o: d for o, d in zip(names, outs)}   # the converter renamed them: same order
    res = {}
    for o in names:
        if o in by_name:
            y = it.get_tensor(by_name[o]["index"])
            res[o] = y.transpose(0, 3, 1, 2) if y.ndim == 4 else y
    return res


def _litert_version() -> str:
    try:
        from importlib.metadata import version

        return version("ai-edge-litert")
    except Exception:  # noqa: BLE001 - the version is only shown
        return ""


def deployed(qm: Any, rep: Report, folder: Path, model_file: str, latency: bool = False) -> dict[str, Any]:
    """The accuracy of the deployed artifact in ``folder``: the ``.tflite`` for target tflite, else the ONNX model
    (``latency``, target ort: also its ms per sample against the float model's, :func:`ort_latency`; off by default,
    it runs both models again for up to ``LATENCY_SECONDS``)."""
    tfl = folder / "model.tflite"
    if tfl.exists() and not qm.config.weight_only:
        t0 = time.perf_counter()
        d = tflite_artifact(qm, rep, tfl)
        d["seconds"] = time.perf_counter() - t0
        return d
    d = onnx_artifact(qm, rep, model_file)
    files = [p for p in folder.iterdir() if p.name == model_file or p.name.startswith(model_file + ".")]
    d["file_bytes"] = sum(p.stat().st_size for p in files)
    if latency and qm.config.target == "ort" and not qm.config.weight_only and not getattr(qm, "unquantized", False):
        d["latency"] = ort_latency(qm, folder / model_file)
        note = slower_note(d["latency"])
        if note and note not in qm.notes:
            qm.notes.append(note)
    return d


#: seconds the report spends timing the float model and the written one in ONNX Runtime (both, after warm-up)
LATENCY_SECONDS = 2.0
#: how much slower than the float model (a ratio of medians, the float model at least 1 ms per sample) gets a note
SLOWER = 1.1


def ort_latency(qm: Any, path: Path, samples: int = 8, rounds: int = 5) -> dict[str, Any]:
    """ms per sample of the float model (as given) and of the written model at ``path`` in ONNX Runtime's default
    CPU session (default level and threads) on up to ``samples`` held-out samples, one at a time: a warm-up run
    each, then passes over them taking turns, up to ``rounds`` each within ``LATENCY_SECONDS``: the medians. A model
    with external data or inputs the samples do not give is not timed (``skipped`` says why)."""
    import onnxruntime as ort

    fm = qm.float_model
    if any(t.data_location == t.EXTERNAL for t in fm.graph.initializer) or fm.ByteSize() > 1 << 30:
        return {"skipped": "the float model is too large to time here"}
    start, stop = qm.held_out()
    feeds = list(qm.dataset.batches(start, min(stop, start + samples), 1)) if qm.dataset is not None else []
    if not feeds:
        return {"skipped": "no held-out samples"}
    try:
        sessions = {"float": ort.InferenceSession(fm.SerializeToString(), providers=["CPUExecutionProvider"]),
                    "quantized": ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])}
        given = {k: [{i.name: f[i.name] for i in s.get_inputs()} for f in feeds] for k, s in sessions.items()}
        for k, s in sessions.items():
            s.run(None, given[k][0])
    except Exception as ex:  # noqa: BLE001 - an input the samples do not give (fixed by --fix-input), say
        return {"skipped": f"{type(ex).__name__}: {str(ex).strip()[:120]}"}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    t_end = time.perf_counter() + LATENCY_SECONDS
    while min(len(v) for v in times.values()) < rounds and (time.perf_counter() < t_end or not times["float"]):
        for k, s in sessions.items():
            t0 = time.perf_counter()
            for f in given[k]:
                s.run(None, f)
            times[k].append((time.perf_counter() - t0) * 1000 / len(feeds))
    ms = {k: float(np.median(v)) for k, v in times.items()}
    return {"runtime": f"ONNX Runtime {ort.__version__}, default CPU session", "samples": len(feeds),
            "passes": len(times["quantized"]), "float_ms": ms["float"], "quantized_ms": ms["quantized"],
            "ratio": ms["quantized"] / ms["float"] if ms["float"] > 0 else float("nan")}


def slower_note(lat: dict[str, Any]) -> str | None:
    """A note when the written model ran slower than the float model in :func:`ort_latency` (by ``SLOWER``, the
    float model taking at least 1 ms per sample: shorter runs are mostly overhead)."""
    f, q = lat.get("float_ms"), lat.get("quantized_ms")
    if f is None or q is None or f < 1.0 or q <= SLOWER * f:
        return None
    return (f"measured here: in ONNX Runtime's default CPU session the quantized model took {q:.3g} ms per sample, "
            f"the float model {f:.3g} ms ({lat['samples']} held-out samples, medians of {lat['passes']} passes): it "
            "runs slower than the float model on this machine; ONNX Runtime runs in float the layers and operators "
            "the other notes name (with their Q/DQ pairs at every inference)")
