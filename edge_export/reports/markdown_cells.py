"""Numbers and sizes as the Markdown report's cells show them: as the JSON report has them
(``to_json_value``: a numpy scalar as a Python number, a non-finite float as no value), so the
Markdown and the JSON agree."""

from __future__ import annotations

from typing import Any

from ..output.serialize import to_json_value as _plain
from ..output.text_safety import escape_markdown as _e

__all__ = ["fmt", "human_size"]


def fmt(value: Any, digits: int = 4) -> str:
    value = _plain(value)  # as the JSON has it: NaN is no value
    if value is None:
        return "–"
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}" if abs(value) >= 1 else f"{value:.{digits}f}"
    return _e(value)


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
