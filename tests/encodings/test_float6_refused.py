"""float6 (QuantizeLinear opset 28) has no AIMET spelling: the in-memory model holds such encodings (for
calibration and Q/DQ models), every file version refuses to write them and 2.x readers refuse to read them, with
an EncodingError naming the tensor, the type and the way out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qlinear import encodings as E
from qlinear.encodings.io import from_document
from qlinear.encodings.model import Encoding, EncodingSet
from qlinear.errors import EncodingError

F6 = ["float6e2m3", "float6e3m2"]


@pytest.mark.parametrize("name", F6)
def test_in_memory_encoding_holds_float6(name):
    e = Encoding("act", name, scale=np.array(0.5))
    assert e.dtype == name and e.zero_point is None
    y = e.fake_quantize(np.array([0.3, 100.0, -0.1], np.float32))
    top = 7.5 if name == "float6e2m3" else 28.0
    assert y[1] == top * 0.5  # saturated to the type's largest value
    with pytest.raises(EncodingError, match="has no zero point"):
        Encoding("act", name, scale=np.array(0.5), zero_point=np.array(1))


@pytest.mark.parametrize("version", ["2.0.0", "2.1.0", "1.0.0", "0.6.1"])
@pytest.mark.parametrize("name", F6)
def test_every_version_refuses_to_write(name, version, tmp_path):
    es = EncodingSet([Encoding("w", "int8", scale=np.array(0.1), zero_point=np.array(0), role="param"),
                      Encoding("act", name, scale=np.array(0.5))])
    pattern = f"act: {name} \\(QuantizeLinear opset 28\\) cannot be expressed in AIMET encodings"
    with pytest.raises(EncodingError, match=pattern):
        E.dumps(es, version)
    with pytest.raises(EncodingError, match=pattern):
        E.save(es, tmp_path / "x.encodings", version)
    assert not (tmp_path / "x.encodings").exists()


@pytest.mark.parametrize("n", [1, 3000])  # the parsed reader and the bulk reader of large files
@pytest.mark.parametrize("name", F6)
def test_2x_readers_refuse(name, n):
    entries = [{"name": f"t{i}", "output_dtype": "int8", "y_scale": [0.1, 0.2], "axis": 0} for i in range(n)]
    entries.append({"name": "act", "output_dtype": name, "y_scale": 0.5})
    for version in ("2.0.0", "2.1.0"):
        text = json.dumps({"version": version, "encodings": entries})
        with pytest.raises(EncodingError, match=f"output_dtype: act: {name} .*cannot be expressed in AIMET"):
            E.loads(text)
        with pytest.raises(EncodingError, match=f"output_dtype: act: {name} .*cannot be expressed in AIMET"):
            from_document(json.loads(text))  # the parsed reader only
