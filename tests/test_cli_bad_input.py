"""``qlinear quantize`` on bad input, as a new user meets it: one ``error:`` line naming the input and the fix, exit
status 3, refused before any work where the refusal can be known up front."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import qlinear
from qlinear import QuantizeConfig
from qlinear.cli.main import EXIT_ERROR, main
from qlinear.errors import ConfigError, GraphError
from qlinear.examples import DATA, MODEL
from qlinear.ptq import ImagePreprocess


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


def test_an_invalid_model_names_the_node_the_checker_names(tmp_path, capsys):
    # onnx.checker puts the node on its second line, which was cut: '... input 'gone' of node: ' and nothing after
    m = onnx.load(MODEL)
    m.graph.node[1].input[0] = "gone"
    onnx.save(m, tmp_path / "dangling.onnx")
    assert main(["quantize", str(tmp_path / "dangling.onnx"), "--data", str(DATA), "-o", str(tmp_path / "o")]) \
        == EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "input 'gone' of node: name: bn OpType: BatchNormalization is not output of any previous nodes" in err
    m = onnx.load(MODEL)
    m.graph.node[1].op_type = "FooBar"
    with pytest.raises(GraphError, match=r"invalid ONNX model: No Op registered for FooBar with domain_version of "
                                         r"17; Bad node spec for node\. Name: bn OpType: FooBar$"):
        qlinear.quantize(m, str(DATA))


@pytest.mark.parametrize("argv, said", [
    (["--weight-type", "float8e4m3fn", "--encodings-version", "1.0.0"],
     "--encodings-version 1.0.0 cannot hold float8e4m3fn encodings (AIMET writes scaled float types from 2.0.0); "
     "use --encodings-version 2.0.0"),
    (["--weights", "per-block", "--encodings-version", "0.6.1"],
     "--encodings-version 0.6.1 has no blocks, so it cannot hold per-block weights; use --encodings-version 1.0.0 "
     "or 2.0.0"),
])
def test_an_encodings_version_that_cannot_hold_the_encodings_is_refused_before_work(tmp_path, capsys, argv, said):
    # refused by the writer after calibration and evaluation: 'error: stem.weight: float8e4m3fn encodings cannot be
    # expressed in 1.0.0 (its FLOAT entries have no scale); write 2.0.0'
    out = tmp_path / "out"
    assert main(["quantize", *argv, "-o", str(out)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert said in " ".join(err.split()), err
    assert "calibrating" not in err and not out.exists()


def test_a_bad_scale_in_an_encodings_file_is_shown_as_a_number(tmp_path, capsys):
    # it said 'scale[1] = np.float64(0.0)' (NumPy's repr)
    f = tmp_path / "bad.encodings"
    f.write_text(json.dumps({"version": "2.0.0", "encodings": [
        {"name": "w", "output_dtype": "int8", "axis": 0, "y_scale": [0.5, 0.0]}]}))
    assert main(["encodings", "inspect", str(f)]) == EXIT_ERROR
    err = " ".join(capsys.readouterr().err.split())
    assert err.endswith("encodings[0].y_scale[1]: w: scale[1] = 0.0; scales must be finite and > 0"), err


def _images(folder, n: int = 4):
    from PIL import Image

    folder.mkdir()
    for i in range(n):
        Image.fromarray(np.full((24, 24, 3), 40 * i, np.uint8)).save(folder / f"{i}_img.png")
    return folder


def test_an_image_std_of_zero_is_refused_naming_the_option(tmp_path, capsys):
    # it printed NumPy's 'RuntimeWarning: invalid value encountered in divide', then blamed the first image: 'input
    # 'input' holds a non-finite value (-inf ...); calibration needs finite data: clean or drop that sample'
    imgs = _images(tmp_path / "imgs")
    assert main(["quantize", "--data", str(imgs), "--image-std", "0", "-o", str(tmp_path / "o")]) == EXIT_ERROR
    err = " ".join(capsys.readouterr().err.split())
    assert "error: image std: expected a finite non-zero number or one per channel (R, G, B), got 0.0" in err, err
    assert "RuntimeWarning" not in err and "calibrating" not in err and not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match="image mean: expected a finite number"):
        ImagePreprocess(mean=(1.0, 2.0))
    assert ImagePreprocess(mean=(1, 2, 3), std=(4, 5, 6)).std == (4, 5, 6)


def test_a_file_in_an_image_folder_that_is_no_image_is_refused_before_work(tmp_path, capsys):
    # found when the report read it, after calibration and evaluation had run
    imgs = _images(tmp_path / "imgs")
    (imgs / "9_broken.png").write_text("not an image")
    out = tmp_path / "o"
    assert main(["quantize", "--data", str(imgs), "--calibration-samples", "2", "-o", str(out)]) == EXIT_ERROR
    err = " ".join(capsys.readouterr().err.split())
    assert "error: " + str(imgs / "9_broken.png") + ": cannot read image (cannot identify image file" in err, err
    assert "calibrating" not in err and not out.exists()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_an_image_cut_short_is_refused_before_work(tmp_path, capsys, fmt):
    # a truncated download was found when its turn to be decoded came, after calibration in a held-out image
    from PIL import Image

    imgs = _images(tmp_path / "imgs")
    rng = np.random.default_rng(3)
    cut = imgs / f"7_cut.{fmt.lower()}"
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(cut, fmt)
    whole = imgs / f"8_trailing.{fmt.lower()}"    # bytes after the end marker: read, not refused
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(whole, fmt)
    whole.write_bytes(whole.read_bytes() + bytes(200))
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    out = tmp_path / "o"
    assert main(["quantize", "--data", str(imgs), "--calibration-samples", "2", "-o", str(out)]) == EXIT_ERROR
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: {cut}: cannot read image (" in err and "replace or remove that file" in err, err
    assert "calibrating" not in err and not out.exists()
    cut.unlink()
    assert main(["quantize", "--data", str(imgs), "--calibration-samples", "2", "-o", str(out)]) == 0


@pytest.mark.parametrize("args, refused", [(["--weights", "lpbq"], True),
                                           (["--weights", "per-block", "--weight-type", "int4"], True),
                                           (["--weights", "per-block"], False),   # 8-bit Conv: per-channel instead
                                           (["--weights", "per-block", "--target", "tflite"], False),
                                           (["--weights", "lpbq", "--target", "qnn"], False)])   # AIMET's blocks
def test_encodings_1_0_0_and_conv_blocks_over_a_kernel_refused_before_work(tmp_path, capsys, args, refused):
    # the 1.0.0 writer refused them at the end of the run, after calibration and evaluation (AIMET interop audit)
    out = tmp_path / "o"
    rc = main(["quantize", *args, "--encodings-version", "1.0.0", "--calibration-samples", "4",
               "--evaluation-samples", "4", "-o", str(out)])
    err = " ".join(capsys.readouterr().err.split())
    if refused:
        assert rc == EXIT_ERROR and "calibrating" not in err and not out.exists(), err
        assert "block Conv weight 'stem.weight' [16, 3, 3, 3] at each of its kernel positions; 1.0.0 cannot hold" in err
    else:
        assert rc == 0 and (out / "model.encodings").exists(), err
