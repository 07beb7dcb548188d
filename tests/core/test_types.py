"""The type registry against onnx's own tables (TensorProto numbers, NumPy dtypes) and the spec's ranges."""

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from qlinear.core.types import TABLE, Kind, qtype
from qlinear.errors import DTypeError, QlinearError

SPEC_RANGES = {  # onnx-quantizelinear-25.txt, "Saturation is done according to"
    "uint16": (0, 65535), "int16": (-32768, 32767), "uint8": (0, 255), "int8": (-128, 127),
    "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1),
}


@pytest.mark.parametrize("t", TABLE, ids=[t.name for t in TABLE])
def test_onnx_numbers_and_dtypes(t):
    assert t.onnx_type == getattr(TensorProto, {"float32": "FLOAT"}.get(t.name, t.name.upper()))
    assert helper.tensor_dtype_to_np_dtype(t.onnx_type) == t.storage
    assert qtype(t.onnx_type) is t and qtype(t.name) is t and qtype(t.storage) is t


def test_spec_saturation_ranges():
    for name, (lo, hi) in SPEC_RANGES.items():
        t = qtype(name)
        assert (t.qmin, t.qmax) == (lo, hi) and t.kind is Kind.INT
        assert ml_dtypes.iinfo(t.storage).min == lo and ml_dtypes.iinfo(t.storage).max == hi


def test_float_ranges_and_bits():
    assert qtype("float8e4m3fn").qmax == 448 and qtype("float8e4m3fnuz").qmax == 240
    assert qtype("float8e5m2").qmax == qtype("float8e5m2fnuz").qmax == 57344
    assert qtype("float4e2m1").qmax == 6 and qtype("float4e2m1").per_byte == 2
    assert qtype("float8e8m0").kind is Kind.SCALE and not qtype("float8e8m0").signed
    assert [qtype(n).per_byte for n in ("int2", "uint2", "int4", "uint4", "int8")] == [4, 4, 2, 2, 1]
    assert qtype("int32").bits == 32 and qtype("int16").levels == 65536


def test_lookup_aliases_and_errors():
    assert qtype("FLOAT") is qtype(np.float32) is qtype("float32")
    assert qtype(ml_dtypes.float4_e2m1fn).name == "float4e2m1"
    assert qtype("float8_e4m3fn").name == "float8e4m3fn"
    with pytest.raises(DTypeError, match="unknown type 'int7'"):
        qtype("int7")
    with pytest.raises(QlinearError, match="not a quantization type"):
        qtype(np.float64)
    with pytest.raises(DTypeError, match="TensorProto data type 7"):
        qtype(7)  # INT64
