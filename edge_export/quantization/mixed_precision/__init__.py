"""Mixed precision to an accuracy target: raise the precision of the most sensitive operators of an
int8 model, in sensitivity order (the cheaper first among operators of near-equal sensitivity),
until the output meets the target on inputs that parity's verdict does not read
(stages/samples.selection_samples).

    run_sensitivity_and_mixed_precision(...) -> (QuantizationResult, SensitivityReport | None,
                                                 MixedPrecisionReport | None)

Modules: report.py (the report and the option's values), order.py (promotion costs and order),
prefix_search.py (the prefix search and bisection, timed prefixes), search.py (one search: int8,
int16, float, and int16 before float), split_phase.py (the weight-splitting phase), findings.py
(the steps, rows and reason reported), child_run.py (everything native in one child process),
driver.py (the export's entry: the child run, and the mixed model finished).

Backend: the flatbuffer one (ai-edge-quantizer), whatever backend the plain int8 model came from.
Its recipes are scoped per operator (sensitivity.py), ranges are calibrated once and shared by
every candidate, and an operator can go to int16 activations (int16x8: the model stays fully
integer) or stay float (``NO_QUANTIZE``: ai-edge-quantizer puts DEQUANTIZE/QUANTIZE around it).
PT2E can leave modules float too, but only at module granularity and with a full re-export per
candidate (tens of seconds each), and it has no int16 activations.

Modes (``--mixed-precision``): ``auto`` promotes to the precision the target allows and runs
fastest here (float on cpu and gpu: XNNPACK runs float and int8 kernels but has no int16x8 ones,
which fall back to the reference kernels, 17-31x slower than fp32 on this host; int16 on targets
that need a fully integer model), ``int16`` promotes to int16 only, ``off`` does nothing.
Without the option, on cpu, a plain ``--quantize int8`` whose model misses the export's own gate on
the calibration inputs runs ``DEFAULT_SEARCH``: int16 promotions only (the model stays fully
integer, as int8 promises) to the gate plus ``DEFAULT_SEARCH_MARGIN_DB`` (``CLASSIFICATION_SEARCH_MARGIN_DB``
for an output declared a classifier); a model that passes is
kept untouched and nothing more runs.

The search: the plain int8 model is checked first; only when it misses the target does anything
else run. Then operators are promoted in sensitivity order, cumulatively: one at a time for the
first ``SINGLE_STEPS``, then in doubling groups (2, 4, 8, ...: a model that needs many promotions
costs a logarithmic number of candidates, not one per operator); when a group overshoots, the
smallest prefix that meets the target is found by bisection inside it. Every promoted operator gets
the SQNR of the measured prefixes before and after it. When the target is never met, the best model
found is kept (of those within ``MISSED_TIE_DB`` of the best SQNR, the most precise:
promotion_steps.best_of_missed) and the report says why. Steps are listed in ``steps`` (``promoted`` = prefix length).
Every candidate is a step of the export's time budget (``budget.py``, ``--time-budget``): once it is
spent, no candidate is measured any more, the best one measured is kept and the reason says what was
not tried.

With int16 promotions, a model that misses the target with every operator at int16 is limited by its
int8 weights; a second phase (``weight_splitting.py``) then splits the weights of the weighted
operators in sensitivity order, the same way (fewest splits), still fully integer. Those operators
appear once more in ``promoted`` with precision ``int16+split-weights``, and their steps carry
``split_weights`` (how many are split).
The order (``promotion_order``): the sensitivity ranking, except that operators whose sensitivities
are within ``TIE_BAND_DB`` of the most sensitive one not yet placed count as equal, and among those
the cheaper is promoted first. What a promotion costs (``promotion_costs``, from the float model's
shapes) depends on the precision, as measured (docs/BENCHMARKS.md section 16): to float on the CPU
it is the bytes the weights add (int8 to float32; XNNPACK's float kernels are no slower than its
int8 ones here, so latency barely moves), to int16 it is the multiply-accumulates (the weights stay
int8, but int16x8 runs on LiteRT's reference kernels, whose time grows with the work).

With ``measure_latency`` (the cpu target without ``--no-latency``) every measured prefix model is
timed (median host latency, XNNPACK, 1 thread: ``prefix_search._median_latency``), so each step's latency change
is reported beside its size change.
"""

from __future__ import annotations

from ..promotion_steps import SINGLE_STEPS, AccuracyTarget, PromotedLayer, TargetCheck, evaluate_target
from .driver import SENSITIVITY_SAMPLES, int16_ready, run_sensitivity_and_mixed_precision
from .order import TIE_BAND_DB, PromotionCost, promotion_costs, promotion_order, promotion_overrides
from .report import (
    CALIBRATED_INPUTS_MARGIN_DB,
    CLASSIFICATION_SEARCH_MARGIN_DB,
    SELECTION_MARGIN_DB,
    DEFAULT_SEARCH,
    DEFAULT_SEARCH_MARGIN_DB,
    MIXED_PRECISION_MODES,
    MixedPrecisionReport,
    MixedPrecisionSearch,
    MixedPrecisionStep,
    check_mixed_precision_option,
    kept_int16_operators,
)
from .search import search_mixed_precision

__all__ = [
    "CALIBRATED_INPUTS_MARGIN_DB",
    "CLASSIFICATION_SEARCH_MARGIN_DB",
    "SELECTION_MARGIN_DB",
    "DEFAULT_SEARCH",
    "DEFAULT_SEARCH_MARGIN_DB",
    "MIXED_PRECISION_MODES",
    "SENSITIVITY_SAMPLES",
    "SINGLE_STEPS",
    "TIE_BAND_DB",
    "AccuracyTarget",
    "MixedPrecisionReport",
    "MixedPrecisionSearch",
    "MixedPrecisionStep",
    "PromotedLayer",
    "PromotionCost",
    "TargetCheck",
    "check_mixed_precision_option",
    "evaluate_target",
    "int16_ready",
    "kept_int16_operators",
    "promotion_costs",
    "promotion_order",
    "promotion_overrides",
    "run_sensitivity_and_mixed_precision",
    "search_mixed_precision",
]
