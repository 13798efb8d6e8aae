"""End-to-end parity: compare every flatbuffer output with PyTorch on the same inputs.

Like optimum's validation, every output and every metric is checked and all failures are collected;
the verdict is computed once at the end and the report says which output and metric was worst.
Which metrics gate an output depends on its kind (output_kinds.py, config.KIND_THRESHOLDS); a metric
that cannot be computed is reported as null with its reason, never as a number that reads as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

from .. import config
from ..config import OutputKind, Thresholds
from . import metrics
from ..output.serialize import json_field
from . import probabilities
from .output_kinds import KindDecision, KindSource
from .output_parts import PartSlice, find_parts
from .stability import ReferenceStability

__all__ = ["Check", "OutputPart", "OutputParity", "ParityResult", "WorstOutput", "compare_outputs", "output_thresholds"]


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
class OutputPart:
    """One part of an output whose range differs from the rest (output_parts.py), judged by its
    output's kind and thresholds as if it were an output of its own."""

    part: str  # e.g. output_0[:, 4:84, :]
    axis: int
    start: int
    stop: int
    reference_max_abs: float  # PyTorch's max |x| over the part
    metrics: dict
    checks: tuple[Check, ...]
    not_computable: Mapping[str, str] = field(default_factory=dict)
    # "sigmoid": the exported model makes this part with a LOGISTIC (a detector's class scores), so
    # its values are also judged as decisions (probabilities.sigmoid_segments)
    activation: str | None = json_field(default=None, omit_none=True)

    JSON_KEYS = ("part", "axis", "start", "stop", "reference_max_abs", "activation", "metrics", "not_computable", "checks", "passed")

    @property
    def passed(self) -> bool:
        return all(c.passed is not False for c in self.checks)


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
    # the parts whose ranges differ by PART_RANGE_FACTOR or more (None: an ordinary output)
    parts: tuple[OutputPart, ...] | None = json_field(default=None, omit_none=True)

    JSON_KEYS = ("index", "name", "decision", "shape", "metrics", "not_computable", "checks", "parts", "error", "passed")

    @property
    def kind(self) -> OutputKind:
        return self.decision.kind

    @property
    def failed_parts(self) -> tuple[OutputPart, ...]:
        return tuple(p for p in self.parts or () if not p.passed)

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed is not False for c in self.checks) and not self.failed_parts


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
        """Among the failing outputs (all of them when none fails), the one with the lowest SQNR (its
        own, or a failing part's); an unknown SQNR (NaN/Inf, shape mismatch) counts as the lowest."""
        if not self.outputs:
            return None
        failing = [o for o in self.outputs if not o.passed]
        pool = failing or list(self.outputs)

        def sqnr(o: OutputParity) -> float:
            values = [o.metrics.get("sqnr_db") if o.metrics else None, *(p.metrics.get("sqnr_db") for p in o.failed_parts)]
            return min(float("-inf") if v is None else v for v in values)

        o = min(pool, key=sqnr)
        failed = [c.metric for c in o.checks if c.passed is False]
        part = min(o.failed_parts, key=lambda p: _sqnr_or_lowest(p.metrics), default=None)
        failed += [f"{c.metric} of {p.part}" for p in o.failed_parts for c in p.checks if c.passed is False]
        return WorstOutput(
            output=o.name,
            index=o.index,
            kind=o.kind,
            sqnr_db=o.metrics.get("sqnr_db") if o.metrics else None,
            max_abs_error=o.metrics.get("max_abs_error") if o.metrics else None,
            failed_checks=tuple(failed),
            error=o.error,
            part=part.part if part is not None else None,
            part_sqnr_db=part.metrics.get("sqnr_db") if part is not None else None,
        )


def _sqnr_or_lowest(m: Mapping) -> float:
    value = m.get("sqnr_db")
    return float("-inf") if value is None else value


@dataclass(frozen=True)
class WorstOutput:
    """The output a summary leads with: the failing (or lowest-SQNR) one, and its worst failing part."""

    output: str  # its name
    index: int
    kind: OutputKind
    sqnr_db: float | None
    max_abs_error: float | None
    failed_checks: tuple[str, ...]  # a part's as "sqnr_db of output_0[:, 4:84, :]"
    error: str | None
    part: str | None = json_field(default=None, omit_none=True)  # e.g. output_0[:, 4:84, :]
    part_sqnr_db: float | None = json_field(default=None, omit_none=True)


# (threshold field, metric, op) per gate; which gates an output gets is KIND_THRESHOLDS[kind].
_GATES = (
    ("atol", "max_abs_error", "<="),
    ("min_sqnr_db", "sqnr_db", ">="),
    ("max_rel_l2", "relative_l2_error", "<="),
    ("max_error_steps", "max_abs_error_steps", "<="),
    ("min_top1", "top1_agreement", ">="),
    ("min_expected_top1", "expected_top1_agreement", ">="),
    ("min_expected_positive_agreement", "expected_positive_agreement", ">="),
    ("min_top5", "top5_agreement", ">="),
    ("min_neighbour_agreement", "neighbour_agreement", ">="),
    ("max_probability_error", "probability_error", "<="),
    ("min_decision_agreement", "decision_agreement", ">="),
    ("min_decision_agreement", "threshold_agreement", ">="),
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
# Only a probabilities output has these (ordinary outputs' reports keep the keys above).
_PROBABILITY_KEYS = ("probability_error", "decision_agreement", "threshold_agreement")
# Only a classifier (expected_top1.py) or a sigmoid (positive_agreement.py) checked on real data has these.
_REAL_DATA_KEYS = ("expected_top1_agreement", "expected_positive_agreement")
# The gates a part made by a sigmoid has besides its output's (its decisions at the threshold).
_SIGMOID_PART_GATES = ("min_decision_agreement", "min_expected_positive_agreement")


def _applicable(kind: OutputKind, shape: tuple[int, ...], scale: float | None, activation: str | None = None, real: bool = False) -> list[str]:
    """The metrics an output of this kind and shape has (the others are null: not applicable);
    ``real``: PyTorch's outputs on the real samples are known (expected top-1, expected detections)."""
    keys = ["max_abs_error", "mean_abs_error", "relative_l2_error", "cosine", "sqnr_db", "worst_sample_sqnr_db"]
    if scale:
        keys.append("max_abs_error_steps")
    if kind is OutputKind.CLASSIFICATION:
        keys.append("top1_agreement")
        if real:
            keys.append("expected_top1_agreement")
        if shape and shape[-1] >= TOP5_MIN_CLASSES:
            keys.append("top5_agreement")
    elif kind is OutputKind.EMBEDDING:
        keys += ["worst_sample_cosine", "neighbour_agreement"]
    elif kind is OutputKind.PROBABILITIES:
        keys += ["probability_error", "decision_agreement"]
        if activation == "sigmoid":  # a multi-label reader decides each value at the threshold
            keys += _sigmoid_keys(real)
    return keys


def _sigmoid_keys(real: bool) -> list[str]:
    """A sigmoid's per-value decisions: their agreement, and with real data the detections kept."""
    return ["threshold_agreement", "expected_positive_agreement"] if real else ["threshold_agreement"]


@dataclass(frozen=True)
class _Context:
    """What one output's (or part's) metrics read besides its values: PyTorch's values on every real
    sample, stacked (None: the samples are not real data), and the decision threshold of a sigmoid."""

    decision: KindDecision = _DEFAULT_DECISION
    scale: float | None = None
    real: np.ndarray | None = None
    threshold: float = probabilities.SIGMOID_THRESHOLD


def _probability_metric(key: str, ref: np.ndarray, out: np.ndarray, context: _Context) -> float:
    """``ref``/``out`` stack the samples on a new first axis, so the classes' axis (numbered in one
    sample's shape) is one further on."""
    decision = context.decision
    p_ref, p_out = probabilities.as_probabilities(ref, decision.activation), probabilities.as_probabilities(out, decision.activation)
    if key == "probability_error":
        return metrics.max_abs_error(p_ref, p_out)
    if key == "decision_agreement":
        axis = None if decision.axis is None else decision.axis + 1
        return probabilities.decision_agreement(p_ref, p_out, axis=axis)
    return probabilities.threshold_agreement(p_ref, p_out, context.threshold)


def _real_data_metric(key: str, ref: np.ndarray, out: np.ndarray, context: _Context) -> float:
    if context.real is None:
        raise metrics.NotComputable("no real samples")
    if key == "expected_top1_agreement":
        from .expected_top1 import MAX_MARGIN_ROWS, expected_top1_agreement

        real = context.real
        return expected_top1_agreement(ref, out, real.reshape(-1, real.shape[-1])[:MAX_MARGIN_ROWS] if real.ndim > 1 else real)
    from .positive_agreement import expected_positive_agreement

    return expected_positive_agreement(ref, out, context.real, context.threshold)


def _metric(key: str, ref: np.ndarray, out: np.ndarray, refs: list, outs: list, context: _Context = _Context()) -> float:
    scale = context.scale
    if key in _PROBABILITY_KEYS:
        return _probability_metric(key, ref, out, context)
    if key in _REAL_DATA_KEYS:
        return _real_data_metric(key, ref, out, context)
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


@dataclass(frozen=True)
class _Judged:
    """What a gate's threshold may depend on: the output's kind and PyTorch's values (stacked)."""

    decision: KindDecision
    shape: tuple[int, ...]
    magnitude: float  # PyTorch's largest |value|
    sigmoid_part: bool = False  # a part a sigmoid makes: also gated on its decisions


def _threshold(field_name: str, metric: str, gate: float, t: Thresholds, judged: _Judged) -> float:
    """The limit one check applies: atol widened for large values (config.scaled_atol), and a
    decision gate that allows at least one decision (probabilities.decision_slack)."""
    if field_name == "atol":
        return config.scaled_atol(gate, t.atol_relative, judged.magnitude) or gate
    if field_name == "min_decision_agreement":
        axis = judged.decision.axis
        count = probabilities.decision_count(judged.shape, None if axis is None else axis + 1, metric == "threshold_agreement")
        return probabilities.decision_slack(gate, count)
    return gate


def _checks(m: dict, t: Thresholds, judged: _Judged, not_computable: Mapping[str, str], failing_reason: str | None) -> tuple[Check, ...]:
    """The gates of one output. A gated metric without a value is a failure when ``failing_reason``
    says why (NaN/Inf), and otherwise a not-computable check that is not counted."""
    kind = judged.decision.kind
    gated = t.for_kind(kind)
    if judged.sigmoid_part:
        gated |= {k: getattr(t, k) for k in _SIGMOID_PART_GATES if getattr(t, k) is not None}
    gates = list(_GATES)
    gates.insert(2, ("min_cosine", _COSINE_METRIC.get(kind, "cosine"), ">="))
    checks = []
    for field_name, metric, op in gates:
        if field_name not in gated or metric not in m:
            continue
        threshold = _threshold(field_name, metric, gated[field_name], t, judged)
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


def _measure(
    ref: np.ndarray, out: np.ndarray, refs: list, outs: list, error: str | None, context: _Context, sigmoid_part: bool = False
) -> tuple[dict, dict[str, str]]:
    """The metrics of one output (or part) and why each missing one has no value; ``sigmoid_part``:
    a part a sigmoid makes, whose values are decisions too."""
    decision, real = context.decision, context.real is not None
    keys = _applicable(decision.kind, tuple(ref.shape[1:]), context.scale, decision.activation, real)
    keys += [k for k in _sigmoid_keys(real) if sigmoid_part and k not in keys]
    m: dict = {key: None for key in (*_METRIC_KEYS, *(k for k in (*_PROBABILITY_KEYS, *_REAL_DATA_KEYS) if k in keys))}
    not_computable: dict[str, str] = {}
    for key in keys:
        if error is not None:
            not_computable[key] = error
            continue
        try:
            value = _metric(key, ref, out, refs, outs, context)
        except metrics.NotComputable as exc:
            not_computable[key] = exc.reason
            continue
        if np.isnan(value):
            not_computable[key] = "the metric came out NaN"
            continue
        if not np.isfinite(value):  # JSON has no inf (e.g. relative error against an all-zero reference)
            value = float(np.sign(value) * 1e300)
        m[key] = value
    return m, not_computable


def _sigmoid_parts(ref: np.ndarray, segments: Sequence[tuple[int, int, int]]) -> tuple[list[PartSlice], set[int]]:
    """The output's parts: those its ranges make (output_parts.py), and each run a sigmoid makes
    (``segments``) that holds none of them; with the indices of the parts a sigmoid makes."""
    parts = list(find_parts(ref))
    made: set[int] = set()
    for axis, start, stop in segments:
        inside = [i for i, p in enumerate(parts) if p.axis == axis and start <= p.start and p.stop <= stop]
        if not inside:
            index = [slice(None)] * ref.ndim
            index[axis + 1] = slice(start, stop)
            largest = float(np.max(np.abs(ref[tuple(index)]))) if ref.size else 0.0
            if not largest > 0.0:  # zero everywhere (or NaN): nothing to judge, as output_parts says
                continue
            inside = [len(parts)]
            parts.append(PartSlice(axis, start, stop, largest))
        made.update(inside)
    return parts, made


def _judge_parts(
    name: str, ref: np.ndarray, out: np.ndarray, thresholds: Thresholds, context: _Context, segments: Sequence[tuple[int, int, int]] = ()
) -> tuple[OutputPart, ...] | None:
    """The output's parts (output_parts.py, and the runs a sigmoid makes), each measured and gated
    as its output is, a sigmoid's also by its decisions; None when the output has none."""
    found, made = _sigmoid_parts(ref, segments)
    if not found:
        return None
    return tuple(_judge_part(name, part, ref, out, thresholds, context, i in made) for i, part in enumerate(found))


def _judge_part(
    name: str, part: PartSlice, ref: np.ndarray, out: np.ndarray, thresholds: Thresholds, context: _Context, sigmoid: bool
) -> OutputPart:
    r, o = part.take(ref), part.take(out)
    real = part.take(context.real) if sigmoid and context.real is not None else None
    m, not_computable = _measure(r, o, list(r), list(o), None, replace(context, real=real), sigmoid)
    # atol scales with the whole output's magnitude: parts guard against one int8 scale shared by
    # ranges 10x apart, while float rounding follows the tensor (YOLO11n fp32's scores part, values
    # <= 1, is off by more than 1e-4 where its boxes reach 800 px, every box and score kept)
    magnitude = float(np.max(np.abs(ref))) if ref.size else float("nan")
    checks = _checks(m, thresholds, _Judged(context.decision, r.shape, magnitude, sigmoid), not_computable, None)
    return OutputPart(
        part.label(name, ref.ndim - 1), part.axis, part.start, part.stop, part.reference_max_abs, m, checks, not_computable,
        "sigmoid" if sigmoid else None,
    )


def _real_values(real_references: Sequence[Sequence[np.ndarray]] | None, k: int, shape: tuple[int, ...]) -> np.ndarray | None:
    """PyTorch's output k on every real sample, stacked (None: no real data, or a sample whose
    output has another shape)."""
    if not real_references:
        return None
    values = [np.asarray(sample[k]) for sample in real_references]
    if any(v.shape != shape for v in values):
        return None
    return np.stack(values)


def _real_data_note(name: str, check: Check, real: int, parity: int, threshold: float) -> str:
    moved = (
        f"the error measured on the {parity} parity samples moves the logits across PyTorch's margins on its {real} real "
        "samples, although those few samples may all agree"
    )
    if check.metric == "expected_top1_agreement":
        return (
            f"{name}: top-1 is expected to agree with PyTorch on {check.value:.3f} of inputs like the calibration "
            f"data, below {check.threshold:g}: {moved} (--min-expected-top1 sets the bound)"
        )
    return (
        f"{name}: PyTorch's detections (values >= {threshold:g}) are expected to be kept at an intersection over union "
        f"of {check.value:.3f} on inputs like the calibration data, below {check.threshold:g}: {moved} "
        "(--decision-threshold sets the threshold the app decides at, --min-expected-positive-agreement the bound)"
    )


def _judge_output(
    k: int, name: str, refs: list, outs: list, thresholds: Thresholds, context: _Context, segments: Sequence[tuple[int, int, int]]
) -> OutputParity:
    decision, shape = context.decision, tuple(refs[0].shape)
    bad = next((o.shape for o in outs if o.shape != refs[0].shape), None)
    if bad is not None:
        return OutputParity(k, name, shape, {}, (), error=f"shape mismatch: PyTorch {shape} vs LiteRT {tuple(bad)}", decision=decision)
    ref = np.stack(refs).astype(np.float64)
    out = np.stack(outs).astype(np.float64)
    error = _non_finite(ref, out)
    m, not_computable = _measure(ref, out, refs, outs, error, context)
    magnitude = float(np.max(np.abs(ref))) if error is None and ref.size else float("nan")
    checks = _checks(m, thresholds, _Judged(decision, ref.shape, magnitude), not_computable, error)
    # An embedding is compared by direction as a whole: a dimension of another range (MiniLM's
    # outlier features 127 and 223) is part of that direction, and a one-wide part's cosine is its sign.
    whole = error is not None or decision.kind is OutputKind.EMBEDDING
    parts = None if whole else _judge_parts(name, ref, out, thresholds, context, segments)
    return OutputParity(k, name, shape, m, checks, error, decision, not_computable, parts)


def output_thresholds(thresholds: Thresholds, output: OutputParity) -> Thresholds:
    """What gates ``output`` (its kind's thresholds, and a sigmoid part's decision gates), with the
    decision threshold: the thresholds test vectors store for it."""
    gated = thresholds.for_kind(output.kind)
    if any(p.activation == "sigmoid" for p in output.parts or ()):
        gated |= {k: getattr(thresholds, k) for k in _SIGMOID_PART_GATES if getattr(thresholds, k) is not None}
    return Thresholds(**gated, decision_threshold=thresholds.decision_threshold)


def _wants_real(decision: KindDecision, segments: Sequence) -> bool:
    """Whether the output's metrics read PyTorch's values on the real samples."""
    return decision.kind is OutputKind.CLASSIFICATION or decision.activation == "sigmoid" or bool(segments)


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
    real_references: Sequence[Sequence[np.ndarray]] | None = None,
    segments: Sequence[Sequence[tuple[int, int, int]]] | None = None,
) -> ParityResult:
    """``reference[s][k]`` / ``candidate[s][k]``: output k of sample s, already in the same layout.
    ``kinds[k]`` says what output k is (default: regression, decided by default). An output whose
    parts differ in range (output_parts.py) is also judged part by part, and so is each run of it a
    sigmoid makes, ``segments[k]`` (probabilities.sigmoid_segments). ``real_references[s][k]``:
    PyTorch's output k on real sample s (the calibration data and held-out samples), from which a
    classifier's expected top-1 agreement takes its margins and a sigmoid's expected detections
    (None: no real data)."""
    outputs = []
    all_notes = list(notes)
    threshold = thresholds.decision_threshold
    for k in range(len(names)):
        decision = kinds[k] if kinds else _DEFAULT_DECISION
        runs = tuple(segments[k]) if segments else ()
        refs = [np.asarray(r[k]) for r in reference]
        real = _real_values(real_references, k, tuple(refs[0].shape)) if _wants_real(decision, runs) else None
        context = _Context(decision, output_scales[k] if output_scales else None, real, threshold)
        result = _judge_output(k, names[k], refs, [np.asarray(c[k]) for c in candidate], thresholds, context, runs)
        for label, checks in ((names[k], result.checks), *((p.part, p.checks) for p in result.parts or ())):
            for c in checks:
                if c.passed is None:
                    all_notes.append(f"{label}: {c.metric} not computable ({c.reason}); counted as neither pass nor fail")
                if c.metric in _REAL_DATA_KEYS and c.passed is False:
                    all_notes.append(_real_data_note(label, c, len(real_references or ()), len(reference), threshold))
        outputs.append(result)
    return ParityResult(len(reference), thresholds, tuple(outputs), runtime, tuple(all_notes))
