"""Typed, validated configuration of a post-training quantization run.

Frozen dataclasses; :meth:`QuantizeConfig.from_dict` rejects unknown keys (never silently dropped) and bad values,
naming the key and what would fix it. A config file is JSON (or TOML on Python >= 3.11).
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from qlinear.core.granularity import LPBQ, Granularity, PerAxis, PerBlock, PerTensor
from qlinear.core.types import Kind, QType, qtype
from qlinear.errors import ConfigError
from qlinear.ptq.report.metrics import Target

WEIGHT_TYPES = ("int8", "uint8", "int4", "uint4", "int2", "int16", "float8e4m3fn")
#: ``float``: weight-only quantization (:mod:`qlinear.ptq.weightonly`), activations stay float
ACTIVATION_TYPES = ("uint8", "int8", "uint16", "int16", "float8e4m3fn", "float")
#: the user's spellings of the weight granularity (CLI ``--weights``, config ``weights``, report.json); the code
#: below the config works with the core objects they stand for (:func:`granularity_of`)
GRANULARITIES = ("per-channel", "per-tensor", "per-block", "lpbq")
#: bits of an LPBQ block scale (AIMET's W4 LPBQ: 4-bit integer block scales)
LPBQ_SCALE_BITS = 4
METHODS = ("minmax", "moving_average", "sqnr", "mse", "percentile", "entropy")
#: weight methods that use the layer inputs (calibration data): sequential MSE and AdaRound (:mod:`qlinear.ptq.algorithms.refine`)
DATA_WEIGHT_METHODS = ("seqmse", "adaround")
#: weight-only methods (:mod:`qlinear.ptq.weightonly`): round to nearest (``minmax``), per-block scale search by
#: the weight error (``mse``), GPTQ (needs data)
WEIGHT_ONLY_METHODS = ("minmax", "mse", "gptq")
#: weight-only methods on the calibration data's Gram matrices (:mod:`qlinear.ptq.algorithms.awq`, ``aag``:
#: :func:`qlinear.ptq.algorithms.grids.activation_aware_grid`), alone or before GPTQ
WEIGHT_ONLY_DATA_METHODS = ("gptq", "awq", "aag", "awq+gptq", "aag+gptq", "awq+aag", "awq+aag+gptq")
WEIGHT_ONLY_METHODS += WEIGHT_ONLY_DATA_METHODS[1:]
OUTPUT_FORMATS = ("qdq", "matmulnbits")
LM_HEAD_TYPES = ("int8", "int4", "float")  #: weight-only lm_head: int8 per-channel, follow the weights, or float
#: what ``output_kinds`` may say of a graph output (the report's reading of it, ``report.evaluate.HEADLINE``)
OUTPUT_KINDS = ("classifier", "sequence", "probability", "regression", "map", "embedding", "state", "generic")
TARGETS = ("ort", "tflite", "qnn")
RAY_ADDRESS = re.compile(r"^(auto|local|rays?://[^\s:/]+(:\d+)?|[^\s:/]+:\d+)$")  # ray_address (ray.init's forms)


@dataclass(frozen=True)
class QuantizeConfig:
    """What to quantize and how.

    Attributes:
        weight_type / activation_type: quantized types (defaults int8 weights, uint8 activations).
        weights: ``per-channel`` (default), ``per-tensor``, ``per-block`` (``block_size``) or ``lpbq`` (4-bit blocks
            with integer per-block scales under a per-channel float scale, AIMET spec §1.2).
            With ``activation_type: "float"`` only the MatMul/Gemm weights are quantized (weight-only, see
            :mod:`qlinear.ptq.weightonly`): ``weight_method`` ``minmax`` (round to nearest), ``mse`` (each block's
            scale searched by the weight error) or ``gptq``; by default (``None``) with per-block weights ``mse``
            without data (blocks up to 32) and ``aag+gptq`` with data (a note says so), else ``minmax``
            (``gptq_act_order``, ``gptq_damp``, ``gptq_sequential``: each block's Hessians on the outputs of the
            blocks before it already quantized, in bounded memory, default true), ``output_format`` ``qdq`` or ``matmulnbits``, ``lm_head_type``
            (the tied embedding / lm_head, the MatMul producing the logits: ``int8`` per-channel by default when
            the weights are 4-bit or less, ``int4`` to follow the weights, ``float`` to leave it).
        weight_method / activation_method: calibration method per role. Default (``None``): ``minmax`` for both
            with per-channel/per-block weights; with per-tensor weights SQNR search for the weights and MSE for the
            activations (min-max loses too much there); under ``size_budget`` / ``average_bits`` SQNR search for
            the weights (the int4 ones clip: on EfficientNet-Lite0 at 0.2 the chosen model's output SQNR on the
            held-back calibration samples is 14.1 dB against 12.8 with min-max, at the same size). Weights also take ``seqmse`` (clipping ranges chosen by the
            layer's output error on the calibration inputs) and ``adaround`` (SeqMSE ranges, then AdaRound's learned
            rounding, ``adaround_iterations`` Adam steps per layer; opt-in: ``adaround_holdout`` (e.g. 0.2) holds
            that fraction of the calibration samples back from its fit and keeps the checkpoint with the lowest
            output error on them, ``adaround_augment`` adds the mirror images of NCHW image inputs; both measured
            worse on EfficientNet-Lite0's held-out images, so off by default); see :mod:`qlinear.ptq.algorithms.refine`.
        weight_symmetric / activation_symmetric: symmetric grids (default: weights yes, activations no).
        policy: range-to-parameters rule (``aimet``, ``onnxruntime``, ``tflite``); the target may impose one.
        percentile: for the percentile method.
        exclude_nodes / exclude_op_types: left in float.
        target: ``ort``, ``tflite`` or ``qnn``; its rules settle the other options before any work
            (:func:`qlinear.ptq.settle.settle`: defaults resolved silently, a requested option changed only with a note,
            or refused). :attr:`requested` lists the options set by the caller.
        equalize: cross-layer equalization before calibration (default on for per-tensor weights).
        bias_correction: correct the mean output shift that weight quantization causes (default on).
        quantize_outputs: put Q/DQ on graph outputs too (default True).
        calibration_samples / evaluation_samples: how many samples of the data to use for each (the rest is
            ignored); evaluation samples follow the calibration ones.
        batch_size: samples per ONNX Runtime call while calibrating.
        overrides: per-tensor rules by name or operator type (type, granularity, block size, method, or
            ``float``); see :mod:`qlinear.ptq.overrides`.
        placement: where activation quantizers go: ``all`` (every activation a runtime computes in integers),
            ``matmul`` (only MatMul/Gemm inputs: LayerNorm, Softmax, Gelu, residual adds stay float), ``auto``
            (default: ``matmul`` for transformer graphs with target ort, else ``all``); see
            :func:`qlinear.graph.plan.make_plan`. Attention masks and tensors computed from shapes are never quantized.
        smoothing: SmoothQuant-style migration of activation outliers into the weights before calibration
            (:mod:`qlinear.ptq.algorithms.smooth`); default: on with ``matmul`` placement and 8-bit activations.
        batch_axes: ``{input name: axis}``, the batch axis of inputs whose first dynamic dimension is not it, or
            ``None`` for an input without one (each sample is the whole input: a sequence of windows an LSTM runs
            over, say; see :mod:`qlinear.ptq.data`; CLI ``--batch-axis NAME=AXIS`` or ``NAME=none``).
        input_shapes: ``{input name: [d0, d1, ...]}`` fixes the dynamic dimensions of graph inputs before any data is
            read (shapes re-inferred, shape computations folded to constants; :mod:`qlinear.graph.passes.shapes`;
            CLI ``--input-shape NAME=1,3,480,480``). Any target; a ``.tflite`` needs static shapes.
        fix_inputs: ``{input name: value}`` makes graph inputs constants of that value (a number or a nested list)
            before any data is read: the written model no longer has them, and an ``If`` they decide is replaced
            by the branch taken, whose layers are then quantized (:mod:`qlinear.graph.passes.fix_inputs`; CLI
            ``--fix-input sr=16000``). Samples that still hold such an input must hold that value.
        output_kinds: ``{output name: kind}`` overrides how the report reads a graph output (its metrics and
            headline), which it otherwise infers from the float values (``classifier``: top-1 agreement,
            ``sequence``, ``probability``, ``regression``, ``map``, ``embedding``: cosine, ``state``, ``generic``;
            :func:`qlinear.ptq.report.evaluate.output_kind`; CLI ``--output-kind NAME=embedding``).
        full_integer: target tflite: refuse operators the TFLite export cannot write in integers instead of
            running them as float islands (DEQUANTIZE -> float builtin -> QUANTIZE; CLI ``--full-integer``).
        workers / ray_address: the calibration statistics pass (observers, channel means, GPTQ's Hessians) on
            ``workers`` Ray actors, on a local Ray instance or the cluster at ``ray_address`` (``qlinear[ray]``); the
            outputs are byte-identical to ``workers: 1`` (default: one process, Ray not imported); see
            :mod:`qlinear.ptq.stats.distributed`.
        accuracy_target: ``METRIC>=VALUE`` (``top1_agreement``, ``sequence_agreement``, ``cosine_mean``,
            ``cosine_min``, ``sqnr_db``):
            precision repair raises the tensors that hurt most until it holds on the last ``repair_samples``
            calibration samples (at most half of them), which are then held back from fitting; see
            :mod:`qlinear.ptq.algorithms.repair`.
        size_budget / average_bits: mixed precision: per-layer int4/int8 weights, chosen from their sensitivity on
            the held-back ``repair_samples``, so that the written Q/DQ file is at most this fraction of the float
            model's file (its bytes as given) / this many bits per quantized weight element (with
            ``accuracy_target``: the smallest such model meeting it); see :mod:`qlinear.ptq.algorithms.budget`.
    """

    weight_type: str = "int8"
    activation_type: str = "uint8"
    weights: str = "per-channel"
    block_size: int = 32
    weight_method: str | None = None
    activation_method: str | None = None
    weight_symmetric: bool = True
    activation_symmetric: bool = False
    policy: str = "aimet"
    percentile: float = 99.99
    exclude_nodes: tuple[str, ...] = ()
    exclude_op_types: tuple[str, ...] = ()
    target: str = "ort"
    equalize: bool | None = None
    bias_correction: bool = True
    quantize_outputs: bool = True
    calibration_samples: int = 100
    evaluation_samples: int = 200
    batch_size: int = 8
    seed: int = 0
    adaround_iterations: int = 300
    adaround_holdout: float = 0.0
    adaround_augment: bool = False
    seqmse_asymmetric: bool = True
    overrides: tuple = ()
    accuracy_target: str | None = None
    repair_samples: int = 64
    size_budget: float | None = None
    average_bits: float | None = None
    output_format: str = "qdq"
    placement: str = "auto"
    smoothing: bool | None = None
    gptq_act_order: bool = True
    gptq_damp: float = 0.01
    gptq_sequential: bool = True
    batch_axes: Any = None
    input_shapes: Any = None
    fix_inputs: Any = None
    output_kinds: Any = None
    full_integer: bool = False
    workers: int = 1
    ray_address: str | None = None
    lm_head_type: str = "int8"

    def __post_init__(self) -> None:
        def one_of(name: str, allowed: tuple[str, ...]) -> None:
            v = getattr(self, name)
            if v not in allowed:
                raise ConfigError(f"{name}: {v!r} is not one of {', '.join(allowed)}")

        one_of("weight_type", WEIGHT_TYPES)
        one_of("activation_type", ACTIVATION_TYPES)
        one_of("weights", GRANULARITIES)
        one_of("output_format", OUTPUT_FORMATS)
        one_of("placement", ("auto", "all", "matmul"))
        if self.smoothing is not None and not isinstance(self.smoothing, bool):
            raise ConfigError(f"smoothing: expected true, false or null, got {self.smoothing!r}")
        one_of("lm_head_type", LM_HEAD_TYPES)
        self._check_mode(one_of)
        if self.activation_method is not None:
            one_of("activation_method", METHODS)
        one_of("target", TARGETS)
        one_of("policy", ("aimet", "onnxruntime", "tflite"))
        for name in ("block_size", "calibration_samples", "batch_size", "adaround_iterations", "repair_samples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{name}: expected a positive integer, got {v!r}")
        if isinstance(self.evaluation_samples, bool) or not isinstance(self.evaluation_samples, int) \
                or self.evaluation_samples < 0:
            raise ConfigError(f"evaluation_samples: expected an integer >= 0, got {self.evaluation_samples!r}")
        if isinstance(self.percentile, bool) or not isinstance(self.percentile, (int, float)) \
                or not 50 <= float(self.percentile) <= 100:
            raise ConfigError(f"percentile: expected a number in [50, 100], got {self.percentile!r}")
        for name in ("exclude_nodes", "exclude_op_types"):
            v = getattr(self, name)
            if isinstance(v, str) or not all(isinstance(s, str) for s in v):
                raise ConfigError(f"{name}: expected a list of strings, got {v!r}")
            object.__setattr__(self, name, tuple(v))
        wt = self.weight_qtype
        if isinstance(self.weight_granularity, LPBQ) and not (wt.is_int and wt.signed and wt.bits in (4, 8)
                                                              and self.weight_symmetric):
            raise ConfigError(f"weights: lpbq needs symmetric int4 (or int8) weights, got {self.weight_type} "
                              f"{'symmetric' if self.weight_symmetric else 'asymmetric'}")
        if isinstance(self.gptq_damp, bool) or not isinstance(self.gptq_damp, (int, float)) \
                or not 0 < float(self.gptq_damp) < 1:
            raise ConfigError(f"gptq_damp: expected a number in (0, 1), got {self.gptq_damp!r}")
        if isinstance(self.adaround_holdout, bool) or not isinstance(self.adaround_holdout, (int, float)) \
                or not 0 <= float(self.adaround_holdout) <= 0.5:
            raise ConfigError(f"adaround_holdout: expected a fraction in [0, 0.5] of the calibration samples, got "
                              f"{self.adaround_holdout!r}")
        for name in ("weight_symmetric", "activation_symmetric", "bias_correction", "quantize_outputs",
                     "gptq_act_order", "adaround_augment", "gptq_sequential"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: expected true or false, got {getattr(self, name)!r}")
        self._check_overrides()
        self._check_ray()
        if self.accuracy_target is not None:
            Target.parse(self.accuracy_target)
            if self.target == "tflite":
                raise ConfigError("accuracy_target: precision repair is not available with target tflite (its "
                                  "integer layers take one activation type: int8, or int16 for every layer with "
                                  "--activation-type int16); use --activation-type int16, or target ort or qnn")
        self._check_budget()
        if self.equalize is not None and not isinstance(self.equalize, bool):
            raise ConfigError(f"equalize: expected true, false or null, got {self.equalize!r}")
        ba = {} if self.batch_axes is None else self.batch_axes
        if not isinstance(ba, dict) or not all(isinstance(k, str) and (v is None or isinstance(v, int))
                                               and not isinstance(v, bool) for k, v in ba.items()):
            raise ConfigError(f"batch_axes: expected a mapping of input name to axis (or null: no batch axis) such as "
                              f"{{\"state\": 1}}, got "
                              f"{self.batch_axes!r}")
        object.__setattr__(self, "batch_axes", dict(ba))
        self._check_input_shapes()
        self._check_fix_inputs()
        self._check_output_kinds()
        self._check_full_integer()

    def _check_full_integer(self) -> None:
        if not isinstance(self.full_integer, bool):
            raise ConfigError(f"full_integer: expected true or false, got {self.full_integer!r}")
        if self.full_integer and self.target != "tflite":
            raise ConfigError(f"full_integer: refuses the float islands of a .tflite, so it needs target tflite, got "
                              f"target {self.target}; add --target tflite (config target), or drop --full-integer "
                              "(config full_integer)")

    def _check_input_shapes(self) -> None:
        shapes = {} if self.input_shapes is None else self.input_shapes
        ok = isinstance(shapes, dict) and all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and len(v) > 0
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in v) for k, v in shapes.items())
        if not ok:
            raise ConfigError(f"input_shapes: expected a mapping of input name to positive dimensions such as "
                              f"{{\"x\": [1, 3, 480, 480]}}, got {self.input_shapes!r}")
        object.__setattr__(self, "input_shapes", {k: tuple(v) for k, v in shapes.items()})

    def _check_output_kinds(self) -> None:
        self._mapping("output_kinds", lambda v: v in OUTPUT_KINDS,
                      f"output name to one of {', '.join(OUTPUT_KINDS)} such as {{\"embedding\": \"embedding\"}}",
                      "its report reads token logits and embeddings itself")

    def _check_fix_inputs(self) -> None:
        def numbers(v: Any) -> bool:
            if isinstance(v, (list, tuple)):
                return len(v) > 0 and all(numbers(x) for x in v)
            return isinstance(v, (int, float))

        self._mapping("fix_inputs", numbers, "input name to a number or a list of numbers such as {\"sr\": 16000}",
                      "it applies to W8A8-style runs")

    def _mapping(self, name: str, ok: Any, expected: str, weight_only: str) -> None:
        """Field ``name``: None or a mapping of names to values ``ok`` accepts, given only in W8A8-style runs (else
        ``weight_only`` says why not); stored as a plain dict."""
        given = getattr(self, name)
        values = {} if given is None else given
        if not isinstance(values, dict) or not all(isinstance(k, str) and ok(v) for k, v in values.items()):
            raise ConfigError(f"{name}: expected a mapping of {expected}, got {given!r}")
        if values and self.weight_only:
            raise ConfigError(f"{name}: not available in weight-only mode (activation_type float); {weight_only}")
        object.__setattr__(self, name, dict(values))

    def _check_mode(self, one_of: Any) -> None:
        """The options that depend on the mode: weight-only (activation_type float) or W8A8-style."""
        if self.weight_only:
            if self.weight_method is not None:
                one_of("weight_method", WEIGHT_ONLY_METHODS)
            if self.weight_type not in ("int8", "uint8", "int4", "uint4", "int2"):
                raise ConfigError(f"weight_type: {self.weight_type!r} with activation_type float (weight-only): "
                                  "expected int8, uint8, int4, uint4 or int2")
            if "aag" in (self.weight_method or "") and self.weights == "lpbq":
                raise ConfigError(f"weight_method: {self.weight_method} chooses per-block scales, which LPBQ "
                                  "replaces by its own; use weights per-block, or weight_method gptq/awq with lpbq")
            if self.weights == "per-tensor":
                raise ConfigError("weights: per-tensor weight-only quantization is not offered (it loses too much); "
                                  "use per-channel, per-block or lpbq")
            if self.target == "tflite":
                raise ConfigError("activation_type: float (weight-only) is not available with target tflite (a "
                                  "full-integer model); use target ort or qnn")
            if self.accuracy_target or self.overrides:
                raise ConfigError("accuracy_target / overrides apply to W8A8-style runs; not available with "
                                  "activation_type float (weight-only)")
        else:
            if self.output_format != "qdq":
                raise ConfigError("output_format: matmulnbits needs weight-only quantization (activation_type "
                                  "float)")
            if self.lm_head_type != "int8":
                raise ConfigError("lm_head_type: only for weight-only runs (activation_type float); use overrides")
            if self.weight_method is not None:
                one_of("weight_method", METHODS + DATA_WEIGHT_METHODS)

    def _check_ray(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers <= 0:
            raise ConfigError(f"workers: expected a positive integer, got {self.workers!r}")
        if self.ray_address is not None and not (isinstance(self.ray_address, str)
                                                 and RAY_ADDRESS.match(self.ray_address)):
            raise ConfigError(f"ray_address: {self.ray_address!r} is not a Ray address; expected HOST:PORT of a head "
                              "node (ray start --head prints it), ray://HOST:10001 or auto")

    def _check_budget(self) -> None:
        for name, ok, text in (("size_budget", lambda v: 0 < v <= 1, "in (0, 1] (a fraction of the float size)"),
                               ("average_bits", lambda v: 4 <= v <= 8, "in [4, 8] (bits per quantized weight)")):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(float(v))):
                raise ConfigError(f"{name}: expected a number {text}, got {v!r}")
        if self.size_budget is None and self.average_bits is None:
            return
        if self.size_budget is not None and self.average_bits is not None:
            raise ConfigError("size_budget / average_bits: give one of them, not both")

    def _check_overrides(self) -> None:
        from qlinear.ptq.overrides import Override, validate

        v = self.overrides
        if isinstance(v, (str, bytes, dict)) or not isinstance(v, (list, tuple)):
            raise ConfigError(f"overrides: expected a list of rules such as [{{\"op_type\": \"Softmax\", "
                              f"\"type\": \"uint16\"}}], got {v!r}")
        rules = tuple(Override.parse(d, f"overrides[{i}]") for i, d in enumerate(v))
        validate(rules, weight_types=WEIGHT_TYPES, activation_types=ACTIVATION_TYPES, granularities=GRANULARITIES,
                 weight_methods=METHODS + DATA_WEIGHT_METHODS, activation_methods=METHODS)
        if rules and self.target == "tflite":
            raise ConfigError("overrides: not available with target tflite (a full-integer TFLite model has one "
                              "activation type and int8 weights throughout); use target ort or qnn")
        object.__setattr__(self, "overrides", rules)

    @cached_property
    def weight_granularity(self) -> Granularity:
        """The core granularity of ``weights`` (and ``block_size``); the axis is chosen per weight (``None``)."""
        return granularity_of(self.weights, self.block_size)

    @cached_property
    def weight_qtype(self) -> QType:
        """``weight_type`` as a row of the core type table."""
        return qtype(self.weight_type, arg="weight_type")

    @cached_property
    def activation_qtype(self) -> QType:
        """``activation_type`` as a row of the core type table (``float``: float32, kind ``REAL``, weight-only)."""
        return qtype(self.activation_type, arg="activation_type")

    @property
    def weight_only(self) -> bool:
        """Only weights are quantized (``activation_type: "float"``)."""
        return self.activation_qtype.kind is Kind.REAL

    @property
    def w_method(self) -> str:
        """The weight calibration method in effect: SQNR search with per-tensor weights or under a size budget,
        min-max otherwise."""
        budget = self.size_budget is not None or self.average_bits is not None
        return self.weight_method or ("sqnr" if isinstance(self.weight_granularity, PerTensor) or budget else "minmax")

    @property
    def a_method(self) -> str:
        """The activation calibration method in effect."""
        return self.activation_method or ("mse" if isinstance(self.weight_granularity, PerTensor) else "minmax")

    @property
    def do_equalize(self) -> bool:
        return isinstance(self.weight_granularity, PerTensor) if self.equalize is None else self.equalize

    @property
    def requested(self) -> frozenset[str]:
        """The options the user set (constructor keywords, dict or file keys, :meth:`replace` changes): the target
        rules may resolve the others silently, a change of these is an error or a note
        (:func:`qlinear.ptq.settle.settle`)."""
        return self.__dict__.get("_requested", frozenset())

    def replace(self, **changes: Any) -> "QuantizeConfig":
        """A copy with ``changes``, which count as requested."""
        new = replace(self, **changes)
        object.__setattr__(new, "_requested", self.requested | frozenset(changes))
        return new

    def settled(self, **changes: Any) -> "QuantizeConfig":
        """A copy with ``changes`` that qlinear's rules made (what was requested stays as it was)."""
        new = replace(self, **changes)
        object.__setattr__(new, "_requested", self.requested)
        return new

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str = "config") -> "QuantizeConfig":
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: expected a mapping of options, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown option(s) {', '.join(unknown)}; known options: "
                              f"{', '.join(sorted(known))}")
        try:
            return cls(**d)
        except TypeError as e:
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> "QuantizeConfig":
        if not isinstance(path, (str, Path)):
            raise ConfigError(f"config: expected a file path, got {type(path).__name__}")
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found")
        try:
            text = p.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{p}: not UTF-8 text (byte {e.start}); save the config as UTF-8 JSON or TOML") from None
        except OSError as e:
            raise ConfigError(f"{p}: cannot read the config ({e.strerror})") from None
        if p.suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                raise ConfigError(f"{p}: TOML configs need Python 3.11; use JSON") from None
            try:
                d = tomllib.loads(text)
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"{p}: invalid TOML: {e}") from None
        else:
            try:
                d = json.loads(text)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{p}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
        return cls.from_dict(d, source=str(p))

    def to_dict(self, *, requested_only: bool = False) -> dict[str, Any]:
        """The options as a dict (``requested_only``: only the ones the user set)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)
                if not requested_only or f.name in self.requested}


def _plain(v: Any) -> Any:
    """An option's value as plain data (JSON/TOML): tuples as lists, override rules as dicts of their set keys."""
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if is_dataclass(v) and not isinstance(v, type):
        return {k: x for k, x in asdict(v).items() if x is not None}
    return v


def granularity_of(name: str, block_size: int) -> Granularity:
    """The core granularity a ``weights`` spelling stands for (axis ``None``: chosen per weight)."""
    if name == "per-tensor":
        return PerTensor()
    if name == "per-channel":
        return PerAxis(None)
    if name == "per-block":
        return PerBlock(None, block_size)
    if name == "lpbq":
        return LPBQ(None, block_size, LPBQ_SCALE_BITS)
    raise ConfigError(f"weights: {name!r} is not one of {', '.join(GRANULARITIES)}")


def granularity_name(g: Granularity) -> str:
    """The ``weights`` spelling of a core granularity (the inverse of :func:`granularity_of`)."""
    if isinstance(g, LPBQ):
        return "lpbq"
    if isinstance(g, PerBlock):
        return "per-block"
    return "per-channel" if isinstance(g, PerAxis) else "per-tensor"


_FIELDS = tuple(f.name for f in fields(QuantizeConfig))
_dataclass_init = QuantizeConfig.__init__


def _init(self: QuantizeConfig, *args: Any, **kwargs: Any) -> None:
    """The dataclass ``__init__``, with unknown or surplus options as :class:`ConfigError` and the set options
    recorded (:attr:`QuantizeConfig.requested`)."""
    unknown = sorted(set(kwargs) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"QuantizeConfig: unknown option(s) {', '.join(unknown)}; known options: "
                          f"{', '.join(sorted(_FIELDS))}")
    if len(args) > len(_FIELDS):
        raise ConfigError(f"QuantizeConfig: {len(args)} positional options given, it has {len(_FIELDS)}; pass "
                          "options by name")
    both = sorted(set(_FIELDS[:len(args)]) & set(kwargs))
    if both:
        raise ConfigError(f"QuantizeConfig: option(s) {', '.join(both)} given twice (by position and by name)")
    object.__setattr__(self, "_requested", frozenset(_FIELDS[:len(args)]) | frozenset(kwargs))
    _dataclass_init(self, *args, **kwargs)


_init.__signature__ = inspect.signature(_dataclass_init)  # type: ignore[attr-defined]
QuantizeConfig.__init__ = _init  # type: ignore[method-assign]

