"""Compare a report with an earlier one and list every metric that got worse beyond a tolerance.

Outputs are matched by name (falling back to position). Higher-is-better metrics (SQNR, cosine,
top-1/top-5, worst-sample cosine, neighbour agreement) may drop by at most an absolute tolerance;
lower-is-better errors may grow by at most a relative one. Both reports judge each output by its kind
(classification, embedding, regression): an output whose kind changed is a regression (its checks are
no longer the same, so the two reports cannot be compared), and so is a metric the baseline had that
can no longer be computed (e.g. neighbour agreement after --samples 1).

The current run is read from its typed report (``RunReport.validation``: a ``ParityResult`` of
``OutputParity``, or ``SkippedValidation``). The baseline is an earlier report's JSON, read through
one small adapter (``EarlierOutput.from_json``) rather than loaded back into the typed report: a
baseline may come from an earlier version of edge-export (before output kinds, before
``not_computable``), and the comparison needs only four values per output, so the adapter reads those
and tolerates what older files lack, where a full typed loader would have to rebuild every stage
result of every past schema. Current numbers are taken as the JSON has them (``to_json_value``: a
non-finite metric is no value), so a run compares the same whether its report was just built or read
back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..output.serialize import to_json_value

from .model import Regression

if TYPE_CHECKING:
    from .model import RunReport

__all__ = ["BaselineTolerance", "EarlierOutput", "Regression", "compare_with_baseline", "earlier_outputs"]


@dataclass(frozen=True)
class BaselineTolerance:
    sqnr_db: float = 1.0  # dB drop allowed
    cosine: float = 1e-4  # absolute drop allowed
    top1_agreement: float = 0.01  # absolute drop allowed
    top5_agreement: float = 0.01  # absolute drop allowed
    worst_sample_cosine: float = 1e-4  # absolute drop allowed
    neighbour_agreement: float = 0.01  # absolute drop allowed
    decision_agreement: float = 0.01  # absolute drop allowed (probabilities outputs)
    threshold_agreement: float = 0.01  # absolute drop allowed (sigmoid probabilities)
    error_ratio: float = 0.10  # errors may grow by 10 %
    error_floor: float = 1e-6  # ...or by this much in absolute terms (fp32 noise)


_HIGHER = (
    "sqnr_db", "cosine", "top1_agreement", "top5_agreement", "worst_sample_cosine", "neighbour_agreement",
    "decision_agreement", "threshold_agreement",
)
_LOWER = ("max_abs_error", "mean_abs_error", "relative_l2_error", "max_abs_error_steps", "probability_error")


@dataclass(frozen=True)
class EarlierOutput:
    """One output of the baseline report, as its JSON has it (the adapter from the earlier file)."""

    name: str
    passed: bool | None
    kind: str | None  # None in a baseline written before output kinds existed
    metrics: Mapping[str, float | None]

    @classmethod
    def from_json(cls, output: Mapping[str, Any]) -> EarlierOutput:
        return cls(output["name"], output.get("passed"), output.get("kind"), output.get("metrics") or {})


def earlier_outputs(baseline: Mapping[str, Any]) -> tuple[EarlierOutput, ...] | None:
    """The baseline's outputs; None when the baseline skipped validation (nothing to compare with)."""
    validation = baseline.get("validation") or {}
    if validation.get("status") == "skipped":
        return None
    return tuple(EarlierOutput.from_json(o) for o in validation.get("outputs") or [])


def compare_with_baseline(report: RunReport, baseline: Mapping[str, Any], tol: BaselineTolerance | None = None) -> list[Regression]:
    """Regressions of the run ``report`` against ``baseline`` (an earlier report's JSON, as read from
    its file by ``json_report.load_report``)."""
    tol = tol or BaselineTolerance()
    regressions: list[Regression] = []
    earlier = earlier_outputs(baseline)
    if earlier is None:
        return regressions
    validation = report.validation
    if validation.passed is None:  # SkippedValidation
        return [Regression("*", "validation", None, None, "the baseline was validated but this run skipped validation")]
    cur_outputs = list(validation.outputs)
    by_name = {o.name: o for o in cur_outputs}
    for i, base in enumerate(earlier):
        cur = by_name.get(base.name) or (cur_outputs[i] if i < len(cur_outputs) else None)
        if cur is None:
            regressions.append(Regression(base.name, "presence", None, None, f"output {base.name} is missing"))
            continue
        bm = base.metrics
        cm = {key: to_json_value(value) for key, value in cur.metrics.items()}
        if base.passed and not cur.passed:
            regressions.append(Regression(base.name, "verdict", None, None, f"output {base.name} passed in the baseline and fails now"))
        bk, ck = base.kind, cur.kind.value
        if bk and bk != ck:  # a baseline written before kinds existed has none: nothing to compare
            regressions.append(
                Regression(
                    base.name, "kind", None, None,
                    f"{base.name}: judged as {bk} in the baseline and as {ck} now, so their checks differ; "
                    "give the same --output-kind, or write a new baseline",
                )
            )
            continue
        # an output that fails with an error (NaN, shape) already shows as a verdict regression
        lost = {} if cur.error else cur.not_computable
        for key in (*_HIGHER, *_LOWER):
            if bm.get(key) is not None and cm.get(key) is None and key in lost:
                regressions.append(
                    Regression(
                        base.name, key, bm[key], None,
                        f"{base.name}: {key} was {bm[key]:.6g} in the baseline and cannot be computed now ({lost[key]})",
                    )
                )
        for key in _HIGHER:
            b, c = bm.get(key), cm.get(key)
            if b is None or c is None:
                continue
            allowed = getattr(tol, key)
            if c < b - allowed:
                regressions.append(
                    Regression(base.name, key, b, c, f"{base.name}: {key} fell from {b:.6g} to {c:.6g} (tolerance {allowed:g})")
                )
        for key in _LOWER:
            b, c = bm.get(key), cm.get(key)
            if b is None or c is None:
                continue
            limit = max(b * (1 + tol.error_ratio), b + tol.error_floor)
            if c > limit:
                regressions.append(
                    Regression(base.name, key, b, c, f"{base.name}: {key} grew from {b:.3g} to {c:.3g} (limit {limit:.3g})")
                )
    return regressions
