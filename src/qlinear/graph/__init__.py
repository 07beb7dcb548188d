"""The ONNX graph layer: loading models, per-parameter axes, and the bridge between encodings and Q/DQ models.

* :func:`resolve` / :func:`load_encodings`: encodings given the axes and roles of a model;
* :func:`validate`: a :class:`Report` of every problem of encodings against a model;
* :func:`apply`: a Q/DQ ONNX model carrying the encodings; :func:`extract`: the encodings of a Q/DQ model;
* :func:`check_integer`: the integer check of a written Q/DQ model.

Importing this package loads ``onnx``.
"""

import qlinear.graph.deferred  # noqa: F401 - first: onnx_ir imported with sympy deferred until used
from qlinear.graph.bridge import Problem, Report, apply, extract, validate
from qlinear.graph.check import IntegerCheck, LayerCheck, check_integer
from qlinear.graph.resolving import load_encodings, resolve

__all__ = ["IntegerCheck", "LayerCheck", "Problem", "Report", "apply", "check_integer", "extract", "load_encodings",
           "resolve", "validate"]
