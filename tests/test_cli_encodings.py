"""The ``qlinear encodings`` commands, run in-process through the real entry point."""

from __future__ import annotations

import pytest

from qlinear.cli.main import EXIT_ERROR, main


@pytest.fixture()
def g(shared_dir):
    return shared_dir / "aimet-golden"


def test_inspect_convert_apply_extract_validate(g, tmp_path, capsys):
    f = g / "aimet-onnx-2.42.0_blockwise_tf_v1.0.0.encodings"
    assert main(["encodings", "inspect", str(f), "--model", str(g / "tiny_model.onnx")]) == 0
    out = capsys.readouterr().out
    assert "fc1.weight" in out and "per_block" in out
    dst = tmp_path / "b2.encodings"
    assert main(["encodings", "convert", str(f), str(dst), "--to", "2.0.0", "-m", str(g / "tiny_model.onnx")]) == 0
    assert dst.read_text() != "" and '"block_size": 16' in dst.read_text()
    q = tmp_path / "q.onnx"
    assert main(["encodings", "apply", str(dst), str(g / "tiny_model.onnx"), "-o", str(q)]) == 0
    back = tmp_path / "back.encodings"
    assert main(["encodings", "extract", str(q), "-o", str(back)]) == 0
    assert back.read_text() == dst.read_text()
    assert main(["encodings", "validate", str(back), "--model", str(g / "tiny_model.onnx")]) == 0


def test_failures_leave_no_partial_file_and_keep_old_output(g, tmp_path, capsys):
    dst = tmp_path / "out.encodings"
    dst.write_text("previous")
    # LPBQ cannot be written as 0.6.1: error names the tensor, exit 3 (EXIT_ERROR), old file intact, no temp files
    rc = main(["encodings", "convert", str(g / "aimet-onnx-2.42.0_lpbq_tf_v2.0.0.encodings"), str(dst), "--to", "0.6.1"])
    assert rc == EXIT_ERROR
    err = capsys.readouterr().err
    assert "fc1.weight" in err and "0.6.1" in err
    assert dst.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.encodings"]
    rc = main(["encodings", "validate", str(g / "aimet-onnx-2.42.0_per_tensor_tf_v2.0.0.encodings"), "--model",
               str(tmp_path / "missing.onnx")])
    assert rc == EXIT_ERROR and "not found" in capsys.readouterr().err


def test_convert_without_axes_names_the_model_option_and_resolves_with_it(g, tmp_path, capsys):
    f = g / "aimet-onnx-2.42.0_per_channel_tf_v1.0.0.encodings"
    dst = tmp_path / "pc2.encodings"
    rc = main(["encodings", "convert", str(f), str(dst), "--to", "2.0.0"])
    err = capsys.readouterr().err
    assert rc == EXIT_ERROR and "conv.weight" in err and "--model" in err and not dst.exists()
    assert main(["encodings", "convert", str(f), str(dst), "--to", "2.0.0", "--model", str(g / "tiny_model.onnx")]) == 0
    from qlinear import encodings as E

    aimet = E.load(g / "aimet-onnx-2.42.0_per_channel_tf_v2.0.0.encodings")  # the axes AIMET itself wrote
    ours = E.load(dst)
    assert all(ours[e.name].axis == e.axis for e in aimet.params if e.name in ours)


def test_inspect_without_model_shows_unresolved_axes(g, capsys):
    f = g / "aimet-onnx-2.42.0_per_channel_tf_v1.0.0.encodings"
    assert main(["encodings", "inspect", str(f)]) == 0
    assert "axis unresolved" in capsys.readouterr().out
    assert main(["encodings", "inspect", str(f), "-m", str(g / "tiny_model.onnx")]) == 0
    assert "axis unresolved" not in capsys.readouterr().out


def test_validate_and_apply_against_the_original_point_to_model_float_onnx(tmp_path, capsys):
    """The encodings `qlinear quantize` writes name the tensors of the float model it rewrote (here a BatchNorm
    folded): given the original, validate and apply fail and say which model they fit."""
    from qlinear.examples import MODEL

    out = tmp_path / "o"
    assert main(["quantize", "--no-report", "-o", str(out)]) == 0
    assert (out / "model.float.onnx").is_file()
    capsys.readouterr()
    enc = str(out / "model.encodings")
    assert main(["encodings", "validate", enc, "--model", str(MODEL)]) == 1
    said = "".join(capsys.readouterr().out.split())   # the console folds a long path where it likes: no spaces
    fit = "".join(f"these encodings fit {out / 'model.float.onnx'}".split())
    assert "problem(s)" in said and fit in said
    assert main(["encodings", "apply", enc, str(MODEL), "-o", str(tmp_path / "q.onnx")]) == EXIT_ERROR
    said = "".join(capsys.readouterr().err.split())
    assert fit in said and not (tmp_path / "q.onnx").exists()
    assert main(["encodings", "validate", enc, "--model", str(out / "model.float.onnx")]) == 0
    assert "these encodings fit" not in capsys.readouterr().out
