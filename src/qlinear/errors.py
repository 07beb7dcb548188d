"""The one exception hierarchy of qlinear.

Every error qlinear raises on bad input derives from :class:`QlinearError`. The subclasses also
derive from the matching built-in (``ValueError``, ``TypeError``, ``NotImplementedError``,
``OSError``) so code written against NumPy-style exceptions keeps working.

Messages name the argument, field, tensor or file, what was expected and what was found, and,
where there is one, the fix.
"""

from __future__ import annotations


class QlinearError(Exception):
    """Base class of every error raised by qlinear."""


class ShapeError(QlinearError, ValueError):
    """An array has a shape that does not fit the others (scale vs input, zero point vs scale...)."""


class DTypeError(QlinearError, TypeError):
    """An array or type argument has a data type the operation does not accept."""


class AxisError(QlinearError, ValueError):
    """An axis argument is outside ``[-rank, rank - 1]``."""


class BlockSizeError(QlinearError, ValueError):
    """A block size does not match the input and scale shapes."""


class UnsupportedError(QlinearError, NotImplementedError):
    """A well-formed request that qlinear does not implement (the README lists them)."""


class EncodingError(QlinearError, ValueError):
    """An encoding (in memory or in a file) is invalid or cannot be expressed in a target format.

    ``path`` is the file (if any) and ``where`` the JSON path inside it (``param_encodings[3].scale[7]``).
    """

    def __init__(self, message: str, *, path: str | None = None, where: str | None = None) -> None:
        self.path = path
        self.where = where
        prefix = ""
        if path:
            prefix += f"{path}: "
        if where:
            prefix += f"{where}: "
        super().__init__(prefix + message)


class EncodingKeyError(EncodingError, KeyError):
    """An :class:`~qlinear.encodings.EncodingSet` has no encoding under the key asked for (a missing tensor name, or a
    key that is not a tensor name at all). Also a ``KeyError``, so ``except KeyError`` keeps working."""

    __str__ = BaseException.__str__  # the message as written (KeyError's would quote it)


class GraphError(QlinearError, ValueError):
    """An ONNX model cannot be read, validated or transformed as asked."""


class ConfigError(QlinearError, ValueError):
    """A configuration (Python object, dict or file) has an unknown key or an invalid value."""


class DataError(QlinearError, ValueError):
    """Calibration or evaluation data cannot be read or does not match the model's inputs."""


class CalibrationError(QlinearError, ValueError):
    """An observer cannot compute an encoding (no data, incompatible statistics, bad options)."""


class KernelError(QlinearError, ValueError):
    """Integer-kernel arguments are inconsistent (shapes, zero points, modes, unsupported ops)."""


class OverflowRiskError(KernelError):
    """An int32 accumulator can (or does) overflow: the runtimes would wrap around there."""


class OutputError(QlinearError, OSError):
    """An output file or folder cannot be written (missing or read-only folder, disk full, a folder in the way)."""


__all__ = [
    "AxisError",
    "BlockSizeError",
    "CalibrationError",
    "ConfigError",
    "DTypeError",
    "DataError",
    "EncodingError",
    "EncodingKeyError",
    "GraphError",
    "KernelError",
    "OutputError",
    "OverflowRiskError",
    "QlinearError",
    "ShapeError",
    "UnsupportedError",
]
