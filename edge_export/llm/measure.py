"""The figures a phone developer asks for, measured on this host (see report.LlmMeasurements)."""

from __future__ import annotations

import resource
import sys

__all__ = ["peak_rss_bytes"]


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
