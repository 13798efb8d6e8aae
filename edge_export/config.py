"""Modes, targets and the small frozen specs that flow through the pipeline.

Everything here is import-light (no torch) so the CLI can build a config before deciding whether any
heavy work is needed.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .errors import UsageError
from .quantize_modes import MODES, mode_spec

__all__ = [
    "QuantizeMode",
    "Target",
    "IODtype",
    "QuantBackend",
    "InputSpec",
    "OutputKind",
    "KIND_THRESHOLDS",
    "Thresholds",
    "DEFAULT_THRESHOLDS",
    "default_thresholds",
    "parse_shape",
    "SUPPORTED_INPUT_DTYPES",
    "SampleSettings",
]


class _Mode(str, enum.Enum):
    """A ``--quantize`` mode; what it is and does is its entry in the mode table (quantize_modes.py)."""

    @property
    def is_integer(self) -> bool:
        return mode_spec(self).integer

    @property
    def needs_calibration(self) -> bool:
        return mode_spec(self).calibrates


# The members are the table's entries, in its order (NONE, FP16, DYNAMIC_INT8, INT8, INT16X8, INT4:
# "dynamic-int8" is DYNAMIC_INT8): a new mode is one entry in MODES, nothing here.
QuantizeMode = _Mode("QuantizeMode", [(name.upper().replace("-", "_"), name) for name in MODES], module=__name__, qualname="QuantizeMode")


class Target(str, enum.Enum):
    CPU = "cpu"
    EDGETPU = "edgetpu"
    MICRO = "micro"


class IODtype(str, enum.Enum):
    FLOAT32 = "float32"
    INT8 = "int8"
    UINT8 = "uint8"


class QuantBackend(str, enum.Enum):
    AUTO = "auto"
    PT2E = "pt2e"
    FLATBUFFER = "flatbuffer"


# Input dtypes a user may name on the command line; maps to torch dtype names.
SUPPORTED_INPUT_DTYPES = ("float32", "float16", "int32", "int64", "bool", "uint8", "int8")


@dataclass(frozen=True)
class InputSpec:
    """One model input: its shape and dtype name (a torch dtype name such as "float32")."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    name: str | None = None

    def __post_init__(self) -> None:
        if any((not isinstance(d, int)) or d <= 0 for d in self.shape):
            raise UsageError(
                f"Input shape {self.shape_text} is not valid: every dimension must be a positive "
                "integer.",
                "Write shapes like --input-shape 1,3,224,224.",
            )
        if self.dtype not in SUPPORTED_INPUT_DTYPES:
            raise UsageError(
                f"Input dtype '{self.dtype}' is not supported.",
                f"Use one of: {', '.join(SUPPORTED_INPUT_DTYPES)}.",
            )

    @property
    def shape_text(self) -> str:
        return ",".join(str(d) for d in self.shape)


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse "1,3,224,224" (also "1x3x224x224") into a tuple of positive ints."""
    # Every part must be a number: "1,3,x" is an error, not the shape (1, 3).
    parts = re.split(r"[,xX]", text.strip().strip("()[]").replace(" ", ""))
    if not all(p.isdigit() and p.isascii() and int(p) > 0 for p in parts):
        raise UsageError(
            f"Cannot read the input shape '{text}'.",
            "Write it as comma-separated positive integers, e.g. --input-shape 1,3,224,224.",
        )
    return tuple(int(p) for p in parts)


class OutputKind(str, enum.Enum):
    """What an output is, which decides how its parity is judged (never guessed from its shape)."""

    CLASSIFICATION = "classification"  # class logits or probabilities along the last axis
    EMBEDDING = "embedding"  # vectors along the last axis, compared by direction
    REGRESSION = "regression"  # any other numeric output
    PROBABILITIES = "probabilities"  # softmax / sigmoid output: judged by its decisions and probability error


# The Thresholds fields that gate each kind of output; the others are reported but not checked.
# Regression has no cosine gate: SQNR bounds it (20 dB is a relative L2 error of 0.1, cosine >= 0.995).
# atol_relative is no gate of its own: it widens atol for large outputs (scaled_atol).
KIND_THRESHOLDS: dict[OutputKind, tuple[str, ...]] = {
    OutputKind.CLASSIFICATION: (
        "atol", "atol_relative", "min_sqnr_db", "min_cosine", "max_rel_l2", "max_error_steps", "min_top1", "min_top5",
        "min_expected_top1",
    ),
    OutputKind.EMBEDDING: ("min_cosine", "min_neighbour_agreement"),
    OutputKind.REGRESSION: ("atol", "atol_relative", "min_sqnr_db", "max_rel_l2", "max_error_steps"),
    OutputKind.PROBABILITIES: (
        "atol", "atol_relative", "min_sqnr_db", "max_rel_l2", "max_error_steps", "max_probability_error",
        "min_decision_agreement", "min_expected_positive_agreement",
    ),
}

_THRESHOLD_FIELDS = (
    "atol",
    "atol_relative",
    "min_sqnr_db",
    "min_cosine",
    "min_top1",
    "min_top5",
    "min_expected_top1",
    "min_neighbour_agreement",
    "max_rel_l2",
    "max_error_steps",
    "min_decision_agreement",
    "max_probability_error",
    "min_expected_positive_agreement",
)
_FRACTIONS = {
    "min_cosine": "--min-cosine",
    "min_top1": "--min-top1",
    "min_top5": "--min-top5",
    "min_expected_top1": "--min-expected-top1",
    "min_neighbour_agreement": "--min-neighbour-agreement",
    "min_decision_agreement": "--min-decision-agreement",
    "min_expected_positive_agreement": "--min-expected-positive-agreement",
}


@dataclass(frozen=True)
class Thresholds:
    """Pass thresholds. ``None`` means the metric is reported but not gated. Which ones apply to an
    output depends on its kind (``KIND_THRESHOLDS``)."""

    atol: float | None = None
    # atol grows to this fraction of the output's largest |value| when that is larger (scaled_atol)
    atol_relative: float | None = None
    min_sqnr_db: float | None = None
    min_cosine: float | None = None  # embeddings: the worst sample's cosine; others: over all samples
    min_top1: float | None = None
    min_top5: float | None = None
    # classification on real data: the top-1 agreement expected from the error and PyTorch's margins
    min_expected_top1: float | None = None
    min_neighbour_agreement: float | None = None
    max_rel_l2: float | None = None
    max_error_steps: float | None = None  # max abs error in output quantization steps (integer outputs)
    min_decision_agreement: float | None = None  # probabilities: argmax (and sigmoid threshold) decisions that agree
    max_probability_error: float | None = None  # probabilities: max abs error of the probabilities
    # a sigmoid (output or part) on real data: the expected intersection over union of the detections
    min_expected_positive_agreement: float | None = None
    # where a sigmoid's value becomes a detection (not a gate: what its decisions mean)
    decision_threshold: float = 0.5

    def __post_init__(self) -> None:
        for name in _THRESHOLD_FIELDS:
            value = getattr(self, name)
            if value is not None and (value != value or value < 0):
                raise UsageError(f"Threshold {name}={value} must be a non-negative number.")
        if not 0.0 < self.decision_threshold < 1.0:  # NaN fails too
            raise UsageError(
                f"--decision-threshold {self.decision_threshold} is not a probability strictly between 0 and 1.",
                "Give the probability at which the app takes a value as a detection, e.g. 0.25.",
            )
        for name, option in _FRACTIONS.items():
            value = getattr(self, name)
            if value is not None and value > 1:
                raise UsageError(f"{option} {value} is above 1; give it as a fraction (0..1).")

    def override(self, **values: float | None) -> "Thresholds":
        """These thresholds with the given ones (None: kept). An atol given outright is the limit:
        it drops the relative widening unless that is given too."""
        merged = {k: getattr(self, k) for k in (*_THRESHOLD_FIELDS, "decision_threshold")}
        if values.get("atol") is not None and values.get("atol_relative") is None:
            merged["atol_relative"] = None
        merged.update({k: v for k, v in values.items() if v is not None})
        return Thresholds(**merged)

    def for_kind(self, kind: OutputKind) -> dict[str, float]:
        """The gated thresholds of one kind of output."""
        return {k: getattr(self, k) for k in KIND_THRESHOLDS[OutputKind(kind)] if getattr(self, k) is not None}


class _ThresholdsByMode(Mapping):
    """The default thresholds of every mode, read from the mode table (quantize_modes.py, where
    the reasons for each number are written)."""

    def __getitem__(self, mode: QuantizeMode | str) -> "Thresholds":
        try:
            return Thresholds(**mode_spec(mode).thresholds)
        except KeyError:
            raise KeyError(mode) from None

    def __iter__(self) -> Iterator[QuantizeMode | str]:
        return iter(_as_mode(name) for name in MODES)

    def __len__(self) -> int:
        return len(MODES)


def _as_mode(name: str) -> QuantizeMode | str:
    """The enum member of ``name``, or the name itself for a mode only the table knows (a test's)."""
    try:
        return QuantizeMode(name)
    except ValueError:
        return name


DEFAULT_THRESHOLDS: Mapping[QuantizeMode | str, Thresholds] = _ThresholdsByMode()


def default_thresholds(mode: QuantizeMode | str) -> Thresholds:
    return DEFAULT_THRESHOLDS[mode]


def scaled_atol(atol: float | None, relative: float | None, magnitude: float) -> float | None:
    """The max abs error allowed on values up to ``magnitude`` in size: ``atol``, or ``relative`` of
    ``magnitude`` when that is larger (float rounding grows with the values: an output in pixels is
    not held to a bound set for values near 1). ``atol`` alone when ``relative`` is None or the
    magnitude is not a finite number."""
    if atol is None or relative is None or not math.isfinite(magnitude):
        return atol
    return max(atol, relative * abs(magnitude))


@dataclass(frozen=True)
class SampleSettings:
    count: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.count < 1:
            raise UsageError(f"--samples {self.count} must be at least 1.")

