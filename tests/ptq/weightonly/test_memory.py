"""A model whose weights exceed the process's memory limit is quantized weight-only: tensors are read, quantized
and written one at a time (``resource.setrlimit(RLIMIT_AS)`` in a subprocess, set after the imports)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
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


def _external_weight_model(path, k, n, *, k_first=True, seed=0):
    """One MatMul (``[K, N]`` weight; ``k_first=False``: Gemm ``transB=1``, ``[N, K]``) then Relu (not an lm_head),
    its weight external data written through a memmap (never whole in memory)."""
    data = path.parent / (path.name + ".data")
    shape = (k, n) if k_first else (n, k)
    w = np.memmap(data, dtype=np.float32, mode="w+", shape=shape)
    rng = np.random.default_rng(seed)
    for i in range(0, shape[0], 256):
        w[i:i + 256] = rng.standard_normal((min(256, shape[0] - i), shape[1]), dtype=np.float32) * 0.02
    w.flush()
    del w
    t = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=shape, data_location=TensorProto.EXTERNAL)
    for key, v in (("location", data.name), ("offset", "0"), ("length", str(k * n * 4))):
        t.external_data.add(key=key, value=v)
    node = helper.make_node("MatMul", ["X", "W"], ["Z"], name="mm") if k_first else \
        helper.make_node("Gemm", ["X", "W"], ["Z"], name="mm", transB=1)
    g = helper.make_graph([node, helper.make_node("Relu", ["Z"], ["Y"], name="relu")], "ext",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, n])], [t])
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())


@pytest.mark.parametrize("k_first", [True, False])
@pytest.mark.parametrize("opts", [dict(weight_type="int4", weights="per-block", block_size=32),
                                  dict(weight_type="uint4", weights="per-block", block_size=16, weight_symmetric=False,
                                       weight_method="mse"),
                                  dict(weight_type="int8", weights="per-channel")])
def test_weight_streamed_in_slabs_equals_whole(tmp_path, monkeypatch, k_first, opts):
    """Round to nearest of an external weight read in slabs of 1024 rows (3 slabs, the last partial), its encodings
    written in slabs of numbers, writes the same files, byte for byte, as the weight read whole; the SQNRs are equal
    too."""
    import qlinear
    from qlinear.encodings import _json
    from qlinear.graph.passes import lower_matmulnbits
    from qlinear.ptq.weightonly import api

    src = tmp_path / "m.onnx"
    _external_weight_model(src, 64, 2500, k_first=k_first)
    cfg = dict(activation_type="float", **opts)
    outs, stats = [], []
    for slab in (1, 1 << 40):  # 1024 rows per slab / one slab
        monkeypatch.setattr(api, "SLAB_BYTES", slab)
        monkeypatch.setattr(_json, "STREAM_NUMBERS", 100 if slab == 1 else 1 << 20)
        monkeypatch.setattr(lower_matmulnbits, "PACK_SLAB", 1000 if slab == 1 else 1 << 22)
        assert len(api.row_slabs(api.Tensors(onnx.load(str(src), load_external_data=False), tmp_path),
                                 "W", _linear(src))) == (3 if slab == 1 else 1)
        q = qlinear.quantize(str(src), None, cfg)
        out = tmp_path / f"out{slab}"
        q.save(out, report=False)
        q.save_onnx(out / "m.nbits.onnx", output_format="matmulnbits")
        outs.append({f: (out / f).read_bytes() for f in ("model.qdq.onnx", "model.qdq.onnx.data", "model.encodings",
                                                         "m.nbits.onnx", "m.nbits.onnx.data")})
        stats.append(q.streamed.weight_stats())
    assert outs[0] == outs[1]
    assert stats[0] == stats[1] and np.isfinite(stats[0][0]["sqnr_db"])


@pytest.mark.parametrize("k_first", [True, False])
@pytest.mark.parametrize("dtype, bits, block, per_channel", [("int8", 8, 0, True), ("int4", 4, 32, False)])
def test_dequantized_weight_streamed_in_slabs_equals_whole(tmp_path, monkeypatch, k_first, dtype, bits, block,
                                                           per_channel):
    """Sequential GPTQ's round-to-nearest weights (a tied lm_head, int8 per channel by default) are read slab by
    slab also when the pass needs their dequantized values: the same scales, zero points, SQNR and dequantized
    weight (initializer layout and type) as quantizing the weight whole in memory."""
    from qlinear.ptq.weightonly import api

    src = tmp_path / "m.onnx"
    _external_weight_model(src, 64, 2500, k_first=k_first)
    tensors, lin = api.Tensors(onnx.load(str(src), load_external_data=False), tmp_path), _linear(src)
    monkeypatch.setattr(api, "SLAB_BYTES", 1)
    assert len(api.row_slabs(tensors, "W", lin)) == 3
    g = api._Grid(lin, dtype, bits, lin.k if per_channel else block, per_channel, False, np.dtype(np.float32))
    slabs = {}
    bq_s, sqnr_s, rtn_s = api._rtn_streamed(tensors, "W", g, "full", "minmax", slabs)
    job = api.WeightJob("W", [lin], g, "full", "minmax", None, False, True, False, "")
    scale, zero_point, _, whole, sqnr_w, rtn_w, *_ = api.run_job(job, tensors.array("W"), None)  # whole in memory
    np.testing.assert_array_equal(bq_s.scale, scale)
    np.testing.assert_array_equal(bq_s.zero_point, zero_point)
    assert (sqnr_s, rtn_s) == (sqnr_w, rtn_w) and np.isfinite(sqnr_s)
    a, b = slabs["W"], whole
    assert a.shape == b.shape == ((64, 2500) if k_first else (2500, 64)) and a.dtype == b.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - tensors.array("W")).max() > 0  # quantized, not the float weight


@pytest.mark.parametrize("q", [
    np.arange(-8, 8, dtype=np.int8).repeat(7)[:-3].reshape(-1, 1),    # int4, an odd count
    (np.arange(16, dtype=np.int16).repeat(4)).reshape(8, 8),           # uint4 stored shifted, as int16
    np.arange(-128, 128, dtype=np.int8).reshape(16, 16),               # int8: kept whole
])
def test_kept_integers_round_trip_through_the_store(q):
    """GPTQ's integers kept until written come back exactly (type, shape, values) from memory and from the
    temporary file of :class:`KeptStore`, which holds 4-bit integers two to a byte."""
    from qlinear.ptq.weightonly.kept import KeptStore, kept

    bits = 8 if q.dtype == np.int8 and q.min() < -8 else 4
    store = KeptStore()
    first = kept(np.zeros((3, 5), np.int8), 4, store)  # another weight before it in the same file
    for got in (kept(q, bits)(), kept(q, bits, store)()):
        assert got.dtype == q.dtype and got.shape == q.shape
        np.testing.assert_array_equal(got, q)
    np.testing.assert_array_equal(first(), np.zeros((3, 5), np.int8))
    assert store.size == 8 + (q.size if bits == 8 else (q.size + 1) // 2)


def test_gptq_integers_are_kept_on_disk_with_the_same_files(tmp_path, monkeypatch):
    """Sequential GPTQ writes each weight's integers to the run's :class:`KeptStore` (a temporary file, not
    memory) as it is quantized; the written files equal those of the integers kept in memory."""
    from tiny_models import lm_data, tiny_lm

    import qlinear
    from qlinear.ptq.weightonly import api
    from qlinear.ptq.weightonly.kept import KeptStore

    stores = []

    class Recording(KeptStore):
        def __init__(self):
            super().__init__()
            stores.append(self)

    m, d = tiny_lm(d=64, ff=128, vocab=256), lm_data(n=20, seq=16, vocab=256)
    cfg = dict(activation_type="float", weight_type="int4", weights="per-block", block_size=32, weight_method="gptq",
               calibration_samples=12, evaluation_samples=4)
    files = []
    for store in (Recording, lambda: None):
        monkeypatch.setattr(api, "KeptStore", store)
        out = tmp_path / f"out{len(files)}"
        qlinear.quantize(m, d, cfg).save(out, report=False)
        files.append({p.name: p.read_bytes() for p in out.iterdir()})
    # the GPTQ weights (the tied embedding is rounded to nearest, redone when written): 4 bits, two to a byte
    kept_weights = 64 * 128 + 128 * 64 + 64 * 64
    assert len(stores) == 1 and stores[0].size == kept_weights // 2
    assert files[0] == files[1] and "model.qdq.onnx" in files[0]


def _linear(src):
    from qlinear.ptq.weightonly.plan import find_linears

    return find_linears(onnx.load(str(src), load_external_data=False))[0][0]


_PEAK = """
import sys, qlinear
q = qlinear.quantize(sys.argv[1], None, dict(activation_type="float", weight_type="int4", weights="per-block",
                                              block_size=32))
q.save(sys.argv[2], report=False)
print("PEAK", int([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]) * 1024)
"""


@pytest.mark.slow
def test_weight_only_peak_memory_is_about_the_largest_weight(tmp_path):
    """A 256 MiB external weight (int4, blocks of 32, Q/DQ and AIMET encodings written): the process's peak RSS is
    below 1.3 x the weight plus the baseline of the same run on a tiny model (imports, ONNX Runtime, graph)."""
    big, tiny = tmp_path / "big" / "m.onnx", tmp_path / "tiny" / "m.onnx"
    big.parent.mkdir()
    tiny.parent.mkdir()
    _external_weight_model(big, 4096, 16384)
    _external_weight_model(tiny, 64, 64)
    weight = 4096 * 16384 * 4

    def peak(src):
        p = subprocess.run([sys.executable, "-c", _PEAK, str(src), str(src.parent / "out")], capture_output=True,
                           text=True, timeout=1200)
        assert p.returncode == 0, p.stderr[-2000:]
        return int(p.stdout.split("PEAK")[-1])

    base, got = peak(tiny), peak(big)
    assert (big.parent / "out" / "model.encodings").stat().st_size > 2 * 2 ** 20
    assert got < base + 1.3 * weight, (base / 2 ** 20, got / 2 ** 20)
