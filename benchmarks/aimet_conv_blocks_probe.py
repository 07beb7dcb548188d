"""Write what AIMET computes for blocked Conv weights, as golden files for qlinear's target qnn.

AIMET blocks a Conv weight [O, I, kh, kw] over input channels across the whole kernel (scales ``(O, I/B, 1, 1)``),
where ONNX's blocked QuantizeLinear blocks each kernel position. This writes, into OUT (default
``tests/encodings/aimet_formats``): ``conv_blocks_model.onnx`` (x[1,64,6,6] -> Conv(conv.weight[8,64,3,3], bias)
-> Relu -> Conv(pw.weight[4,8,1,1]) -> y, weights from ``default_rng(1)``) and AIMET's 2.0.0 encodings of it with
LPBQ (``set_lpbq_for_params``, int4, block 16) and with int4 blockwise weights (``set_blockwise_quantization_for_weights``,
block 16) on Conv, min-max (``tf``) calibration on 6 batches from ``default_rng(2)``.

Run it in AIMET's own environment (see ``aimet_format_probe.py`` for its set-up)::

    /work/.venv-aimet/bin/python benchmarks/aimet_conv_blocks_probe.py [OUT]
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (8, 64, 3, 3)).astype(np.float32), "conv.weight"),
             numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "conv.bias"),
             numpy_helper.from_array(rng.normal(0, 0.2, (4, 8, 1, 1)).astype(np.float32), "pw.weight")]
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "pw.weight"], ["y"], name="pw")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main(out: str) -> None:
    import aimet_onnx
    from aimet_onnx.common.defs import QuantScheme
    from aimet_onnx.quantsim import (
        QuantizationSimModel,
        set_blockwise_quantization_for_weights,
        set_lpbq_for_params,
    )

    os.makedirs(out, exist_ok=True)
    m = model()
    onnx.save(m, os.path.join(out, "conv_blocks_model.onnx"))
    cfg = os.path.join(os.path.dirname(aimet_onnx.__file__), "common", "quantsim_config",
                       "default_config_per_channel.json")
    x = np.random.default_rng(2).normal(size=(6, 1, 64, 6, 6)).astype(np.float32)
    for kind in ("lpbq", "blockwise"):
        sim = QuantizationSimModel(m, quant_scheme=QuantScheme.post_training_tf, default_param_bw=4,
                                   default_activation_bw=8, config_file=cfg)
        if kind == "lpbq":
            set_lpbq_for_params(sim, bitwidth=4, block_size=16, op_types={"Conv"})
        else:
            set_blockwise_quantization_for_weights(sim, ("Conv",), bitwidth=4, symmetric=True, block_size=16)
        sim.compute_encodings([{"x": b} for b in x])
        sim.export(out, f"aimet-onnx-{aimet_onnx.__version__}_conv_{kind}_v2.0.0", export_model=False,
                   encoding_version="2.0.0")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "encodings",
                                                           "aimet_formats"))
