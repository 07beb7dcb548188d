"""``onnx_ir`` imported without ``sympy`` (a quarter of a second of every CLI run, for symbolic shape arithmetic the
package never does): while ``onnx_ir`` imports, ``sympy`` and ``onnx_ir._symbolic_shapes`` (whose module level reads
``sympy``) are stand-ins in ``sys.modules``; afterwards the stand-ins leave ``sys.modules`` (any later ``import sympy``
is the ordinary one) and only ``onnx_ir``'s own references keep them, each importing its module on first use and
forwarding every attribute to it. Without ``onnx_ir`` or ``sympy``, or with either already imported, nothing is
deferred. Importing this module does it (:mod:`qlinear.graph` imports it before anything else)."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any


class Deferred(types.ModuleType):
    """A module's stand-in: its real module is imported when an attribute is first read."""

    def __init__(self, name: str, spec: Any) -> None:
        super().__init__(name)
        self.__spec__ = spec
        self.__dict__["_real_lock"] = threading.Lock()
        self.__dict__["_real_module"] = None

    def __getattr__(self, attr: str) -> Any:   # only for names the stand-in lacks: the real module's
        with self.__dict__["_real_lock"]:
            real = self.__dict__["_real_module"]
            if real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]
                real = importlib.import_module(self.__name__)
                self.__dict__["_real_module"] = real
        return getattr(real, attr)


def import_onnx_ir() -> None:
    """Import ``onnx_ir`` with ``sympy`` deferred (see the module's text)."""
    if "onnx_ir" in sys.modules or "sympy" in sys.modules:
        return
    try:
        pkg = importlib.util.find_spec("onnx_ir")
        specs = {"sympy": importlib.util.find_spec("sympy"),
                 "onnx_ir._symbolic_shapes": None if pkg is None else importlib.machinery.PathFinder.find_spec(
                     "onnx_ir._symbolic_shapes", pkg.submodule_search_locations)}
    except (ImportError, ValueError):
        return
    if pkg is None or None in specs.values():
        return
    stand_ins = {name: Deferred(name, spec) for name, spec in specs.items()}
    sys.modules.update(stand_ins)
    try:
        importlib.import_module("onnx_ir")
    finally:
        for name, mod in stand_ins.items():
            if sys.modules.get(name) is mod:
                del sys.modules[name]


import_onnx_ir()  # on import: qlinear.graph imports this module before any of its modules import onnx_ir

__all__ = ["Deferred", "import_onnx_ir"]
