"""The options of the micro target and of the Ethos-U targets built on it (``MicroOptions``): each
field is an ExportOptions keyword and an ``export`` flag, refused with any other target."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...option_fields import option, path_text
from ..registry import TargetOptions

__all__ = ["MicroOptions"]

_PANEL = "Target: micro"


@dataclass(frozen=True)
class MicroOptions(TargetOptions):
    emit_op_resolver: str | None = option(
        None, "--emit-op-resolver", help="micro: write the C++ MicroMutableOpResolver lines for the model's operators here.",
        panel=_PANEL, cli_type=Optional[Path], parse=path_text)
    # bytes once checked (budgets.parse_size); None: no budget
    max_flash: int | None = option(
        None, "--max-flash", metavar="SIZE", panel=_PANEL,
        help="micro and ethos-u*: flash budget for the model, e.g. 256KiB, 1MiB, 1.5MB or 300000 (bytes); over it: exit 1 naming the largest weights.")
    max_ram: int | None = option(
        None, "--max-ram", metavar="SIZE", panel=_PANEL,
        help="micro and ethos-u*: RAM budget for the tensor arena TFLite Micro measures, e.g. 64KiB; over it: exit 1 naming the largest activations.")
    emit_c: str | None = option(
        None, "--emit-c", metavar="DIR", panel=_PANEL, cli_type=Optional[Path], parse=path_text,
        help="micro: write the firmware bundle (model array, op resolver, arena size, test vectors) into DIR (default with --target micro: <stem>_micro/ beside the .tflite).")
    no_emit_c: bool = option(False, "--no-emit-c", help="micro: write no firmware bundle.", panel=_PANEL, cli_type=bool)

    def __post_init__(self) -> None:
        from .budgets import parse_size

        for name in ("emit_op_resolver", "emit_c"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, str(getattr(self, name)))
        for name in ("max_flash", "max_ram"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, parse_size(getattr(self, name), "--" + name.replace("_", "-")))
