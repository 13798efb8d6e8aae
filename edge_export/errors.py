"""The errors edge-export raises, and the exit code each maps to.

    EdgeExportError              every error meant for the user (has .exit_code and .hint)
    ├── UsageError               exit 2: bad option values, bad shapes, unwritable output
    │   ├── ModelLoadError       exit 2: the model file/reference is missing, unreadable or not a model
    │   ├── InputSpecError       exit 2: the inputs do not fit the model
    │   ├── CalibrationDataError exit 2: calibration data does not match the model
    │   ├── FlatbufferError      exit 2: a .tflite file that is not a valid LiteRT flatbuffer
    │   └── TargetError          exit 2: the model cannot meet the target's hard rules (e.g. batch > 1)
    ├── ExportFailure            exit 3: the model could not be exported
    │   ├── TraceError           exit 3: torch.export failed
    │   ├── ConversionError      exit 3: litert-torch could not lower the graph
    │   └── QuantizationError    exit 3: every quantization backend failed
    └── RuntimeRunError          exit 3: the LiteRT (or TFLM) interpreter could not run the model
    InternalError                exit 4: a bug in edge-export ("please report")

Exit code 1 is not an error: it means the artifacts were written but a parity or regression gate
failed; the result object says why.

Third-party exceptions are wrapped at the boundary with ``raise ... from exc`` so that the CLI can
print one paragraph and keep the traceback for ``--debug``.
"""

from __future__ import annotations

__all__ = [
    "EXIT_OK",
    "EXIT_PARITY_FAILED",
    "EXIT_USAGE",
    "EXIT_EXPORT_FAILED",
    "EXIT_INTERNAL",
    "exit_code_for_verdict",
    "EdgeExportError",
    "UsageError",
    "ModelLoadError",
    "InputSpecError",
    "CalibrationDataError",
    "FlatbufferError",
    "TargetError",
    "ExportFailure",
    "TraceError",
    "ConversionError",
    "QuantizationError",
    "RuntimeRunError",
    "InternalError",
]

EXIT_OK = 0
EXIT_PARITY_FAILED = 1
EXIT_USAGE = 2
EXIT_EXPORT_FAILED = 3
EXIT_INTERNAL = 4


def exit_code_for_verdict(verdict: str) -> int:
    """The one mapping from a report's verdict to the process exit code: a failed check (parity,
    the per-layer gate, a baseline regression) is 1; passed and exported-unvalidated are 0."""
    return EXIT_PARITY_FAILED if verdict == "failed" else EXIT_OK


class EdgeExportError(Exception):
    """Base of every error meant for the user. ``hint`` says what to try."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} {self.hint}"
        return self.message


class UsageError(EdgeExportError):
    exit_code = EXIT_USAGE


class ModelLoadError(UsageError):
    pass


class InputSpecError(UsageError):
    pass


class CalibrationDataError(UsageError):
    pass


class FlatbufferError(UsageError):
    pass


class TargetError(UsageError):
    pass


class ExportFailure(EdgeExportError):
    exit_code = EXIT_EXPORT_FAILED


class TraceError(ExportFailure):
    pass


class ConversionError(ExportFailure):
    pass


class QuantizationError(ExportFailure):
    pass


class RuntimeRunError(ExportFailure):
    pass


class InternalError(Exception):
    """A bug in edge-export, not in the user's model or options."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(
            f"{message} This is a bug in edge-export; please report it with the output of --debug."
        )
