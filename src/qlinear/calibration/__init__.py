"""Calibration: scale and zero point from data, exactly as AIMET, ONNX Runtime and the TFLite converter compute them.

* observers (:mod:`.observers`): ``update`` / ``merge`` / ``compute`` for min-max, moving average, percentile,
  MSE, SQNR search and entropy, per-tensor, per-channel and per-block;
* policies (:mod:`.policies`): ``aimet``, ``onnxruntime``, ``tflite``, float8, LPBQ, int32 bias;
* :func:`calibrate`: one call for scripts.
"""

from qlinear.calibration.api import calibrate
from qlinear.calibration.groups import Grouping
from qlinear.calibration.observers import (
    METHODS,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    Observer,
    make_observer,
)
from qlinear.calibration.policies import bias_scale

__all__ = ["METHODS", "Grouping", "HistogramObserver", "MinMaxObserver", "MovingAverageMinMaxObserver", "Observer",
           "bias_scale", "calibrate", "make_observer"]
