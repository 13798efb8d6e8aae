"""The model a search keeps when it misses its target (promotion_steps.best_of_missed): the most
precise of those within MISSED_TIE_DB of the best SQNR, whatever the numbers."""

import math

import pytest

from edge_export.quantization.promotion_steps import MISSED_TIE_DB, best_of_missed


def test_near_equal_misses_keep_the_most_precise():
    # the random-weight YOLO11n's weight splits (docs/BENCHMARKS.md section 45): 70 read best by 0.011 dB
    measured = {0: 7.646, 1: 7.851, 4: 8.888, 8: 9.343, 14: 9.508, 22: 9.539, 38: 9.562, 70: 9.563, 88: 9.552}
    assert best_of_missed(measured) == 88


def test_a_clearly_better_model_is_kept_over_more_precise_ones():
    # the trained YOLO11n: 22 splits read 28.9 dB, more splits 11 dB (a saturated bias)
    measured = {0: 20.1, 7: 23.7, 14: 23.1, 22: 28.928, 38: 11.094, 70: 11.088, 88: 11.064}
    assert best_of_missed(measured) == 22


def test_the_band_is_inclusive_and_no_wider():
    best = 25.0
    assert best_of_missed({1: best, 2: best - MISSED_TIE_DB}) == 2
    assert best_of_missed({1: best, 2: best - MISSED_TIE_DB - 0.01}) == 1


@pytest.mark.parametrize(
    "measured, kept",
    [
        ({0: math.nan, 3: math.nan}, 0),  # nothing a number: the fewest
        ({0: -math.inf, 5: math.nan}, 0),
        ({0: math.nan, 2: 10.0, 4: math.nan}, 2),  # NaN is the worst, not a tie
        ({1: math.inf, 2: 30.0, 3: math.inf}, 3),  # exact outputs: the most precise of them
        ({7: 12.0}, 7),
    ],
)
def test_any_numbers_give_one_of_the_candidates(measured, kept):
    assert best_of_missed(measured) == kept
