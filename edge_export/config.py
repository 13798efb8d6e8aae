"""Modes, targets and the small frozen specs that flow through the pipeline.

Everything here is import-light (no torch) so the CLI can build a config before deciding whether any
heavy work is needed.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

from .errors import UsageError

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


class QuantizeMode(str, enum.Enum):
    NONE = "none"
    FP16 = "fp16"
    DYNAMIC_INT8 = "dynamic-int8"
    INT8 = "int8"
    INT16X8 = "int16x8"
    INT4 = "int4"  # channelwise int4 weights, float activations quantized at run time (phones)

    @property
    def is_integer(self) -> bool:
        return self in (QuantizeMode.DYNAMIC_INT8, QuantizeMode.INT8, QuantizeMode.INT16X8, QuantizeMode.INT4)

    @property
    def needs_calibration(self) -> bool:
        return self in (QuantizeMode.INT8, QuantizeMode.INT16X8)


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
        "atol", "atol_relative", "min_sqnr_db", "min_cosine", "max_rel_l2", "max_error_steps", "min_top1", "min_top5"
    ),
    OutputKind.EMBEDDING: ("min_cosine", "min_neighbour_agreement"),
    OutputKind.REGRESSION: ("atol", "atol_relative", "min_sqnr_db", "max_rel_l2", "max_error_steps"),
    OutputKind.PROBABILITIES: (
        "atol", "atol_relative", "min_sqnr_db", "max_rel_l2", "max_error_steps", "max_probability_error",
        "min_decision_agreement",
    ),
}

_THRESHOLD_FIELDS = (
    "atol",
    "atol_relative",
    "min_sqnr_db",
    "min_cosine",
    "min_top1",
    "min_top5",
    "min_neighbour_agreement",
    "max_rel_l2",
    "max_error_steps",
    "min_decision_agreement",
    "max_probability_error",
)
_FRACTIONS = {
    "min_cosine": "--min-cosine",
    "min_top1": "--min-top1",
    "min_top5": "--min-top5",
    "min_neighbour_agreement": "--min-neighbour-agreement",
    "min_decision_agreement": "--min-decision-agreement",
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
    min_neighbour_agreement: float | None = None
    max_rel_l2: float | None = None
    max_error_steps: float | None = None  # max abs error in output quantization steps (integer outputs)
    min_decision_agreement: float | None = None  # probabilities: argmax (and sigmoid 0.5) decisions that agree
    max_probability_error: float | None = None  # probabilities: max abs error of the probabilities

    def __post_init__(self) -> None:
        for name in _THRESHOLD_FIELDS:
            value = getattr(self, name)
            if value is not None and (value != value or value < 0):
                raise UsageError(f"Threshold {name}={value} must be a non-negative number.")
        for name, option in _FRACTIONS.items():
            value = getattr(self, name)
            if value is not None and value > 1:
                raise UsageError(f"{option} {value} is above 1; give it as a fraction (0..1).")

    def override(self, **values: float | None) -> "Thresholds":
        """These thresholds with the given ones (None: kept). An atol given outright is the limit:
        it drops the relative widening unless that is given too."""
        merged = {k: getattr(self, k) for k in _THRESHOLD_FIELDS}
        if values.get("atol") is not None and values.get("atol_relative") is None:
            merged["atol_relative"] = None
        merged.update({k: v for k, v in values.items() if v is not None})
        return Thresholds(**merged)

    def for_kind(self, kind: OutputKind) -> dict[str, float]:
        """The gated thresholds of one kind of output."""
        return {k: getattr(self, k) for k in KIND_THRESHOLDS[OutputKind(kind)] if getattr(self, k) is not None}


# Defaults per precision (README's threshold table is this table). fp32 is strict (the converter
# reorders float math, so not bit-exact); fp16 weights lose ~3 decimal digits; int modes are judged by
# SQNR, cosine, top-k and neighbours since absolute error depends on the output range. int8's 20 dB
# floor is loose on purpose: parity runs on random inputs. Top-1/top-5 are not gated at fp32/fp16,
# where the error gates are far stricter. Neighbour agreement below 1 tolerates a flip between two
# samples that are almost equally near in PyTorch (7 of 8 is 0.875). Probabilities (softmax/sigmoid
# outputs) are judged by their decisions, gated at every precision: int8's 0.9 fails the pitch model
# whose argmax agreed on 72.7% of frames, and PyTorch's near-ties (within one int8 probability step,
# validators/probabilities.DECISION_TIE_MARGIN) count as agreement, so the gate sees real flips only;
# a gate that would demand every one of n decisions allows one (probabilities.decision_slack: 7 of 8).
# The probability error is one line, 0.05, at int8 and int16x8: it bounds how far a probability may
# move before decisions near a threshold flip, which no precision changes (int16x8's 0.01 failed
# models with every decision kept, CREPE 0.011 and MTCNN R-Net 0.021, while their int8 models passed;
# P-Net int8's 0.18 lost faces). fp32's atol grows to 2e-3 of the output's largest |value|
# (scaled_atol): YOLO11n's boxes reach 800 px and were off by 0.71-0.82 px (1e-3) with every IoU 1.000;
# 60 dB SQNR already allows an RMS error of 1e-3 of the RMS value, so on large outputs atol adds a
# bound on one outlying value of the same order, not a stricter one. int16x8's worst-sample cosine
# 0.9975 lies between MiniLM's 0.9984 (every neighbour kept on held-out sentences) and Resemblyzer's
# 0.9964 (neighbour agreement 0.92 over 60 utterances); classification's cosine is bounded by 30 dB.
DEFAULT_THRESHOLDS: dict[QuantizeMode, Thresholds] = {
    QuantizeMode.NONE: Thresholds(
        atol=1e-4, atol_relative=2e-3, min_sqnr_db=60.0, min_cosine=0.99999, min_neighbour_agreement=0.85,
        min_decision_agreement=0.99, max_probability_error=1e-4,
    ),
    QuantizeMode.FP16: Thresholds(
        atol=5e-2, min_sqnr_db=35.0, min_cosine=0.999, min_neighbour_agreement=0.85,
        min_decision_agreement=0.99, max_probability_error=1e-2,
    ),
    QuantizeMode.DYNAMIC_INT8: Thresholds(
        min_sqnr_db=20.0, min_cosine=0.99, min_top1=0.75, min_top5=0.85, min_neighbour_agreement=0.75,
        min_decision_agreement=0.9, max_probability_error=0.05,
    ),
    QuantizeMode.INT8: Thresholds(
        min_sqnr_db=20.0, min_cosine=0.99, min_top1=0.75, min_top5=0.85, min_neighbour_agreement=0.75,
        min_decision_agreement=0.9, max_probability_error=0.05,
    ),
    QuantizeMode.INT16X8: Thresholds(
        min_sqnr_db=30.0, min_cosine=0.9975, min_top1=0.85, min_top5=0.95, min_neighbour_agreement=0.85,
        min_decision_agreement=0.95, max_probability_error=0.05,
    ),
    # int4 weights have 16 levels: each layer's weight error is ~24 dB worse than int8's, so a
    # random-weight small CNN or transformer reads 17-20 dB (docs/BENCHMARKS.md section 15).
    QuantizeMode.INT4: Thresholds(
        min_sqnr_db=15.0, min_cosine=0.97, min_top1=0.6, min_top5=0.75, min_neighbour_agreement=0.6,
        min_decision_agreement=0.8, max_probability_error=0.1,
    ),
}


def default_thresholds(mode: QuantizeMode) -> Thresholds:
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

