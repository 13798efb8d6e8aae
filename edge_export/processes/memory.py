"""How much memory the host can give, checked before allocating anything whose size a user input sets.

An --input-shape of 1,3,100000,100000, an .npy header that declares 256 GiB or a PNG that claims
100000x100000 pixels used to end as a MemoryError ("internal error", exit 4) or, worse, made the
kernel kill the process. Each is checked against the memory available now and refused as bad input
(exit 2) before the allocation.
"""

from __future__ import annotations

import os

from ..errors import UsageError

__all__ = ["available_memory_bytes", "ensure_memory_for", "format_bytes"]


def available_memory_bytes() -> int | None:
    """Memory the kernel can hand out without swapping (MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def ensure_memory_for(nbytes: int, what: str, hint: str, error: type[UsageError] = UsageError) -> None:
    """Raise ``error`` (exit 2) when ``nbytes`` for ``what`` exceed the memory available now."""
    available = available_memory_bytes()
    if available is not None and nbytes > available:
        raise error(
            f"{what} needs {format_bytes(nbytes)} of memory, but only {format_bytes(available)} is available.",
            hint,
        )
