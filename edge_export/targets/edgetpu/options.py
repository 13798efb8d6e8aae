"""The edgetpu target's options (``EdgeTpuOptions``): an ExportOptions keyword and an ``export``
flag each, refused with any other target."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ...errors import UsageError
from ...option_fields import option
from ..registry import TargetOptions

__all__ = ["EdgeTpuOptions"]

_PANEL = "Target: edgetpu"
DEFAULT_COMPILER_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class EdgeTpuOptions(TargetOptions):
    edgetpu_compiler: str | None = option(None, "--edgetpu-compiler", help="Path of edgetpu_compiler (default: found on PATH).", panel=_PANEL, metavar="PATH")
    compiler_timeout: float | None = option(  # None: not given, DEFAULT_COMPILER_TIMEOUT_S (``timeout_s``)
        None, "--compiler-timeout", help="Seconds before edgetpu_compiler is stopped (default 180).", panel=_PANEL, metavar="SECONDS",
        cli_type=Optional[float])
    require_compiler: bool = option(
        False, "--require-compiler", help="Fail when edgetpu_compiler is absent or fails (default: report it and go on).", panel=_PANEL, cli_type=bool)
    delegate: str | None = option(
        None, "--delegate", help="edgetpu: run parity through the Edge TPU delegate (libedgetpu) when present.", panel=_PANEL, metavar="edgetpu")

    def __post_init__(self) -> None:
        if self.compiler_timeout is not None:
            seconds = float(self.compiler_timeout)
            if not (math.isfinite(seconds) and seconds > 0):
                raise UsageError(f"--compiler-timeout {self.compiler_timeout} is not a positive number of seconds.", "Give e.g. --compiler-timeout 180 (the default).")
            object.__setattr__(self, "compiler_timeout", seconds)
        if self.delegate is not None and self.delegate != "edgetpu":
            raise UsageError(f"--delegate {self.delegate} is not known.", "Use --delegate edgetpu.")

    @property
    def timeout_s(self) -> float:
        return self.compiler_timeout if self.compiler_timeout is not None else DEFAULT_COMPILER_TIMEOUT_S
