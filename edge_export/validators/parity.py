"""End-to-end parity: compare every flatbuffer output with PyTorch on the same inputs.

Like optimum's validation, every output and every metric is checked and all failures are collected;
the verdict is computed once at the end and the report says which output and metric was worst.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..config import Thresholds
from . import metrics

__all__ = ["Check", "OutputParity", "ParityResult", "compare_outputs"]


@dataclass(frozen=True)
class Check:
    metric: str
    value: float
    threshold: float
    op: str  # "<=" or ">="
    passed: bool

    def to_dict(self) -> dict:
        return {"metric": self.metric, "value": self.value, "threshold": self.threshold, "op": self.op, "passed": self.passed}


@dataclass(frozen=True)
class OutputParity:
    index: int
    name: str
    shape: tuple[int, ...]
    metrics: dict
    checks: tuple[Check, ...]
    error: str | None = None  # e.g. a shape mismatch: the output fails without metrics

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed for c in self.checks)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "shape": list(self.shape),
            "metrics": self.metrics,
            "checks": [c.to_dict() for c in self.checks],
            "error": self.error,
            "passed": self.passed,
        }


@dataclass(frozen=True)
class ParityResult:
    samples: int
    thresholds: Thresholds
    outputs: tuple[OutputParity, ...]
    runtime: str
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def worst(self) -> dict | None:
        """The output with the lowest SQNR (or the first failing one)."""
        if not self.outputs:
            return None
        failing = [o for o in self.outputs if not o.passed]
        pool = failing or list(self.outputs)
        o = min(pool, key=lambda x: x.metrics.get("sqnr_db", float("inf")) if x.metrics else float("-inf"))
        failed = [c.metric for c in o.checks if not c.passed]
        return {
            "output": o.name,
            "index": o.index,
            "sqnr_db": o.metrics.get("sqnr_db") if o.metrics else None,
            "max_abs_error": o.metrics.get("max_abs_error") if o.metrics else None,
            "failed_checks": failed,
            "error": o.error,
        }

    def to_dict(self) -> dict:
        return {
            "status": "passed" if self.passed else "failed",
            "samples": self.samples,
            "runtime": self.runtime,
            "thresholds": self.thresholds.to_dict(),
            "outputs": [o.to_dict() for o in self.outputs],
            "worst": self.worst(),
            "notes": list(self.notes),
        }


def _checks(m: dict, t: Thresholds, logits: bool) -> tuple[Check, ...]:
    checks = []
    if t.atol is not None:
        checks.append(Check("max_abs_error", m["max_abs_error"], t.atol, "<=", m["max_abs_error"] <= t.atol))
    if t.min_sqnr_db is not None:
        checks.append(Check("sqnr_db", m["sqnr_db"], t.min_sqnr_db, ">=", m["sqnr_db"] >= t.min_sqnr_db))
    if t.min_cosine is not None:
        checks.append(Check("cosine", m["cosine"], t.min_cosine, ">=", m["cosine"] >= t.min_cosine))
    if t.min_top1 is not None and logits:
        checks.append(Check("top1_agreement", m["top1_agreement"], t.min_top1, ">=", m["top1_agreement"] >= t.min_top1))
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
) -> ParityResult:
    """``reference[s][k]`` / ``candidate[s][k]``: output k of sample s, already in the same layout."""
    n_out = len(names)
    outputs = []
    for k in range(n_out):
        refs = [np.asarray(r[k]) for r in reference]
        outs = [np.asarray(c[k]) for c in candidate]
        shape = tuple(refs[0].shape)
        bad = next((o.shape for o in outs if o.shape != refs[0].shape), None)
        if bad is not None:
            outputs.append(
                OutputParity(k, names[k], shape, {}, (), error=f"shape mismatch: PyTorch {shape} vs LiteRT {tuple(bad)}")
            )
            continue
        ref = np.stack(refs).astype(np.float64)
        out = np.stack(outs).astype(np.float64)
        # NaN or Inf on either side is a parity failure; the metrics of such arrays mean nothing (an
        # Inf output used to crash SQNR, or claim 200 dB).
        nonfinite = [side for side, a in (("PyTorch", ref), ("LiteRT", out)) if not np.all(np.isfinite(a))]
        if nonfinite:
            outputs.append(OutputParity(k, names[k], shape, {}, (), error=f"{' and '.join(nonfinite)} output contains NaN or Inf"))
            continue
        finite = True
        m = {
            "max_abs_error": metrics.max_abs_error(ref, out),
            "mean_abs_error": metrics.mean_abs_error(ref, out),
            "relative_l2_error": metrics.relative_l2_error(ref, out),
            "cosine": metrics.cosine_similarity(ref, out),
            "sqnr_db": metrics.sqnr_db(ref, out),
            "worst_sample_sqnr_db": min(metrics.sqnr_db(r, o) for r, o in zip(refs, outs)),
            "top1_agreement": None,
        }
        if not finite:
            outputs.append(OutputParity(k, names[k], shape, m, (), error="LiteRT output contains NaN or Inf"))
            continue
        logits = metrics.looks_like_logits(shape)
        if logits:
            m["top1_agreement"] = metrics.top1_agreement(ref, out)
        scale = output_scales[k] if output_scales else None
        m["max_abs_error_steps"] = metrics.error_in_steps(ref, out, scale) if scale else None
        for key, v in m.items():  # JSON has no inf
            if isinstance(v, float) and not np.isfinite(v):
                m[key] = None if np.isnan(v) else float(np.sign(v) * 1e300)
        outputs.append(OutputParity(k, names[k], shape, m, _checks(m, thresholds, logits)))
    return ParityResult(len(reference), thresholds, tuple(outputs), runtime, tuple(notes))
