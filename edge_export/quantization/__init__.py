"""Quantization: dynamic int8, full-integer int8 and int16x8, and int4 weights, with two backends
chosen by measurement.

    quantize_model(module, example_inputs, QuantizationRequest(mode, calibration, ...)) -> QuantizationResult

Backends (``QuantBackend``): ``pt2e`` quantizes the exported PyTorch graph (pt2e.py); ``flatbuffer``
applies ai-edge-quantizer recipes to the converted float flatbuffer (flatbuffer_recipes.py);
``auto`` runs those that support the mode and keeps one by the rules in selection.py.

Where things are:

- ../quantize_modes.py (at the package root, the ground layer): the table of modes (what each is, its backends and recipes, thresholds, latency note);
- request.py, result.py: what quantize_model takes and returns;
- engine.py: quantize_model itself; candidates.py: each backend's run, PT2E's early look and the
  parity of each candidate; explanations.py: the reason a backend was kept, and the warnings;
- calibration*.py, synthetic_calibration.py: calibration data; io_types.py: the I/O types;
- sensitivity.py and mixed_precision/: ranking operators and raising the sensitive ones.
"""

from __future__ import annotations

from ..config import InputSpec
from .calibration import DEFAULT_CALIBRATION_SAMPLES, DEFAULT_SYNTHETIC_SAMPLES, CalibrationSet, load_calibration_data
from .engine import backends_for, quantize_model
from .flatbuffer_recipes import FLATBUFFER_OBSERVERS
from .io_types import IOQuantInfo, describe_io, set_io_dtype
from ..quantize_modes import MODES, ModeSpec, mode_spec
from .pt2e import PT2E_OBSERVERS
from .request import PARITY_SAMPLES, QuantizationRequest
from .result import CalibrationParity, QuantizationResult
from .selection import BackendAttempt, IntegerCheck, ParityTarget, check_integer, module_path_for
from .synthetic_calibration import synthetic_calibration

__all__ = [
    "DEFAULT_CALIBRATION_SAMPLES",
    "DEFAULT_SYNTHETIC_SAMPLES",
    "FLATBUFFER_OBSERVERS",
    "MODES",
    "PARITY_SAMPLES",
    "PT2E_OBSERVERS",
    "BackendAttempt",
    "CalibrationParity",
    "CalibrationSet",
    "IOQuantInfo",
    "InputSpec",
    "IntegerCheck",
    "ModeSpec",
    "ParityTarget",
    "QuantizationRequest",
    "QuantizationResult",
    "backends_for",
    "check_integer",
    "describe_io",
    "load_calibration_data",
    "mode_spec",
    "module_path_for",
    "quantize_model",
    "set_io_dtype",
    "synthetic_calibration",
]
