"""Compare a report with an earlier one and list every metric that got worse beyond a tolerance.

Outputs are matched by name (falling back to position). Higher-is-better metrics (SQNR, cosine,
top-1/top-5, worst-sample cosine, neighbour agreement) may drop by at most an absolute tolerance;
lower-is-better errors may grow by at most a relative one. Both reports judge each output by its kind
(classification, embedding, regression): an output whose kind changed is a regression (its checks are
no longer the same, so the two reports cannot be compared), and so is a metric the baseline had that
can no longer be computed (e.g. neighbour agreement after --samples 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BaselineTolerance", "Regression", "compare_with_baseline"]


@dataclass(frozen=True)
class BaselineTolerance:
    sqnr_db: float = 1.0  # dB drop allowed
    cosine: float = 1e-4  # absolute drop allowed
    top1_agreement: float = 0.01  # absolute drop allowed
    top5_agreement: float = 0.01  # absolute drop allowed
    worst_sample_cosine: float = 1e-4  # absolute drop allowed
    neighbour_agreement: float = 0.01  # absolute drop allowed
    error_ratio: float = 0.10  # errors may grow by 10 %
    error_floor: float = 1e-6  # ...or by this much in absolute terms (fp32 noise)


@dataclass(frozen=True)
class Regression:
    output: str
    metric: str
    baseline: float | None
    current: float | None
    message: str


_HIGHER = ("sqnr_db", "cosine", "top1_agreement", "top5_agreement", "worst_sample_cosine", "neighbour_agreement")
_LOWER = ("max_abs_error", "mean_abs_error", "relative_l2_error", "max_abs_error_steps")


def _outputs(report: dict) -> list[dict]:
    return list((report.get("validation") or {}).get("outputs") or [])


def compare_with_baseline(current: Any, baseline: dict, tol: BaselineTolerance | None = None) -> list[Regression]:
    """Regressions of ``current`` (a RunReport, or a report's JSON) against ``baseline`` (an earlier
    report's JSON, as read from its file). A typed report is compared through its JSON form, the
    form the baseline was written in, so both sides are read the same way."""
    if not isinstance(current, Mapping):
        from .serialize import to_json_value

        current = {"validation": to_json_value(current.validation)}
    tol = tol or BaselineTolerance()
    regressions: list[Regression] = []
    if (baseline.get("validation") or {}).get("status") == "skipped":
        return regressions
    cur_outputs = _outputs(current)
    if (current.get("validation") or {}).get("status") == "skipped":
        return [Regression("*", "validation", None, None, "the baseline was validated but this run skipped validation")]
    by_name = {o["name"]: o for o in cur_outputs}
    for i, base in enumerate(_outputs(baseline)):
        cur = by_name.get(base["name"]) or (cur_outputs[i] if i < len(cur_outputs) else None)
        if cur is None:
            regressions.append(Regression(base["name"], "presence", None, None, f"output {base['name']} is missing"))
            continue
        bm, cm = base.get("metrics") or {}, cur.get("metrics") or {}
        if base.get("passed") and not cur.get("passed"):
            regressions.append(Regression(base["name"], "verdict", None, None, f"output {base['name']} passed in the baseline and fails now"))
        bk, ck = base.get("kind"), cur.get("kind")
        if bk and ck and bk != ck:  # a baseline written before kinds existed has none: nothing to compare
            regressions.append(
                Regression(
                    base["name"], "kind", None, None,
                    f"{base['name']}: judged as {bk} in the baseline and as {ck} now, so their checks differ; "
                    "give the same --output-kind, or write a new baseline",
                )
            )
            continue
        # an output that fails with an error (NaN, shape) already shows as a verdict regression
        lost = {} if cur.get("error") else (cur.get("not_computable") or {})
        for key in (*_HIGHER, *_LOWER):
            if bm.get(key) is not None and cm.get(key) is None and key in lost:
                regressions.append(
                    Regression(
                        base["name"], key, bm[key], None,
                        f"{base['name']}: {key} was {bm[key]:.6g} in the baseline and cannot be computed now ({lost[key]})",
                    )
                )
        for key in _HIGHER:
            b, c = bm.get(key), cm.get(key)
            if b is None or c is None:
                continue
            allowed = getattr(tol, key)
            if c < b - allowed:
                regressions.append(
                    Regression(base["name"], key, b, c, f"{base['name']}: {key} fell from {b:.6g} to {c:.6g} (tolerance {allowed:g})")
                )
        for key in _LOWER:
            b, c = bm.get(key), cm.get(key)
            if b is None or c is None:
                continue
            limit = max(b * (1 + tol.error_ratio), b + tol.error_floor)
            if c > limit:
                regressions.append(
                    Regression(base["name"], key, b, c, f"{base['name']}: {key} grew from {b:.3g} to {c:.3g} (limit {limit:.3g})")
                )
    return regressions
