"""What quantize_model returns: the chosen model, what was tried and why it was kept."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import IODtype, QuantizeMode
from ..flatbuffer import FlatbufferModel
from ..output.serialize import json_field
from .bias_saturation import SaturatedBias, saturated_biases
from .budget import BudgetSection
from .calibration import CalibrationSummary
from .int16_headroom import RangeHeadroom
from .io_types import IOQuantInfo
from .output_joins import JoinedOutput, joined_outputs
from .selection import BackendAttempt, IntegerCheck

__all__ = ["CalibrationParity", "QuantizationResult"]


@dataclass(frozen=True)
class QuantizationResult:
    model: FlatbufferModel = field(repr=False)  # the chosen model, verified; its bytes are ``.data``
    mode: QuantizeMode
    backend: str  # "pt2e" | "flatbuffer"
    recipe: str  # ai-edge-quantizer recipe name, or the PT2E config used
    observer: str | None  # activation-range observer (None for dynamic-int8)
    attempts: tuple[BackendAttempt, ...]
    reason: str
    fully_integer: bool
    integer_check: IntegerCheck
    io: tuple[IOQuantInfo, ...]
    io_dtype: IODtype
    calibration: CalibrationSummary
    sqnr_db: float | None  # chosen model vs fp32 module, worst output, on calibration inputs
    cosine: float | None
    warnings: tuple[str, ...] = ()
    # --time-budget: the budget, the time used and what was not tried (set by the export, after mixed precision)
    time_budget: BudgetSection | None = json_field(default=None, omit_none=True)
    # how the int8 filters were rounded: "gptq" (weight_rounding.py), "nearest"; None: not the flatbuffer backend's int8 weights
    weight_rounding: str | None = json_field(default=None, omit_none=True)
    # the flatbuffer backend's WeightRounding, for the mixed-precision search to reuse (not reported)
    rounding: Any = field(default=None, repr=False, compare=False)
    # int16 tensors of the kept model whose ranges were widened beyond calibration (int16_headroom.py)
    int16_headroom: tuple[RangeHeadroom, ...] = ()

    JSON_KEYS = (
        "mode", "backend", "recipe", "observer", "weight_rounding", "reason", "attempts", "fully_integer", "integer_check",
        "io_dtype", "io", "output_parts", "saturated_biases", "int16_headroom", "calibration", "calibration_parity", "size_bytes", "warnings",
        "time_budget",
    )

    @property
    def saturated_biases(self) -> tuple[SaturatedBias, ...]:
        """Operators whose integer bias was clipped at the int32 limits (bias_saturation.py)."""
        return saturated_biases(self.model)

    @property
    def output_parts(self) -> tuple[JoinedOutput, ...]:
        """Outputs joined in float from parts with their own scales (output_joins.py)."""
        return joined_outputs(self.model)

    @property
    def size_bytes(self) -> int:
        return self.model.size_bytes

    @property
    def calibrated_on_real_data(self) -> bool:
        return self.calibration.real_data

    @property
    def calibration_parity(self) -> CalibrationParity:
        return CalibrationParity(self.sqnr_db, self.cosine)


@dataclass(frozen=True)
class CalibrationParity:
    """The chosen model against the fp32 module on the calibration inputs (worst output)."""

    sqnr_db: float | None
    cosine: float | None
