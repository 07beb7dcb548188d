"""``qlinear quantize`` on bad input, as a new user meets it: one ``error:`` line naming the input and the fix, exit
status 3, refused before any work where the refusal can be known up front."""

from __future__ import annotations

import numpy as np
import pytest

from qlinear import QuantizeConfig
from qlinear.cli.main import EXIT_ERROR, main
from qlinear.errors import ConfigError
from qlinear.examples import DATA


def test_no_model_names_the_data_given(tmp_path, capsys):
    # it said 'on example_data.npz' while it read the --data given (and failed on it)
    d = tmp_path / "mine.npz"
    np.savez(d, inp=np.load(DATA)["input"][:4])
    assert main(["quantize", "--data", str(d), "-o", str(tmp_path / "out")]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "bundled example example_cnn.onnx on mine.npz" in " ".join(err.split()), err
    assert "example_data.npz" not in err
    assert not (tmp_path / "out").exists()


def test_full_integer_without_target_tflite_is_refused_before_work(tmp_path, capsys):
    # it ran target ort and wrote the outputs with --full-integer unsaid (no .tflite, nothing refused, no note)
    out = tmp_path / "out"
    assert main(["quantize", "--full-integer", "-o", str(out)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "full_integer: refuses the float islands of a .tflite, so it needs target tflite, got target ort; add " \
           "--target tflite" in " ".join(err.split()), err
    assert "calibrating" not in err and not out.exists()
    with pytest.raises(ConfigError, match="full_integer: .* got target qnn"):
        QuantizeConfig(target="qnn", full_integer=True)
    assert QuantizeConfig(target="tflite", full_integer=True).full_integer
