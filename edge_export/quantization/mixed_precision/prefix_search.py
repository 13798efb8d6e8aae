"""The prefix search: the models with the first k operators of the promotion order raised,
measured in growing groups and bisected inside the group that first meets the target, each a step
of the time budget; every measured prefix timed on the host when asked."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..budget import TimeBudget
from ..promotion_steps import AccuracyTarget, TargetCheck, evaluate_target
from ..promotion_steps import step_sizes as _groups
from ..sensitivity import LayerSensitivity, RecipeQuantizer, parity_outputs
from .order import promotion_overrides

__all__ = ["LATENCY_BUDGET_S", "LATENCY_MAX_RUNS", "LATENCY_MIN_RUNS", "Prefixes", "search_prefixes"]


# Timing each measured prefix (_median_latency): at least LATENCY_MIN_RUNS timed runs, more up to
# LATENCY_MAX_RUNS while under LATENCY_BUDGET_S seconds of timed work, after one warm-up run.
LATENCY_MIN_RUNS, LATENCY_MAX_RUNS, LATENCY_BUDGET_S = 3, 10, 0.3


def _median_latency(
    model_bytes: bytes, *, min_runs: int = LATENCY_MIN_RUNS, max_runs: int = LATENCY_MAX_RUNS, budget_s: float = LATENCY_BUDGET_S
) -> float | None:
    """Median host latency (LiteRT + XNNPACK, 1 thread) after one warm-up run: at least
    ``min_runs`` timed runs, then more up to ``max_runs`` while under ``budget_s`` of timed work
    (a slow int16x8 model gets ``min_runs``, a fast one ``max_runs``)."""
    from ...flatbuffer import read_flatbuffer
    from ...runtime.latency import random_inputs
    from ...runtime.interpreter import Resolver, TFLiteRunner

    try:
        runner = TFLiteRunner(read_flatbuffer(model_bytes), resolver=Resolver.XNNPACK, num_threads=1)
        interp = runner.interpreter
        for spec, arr in zip(runner.inputs, random_inputs(runner.inputs)):
            interp.set_tensor(spec.index, arr)
        interp.invoke()
        times: list[float] = []
        while len(times) < max_runs and (len(times) < min_runs or sum(times) < budget_s):
            start = time.perf_counter()
            interp.invoke()
            times.append(time.perf_counter() - start)
        return round(float(np.median(times)) * 1e3, 3)
    except Exception:  # a latency we cannot measure is reported as none, never a failed export
        return None


def search_prefixes(measure: Callable[[int], TargetCheck], count: int, budget: TimeBudget, precision: str,
                     known: Mapping[int, TargetCheck] | None = None) -> tuple[int | None, str | None]:
    """Measure prefixes of the promotion order in ``_groups`` steps, then bisect inside the group
    that first meets the target. Returns (the smallest prefix found that meets it, or None; what the
    time budget left untried, or None). Every loop is bounded: the groups by ``count``, the
    bisection by halving.

    At int16, every operator at int16 is measured first: it tells whether int16 can reach the target
    at all (when it cannot, no prefix is tried and weight splitting starts from it), and when the
    budget ends the search before a smaller prefix meets it, that model is kept, fully integer and
    meeting the target (the zoo's PoolFormer: the budget ended the search after its single steps,
    while every operator at int16 reads 43 dB). ``known``: prefixes already measured (no step)."""
    groups = _groups(count)
    estimate = len(groups) + math.ceil(math.log2(max(groups, default=1) or 1)) + 1
    steps = 0
    known = dict(known or {})

    def allowed(what: str) -> bool:
        nonlocal steps
        if not budget.allows(what):
            return False
        budget.step(f"Mixed precision: promoting to {precision}", steps, max(estimate, steps + 1))
        steps += 1
        return True

    def met(k: int) -> bool:
        if k not in known:
            known[k] = measure(k)
        return known[k].met

    fallback = None
    if precision == "int16" and count > 1:
        untried = f"promoting more than 0 of {count} operators"
        if count not in known and not allowed(untried):
            return None, untried
        if not met(count):
            return None, None
        fallback = count
    done = 0
    for size in groups:
        previous, done = done, done + size
        untried = f"promoting more than {previous} of {count} operators"
        if done not in known and not allowed(untried):
            return fallback, untried if fallback is None else f"promoting fewer than all {count} operators"
        if met(done):  # a group overshot: bisect between the last prefix that missed and this one
            return _bisect(met, allowed, previous, done)
    return None, None


def _bisect(met: Callable[[int], bool], allowed: Callable[[str], bool], low: int, high: int) -> tuple[int, str | None]:
    """The smallest prefix in (low, high] that meets the target (``high`` does, ``low`` does not),
    by halving; when the budget ends it first, ``high`` and what was not tried."""
    while high - low > 1:
        untried = f"fewer promotions than {high} (between {low} and {high}; the model kept may promote more than needed)"
        if not allowed(untried):
            return high, untried
        mid = (low + high) // 2
        if met(mid):
            high = mid
        else:
            low = mid
    return high, None


class Prefixes:
    """The candidates of one search: the model with the first k operators of ``order`` promoted,
    measured once each (prefix length -> (check, bytes)), timed on the host when asked."""

    def __init__(self, quantizer: RecipeQuantizer, by_index: Mapping[int, Any], order: Sequence[LayerSensitivity], precision: str,
                 boundary: Mapping[Any, str], heldout: Sequence[tuple[np.ndarray, ...]], heldout_refs: list[list[np.ndarray]], target: AccuracyTarget,
                 measure_latency: bool) -> None:
        self.quantizer, self.order, self.precision, self.boundary = quantizer, order, precision, boundary
        self.heldout, self.heldout_refs, self.target, self.measure_latency = heldout, heldout_refs, target, measure_latency
        self.by_index = by_index
        self.int16_opcodes: frozenset[str] | None = None  # what the target runs at int16 (None: any)
        self.measured: dict[int, tuple[TargetCheck, bytes]] = {}  # prefix length -> result
        self.carried = {0: 0}  # layout operators promoted along with the first k candidates
        self.latency: dict[int, float | None] = {}  # prefix length -> median host latency (ms)
        self.timing = 0.0  # seconds spent timing

    def record(self, k: int, check: TargetCheck, model_bytes: bytes) -> TargetCheck:
        self.measured[k] = (check, model_bytes)
        if self.measure_latency:
            self.latency[k] = self.timed(model_bytes)
        return check

    def timed(self, model_bytes: bytes) -> float | None:
        began = time.perf_counter()
        found = _median_latency(model_bytes)
        self.timing += time.perf_counter() - began
        return found

    def check(self, model_bytes: bytes) -> TargetCheck:
        return evaluate_target(parity_outputs(model_bytes, self.heldout), self.heldout_refs, self.target)

    def measure(self, k: int) -> TargetCheck:
        if k in self.measured:
            return self.measured[k][0]
        overrides = promotion_overrides(
            self.quantizer, [self.by_index[layer.op_index] for layer in self.order[:k]], self.precision, self.int16_opcodes
        )
        overrides.update(self.boundary)
        self.carried[k] = sum(1 for raised in overrides.values() if raised == self.precision) - k
        candidate = self.quantizer.quantize("int8", overrides)
        return self.record(k, self.check(candidate), candidate)
