"""What an export is asked to do: ``ExportOptions``, checked when it is built (a bad value fails
before any work), and the thresholds it implies."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from .config import IODtype, QuantBackend, QuantizeMode, Target, Thresholds, default_thresholds
from .errors import UsageError

__all__ = ["ExportOptions"]


@dataclass(frozen=True)
class ExportOptions:
    quantize: QuantizeMode = QuantizeMode.NONE
    target: Target | str = Target.CPU  # a Target, or the name of a target registered in targets.base
    input_shapes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    channels_last: bool = False
    strict: bool = False
    validate: bool = True
    samples: int = 8
    seed: int = 0
    runtime: str = "interpreter"  # parity through: interpreter, compiled-model (LiteRT 2.x) or both
    atol: float | None = None
    min_sqnr: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    min_top5: float | None = None
    min_neighbour_agreement: float | None = None
    max_rel_l2: float | None = None
    max_error_steps: float | None = None
    min_decision_agreement: float | None = None  # probabilities outputs (validators/probabilities.py)
    max_probability_error: float | None = None
    # what each output is: "KIND" for all, "NAME=KIND" pairs, or {name: kind} (see output_kinds.py)
    output_kinds: Any = ()
    labels: Any = ()  # "FILE" for the classifier output, "NAME=FILE" pairs, or {name: file}
    weights: str | None = None
    trust_pickle: bool = False
    verbose: bool = False
    # Redirect fds 1 and 2 for the whole run, hiding the libraries' chatter (and anything else the
    # process prints meanwhile). Off by default: the caller owns its streams (the CLI's terminal
    # session captures them itself). Library calls whose output edge-export parses capture locally.
    quiet_libraries: bool = False
    junit: str | None = None  # also write JUnit XML here
    baseline: str | None = None  # an earlier report.json to gate regressions against
    per_layer: bool = False  # compare every matched layer, not just the outputs
    per_layer_min_sqnr: float | None = None  # optional gate on every compared layer
    per_layer_plot: str | None = None  # PNG of SQNR per layer (needs matplotlib)
    strip_names: bool = False  # drop inner tensor names from the written flatbuffer
    keep_names: bool = False  # keep them where the target strips them by default (micro)
    # signature names (see io_names.py): "a,b" or a sequence; empty: named after the model
    input_names: Any = ()
    output_names: Any = ()
    signature_key: str = "serving_default"
    # TFLite model metadata (model_metadata.py), written with --labels and --mean/--std too
    model_name: str | None = None
    model_version: str | None = None
    description: str | None = None
    author: str | None = None
    write_metadata: bool = True  # False (--no-metadata): --labels, --mean/--std keep only their checking roles
    # quantization (int modes)
    calibration_data: str | None = None
    calibration_samples: int | None = None
    # labelled calibration data (quantization/calibration_labels.py, validators/accuracy.py)
    holdout_fraction: float = 0.2  # calibration_labels.DEFAULT_HOLDOUT_FRACTION (not imported: options stay light)
    max_accuracy_drop: float = 0.01  # accuracy.DEFAULT_MAX_ACCURACY_DROP
    range_algorithm: str | None = None  # minmax | percentile | mse; None: each backend's default
    part_scales: bool = True  # an output joined from parts of different ranges keeps their scales (quantization/output_joins.py)
    image_size: tuple[int, int] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    image_layout: str = "nchw"  # the layout the PyTorch model takes
    quant_backend: QuantBackend = QuantBackend.AUTO
    sensitivity: bool = False  # int8: rank operators by sensitivity (quantization/sensitivity.py)
    mixed_precision: str | None = None  # auto | int16 | off; None: the target's default
    # seconds for the whole quantization stage (quantization/budget.py); None: no limit
    time_budget: float | None = 300.0  # budget.DEFAULT_TIME_BUDGET_S (not imported: options stay light)
    host_latency: bool = True  # quantized exports on cpu: time the model against its float one here (latency.py)
    io_dtype: IODtype | None = None  # None: float32, or the target's default
    # The options targets declare (TargetPlugin.options: --max-flash, --gpu-precision, ...), as given:
    # passed as keywords like any other (ExportOptions(max_flash="256KiB")), read as attributes
    # (options.max_flash: the given value, else the declaration's default). Only what was given is
    # here, so an option given with a target that does not own it is refused (targets/base.py).
    target_options: Mapping[str, Any] = field(default_factory=dict)
    # <stem>.testdata.npz: parity inputs as the model takes them, PyTorch's outputs, the thresholds
    emit_test_vectors: bool = False
    test_vectors_count: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "quantize", QuantizeMode(self.quantize))
        object.__setattr__(self, "target", _target_option(self.target))
        object.__setattr__(self, "quant_backend", QuantBackend(self.quant_backend))
        if self.io_dtype is not None:
            object.__setattr__(self, "io_dtype", IODtype(self.io_dtype))
        object.__setattr__(self, "target_options", _checked_target_options(self.target_options))
        if self.range_algorithm is not None:  # the name now; whether the mode calibrates once targets imply it
            from .quantization.ranges import check_range_algorithm

            check_range_algorithm(self.range_algorithm)
        if self.calibration_samples is not None and self.calibration_samples < 1:
            raise UsageError(f"--calibration-samples {self.calibration_samples} must be at least 1.")
        if self.samples < 1:
            raise UsageError(f"--samples {self.samples} must be at least 1.", "Use e.g. --samples 8.")
        if not 0 < self.holdout_fraction < 1:  # also refuses NaN
            raise UsageError(f"--holdout-fraction {self.holdout_fraction} is not a fraction between 0 and 1.", "Use e.g. --holdout-fraction 0.2.")
        if not 0 <= self.max_accuracy_drop <= 1:
            raise UsageError(f"--max-accuracy-drop {self.max_accuracy_drop} is not a fraction from 0 to 1.", "Use e.g. --max-accuracy-drop 0.01 (one percentage point).")
        if not 0 <= self.seed < 2**32:  # numpy's and torch's generators take no other seed
            raise UsageError(f"--seed {self.seed} is not a seed: it must be from 0 to {2**32 - 1}.", "Use e.g. --seed 0.")
        from .validators.runtimes import check_runtime_option

        check_runtime_option(self.runtime)
        from .validators.output_kinds import parse_labels, parse_output_kinds

        object.__setattr__(self, "output_kinds", parse_output_kinds(self.output_kinds))
        object.__setattr__(self, "labels", parse_labels(self.labels))
        from .artifacts.io_names import check_names, check_signature_key

        for attr, option in (("input_names", "--input-names"), ("output_names", "--output-names")):
            value = getattr(self, attr)
            value = [v.strip() for v in value.split(",")] if isinstance(value, str) and value.strip() else list(value or ())
            object.__setattr__(self, attr, check_names(value, option))
        check_signature_key(self.signature_key)
        for attr, option in (("model_name", "--model-name"), ("model_version", "--model-version"), ("description", "--description"), ("author", "--author")):
            value = getattr(self, attr)
            if value is not None and not str(value).strip():
                raise UsageError(f"{option} is empty.", f"Give {option} a text, or drop it.")
        self.thresholds()  # a bad threshold fails now, not after minutes of tracing
        for option, values in (("--mean", self.mean), ("--std", self.std)):
            if values is not None and not all(math.isfinite(v) for v in values):
                raise UsageError(f"{option} {','.join(map(str, values))} is not a list of finite numbers.", f"Write e.g. {option} 0.5,0.5,0.5.")
        if self.std is not None and any(v <= 0 for v in self.std):
            raise UsageError(f"--std {','.join(map(str, self.std))} must be positive: it divides the pixel values.")
        if self.image_layout not in ("nchw", "nhwc"):
            raise UsageError(f"--image-layout {self.image_layout} is not known.", "Use nchw or nhwc.")
        if self.per_layer_min_sqnr is not None and self.per_layer_min_sqnr != self.per_layer_min_sqnr:
            raise UsageError("--per-layer-min-sqnr nan is not a number.")
        from .quantization.budget import check_time_budget
        from .quantization.mixed_precision import check_mixed_precision_option

        check_mixed_precision_option(self.mixed_precision)
        check_time_budget(self.time_budget)
        if self.strip_names and self.keep_names:
            raise UsageError("--strip-names and --keep-names contradict each other.", "Give one of them.")
        if self.test_vectors_count < 1:
            raise UsageError(f"--test-vectors-count {self.test_vectors_count} must be at least 1.", "Use e.g. --test-vectors-count 4.")
        if self.emit_test_vectors and not self.validate:
            raise UsageError(
                "--emit-test-vectors needs the parity check: the vectors are its inputs, PyTorch's outputs "
                "and the thresholds it judged them by, and --no-validate skips it.",
                "Drop --no-validate (or --emit-test-vectors).",
            )

    def thresholds(self) -> Thresholds:
        return default_thresholds(self.quantize).override(**self.threshold_overrides())

    def threshold_overrides(self) -> dict[str, float | None]:
        """The thresholds given as options (None: the default of the precision, or of the file)."""
        return {
            "atol": self.atol,
            "min_sqnr_db": self.min_sqnr,
            "min_cosine": self.min_cosine,
            "min_top1": self.min_top1,
            "min_top5": self.min_top5,
            "min_neighbour_agreement": self.min_neighbour_agreement,
            "max_rel_l2": self.max_rel_l2,
            "max_error_steps": self.max_error_steps,
            "min_decision_agreement": self.min_decision_agreement,
            "max_probability_error": self.max_probability_error,
        }


def _target_option(value: Target | str) -> Target | str:
    """A built-in target as its Target member; any other registered target by its name."""
    try:
        return Target(value)
    except ValueError:
        pass
    from .plugins.target_registry import get_target

    return get_target(value).name  # UsageError naming the known targets when it is none


def _checked_target_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """The target options given, each checked and normalized by its declaration (a size that does
    not parse fails now, before any work)."""
    from .plugins.target_registry import declared_target_options

    declared = declared_target_options()
    checked = {}
    for name, value in given.items():
        option = declared.get(name)
        if option is None:
            raise UsageError(f"{name} is not an option of any target.", f"Use one of: {', '.join(sorted(declared))}.")
        checked[name] = option.check(value) if option.check is not None else value
    return checked


_dataclass_init = ExportOptions.__init__


def _init(self: ExportOptions, **values: Any) -> None:
    """Keywords that name a target's declared option go to ``target_options``."""
    from .plugins.target_registry import declared_target_options

    declared = declared_target_options()
    own = dict(values.pop("target_options", None) or {})
    for name in [k for k in values if k in declared]:
        own[name] = values.pop(name)
    _dataclass_init(self, **values, target_options=own)


def _target_option_value(self: ExportOptions, name: str) -> Any:
    """``options.max_flash``: a declared target option's given value, else its default."""
    if name.startswith("__") or name == "target_options":
        raise AttributeError(name)
    from .plugins.target_registry import declared_target_options

    option = declared_target_options().get(name)
    if option is None:
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    return self.target_options.get(name, option.default)


def _hash(self: ExportOptions) -> int:
    return hash(tuple((f, repr(getattr(self, f))) for f in self.__dataclass_fields__))


ExportOptions.__init__ = _init  # type: ignore[method-assign]
ExportOptions.__getattr__ = _target_option_value  # type: ignore[attr-defined]
ExportOptions.__hash__ = _hash  # type: ignore[method-assign]
