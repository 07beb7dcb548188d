#!/usr/bin/env python3
"""
Probe of the AIMET 2.42 encoding-format additions (issue 24): int2 ``zero_point_shift``, float8 / float4 entries,
and the legacy "0.6.2" version. Runs in AIMET's own virtual environment, NOT in qlinear's:

    python3 -m venv /work/venv-aimet
    /work/venv-aimet/bin/pip install torch==2.13.0                     # CPU wheel
    echo "torch==2.13.0" > aimet_constraints.txt
    /work/venv-aimet/bin/pip install -c aimet_constraints.txt aimet-onnx==2.42.0
    /work/venv-aimet/bin/pip install -c aimet_constraints.txt aimet-torch==2.42.0   # optional: float4 files
    /work/venv-aimet/bin/python benchmarks/aimet_format_probe.py tests/encodings/aimet_formats

Writes into OUTDIR (files named ``<writer>-2.42.0_<case>_v<version>.encodings``):
  * probe_model.onnx: the model (x[1,4,8,8] -> Conv(conv.weight[32,4,3,3]) -> Relu -> GlobalAveragePool -> Flatten
    -> Gemm(fc1.weight[64,32], transB=1) -> Relu -> MatMul(fc2.weight[64,16]) -> y), opset 17;
  * int2 symmetric weights with zero-point shift 0.5 (``QSpec(..., shift_zero_point=True)``): per-tensor conv.weight,
    per-channel fc1.weight, blockwise (block 16) fc2.weight, exported in every version AIMET accepts;
  * int2_shift_qdq.npz: AIMET's own quantize-dequantize (``QcQuantizeOp.quantize_dequantize``) of each shifted
    quantizer applied to its weight and to a probe tensor of grid points and exact ties (k/2 * scale), with the
    exported scale: the numbers qlinear's shifted grid must reproduce;
  * float8 weights and activations (aimet-onnx: float8e4m3fn per-channel and blockwise, float8e5m2 per-tensor,
    float8e4m3fn activation) in 2.0.0; what 0.6.1 / 1.0.0 export says is printed;
  * with --torch (aimet-torch installed): float4e2m1 (FloatQuantizeDequantize, per-block), float8e4m3fnuz and
    float8e5m2 in 2.0.0; MXFP4 in 2.0.0/2.1.0 and NVFP4 (float8 block scales under a meta scale) in 2.1.0; int2
    weights with zero_point_shift in aimet-torch's 0.6.1/1.0.0 (legacy sim.export) and 1.0.0/2.0.0 (sim.onnx.export)
    with aimet-torch's quantize-dequantize numbers (int2_shift_qdq_torch.npz);
  * int32 biases in 0.6.1 / 1.0.0 (``export_int32_bias=True``) and signed activations in 2.0.0
    (``force_activation_as="signed"``);
  * what ``export(encoding_version="0.6.2")`` and ``AIMET_ENCODING_VERSION=0.6.2`` do (printed).
Deterministic: two runs write identical bytes.
"""
import json
import logging
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

try:  # module-level so that aimet-torch's legacy sim.export can pickle the model
    import torch

    class TorchLin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(64, 8)

        def forward(self, x):
            return self.fc1(x)
except ImportError:  # aimet-torch cases are skipped
    pass

OUT = next((a for a in sys.argv[1:] if not a.startswith("--")), "./aimet_format_probe_out")
os.makedirs(OUT, exist_ok=True)
VERSIONS = ("0.6.1", "1.0.0", "2.0.0")


def build_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    arrays = [((rng.standard_normal((32, 4, 3, 3)) * 0.2), "conv.weight"), ((rng.standard_normal(32) * 0.1), "conv.bias"),
              ((rng.standard_normal((64, 32)) * 0.3), "fc1.weight"), ((rng.standard_normal(64) * 0.1), "fc1.bias"),
              ((rng.standard_normal((64, 16)) * 0.3), "fc2.weight")]
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in arrays]
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv_out"], ["relu1_out"], name="relu1"),
        helper.make_node("GlobalAveragePool", ["relu1_out"], ["gap_out"], name="gap"),
        helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="flatten"),
        helper.make_node("Gemm", ["flat_out", "fc1.weight", "fc1.bias"], ["fc1_out"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1_out"], ["relu2_out"], name="relu2"),
        helper.make_node("MatMul", ["relu2_out", "fc2.weight"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def calib_data():
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(8)]


def make_sim(model):
    import aimet_onnx
    from aimet_onnx.common.defs import qtype
    from aimet_onnx.quantsim import QuantizationSimModel
    cfg = os.path.join(os.path.dirname(aimet_onnx.__file__), "common", "quantsim_config",
                       "default_config_per_channel.json")
    return QuantizationSimModel(onnx.ModelProto.FromString(model.SerializeToString()), param_type=qtype.int(8),
                                activation_type=qtype.int(8), quant_scheme="tf", config_file=cfg)


def export_all(sim, case, versions=VERSIONS):
    for ver in versions:
        try:
            sim.export(OUT, f"aimet-onnx-2.42.0_{case}_v{ver}", export_model=False, encoding_version=ver)
            print(f"  {case} {ver}: written")
        except Exception as e:  # report what AIMET refuses, do not hide it
            print(f"  {case} {ver}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")


def int2_shift(model, data):
    """int2 symmetric weights with the zero-point shift, in three granularities, plus AIMET's own QDQ numbers."""
    from aimet_onnx.defs import QSpec
    sim = make_sim(model)
    ops = sim.qc_quantize_op_dict
    ops["conv.weight"].set_qspec(QSpec.per_tensor("int2", symmetric=True, shift_zero_point=True))
    ops["fc1.weight"].set_qspec(QSpec.per_channel("int2", symmetric=True, shift_zero_point=True))
    ops["fc2.weight"].set_qspec(QSpec.blockwise("int2", block_size=16, symmetric=True, shift_zero_point=True))
    sim.compute_encodings(data)
    print("int2 + zero_point_shift:")
    for n in ("conv.weight", "fc1.weight", "fc2.weight"):
        e = ops[n].get_encodings()
        print(f"  {n}: shift={ops[n].get_zero_point_shift()} {len(e)} encodings, first delta={e[0].delta!r} "
              f"offset={e[0].offset!r} min={e[0].min!r} max={e[0].max!r}")
    export_all(sim, "int2_shift")
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    with open(os.path.join(OUT, "aimet-onnx-2.42.0_int2_shift_v2.0.0.encodings")) as f:
        exported = {e["name"]: e for e in json.load(f)["encodings"]}
    qdq = {}
    for n in ("conv.weight", "fc1.weight", "fc2.weight"):
        w = weights[n]
        qdq[f"{n}/w"] = w
        qdq[f"{n}/qdq"] = ops[n].quantize_dequantize(w.copy())
        # grid points and exact ties of the shifted grid: x = k/2 * (the element's exported scale), k = -6..6
        s = full_scale(exported[n], w.shape).astype(np.float32)
        k = np.resize(np.arange(-6, 7, dtype=np.float32), w.size).reshape(w.shape)
        probe = ((k / np.float32(2.0)) * s).astype(np.float32)
        qdq[f"{n}/probe"] = probe
        qdq[f"{n}/probe_qdq"] = ops[n].quantize_dequantize(probe.copy())
    np.savez(os.path.join(OUT, "int2_shift_qdq.npz"), **qdq)


def full_scale(entry, shape):
    """The scale of every element of a weight of ``shape``, from its 2.0.0 entry."""
    s = np.array(entry["y_scale"], np.float64)
    if s.ndim == 0:
        return np.broadcast_to(s, shape)
    if "block_size" in entry:
        return np.repeat(s, entry["block_size"], axis=entry["axis"])
    return np.broadcast_to(s.reshape((-1,) + (1,) * (len(shape) - 1)), shape)


def float8(model, data):
    sim = make_sim(model)
    ops = sim.qc_quantize_op_dict
    ops["fc1.weight"].set_precision("float8e4m3fn")            # per-channel (config)
    ops["conv.weight"].set_precision("float8e5m2")
    ops["conv.weight"].enable_per_channel_quantization(False)  # per-tensor
    ops["relu2_out"].set_precision("float8e4m3fn")              # activation, per-tensor
    try:
        from aimet_onnx.quantsim import set_blockwise_quantization_for_weights
        set_blockwise_quantization_for_weights(sim, ("MatMul",), bitwidth=8, symmetric=True, block_size=16)
        ops["fc2.weight"].set_precision("float8e4m3fn")         # blockwise float8
    except Exception as e:
        print(f"  blockwise float8 setup: {type(e).__name__}: {e}")
    sim.compute_encodings(data)
    print("float8:")
    export_all(sim, "float8")


def export_options(model, data):
    """The export options that change what 2.42 writes: int32 biases in 0.6.1 / 1.0.0 (``export_int32_bias=True``;
    the default only for 2.0.0) and signed activations in 2.0.0 (``force_activation_as="signed"``)."""
    sim = make_sim(model)
    sim.compute_encodings(data)
    print("export options:")
    for ver in ("0.6.1", "1.0.0"):
        try:
            sim.export(OUT, f"aimet-onnx-2.42.0_int32_bias_v{ver}", export_model=False, encoding_version=ver,
                       export_int32_bias=True)
            print(f"  int32 bias {ver}: written")
        except Exception as e:
            print(f"  int32 bias {ver}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    try:
        sim.export(OUT, "aimet-onnx-2.42.0_signed_act_v2.0.0", export_model=False, encoding_version="2.0.0",
                   force_activation_as="signed")
        print("  signed activations 2.0.0: written")
    except Exception as e:
        print(f"  signed activations 2.0.0: {type(e).__name__}: {str(e).splitlines()[0][:160]}")


def version_0_6_2(model, data):
    sim = make_sim(model)
    sim.compute_encodings(data)
    print("0.6.2:")
    export_all(sim, "per_channel", versions=("0.6.2",))
    from aimet_onnx.common import quantsim as qs
    print(f"  VALID_ENCODING_VERSIONS = {qs.VALID_ENCODING_VERSIONS}")
    import subprocess
    r = subprocess.run([sys.executable, "-c", "import aimet_onnx.quantsim"], env=dict(os.environ,
                       AIMET_ENCODING_VERSION="0.6.2"), capture_output=True, text=True)
    print(f"  AIMET_ENCODING_VERSION=0.6.2: exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:200]}")


def stub_torchvision():
    """The PyPI torchvision wheel does not load against torch 2.13.0+cpu ("operator torchvision::nms does not
    exist"); aimet_torch only needs it at import time, so a stub module stands in (as in aimet_probe.py)."""
    import types
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # pylint: disable=broad-except
        for k in [k for k in sys.modules if k.startswith("torchvision")]:
            del sys.modules[k]

    class _Any(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            m = _Any(f"{self.__name__}.{name}")
            sys.modules[m.__name__] = m
            setattr(self, name, m)
            return m
    for n in ["torchvision", "torchvision.datasets", "torchvision.transforms", "torchvision.models",
              "torchvision.ops"]:
        sys.modules[n] = _Any(n)


def float4_torch():
    """float4e2m1 (per-block) and float8 (fnuz per-channel, e5m2 per-tensor) weights written by aimet-torch's
    ``sim.onnx.export``; each case also tries 1.0.0 and prints AIMET's refusal."""
    stub_torchvision()
    try:
        import torch
        from aimet_torch.quantization.float import FloatQuantizeDequantize
        from aimet_torch.quantsim import QuantizationSimModel as TorchSim
    except Exception as e:  # aimet-torch not installed: say so
        print(f"float4: aimet-torch unavailable ({type(e).__name__}: {e})")
        return

    Lin = TorchLin

    cases = {
        "float4_block": dict(exponent_bits=2, mantissa_bits=1, finite=True, unsigned_zero=False, shape=(8, 4),
                             block_size=(1, 16)),
        "float8_channel": dict(dtype=torch.float8_e4m3fnuz, shape=(8, 1)),
        "float8_tensor": dict(dtype=torch.float8_e5m2),
    }
    print("aimet-torch float:")
    for case, kw in cases.items():
        torch.manual_seed(0)
        lin, x = Lin().eval(), torch.randn(1, 64)
        sim = TorchSim(lin, dummy_input=x, quant_scheme="tf", default_param_bw=8, default_output_bw=8)
        sim.model.fc1.param_quantizers["weight"] = FloatQuantizeDequantize(**kw)
        sim.compute_encodings(lambda m: [m(torch.randn(2, 64)) for _ in range(4)])
        for ver in ("2.0.0", "1.0.0"):
            try:
                sim.onnx.export(x, os.path.join(OUT, f"aimet-torch-2.42.0_{case}_v{ver}.onnx"),
                                encoding_version=ver, dynamo=False)
                print(f"  {case} {ver}: written")
            except Exception as e:
                print(f"  {case} {ver}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                leftover = os.path.join(OUT, f"aimet-torch-2.42.0_{case}_v{ver}.onnx")  # written before the refusal
                if os.path.exists(leftover):
                    os.remove(leftover)


def fp4_torch():
    """MXFP4 (``_MXFP4QuantizeDequantize``: float4e2m1 blocks of 16 with power-of-2 scales) in 2.0.0 and 2.1.0, and
    NVFP4 (``set_weight_quantizer_to_nvfp4_int8``: float8e4m3fn block scales under a per-tensor meta scale, then an
    int8 per-channel weight quantizer) in 2.1.0, the only version aimet-torch writes it in."""
    import torch
    from aimet_torch.quantization.float.quantizer import _MXFP4QuantizeDequantize
    from aimet_torch.quantsim import QuantizationSimModel as TorchSim

    print("aimet-torch fp4:")
    for case in ("mxfp4", "nvfp4"):
        torch.manual_seed(0)
        lin, x = TorchLin().eval(), torch.randn(1, 64)
        sim = TorchSim(lin, dummy_input=x, quant_scheme="tf", default_param_bw=8, default_output_bw=8)
        if case == "mxfp4":
            sim.model.fc1.param_quantizers["weight"] = _MXFP4QuantizeDequantize(shape=(8, 4), block_size=(1, 16))
        else:
            amax = sim.model.fc1.weight.detach().reshape(8, 4, 16).abs().amax(-1)
            meta = (amax.max() / 6 / 448).item()
            sim.model.fc1.set_weight_quantizer_to_nvfp4_int8((amax / 6 / meta).to(torch.float8_e4m3fn), meta)
        sim.compute_encodings(lambda m: [m(torch.randn(2, 64)) for _ in range(4)])
        for ver in ("2.1.0", "2.0.0"):
            path = os.path.join(OUT, f"aimet-torch-2.42.0_{case}_v{ver}.onnx")
            try:
                sim.onnx.export(x, path, encoding_version=ver, dynamo=False)
                print(f"  {case} {ver}: written")
            except Exception as e:
                print(f"  {case} {ver}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                if os.path.exists(path):
                    os.remove(path)


def int2_shift_torch():
    """int2 symmetric weights with zero_point_shift 0.5 in aimet-torch (per-tensor, per-channel, per-block 16) on a
    Linear(64, 8): legacy ``sim.export`` (0.6.1, 1.0.0) and ``sim.onnx.export`` (1.0.0, 2.0.0), plus aimet-torch's
    own quantize-dequantize of each weight and of a tie probe (int2_shift_qdq_torch.npz)."""
    import aimet_torch.common.quantsim as torch_qs
    import torch
    from aimet_torch.quantization.affine import QuantizeDequantize
    from aimet_torch.quantsim import QuantizationSimModel as TorchSim

    Lin = TorchLin

    cases = {"tensor": dict(shape=()), "channel": dict(shape=(8, 1)), "block": dict(shape=(8, 4), block_size=(1, 16))}
    qdq = {}
    print("aimet-torch int2 + zero_point_shift:")
    for case, kw in cases.items():
        torch.manual_seed(0)
        lin, x = Lin().eval(), torch.randn(1, 64)
        sim = TorchSim(lin, dummy_input=x, quant_scheme="tf", default_param_bw=8, default_output_bw=8)
        sim.model.fc1.param_quantizers["weight"] = QuantizeDequantize(bitwidth=2, symmetric=True,
                                                                      zero_point_shift=0.5, **kw)
        sim.compute_encodings(lambda m: [m(torch.randn(2, 64)) for _ in range(4)])
        name = f"aimet-torch-2.42.0_int2_shift_{case}"
        for ver in ("0.6.1", "1.0.0"):
            torch_qs.encoding_version = ver
            try:
                sim.export(OUT, f"{name}_legacy_v{ver}", dummy_input=x)
                print(f"  {case} legacy {ver}: written")
            except Exception as e:
                print(f"  {case} legacy {ver}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            for ext in (".pth", ".onnx"):  # the model files of the legacy export (pickle; the same graph)
                if os.path.exists(os.path.join(OUT, f"{name}_legacy_v{ver}{ext}")):
                    os.remove(os.path.join(OUT, f"{name}_legacy_v{ver}{ext}"))
        torch_qs.encoding_version = "1.0.0"
        for ver in ("1.0.0", "2.0.0"):
            try:
                sim.onnx.export(x, os.path.join(OUT, f"{name}_v{ver}.onnx"), encoding_version=ver, dynamo=False)
                print(f"  {case} onnx {ver}: written")
            except Exception as e:
                print(f"  {case} onnx {ver}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        q = sim.model.fc1.param_quantizers["weight"]
        w = sim.model.fc1.weight.detach().clone()
        s = q.get_scale().detach().to(torch.float32)
        full = s.repeat_interleave(16, dim=1) if case == "block" else s.expand_as(w)
        k = torch.arange(-6, 7, dtype=torch.float32).repeat(w.numel() // 13 + 1)[: w.numel()].reshape(w.shape)
        probe = (k / 2) * full
        qdq[f"{case}/w"] = w.numpy()
        qdq[f"{case}/qdq"] = q(w).dequantize().detach().numpy()
        qdq[f"{case}/probe"] = probe.numpy()
        qdq[f"{case}/probe_qdq"] = q(probe).dequantize().detach().numpy()
    for f in os.listdir(OUT):  # keep the .onnx of the 2.0.0 exports only (the 1.0.0 ones are the same model), and
        # not the legacy export's module-keyed "_torch.encodings" (aimet-torch's own format, not a QNN encodings file)
        if (f.startswith("aimet-torch-2.42.0_int2_shift") and f.endswith(".onnx") and "_v2.0.0" not in f) \
                or f.endswith("_torch.encodings") or f == "temp_onnx_model_with_all_markers.onnx":
            os.remove(os.path.join(OUT, f))
    np.savez(os.path.join(OUT, "int2_shift_qdq_torch.npz"), **qdq)


def main():
    import aimet_onnx
    print("aimet_onnx", aimet_onnx.__version__)
    model = build_model()
    onnx.save(model, os.path.join(OUT, "probe_model.onnx"))
    data = calib_data()
    int2_shift(model, data)
    float8(model, data)
    export_options(model, data)
    version_0_6_2(model, data)
    if "--torch" in sys.argv:
        float4_torch()
        fp4_torch()
        int2_shift_torch()
    print("written:", sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
