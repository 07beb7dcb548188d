"""Graph rewrites (``graph -> graph``), one per module, each tested on its own (``tests/graph/passes``).

* :func:`~qlinear.graph.passes.normalize.normalize` (proto): before planning — Constant weights become initializers,
  constant Identity/Cast/layout folded, opset 7-12 upgraded, weights left float (subgraphs) named in notes.

``onnx_ir`` passes (:class:`onnx_ir.passes.InPlacePass`, ``pass(model) -> PassResult``; what a pass did is on its
attributes), in the order :func:`qlinear.quantize` runs them on one :class:`onnx_ir.Model`:

* :class:`~qlinear.graph.passes.drop_identity.DropIdentity`: ``Identity`` nodes between layers dropped;
* :class:`~qlinear.graph.passes.unshare_biases.UnshareBiases`: a bias several layers read copied, one per layer (each
  int32 bias at its own layer's scales; not for weight-only runs);
* :class:`~qlinear.graph.passes.fold_batchnorm.FoldBatchNorm`: ``Conv -> BatchNormalization`` folded into the Conv;
* :class:`~qlinear.graph.passes.fold_conv_affine.FoldConvAffine`: ``Conv -> Mul/Add/Sub`` of a per-channel constant
  folded into the Conv's weight and bias;
* :class:`~qlinear.graph.passes.equalize.Equalize`: cross-layer equalization of Conv pairs (Clip -> per-channel
  Max/Min);
* :class:`~qlinear.graph.passes.smooth.Smooth`: SmoothQuant scaling of normalization outputs feeding MatMuls, given
  their per-channel ``max|x|`` (measured with ONNX Runtime in :mod:`qlinear.ptq.algorithms.smooth`);
* :class:`~qlinear.graph.passes.correct_bias.CorrectBias`: bias correction for quantized weights, given the layer
  input means;
* :class:`~qlinear.graph.passes.raise_opset.RaiseOpset`: the opset the encodings need (``onnx.version_converter``);
* :class:`~qlinear.graph.passes.insert_qdq.InsertQDQ`: Q/DQ (and Cast pairs) for a set of resolved encodings (a
  :class:`~qlinear.graph.passes.insert_qdq.ParamSource` gives a param's integers lazily: weight-only);
* :class:`~qlinear.graph.passes.lower_matmulnbits.LowerMatMulNBits`: ``DequantizeLinear(int4/int8 W) -> MatMul/Gemm``
  to ONNX Runtime's ``com.microsoft.MatMulNBits`` (weight-only).
"""
