"""AIMET encoding format 2.1.0 (notes ``aimet.md`` §3.5): 2.0.0 plus "meta" scales.

``y_scale`` may be an object ``{"x": quantized scale, "x_scale": its scale, "axis"?, "x_zero_point"?,
"input_dtype"?, "block_size"?}`` whose effective value is ``DequantizeLinear(x, x_scale, x_zero_point, axis)``.
aimet-torch writes LPBQ this way, with the inner axis negative (``-2``) and the outer ``axis`` positive::

    {"name": "fc1.weight", "output_dtype": "int4", "y_scale": {"x": [[13, 15], ...], "x_scale": [...], "axis": -2},
     "axis": 1, "block_size": 16}

qlinear reads integer meta scales as LPBQ (int scales ``x``, per-channel float scale ``x_scale``) and writes LPBQ
this way; float meta scales (NVFP4: ``x`` float8e4m3fn, ``input_dtype``) are not supported.
"""

from __future__ import annotations

from qlinear.encodings import _doc as d
from qlinear.encodings import v2_0_0
from qlinear.encodings._meta import read_meta_scale, write_meta_scale
from qlinear.encodings.model import Encoding, EncodingSet, Style

VERSION = "2.1.0"


def read(ctx: d.Ctx, doc: dict) -> tuple[list[Encoding], bool, list[str] | None]:
    return v2_0_0.read(ctx, doc, meta_scales=True)


def write(es: EncodingSet, style: Style, *, drop_float: bool = False) -> dict:
    return v2_0_0.write(es, style, drop_float=drop_float, version=VERSION)


__all__ = ["VERSION", "read", "read_meta_scale", "write", "write_meta_scale"]
