"""EfficientNet-Lite0 exported to .tflite (issue 14 bars): LiteRT 2.3.0's reference resolver and its default resolver
produce exactly what run_integer computes in the matching profile; ONNX Runtime's fused int8 path on the ort target
equals the ort_fused profile. The full 300-image run is ``benchmarks/bench_tflite.py`` (README table)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import qlinear
from qlinear.kernels.run import IntegerModel

litert = pytest.importorskip("ai_edge_litert.interpreter")
N = 12


@pytest.fixture(scope="module")
def images(shared_dir):
    import onnx

    from qlinear.ptq import load_dataset
    from qlinear.ptq.data import model_inputs

    model = shared_dir / "models" / "efficientnet-lite0.onnx"
    ds = load_dataset(shared_dir / "data" / "imagenet-dev", model_inputs(onnx.load(model)))
    x = np.concatenate([ds.sample(i)["input"] for i in range(40 + N)])
    return model, x


@pytest.mark.slow
def test_tflite_bit_exact_with_litert(images, tmp_path):
    model, x = images
    qm = qlinear.quantize(model, {"input": x[:40]}, dict(calibration_samples=40, evaluation_samples=0,
                                                         target="tflite"))
    assert qm.integer_check.ok
    qm.save_tflite(tmp_path / "m.tflite")
    data = (tmp_path / "m.tflite").read_bytes()
    held = x[40:]
    for resolver, mode in ((litert.OpResolverType.BUILTIN_REF, "litert_ref"),
                           (litert.OpResolverType.AUTO, "litert_xnnpack")):
        it = litert.Interpreter(model_content=data, experimental_op_resolver_type=resolver)
        it.resize_tensor_input(it.get_input_details()[0]["index"], [N, 224, 224, 3])
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], held.transpose(0, 2, 3, 1))
        it.invoke()
        y = it.get_tensor(it.get_output_details()[0]["index"])
        z = IntegerModel(qm.model, mode).run({"input": held})["logits"]
        assert np.array_equal(y, z), f"{resolver}: {int((y != z).any(1).sum())} of {N} images differ"


def _vnni() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


@pytest.mark.slow
def test_ort_fused_int8_path_equals_ort_fused_profile(images):
    if not _vnni():
        pytest.skip("ORT's u8s8 int8 GEMM saturates pairs of products on x86 CPUs without VNNI (vpmaddubsw): its fused "
                    "path is not exact there, so there is nothing exact to reproduce (README, ORT fused column)")
    model, x = images
    qm = qlinear.quantize(model, {"input": x[:40]}, dict(calibration_samples=40, evaluation_samples=0))
    s = ort.InferenceSession(qm.model.SerializeToString(), providers=["CPUExecutionProvider"])
    held = x[40:]
    y = s.run(None, {"input": held})[0]
    z = IntegerModel(qm.model, "ort_fused").run({"input": held})["logits"]
    assert np.array_equal(y, z), f"{int((y != z).any(1).sum())} of {N} images differ"
