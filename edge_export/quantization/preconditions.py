"""What must hold before any quantization backend calibrates: the float model is a valid flatbuffer
that LiteRT can allocate and run.

Both backends end in the converter's flatbuffer (the flatbuffer backend quantizes the float model,
PT2E lowers its graph through the same converter), so a float model that does not verify or does not
run cannot become a quantized one either. Checked once, in seconds, before calibration: on
EfficientNet-B0 the flatbuffer backend failed on such a model and PT2E then calibrated 128 samples
for minutes before failing the same way (issue 21).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConversionError, EdgeExportError, FlatbufferError, first_line
from ..flatbuffer import FlatbufferModel

__all__ = ["require_runnable_float_model"]

_HINT = (
    "No quantization backend was run: both start from this conversion. Replace the operator the "
    "message names (run the export with --quantize none to see the float model's own error), or "
    "report it to litert-torch with the model."
)


def _run_once(model: FlatbufferModel, sample: Sequence[np.ndarray]) -> None:
    from ..runtime.interpreter import Resolver, TFLiteRunner

    TFLiteRunner(model, resolver=Resolver.BUILTIN).run(list(sample))


def require_runnable_float_model(float_bytes: bytes, sample: Sequence[np.ndarray]) -> FlatbufferModel:
    """The float model read and verified, after one run of ``sample`` in a child process; raises
    ConversionError (exit 3) naming why it cannot be quantized."""
    from ..flatbuffer import read_flatbuffer
    from ..processes.isolation import run_isolated

    try:
        model = read_flatbuffer(float_bytes, origin="the float model litert-torch converted")
    except FlatbufferError as exc:
        # not a damaged file: the converter wrote it, so the verifier's guess about copying does not apply
        reason = exc.message.replace(" The file may be truncated or corrupted.", "")
        raise ConversionError(f"{reason} It cannot be quantized.", _HINT) from exc
    try:
        run_isolated(
            _run_once, model, tuple(sample), stage="run of the float model", backend="the LiteRT interpreter", hint=_HINT
        )
    except EdgeExportError as exc:
        raise ConversionError(
            f"LiteRT cannot run the float model litert-torch converted, so it cannot be quantized: {first_line(exc)}",
            _HINT,
        ) from exc
    except Exception as exc:  # the interpreter's own errors (allocation, a kernel's Prepare) come back as is
        raise ConversionError(
            "LiteRT cannot run the float model litert-torch converted, so it cannot be quantized: "
            f"{first_line(exc, with_type=True)}",
            _HINT,
        ) from exc
    return model
