"""The pieces the mixed-precision search (mixed_precision/) and its weight-splitting phase
(weight_splitting.py) share: the accuracy target and a candidate's check against it, the promoted
layer's record, the SQNR sort key, the model a missed search keeps and the step sizes of a search."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..output.serialize import json_field

__all__ = ["MISSED_TIE_DB", "SINGLE_STEPS", "AccuracyTarget", "best_of_missed", "TargetCheck", "PromotedLayer", "evaluate_target", "sqnr_key", "step_sizes"]

SINGLE_STEPS = 8  # promotions made one at a time before the groups grow
# SQNRs of one missed search's candidates closer than this count as equal (best_of_missed)
MISSED_TIE_DB = 0.5


@dataclass(frozen=True)
class AccuracyTarget:
    """What the output must reach on the held-out inputs: the parity thresholds that gate every
    output kind (SQNR) and the ones the user gave explicitly (cosine, top-1). ``margin_db``: how far
    above the SQNR gate (the export's own, or the user's --min-sqnr) the search aims, on inputs the
    verdict does not read (stages/convert.search_target)."""

    min_sqnr_db: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    margin_db: float = 0.0

    def gate_sqnr_db(self) -> float | None:
        """The export's own SQNR gate under a default search's target."""
        return None if self.min_sqnr_db is None else self.min_sqnr_db - self.margin_db

    def describe(self) -> str:
        parts = []
        if self.min_sqnr_db is not None and self.margin_db:
            parts.append(f"SQNR >= {self.min_sqnr_db:g} dB ({self.gate_sqnr_db():g} dB + {self.margin_db:g} dB margin)")
        elif self.min_sqnr_db is not None:
            parts.append(f"SQNR >= {self.min_sqnr_db:g} dB")
        if self.min_cosine is not None:
            parts.append(f"cosine >= {self.min_cosine:g}")
        if self.min_top1 is not None:
            parts.append(f"top-1 >= {self.min_top1:g}")
        return ", ".join(parts) or "no threshold"


@dataclass(frozen=True)
class TargetCheck:
    """One candidate against the target, on the held-out inputs (worst output)."""

    sqnr_db: float
    cosine: float
    top1: float | None
    failed: tuple[str, ...]

    @property
    def met(self) -> bool:
        return not self.failed


def evaluate_target(outs: list[list[np.ndarray]], refs: list[list[np.ndarray]], target: AccuracyTarget) -> TargetCheck:
    from ..validators.metrics import cosine_similarity, top1_agreement
    from ..validators.output_parts import worst_sqnr_db

    sqnrs, cosines, top1s = [], [], []
    for k in range(min(len(refs[0]), len(outs[0]))):
        ref = np.stack([np.asarray(r[k], dtype=np.float32) for r in refs])
        out = np.stack([np.asarray(o[k], dtype=np.float32).reshape(np.shape(r[k])) for o, r in zip(outs, refs)])
        sqnrs.append(worst_sqnr_db(ref, out))  # an output's parts too: a detector's scores, not only its boxes
        cosines.append(cosine_similarity(ref.ravel(), out.ravel()))
        if target.min_top1 is not None and ref.shape[-1] > 1:
            top1s.append(top1_agreement(ref.reshape(-1, ref.shape[-1]), out.reshape(-1, ref.shape[-1])))
    sqnr, cosine = float(min(sqnrs, key=sqnr_key)), float(min(cosines))
    top1 = float(min(top1s)) if top1s else None
    failed = []
    if target.min_sqnr_db is not None and not sqnr >= target.min_sqnr_db:
        failed.append(f"SQNR {sqnr:.1f} dB < {target.min_sqnr_db:g}")
    if target.min_cosine is not None and not cosine >= target.min_cosine:
        failed.append(f"cosine {cosine:.5f} < {target.min_cosine:g}")
    if target.min_top1 is not None and top1 is not None and not top1 >= target.min_top1:
        failed.append(f"top-1 {top1:.3f} < {target.min_top1:g}")
    return TargetCheck(round(sqnr, 3), round(cosine, 6), None if top1 is None else round(top1, 4), tuple(failed))


@dataclass(frozen=True)
class PromotedLayer:
    """One operator raised above int8, with what it cost and bought."""

    op_index: int
    opcode: str
    tensor: str
    module_path: str | None
    module_type: str | None
    source: str | None
    precision: str  # "int16" | "float" | "int16+split-weights" (weight_splitting.SPLIT_PRECISION)
    sensitivity_rank: int
    step: int  # which measured prefix first included it (operators promoted together share one)
    sqnr_before_db: float  # the model's held-out SQNR before this step
    sqnr_after_db: float  # and after it
    size_delta_bytes: int  # file size change of this step (shared by the step's operators)
    # median host latency change of this step (shared likewise); None when latency is not measured
    latency_delta_ms: float | None = json_field(default=None, digits=3)


def sqnr_key(sqnr_db: float) -> float:
    """An SQNR as a "higher is better" key: NaN (output not a number) is the worst."""
    return -math.inf if math.isnan(sqnr_db) else sqnr_db


def best_of_missed(sqnr_by_count: Mapping[int, float]) -> int:
    """Of the candidates of a search that missed its target (count: operators promoted or split,
    more is more precision), the one kept: the most precise of those within ``MISSED_TIE_DB`` of the
    best SQNR. Closer than that, the search's few samples cannot tell them apart, and a model that
    already falls short is better served by precision than by its size (the random-weight YOLO11n:
    14 to 88 weight splits read 9.51-9.56 dB, and the noise picked 70). NaN is the worst; with
    every SQNR NaN or -Inf, the fewest."""
    best = max(sqnr_key(v) for v in sqnr_by_count.values())
    if best == -math.inf:
        return min(sqnr_by_count)
    return max(k for k, v in sqnr_by_count.items() if sqnr_key(v) >= best - MISSED_TIE_DB)


def step_sizes(count: int) -> list[int]:
    """How many operators each step promotes: one at a time first, then doubling groups."""
    sizes, size, done = [], 1, 0
    while done < count:
        if done >= SINGLE_STEPS:
            size *= 2
        take = min(size, count - done)
        sizes.append(take)
        done += take
    return sizes
