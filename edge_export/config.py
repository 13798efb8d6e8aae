"""Modes, targets and the small frozen specs that flow through the pipeline.

Everything here is import-light (no torch) so the CLI can build a config before deciding whether any
heavy work is needed.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from .errors import UsageError

__all__ = [
    "QuantizeMode",
    "Target",
    "IODtype",
    "QuantBackend",
    "InputSpec",
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

    @property
    def is_integer(self) -> bool:
        return self in (QuantizeMode.DYNAMIC_INT8, QuantizeMode.INT8, QuantizeMode.INT16X8)

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

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


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


@dataclass(frozen=True)
class Thresholds:
    """Pass thresholds for one output. ``None`` means the metric is reported but not gated."""

    atol: float | None = None
    min_sqnr_db: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None

    def __post_init__(self) -> None:
        for name in ("atol", "min_sqnr_db", "min_cosine", "min_top1"):
            value = getattr(self, name)
            if value is not None and (value != value or value < 0):
                raise UsageError(f"Threshold {name}={value} must be a non-negative number.")
        if self.min_cosine is not None and self.min_cosine > 1:
            raise UsageError(f"--min-cosine {self.min_cosine} is above 1; cosine similarity is at most 1.")
        if self.min_top1 is not None and self.min_top1 > 1:
            raise UsageError(
                f"--min-top1 {self.min_top1} is above 1; give top-1 agreement as a fraction (0..1)."
            )

    def override(self, **values: float | None) -> "Thresholds":
        merged = {k: getattr(self, k) for k in ("atol", "min_sqnr_db", "min_cosine", "min_top1")}
        merged.update({k: v for k, v in values.items() if v is not None})
        return Thresholds(**merged)

    def to_dict(self) -> dict:
        return {
            "atol": self.atol,
            "min_sqnr_db": self.min_sqnr_db,
            "min_cosine": self.min_cosine,
            "min_top1": self.min_top1,
        }


# Defaults per precision. fp32 is strict (converter reorders float math, so not bit-exact);
# fp16 weights lose ~3 decimal digits; int modes are judged by SQNR/cosine/top-1 since absolute
# error depends on the output range. int8's 30 dB follows PyTorch's own quantization tests.
DEFAULT_THRESHOLDS: dict[QuantizeMode, Thresholds] = {
    QuantizeMode.NONE: Thresholds(atol=1e-4, min_sqnr_db=60.0, min_cosine=0.99999),
    QuantizeMode.FP16: Thresholds(atol=5e-2, min_sqnr_db=35.0, min_cosine=0.999),
    QuantizeMode.DYNAMIC_INT8: Thresholds(min_sqnr_db=20.0, min_cosine=0.99, min_top1=0.75),
    QuantizeMode.INT8: Thresholds(min_sqnr_db=20.0, min_cosine=0.99, min_top1=0.75),
    QuantizeMode.INT16X8: Thresholds(min_sqnr_db=30.0, min_cosine=0.999, min_top1=0.85),
}


def default_thresholds(mode: QuantizeMode) -> Thresholds:
    return DEFAULT_THRESHOLDS[mode]


@dataclass(frozen=True)
class SampleSettings:
    count: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.count < 1:
            raise UsageError(f"--samples {self.count} must be at least 1.")

