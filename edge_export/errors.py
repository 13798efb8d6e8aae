"""The errors edge-export raises, and the exit code each maps to.

    EdgeExportError              every error meant for the user (has .exit_code and .hint)
    ├── UsageError               exit 2: bad option values, bad shapes, unwritable output
    │   ├── ModelLoadError       exit 2: the model file/reference is missing, unreadable or not a model
    │   │   ├── UnsafeArchiveMember  exit 2: an archive member that could run code (archive_safety.py)
    │   │   └── UnsafeTorchScript    exit 2: TorchScript code or data outside the allow-list (torchscript_archive.py)
    │   ├── InputSpecError       exit 2: the inputs do not fit the model
    │   ├── CalibrationDataError exit 2: calibration data does not match the model
    │   ├── FlatbufferError      exit 2: a .tflite file that is not a valid LiteRT flatbuffer
    │   │   └── OversizedTensorError exit 2: a tensor over LiteRT's 2 GB (flatbuffer/; from the converter: exit 3)
    │   └── TargetError          exit 2: the model cannot meet the target's hard rules (e.g. batch > 1)
    ├── ExportFailure            exit 3: the model could not be exported
    │   ├── TraceError           exit 3: torch.export failed
    │   ├── ConversionError      exit 3: litert-torch could not lower the graph
    │   └── QuantizationError    exit 3: every quantization backend failed
    │       ├── TimeBudgetSpent  exit 3: never shown: stops PT2E's calibration when --time-budget is spent (quantization/budget.py)
    │       └── PT2ECannotWin    exit 3: never shown: stops PT2E's calibration when its first ranges cannot beat a result (quantization/candidates.py)
    └── RuntimeRunError          exit 3: the LiteRT (or TFLM) interpreter could not run the model
        └── NativeCrashError     exit 3: native code crashed in an isolated child process (isolation.py)
    InternalError                exit 4: a bug in edge-export ("please report")

Exit code 1 is not an error: it means the artifacts were written but a parity or regression gate
failed; the result object says why.

Third-party exceptions are wrapped at the boundary with ``raise ... from exc`` so that the CLI can
print one paragraph and keep the traceback for ``--debug``. The boundary is one context manager,
:func:`map_exceptions` (after httpx's), around calls into third-party code (LiteRT, PT2E,
torch.jit.load, Pillow, numpy, the user's forward()); the message quotes the third party's first line
through :func:`first_line`, the one formatter of foreign errors. A few boundaries map by hand with a
comment saying why (conversion locates the failing node first; torch.load tells a refused pickle from
a corrupt one). Anything not mapped reaches the CLI as an unexpected exception and exits 4 as a bug:
no user input may get there (tests/test_errors.py walks a table of bad inputs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

__all__ = [
    "first_line",
    "map_exceptions",
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


def first_line(exc: BaseException, limit: int = 300, *, with_type: bool = False) -> str:
    """The first non-blank line of a (usually third-party) exception, cut to ``limit`` characters.

    An exception with no text (``EOFError()``, ``IndexError()``) is named by its type, so a message
    never ends in an empty quote. ``with_type`` prefixes the type name (``ValueError: ...``) for
    errors whose text alone does not say what went wrong. An edge-export error gives its message
    without the hint."""
    if isinstance(exc, SystemExit):
        return f"sys.exit({exc.code!r})"
    text = exc.message if isinstance(exc, EdgeExportError) else str(exc)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:limit]
    if not line:
        return type(exc).__name__
    return f"{type(exc).__name__}: {line}" if with_type else line


@contextlib.contextmanager
def map_exceptions(
    mapping: Mapping[type[BaseException] | tuple[type[BaseException], ...], type[EdgeExportError]],
    message: str,
    hint: str | None = None,
) -> Iterator[None]:
    """Turn the third-party exceptions listed in ``mapping`` into edge-export errors.

    ``mapping`` goes from exception type (or tuple of types) to the EdgeExportError subclass raised
    ``from`` it; the first matching entry wins, so list specific types first. ``message`` may use
    ``{error}`` (the first line of the original error, see :func:`first_line`) and ``{type}`` (its
    class name), replaced literally (in an f-string, write ``{{error}}``). Edge-export's own errors
    pass through unchanged, and so does anything not listed (a bug, which the CLI reports as exit 4).

        with map_exceptions({RuntimeError: TraceError}, "torch.export failed: {error}", "Try ..."):
            torch.export.export(module, args)
    """
    try:
        yield
    except EdgeExportError:
        raise
    except BaseException as exc:
        for caught, mapped in mapping.items():
            if isinstance(exc, caught):
                # replace, not str.format: the message may quote user paths that hold braces
                error = first_line(exc)
                if "{error}." in message:  # no doubled full stop
                    error = error.rstrip(".")
                text = message.replace("{type}", type(exc).__name__).replace("{error}", error)
                raise mapped(text, hint) from exc
        raise
