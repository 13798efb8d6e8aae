"""What the .pt2 checks refuse with (pt2_archive.py reads the zip, pt2_program.py the program JSON):
the error, its two messages, and the shape of a dotted name both accept."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ModelLoadError

__all__ = ["DOTTED_NAME", "RATIO_ENV", "UnsafeArchiveMember", "refusal"]

RATIO_ENV = "EDGE_EXPORT_ARCHIVE_INFLATE_RATIO"

DOTTED_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,127}|[0-9]{1,9})(\.([A-Za-z_][A-Za-z0-9_]{0,127}|[0-9]{1,9})){0,63}")  # a module path: nn.Sequential's children are 0, 1, ...

_TRUST_HINT = (
    "Export the model again with torch.export.save (torch 2.8 or later) from a module whose weights, "
    "buffers and example inputs are plain tensors; if you trust the file's author, pass --trust-pickle."
)


class UnsafeArchiveMember(ModelLoadError):
    """An archive member outside what the format allows; refused without --trust-pickle (exit 2)."""


def refusal(path: Path | str, member: str, what: str, *, size: bool = False) -> UnsafeArchiveMember:
    if size:
        return UnsafeArchiveMember(
            f"{path} is an ExportedProgram archive whose member {member} {what}; an archive that claims "
            "more than its model needs is refused before it is read.",
            f"If the archive is genuine, raise the limit with {RATIO_ENV} (default 10), or export the model "
            "again with torch.export.save.",
        )
    return UnsafeArchiveMember(
        f"{path} is an ExportedProgram archive whose member {member} {what}; loading it could run "
        "arbitrary code, so it is refused by default.",
        _TRUST_HINT,
    )
