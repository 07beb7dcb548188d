"""Statistics of a float model's tensors over the calibration data: one streaming ONNX Runtime pass feeding
pluggable accumulators.

* :mod:`.accumulators`: the :class:`~.accumulators.Accumulator` interface (``update(x)`` per batch) and the
  accumulators the algorithms need: :class:`~.accumulators.ChannelMean` (bias correction's input means),
  :class:`~.accumulators.Gram` (``X^T X``, GPTQ's Hessian); the calibration observers
  (:mod:`qlinear.calibration.observers`, ranges) have the same interface.
* :mod:`.stream`: :func:`~.stream.accumulate`, the one pass: the float model runs with every watched tensor exposed
  as an output, each batch updates the tensor's accumulators and is dropped (memory: the model and one batch).
"""

from qlinear.ptq.stats.accumulators import Accumulator, ChannelMean, Gram
from qlinear.ptq.stats.stream import accumulate

__all__ = ["Accumulator", "ChannelMean", "Gram", "accumulate"]
