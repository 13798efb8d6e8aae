"""The JSON report: the result objects' dicts, written as they are (reports never recompute)."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["render_json", "load_report"]


def _clean(value: Any) -> Any:
    # JSON has no NaN/inf; metrics already cap infinities, this is the last guard.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def render_json(report: dict) -> str:
    return json.dumps(_clean(report), indent=2, allow_nan=False) + "\n"


def load_report(path: str) -> dict:
    from pathlib import Path

    from ..errors import UsageError

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"No such report: {p}.", "Pass the path of an earlier <stem>.report.json.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{p} is not a readable JSON report: {exc}.", "Pass a report written by edge-export.") from exc
    if not isinstance(data, dict) or "schema_version" not in data:
        raise UsageError(f"{p} is not an edge-export report (no schema_version).", "Pass a report written by edge-export.")
    return data
