"""Graph rewrites (``graph -> graph``), one per module, each tested on its own.

* :func:`~qlinear.graph.passes.normalize.normalize`: before planning — Constant weights become initializers,
  constant Identity/Cast/layout folded, opset 7-12 upgraded, weights left float (subgraphs) named in notes.
* :class:`~qlinear.graph.passes.insert_qdq.InsertQDQ` (``onnx_ir``): Q/DQ (and Cast pairs) for a set of resolved
  encodings (a :class:`~qlinear.graph.passes.insert_qdq.ParamSource` gives a param's integers lazily: weight-only).
* :class:`~qlinear.graph.passes.lower_matmulnbits.LowerMatMulNBits` (``onnx_ir``): ``DequantizeLinear(int4/int8
  W) -> MatMul/Gemm`` to ONNX Runtime's ``com.microsoft.MatMulNBits``.
"""
