"""The pinned set edge-export is tested with, shipped inside the package, and how a run compares.

    python -m edge_export.constraints        # prints the pins (as does `edge-export constraints`)
    pip install edge-export -c <(python -m edge_export.constraints)

``constraints.txt`` beside this module is a copy of the repository's root ``constraints.txt`` (the file
CI installs with; ``tests/test_constraints.py`` keeps them identical), so the tested set travels with
the wheel. This module uses the standard library only: it runs in an environment where edge-export
was installed with ``--no-deps`` (before its dependencies, which the printed pins then select), and
``edge-export --version`` reads versions without importing torch.
"""

from __future__ import annotations

import functools
import platform
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata, resources

__all__ = [
    "PINNED_LIBRARIES",
    "REPORTED_LIBRARIES",
    "LibraryMismatch",
    "PinnedSetCheck",
    "constraints_text",
    "pinned_versions",
    "library_versions",
    "check_pinned_set",
]

# The libraries whose version decides what a model converts to and how it computes: a difference
# from the pinned set is a warning in every report.
PINNED_LIBRARIES = ("torch", "litert-torch", "ai-edge-litert", "ai-edge-quantizer")
REPORTED_LIBRARIES = (*PINNED_LIBRARIES, "numpy")

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def _canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``PyYAML`` = ``pyyaml``, ``ai_edge`` = ``ai-edge``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def constraints_text() -> str:
    """The pinned set as shipped in the package (pip's constraints-file format)."""
    return resources.files(__package__).joinpath("constraints.txt").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def pinned_versions() -> Mapping[str, str]:
    """Every ``name==version`` pin of the shipped set, by canonical name; empty when the file is
    missing (an edge-export installed from a tree without it: nothing to compare with)."""
    try:
        text = constraints_text()
    except (FileNotFoundError, OSError):
        return {}
    pins = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            pins[_canonical(match.group(1))] = match.group(2)
    return pins


def library_versions() -> dict[str, str | None]:
    """Python's version and each reported library's installed version (None: not installed), read
    from the installed metadata without importing the libraries."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for dist in REPORTED_LIBRARIES:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def _satisfies(installed: str, pinned: str) -> bool:
    """Whether ``installed`` meets ``==pinned`` as pip reads it: a pin without a local label accepts
    any local build of that version (``torch==2.13.0`` accepts ``2.13.0+cpu``)."""
    if installed == pinned:
        return True
    return "+" not in pinned and installed.split("+", 1)[0] == pinned


@dataclass(frozen=True)
class LibraryMismatch:
    """A pinned library whose installed version is not the tested one."""

    name: str
    pinned: str
    installed: str | None  # None: not installed


@dataclass(frozen=True)
class PinnedSetCheck:
    """The run's libraries against the pinned set this edge-export was tested with."""

    pinned: Mapping[str, str]  # library -> tested version (PINNED_LIBRARIES)
    mismatches: tuple[LibraryMismatch, ...]

    JSON_KEYS = ("status", "pinned", "mismatches")

    @property
    def status(self) -> str:
        """``tested``: every pinned library is the tested version; ``untested``: one differs;
        ``unknown``: this installation carries no pinned set."""
        if not self.pinned:
            return "unknown"
        return "untested" if self.mismatches else "tested"

    def warning(self) -> str | None:
        """One sentence naming each difference and the command that installs the tested set."""
        if not self.mismatches:
            return None
        found = ", ".join(f"{m.name} {m.installed or 'not installed'} (tested: {m.pinned})" for m in self.mismatches)
        return (
            f"not the tested library set: {found}. Results may differ from the tested ones; "
            "`pip install edge-export -c <(edge-export constraints)` installs the tested set."
        )


def check_pinned_set(versions: Mapping[str, str | None]) -> PinnedSetCheck:
    """Compare the installed ``versions`` (``library_versions()``) with the shipped pins."""
    pins = pinned_versions()
    pinned = {name: pins[_canonical(name)] for name in PINNED_LIBRARIES if _canonical(name) in pins}
    mismatches = tuple(
        LibraryMismatch(name, version, versions.get(name))
        for name, version in pinned.items()
        if versions.get(name) is None or not _satisfies(versions[name], version)
    )
    return PinnedSetCheck(pinned, mismatches)


def main() -> None:
    sys.stdout.write(constraints_text())


if __name__ == "__main__":
    main()
