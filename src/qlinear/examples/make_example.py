"""Regenerate the bundled example (deterministic): ``python -m qlinear.examples.make_example``.

A small CNN with the structures PTQ must handle: Conv + BatchNormalization (folded), Conv + Relu (fused), a
depthwise Conv + Clip(0, 6) (ReLU6), a residual Add, GlobalAveragePool, Flatten (data movement) and a Gemm
classifier. Weights are random but scaled like a trained network's; inputs are smooth random images.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qlinear.examples import DATA, MODEL


def build(seed: int = 0, channels: int = 16) -> tuple[onnx.ModelProto, np.ndarray]:
    """The example network with ``channels`` channels (16 in the bundled file; wider ones for tests that need more
    weight bytes) and its 40 input images."""
    c = channels
    rng = np.random.default_rng(seed)

    def w(name, *shape, fan_in):
        return numpy_helper.from_array((rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), name)

    inits = [
        w("stem.weight", c, 3, 3, 3, fan_in=27),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), "bn.scale"),
        numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "bn.bias"),
        numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "bn.mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2.0, c).astype(np.float32), "bn.var"),
        w("dw.weight", c, 1, 3, 3, fan_in=9),
        numpy_helper.from_array((rng.standard_normal(c) * 0.05).astype(np.float32), "dw.bias"),
        w("pw.weight", c, c, 1, 1, fan_in=c),
        numpy_helper.from_array((rng.standard_normal(c) * 0.05).astype(np.float32), "pw.bias"),
        w("fc.weight", 10, c, fan_in=c),
        numpy_helper.from_array(np.zeros(10, np.float32), "fc.bias"),
        numpy_helper.from_array(np.float32(0.0), "zero"),
        numpy_helper.from_array(np.float32(6.0), "six"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "stem.weight"], ["stem_out"], pads=[1, 1, 1, 1], name="stem"),
        helper.make_node("BatchNormalization", ["stem_out", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["bn_out"],
                         name="bn"),
        helper.make_node("Relu", ["bn_out"], ["relu_out"], name="relu"),
        helper.make_node("Conv", ["relu_out", "dw.weight", "dw.bias"], ["dw_out"], pads=[1, 1, 1, 1], group=c,
                         name="dw"),
        helper.make_node("Clip", ["dw_out", "zero", "six"], ["relu6_out"], name="relu6"),
        helper.make_node("Conv", ["relu6_out", "pw.weight", "pw.bias"], ["pw_out"], name="pw"),
        helper.make_node("Add", ["pw_out", "relu_out"], ["res_out"], name="residual"),
        helper.make_node("GlobalAveragePool", ["res_out"], ["gap_out"], name="gap"),
        helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="flatten"),
        helper.make_node("Gemm", ["flat_out", "fc.weight", "fc.bias"], ["logits"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(nodes, "example_cnn",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 24, 24])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="qlinear-example")
    m.ir_version = 8
    onnx.checker.check_model(m)
    # smooth random images: low-frequency noise upsampled, scaled to about [-1, 1]
    low = rng.standard_normal((40, 3, 6, 6)).astype(np.float32)
    x = np.repeat(np.repeat(low, 4, axis=2), 4, axis=3)
    x += 0.1 * rng.standard_normal(x.shape).astype(np.float32)
    x = np.clip(x / 2, -1, 1).astype(np.float32)
    return m, x


def main() -> None:
    m, x = build()
    onnx.save(m, MODEL)
    np.savez_compressed(DATA, input=x)
    print(f"wrote {MODEL} and {DATA}")


if __name__ == "__main__":
    main()
