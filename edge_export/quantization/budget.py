"""The quantization stage's time budget (``--time-budget``) and its progress reports.

One ``TimeBudget`` spans the whole stage: auto's backends, PT2E's calibration, the sensitivity
ranking, the mixed-precision search and its weight-splitting phase. Every loop over candidates asks
``budget.allows(what)`` before a step; once the budget is spent the step is not started, what was
not tried is recorded (``skipped``) and the best result so far is kept. A step already started
finishes, so the stage ends at most one step after the budget. Nothing is skipped while no model
exists yet: the first backend always runs to the end.

Shares: a phase that a later one must not starve runs inside ``budget.share(fraction)``: until it
ends, the budget reads as spent once ``fraction`` of the time left when the phase began is used, so
the phase after it always starts with the rest. The export gives auto's backends
``BACKENDS_SHARE`` when a sensitivity ranking or a mixed-precision search follows (the first backend
still always finishes), the search gives its sensitivity ranking ``RANKING_SHARE`` of what is left
(operators not ranked stay candidates, after the ranked ones), and on cpu the int16 try before float
promotions ``INT16_FIRST_SHARE`` (mixed_precision.py): a slow PT2E calibration can no longer spend the
whole budget before the search starts (the pretrained MiniLM with --min-sqnr 25 did).

Progress: ``budget.step(label, i, n)`` reaches the caller's ``on_progress(label, i, n)`` (the CLI's
spinner), through ``isolation.send_progress`` when called in an isolated child. The deadline is a
``time.monotonic`` instant, which a forked child shares with its parent.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ..errors import QuantizationError
from ..output.serialize import json_field

__all__ = ["BACKENDS_SHARE", "DEFAULT_TIME_BUDGET_S", "INT16_FIRST_SHARE", "RANKING_SHARE", "SLOW_STEP_ENV", "BudgetSection", "TimeBudget", "TimeBudgetSpent", "check_time_budget"]

DEFAULT_TIME_BUDGET_S = 300.0
# The shares of the time left that a phase may use when a later phase follows (see the docstring).
BACKENDS_SHARE = 0.4
RANKING_SHARE = 0.5
INT16_FIRST_SHARE = 0.5
# Test hook: seconds slept at every step (a search slow enough to test the budget and the progress
# line on a tiny model). Never set in normal use.
SLOW_STEP_ENV = "EDGE_EXPORT_TEST_SLOW_STEP"

Progress = Callable[[str, int, int], None]


class TimeBudgetSpent(QuantizationError):
    """Raised inside a step that can stop part-way (PT2E's calibration loop) when the budget is
    spent and a model already exists; the caller records what was not finished."""


def check_time_budget(seconds: float | None) -> None:
    from ..errors import UsageError

    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(
            f"--time-budget {seconds} is not a positive number of seconds.",
            f"Give e.g. --time-budget {DEFAULT_TIME_BUDGET_S:g} (the default).",
        )


@dataclass(frozen=True)
class BudgetSection:
    """The report's account of the budget: what it was, what was used, what was not tried."""

    seconds: float  # the budget
    used_seconds: float = json_field(digits=3)  # from the start of the quantize stage to its end
    exhausted: bool  # some step was not run because the budget was spent
    skipped: tuple[str, ...] = ()  # what was not tried, one sentence each


@dataclass
class TimeBudget:
    """``seconds`` from now (None: no limit) for the quantization stage; see the module docstring."""

    seconds: float | None = DEFAULT_TIME_BUDGET_S
    on_progress: Progress | None = None
    started: float = field(default_factory=time.monotonic)
    skipped: list[str] = field(default_factory=list)
    phase_end: float = math.inf  # the running share's end (share()); inf outside one
    phase: str = ""  # what the running share is for, named in what it leaves untried

    @property
    def deadline(self) -> float:
        """When the current phase must stop: the budget's end, or its share's end if sooner."""
        whole = math.inf if self.seconds is None else self.started + self.seconds
        return min(whole, self.phase_end)

    @contextlib.contextmanager
    def share(self, fraction: float, phase: str) -> Iterator[None]:
        """Within the block, the budget is spent once ``fraction`` (0-1) of the time left now is
        used; after it, the outer deadline again. Nested shares take a share of the inner one.
        ``phase`` ("the backends") names it in what it leaves untried."""
        if not (math.isfinite(fraction) and 0 < fraction <= 1):
            raise ValueError(f"a budget share is a fraction in (0, 1], not {fraction}")
        outer, outer_phase = self.phase_end, self.phase
        left = self.deadline - time.monotonic()
        if math.isfinite(left):
            self.phase_end = min(outer, time.monotonic() + max(left, 0.0) * fraction)
            self.phase = f"the share for {phase}, {fraction:.0%} of the {max(left, 0.0):.0f} s then left, was used"
        try:
            yield
        finally:
            self.phase_end, self.phase = outer, outer_phase

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def spent(self) -> bool:
        return time.monotonic() >= self.deadline

    def allows(self, what: str) -> bool:
        """True while there is time left; else records ``what`` (a phrase: "the pt2e backend") as
        not tried and returns False."""
        if not self.spent():
            return True
        self.skip(self.noted(what))
        return False

    def noted(self, what: str) -> str:
        """``what``, with the share that ended it when a share (not the whole budget) did."""
        whole = math.inf if self.seconds is None else self.started + self.seconds
        return f"{what} ({self.phase})" if self.phase and self.phase_end < whole else what

    def skip(self, what: str) -> None:
        if what not in self.skipped:
            self.skipped.append(what)

    def extend(self, skipped: Iterable[str]) -> None:
        """Add what a child process skipped (its copy of the budget is not this one)."""
        for what in skipped:
            self.skip(what)

    def step(self, label: str, index: int, total: int) -> None:
        """Report step ``index`` (0-based) of ``total`` of ``label``; called before the step runs."""
        delay = os.environ.get(SLOW_STEP_ENV)
        if delay:
            time.sleep(float(delay))
        from ..processes.isolation import send_progress

        if not send_progress(label, index, total) and self.on_progress is not None:
            self.on_progress(label, index, total)

    def section(self) -> BudgetSection | None:
        if self.seconds is None:
            return None
        return BudgetSection(float(self.seconds), round(self.elapsed(), 3), bool(self.skipped), tuple(self.skipped))
