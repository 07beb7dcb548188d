"""A model whose weights exceed the process's memory limit is quantized weight-only: tensors are read, quantized
and written one at a time (``resource.setrlimit(RLIMIT_AS)`` in a subprocess, set after the imports)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS, D = 24, 2048          # 24 weights of 2048 x 2048 float32: 384 MiB
BUDGET_MB = 192               # the child may allocate this much beyond its baseline after imports


def _big_model(path):
    nodes, inits = [], []
    x = "x"
    for i in range(LAYERS):
        w = np.full((D, D), 0.001 * (i + 1), np.float32)
        w[::7, ::3] = -0.002 * (i + 1)   # not constant: every block has a real range
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        x = f"h{i}"
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", D])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["B", D])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(m, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)


def test_weights_larger_than_the_memory_limit(tmp_path):
    src = tmp_path / "big.onnx"
    _big_model(src)
    weights_mb = LAYERS * D * D * 4 / 2 ** 20
    assert weights_mb > 1.9 * BUDGET_MB
    code = textwrap.dedent(f"""
        import resource, sys
        import numpy as np, onnx, qlinear
        from qlinear.ptq.weightonly import quantize_weights
        from qlinear.ptq import QuantizeConfig
        vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize:")][0].split()[1]) * 1024
        limit = vm + {BUDGET_MB} * 2 ** 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:                                      # the limit holds: loading every weight at once fails
            np.ones(({LAYERS}, {D}, {D}), np.float32)
            sys.exit("the memory limit did not hold")
        except MemoryError:
            pass
        cfg = QuantizeConfig(activation_type="float", weight_type="int4", weights="per-block", block_size=128)
        wm = quantize_weights({str(src)!r}, None, cfg)
        files = wm.save({str(tmp_path / 'out')!r}, report=False)
        print("FILES", files)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "model.qdq.onnx.data" in p.stdout
    # the output runs and equals the blocked dequantization of the weights
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((2, D)).astype(np.float32) * 0.01
    s = ort.InferenceSession(str(tmp_path / "out" / "model.qdq.onnx"), providers=["CPUExecutionProvider"])
    y = s.run(None, {"x": x})[0]
    assert y.shape == (2, D) and np.isfinite(y).all()
