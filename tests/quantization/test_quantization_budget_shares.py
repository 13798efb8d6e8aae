"""The time budget shared between the quantization stage's phases (budget.TimeBudget.share): a phase
that a later one must not starve (auto's backends before the search, the ranking before the
promotions, int16 before float) ends at its share, and the phase after it starts with the rest."""

from __future__ import annotations

import math
import time

import pytest

from edge_export.quantization.budget import TimeBudget
from edge_export.quantization.promotion_steps import TargetCheck


def test_a_share_ends_its_phase_and_gives_the_rest_back():
    budget = TimeBudget(100.0)
    whole = budget.deadline
    with budget.share(0.4, "auto's backends"):
        assert budget.deadline == pytest.approx(budget.started + 40.0, abs=0.5)
        assert budget.allows("the pt2e backend")
        budget.phase_end = time.monotonic() - 1  # the share is used up: as after 40 s
        assert not budget.allows("the pt2e backend (int8)")
    assert budget.deadline == whole and budget.allows("the mixed-precision search")
    # what the share left untried names the share, so the report says why it stopped there
    assert budget.skipped == ["the pt2e backend (int8) (the share for auto's backends, 40% of the 100 s then left, was used)"]


def test_nested_shares_take_a_share_of_the_inner_one_and_an_unbounded_budget_has_none():
    budget = TimeBudget(100.0)
    with budget.share(0.5, "the int16 try"):
        with budget.share(0.5, "the sensitivity ranking"):
            assert budget.deadline == pytest.approx(budget.started + 25.0, abs=0.5)
        assert budget.deadline == pytest.approx(budget.started + 50.0, abs=0.5)
    unbounded = TimeBudget(None)
    with unbounded.share(0.1, "auto's backends"):
        assert unbounded.deadline == math.inf and unbounded.allows("anything")


def test_a_share_of_a_spent_budget_is_spent_and_a_share_is_a_fraction():
    budget = TimeBudget(1.0)
    budget.started -= 10
    with budget.share(0.5, "the sensitivity ranking"):
        assert budget.spent()
    for bad in (0.0, -0.5, 1.5, math.nan, math.inf):
        with pytest.raises(ValueError), budget.share(bad, "x"):
            pass


def _check(sqnr: float, met: bool) -> TargetCheck:
    return TargetCheck(sqnr, 0.99, None, () if met else ("SQNR low",))


def test_a_ranking_that_uses_its_share_still_leaves_the_promotions_their_time(monkeypatch):
    """The ranking ends at its share (operators it did not reach stay candidates), and the prefix
    search after it measures candidates: before, a slow ranking spent the whole budget and the search
    kept the int8 model."""
    from edge_export.quantization.mixed_precision import prefix_search as mp

    budget = TimeBudget(1000.0)
    with budget.share(0.5, "the sensitivity ranking"):
        budget.phase_end = time.monotonic() - 1  # the ranking used its share
        assert not budget.allows("the sensitivity of 40 of 100 operators (left out of the ranking)")
    measured: list[int] = []

    def measure(k: int) -> TargetCheck:
        measured.append(k)
        return _check(20.0 + k, met=k >= 5)

    met_at, untried = mp.search_prefixes(measure, 100, budget, "float")
    assert met_at == 5 and untried is None and measured
    assert "share for the sensitivity ranking" in budget.skipped[0]
