"""End-to-end parity: compare every flatbuffer output with PyTorch on the same inputs.

Like optimum's validation, every output and every metric is checked and all failures are collected;
the verdict is computed once at the end and the report says which output and metric was worst.
Which metrics gate an output depends on its kind (output_kinds.py, config.KIND_THRESHOLDS); a metric
that cannot be computed is reported as null with its reason, never as a number that reads as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..config import OutputKind, Thresholds
from . import metrics
from ..serialize import json_field
from .output_kinds import KindDecision, KindSource
from .stability import ReferenceStability

__all__ = ["Check", "OutputParity", "ParityResult", "WorstOutput", "compare_outputs"]


@dataclass(frozen=True)
class Check:
    """One gate on one metric. ``passed`` is None when the metric could not be computed for a reason
    that is no fault of the model (e.g. one sample gives no nearest neighbour): such a check is
    reported with its reason and counted neither as a pass nor as a failure."""

    metric: str
    value: float | None
    threshold: float
    op: str  # "<=" or ">="
    passed: bool | None
    reason: str | None = None


_DEFAULT_DECISION = KindDecision(OutputKind.REGRESSION, KindSource.DEFAULT)


@dataclass(frozen=True)
class OutputParity:
    index: int
    name: str
    shape: tuple[int, ...]
    metrics: dict
    checks: tuple[Check, ...]
    error: str | None = None  # e.g. a shape mismatch or NaN: the output fails
    decision: KindDecision = json_field(default=_DEFAULT_DECISION, flatten=True)  # kind, kind_source, labels
    not_computable: Mapping[str, str] = field(default_factory=dict)  # metric -> why it has no value

    JSON_KEYS = ("index", "name", "decision", "shape", "metrics", "not_computable", "checks", "error", "passed")

    @property
    def kind(self) -> OutputKind:
        return self.decision.kind

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed is not False for c in self.checks)


@dataclass(frozen=True)
class ParityResult:
    samples: int
    thresholds: Thresholds
    outputs: tuple[OutputParity, ...]
    runtime: str
    notes: tuple[str, ...] = field(default=())
    # PyTorch against itself on slightly changed inputs, measured when parity failed (stability.py)
    reference_stability: ReferenceStability | None = json_field(default=None, omit_none=True)

    JSON_KEYS = ("status", "samples", "runtime", "thresholds", "outputs", "worst", "notes", "reference_stability")

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    @property
    def status(self) -> str:
        return "passed" if self.passed else "failed"

    def worst(self) -> WorstOutput | None:
        """Among the failing outputs (all of them when none fails), the one with the lowest SQNR; an
        unknown SQNR (NaN/Inf, shape mismatch) counts as the lowest."""
        if not self.outputs:
            return None
        failing = [o for o in self.outputs if not o.passed]
        pool = failing or list(self.outputs)

        def sqnr(o: OutputParity) -> float:
            value = o.metrics.get("sqnr_db") if o.metrics else None
            return float("-inf") if value is None else value

        o = min(pool, key=sqnr)
        failed = [c.metric for c in o.checks if c.passed is False]
        return WorstOutput(
            output=o.name,
            index=o.index,
            kind=o.kind,
            sqnr_db=o.metrics.get("sqnr_db") if o.metrics else None,
            max_abs_error=o.metrics.get("max_abs_error") if o.metrics else None,
            failed_checks=tuple(failed),
            error=o.error,
        )


@dataclass(frozen=True)
class WorstOutput:
    """The output a summary leads with: the failing (or lowest-SQNR) one."""

    output: str  # its name
    index: int
    kind: OutputKind
    sqnr_db: float | None
    max_abs_error: float | None
    failed_checks: tuple[str, ...]
    error: str | None


# (threshold field, metric, op) per gate; which gates an output gets is KIND_THRESHOLDS[kind].
_GATES = (
    ("atol", "max_abs_error", "<="),
    ("min_sqnr_db", "sqnr_db", ">="),
    ("max_rel_l2", "relative_l2_error", "<="),
    ("max_error_steps", "max_abs_error_steps", "<="),
    ("min_top1", "top1_agreement", ">="),
    ("min_top5", "top5_agreement", ">="),
    ("min_neighbour_agreement", "neighbour_agreement", ">="),
)
# min_cosine gates the worst sample of an embedding, and the cosine over all samples otherwise.
_COSINE_METRIC = {OutputKind.EMBEDDING: "worst_sample_cosine"}

# Top-5 agreement only says something with enough classes.
TOP5_MIN_CLASSES = 10

_METRIC_KEYS = (
    "max_abs_error",
    "mean_abs_error",
    "relative_l2_error",
    "cosine",
    "sqnr_db",
    "worst_sample_sqnr_db",
    "max_abs_error_steps",
    "top1_agreement",
    "top5_agreement",
    "worst_sample_cosine",
    "neighbour_agreement",
)


def _applicable(kind: OutputKind, shape: tuple[int, ...], scale: float | None) -> list[str]:
    """The metrics an output of this kind and shape has (the others are null: not applicable)."""
    keys = ["max_abs_error", "mean_abs_error", "relative_l2_error", "cosine", "sqnr_db", "worst_sample_sqnr_db"]
    if scale:
        keys.append("max_abs_error_steps")
    if kind is OutputKind.CLASSIFICATION:
        keys.append("top1_agreement")
        if shape and shape[-1] >= TOP5_MIN_CLASSES:
            keys.append("top5_agreement")
    elif kind is OutputKind.EMBEDDING:
        keys += ["worst_sample_cosine", "neighbour_agreement"]
    return keys


def _metric(key: str, ref: np.ndarray, out: np.ndarray, refs: list, outs: list, scale: float | None) -> float:
    if key == "max_abs_error":
        return metrics.max_abs_error(ref, out)
    if key == "mean_abs_error":
        return metrics.mean_abs_error(ref, out)
    if key == "relative_l2_error":
        return metrics.relative_l2_error(ref, out)
    if key == "cosine":
        return metrics.cosine_similarity(ref, out)
    if key == "sqnr_db":
        return metrics.sqnr_db(ref, out)
    if key == "worst_sample_sqnr_db":
        return min(metrics.sqnr_db(r, o) for r, o in zip(refs, outs))
    if key == "max_abs_error_steps":
        return metrics.error_in_steps(ref, out, scale or 0.0)
    if key == "top1_agreement":
        return metrics.top1_agreement(ref, out)
    if key == "top5_agreement":
        return metrics.topk_agreement(ref, out, 5)
    if key == "worst_sample_cosine":
        return metrics.worst_sample_cosine(ref, out)
    if key == "neighbour_agreement":
        return metrics.neighbour_agreement(ref, out)
    raise KeyError(key)


def _non_finite(ref: np.ndarray, out: np.ndarray) -> str | None:
    """Why the output cannot be judged, when either side holds NaN or Inf."""
    bad_out = int(np.sum(~np.isfinite(out)))
    bad_ref = int(np.sum(~np.isfinite(ref)))
    if bad_out and bad_ref:
        return (
            f"NaN or Inf in both outputs ({bad_ref} PyTorch and {bad_out} LiteRT values of {ref.size}): "
            "the model itself produces non-finite values, so parity cannot be judged"
        )
    if bad_out:
        return f"LiteRT output contains NaN or Inf ({bad_out} of {out.size} values) where PyTorch's is finite"
    if bad_ref:
        return f"PyTorch output contains NaN or Inf ({bad_ref} of {ref.size} values): parity cannot be judged"
    return None


def _checks(m: dict, t: Thresholds, kind: OutputKind, not_computable: Mapping[str, str], failing_reason: str | None) -> tuple[Check, ...]:
    """The gates of one output. A gated metric without a value is a failure when ``failing_reason``
    says why (NaN/Inf), and otherwise a not-computable check that is not counted."""
    gated = t.for_kind(kind)
    gates = list(_GATES)
    gates.insert(2, ("min_cosine", _COSINE_METRIC.get(kind, "cosine"), ">="))
    checks = []
    for field_name, metric, op in gates:
        if field_name not in gated or metric not in m:
            continue
        threshold = gated[field_name]
        value = m[metric]
        if value is None:
            if metric not in not_computable:
                continue  # not applicable to this output (e.g. no scale, fewer than 10 classes)
            checks.append(
                Check(metric, None, threshold, op, False if failing_reason else None, not_computable[metric])
            )
            continue
        ok = value <= threshold if op == "<=" else value >= threshold
        checks.append(Check(metric, value, threshold, op, bool(ok)))
    return tuple(checks)


def compare_outputs(
    reference: Sequence[Sequence[np.ndarray]],
    candidate: Sequence[Sequence[np.ndarray]],
    *,
    names: Sequence[str],
    thresholds: Thresholds,
    runtime: str,
    output_scales: Sequence[float | None] | None = None,
    notes: Sequence[str] = (),
    kinds: Sequence[KindDecision] | None = None,
) -> ParityResult:
    """``reference[s][k]`` / ``candidate[s][k]``: output k of sample s, already in the same layout.
    ``kinds[k]`` says what output k is (default: regression, decided by default)."""
    n_out = len(names)
    outputs = []
    all_notes = list(notes)
    for k in range(n_out):
        decision = kinds[k] if kinds else _DEFAULT_DECISION
        refs = [np.asarray(r[k]) for r in reference]
        outs = [np.asarray(c[k]) for c in candidate]
        shape = tuple(refs[0].shape)
        bad = next((o.shape for o in outs if o.shape != refs[0].shape), None)
        if bad is not None:
            outputs.append(
                OutputParity(
                    k, names[k], shape, {}, (), error=f"shape mismatch: PyTorch {shape} vs LiteRT {tuple(bad)}", decision=decision
                )
            )
            continue
        ref = np.stack(refs).astype(np.float64)
        out = np.stack(outs).astype(np.float64)
        scale = output_scales[k] if output_scales else None
        m: dict = {key: None for key in _METRIC_KEYS}
        not_computable: dict[str, str] = {}
        error = _non_finite(ref, out)
        for key in _applicable(decision.kind, shape, scale):
            if error is not None:
                not_computable[key] = error
                continue
            try:
                value = _metric(key, ref, out, refs, outs, scale)
            except metrics.NotComputable as exc:
                not_computable[key] = exc.reason
                continue
            if np.isnan(value):
                not_computable[key] = "the metric came out NaN"
                continue
            if not np.isfinite(value):  # JSON has no inf (e.g. relative error against an all-zero reference)
                value = float(np.sign(value) * 1e300)
            m[key] = value
        checks = _checks(m, thresholds, decision.kind, not_computable, error)
        for c in checks:
            if c.passed is None:
                all_notes.append(f"{names[k]}: {c.metric} not computable ({c.reason}); counted as neither pass nor fail")
        outputs.append(OutputParity(k, names[k], shape, m, checks, error, decision, not_computable))
    return ParityResult(len(reference), thresholds, tuple(outputs), runtime, tuple(all_notes))
