"""What quantize_model is asked to make: the mode and how to get there, one frozen request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import IODtype, QuantBackend, QuantizeMode
from ..errors import UsageError
from .flatbuffer_recipes import DEFAULT_FLATBUFFER_OBSERVER
from ..quantize_modes import MODES, mode_spec
from .pt2e import DEFAULT_PT2E_OBSERVER
from .selection import ParityTarget

__all__ = ["PARITY_SAMPLES", "QuantizationRequest"]

# Samples used to measure each backend's parity during selection (the first N calibration samples).
PARITY_SAMPLES = 16


@dataclass(frozen=True)
class QuantizationRequest:
    """One quantization: the mode, its calibration samples and the choices that steer the backends.
    Checks itself: a mode quantize_model does not make, or an integer I/O type for a mode whose
    model takes float, is a UsageError."""

    mode: QuantizeMode
    calibration: Any  # calibration.CalibrationSet
    backend: QuantBackend = QuantBackend.AUTO
    io_dtype: IODtype = IODtype.FLOAT32
    require_full_integer: bool = False
    pt2e_observer: str = DEFAULT_PT2E_OBSERVER
    flatbuffer_observer: str = DEFAULT_FLATBUFFER_OBSERVER
    parity_samples: int = PARITY_SAMPLES
    target: ParityTarget | None = None  # the export's parity target: auto stops at the first result meeting it
    part_scales: bool = True  # an output joined from parts of different ranges keeps their scales (output_joins.py)
    weight_rounding: bool = True  # int8 filters rounded for their layers' outputs (weight_rounding.py)
    strict: bool = False
    verbose: bool = False

    def __post_init__(self) -> None:
        # a name is accepted where the enum is: the CLI and the API pass either
        object.__setattr__(self, "mode", QuantizeMode(self.mode))
        object.__setattr__(self, "backend", QuantBackend(self.backend))
        object.__setattr__(self, "io_dtype", IODtype(self.io_dtype))
        spec = mode_spec(self.mode)
        if not spec.quantized:
            raise UsageError(
                f"quantize_model handles {_names(s.name for s in MODES.values() if s.quantized)}, not {self.mode.value}.",
                "fp32 and fp16 are plain conversions (edge_export.conversion.litert).",
            )
        if self.io_dtype != IODtype.FLOAT32 and not spec.integer_io:
            io_modes = _names(s.name for s in MODES.values() if s.integer_io)
            raise UsageError(
                f"--io-dtype {self.io_dtype.value} applies to --quantize {io_modes} only; {self.mode.value} models take and "
                "return float32.",
                f"Drop --io-dtype, or use --quantize {io_modes}.",
            )

    @property
    def parity_set(self) -> list:
        """The calibration samples each backend's parity is measured on."""
        return self.calibration.samples[: max(1, self.parity_samples)]


def _names(names: Any) -> str:
    """"a, b and c"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
