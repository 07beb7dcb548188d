"""``qlinear quantize`` on bad input, as a new user meets it: one ``error:`` line naming the input and the fix, exit
status 3, refused before any work where the refusal can be known up front."""

from __future__ import annotations

import numpy as np

from qlinear.cli.main import EXIT_ERROR, main
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
