"""Loading qlinear's optional compiled helpers (plain C extension files, used through :mod:`ctypes`)."""

from __future__ import annotations

import ctypes
import importlib.util
import os


def cdll(module: str) -> ctypes.CDLL | None:
    """The shared library of extension ``module`` (e.g. ``"qlinear.core._native"``), or None when it was not built
    (no C compiler at install time: callers then use their NumPy / pure-Python path)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not os.path.exists(spec.origin):
        return None
    return ctypes.CDLL(spec.origin, use_errno=True)
