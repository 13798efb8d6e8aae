"""The child process of the sensitivity ranking and the search: calibration, the sensitivity
variants and the promotions, everything native, run once in isolation."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..budget import RANKING_SHARE, TimeBudget
from ..promotion_steps import AccuracyTarget, evaluate_target
from ..sensitivity import SENSITIVITY_METHOD, LayerSensitivity, RecipeQuantizer, SensitivityReport, measure_sensitivity, parity_outputs
from .order import promotion_costs
from .report import MixedPrecisionSearch
from .search import search_mixed_precision

__all__ = ["run_in_child", "untried"]


def run_in_child(
    float_bytes: bytes,
    calibration: Any,
    ranking_samples: Sequence[tuple[np.ndarray, ...]],
    ranking_refs: list[list[np.ndarray]],
    heldout: Sequence[tuple[np.ndarray, ...]],
    heldout_refs: list[list[np.ndarray]],
    *,
    module: Any,
    want_sensitivity: bool,
    search_mode: str | None,
    precision: str,
    target: AccuracyTarget,
    base_model_bytes: bytes | None,
    verbose: bool,
    int8_io: bool = False,
    measure_latency: bool = True,
    budget: TimeBudget,
    int16_first: bool = False,
    weight_rounding: bool = True,
    part_scales: bool = True,
    rounding: Any = None,
    int16_opcodes: frozenset[str] | None = None,
) -> tuple[SensitivityReport | None, MixedPrecisionSearch | None, list[str]]:
    """Everything native in one child process: calibration, the sensitivity variants, the search.
    Also returns what the time budget left untried (this process's copy of ``budget`` is not the
    caller's)."""
    search_needed = False
    if search_mode is not None and base_model_bytes is not None:
        # The model quantization kept first: nothing more runs when it already meets the target.
        search_needed = not evaluate_target(parity_outputs(base_model_bytes, heldout), heldout_refs, target).met
    if not want_sensitivity and not search_needed:
        return None, None, budget.skipped
    if not budget.allows(untried(want_sensitivity, search_mode if search_needed else None, needed=True)):
        return None, None, budget.skipped
    quantizer = RecipeQuantizer(float_bytes, calibration, verbose=verbose, weight_rounding=weight_rounding, part_scales=part_scales,
                                rounding=rounding)
    ranked: list[SensitivityReport] = []

    def ranking() -> Sequence[LayerSensitivity]:  # measured once, when first needed
        if not ranked:
            # before promotions, a share: operators it leaves unranked stay candidates, last
            with budget.share(RANKING_SHARE, "the sensitivity ranking") if search_needed else contextlib.nullcontext():
                ranked.append(measure_sensitivity(quantizer, ranking_samples, ranking_refs, method=SENSITIVITY_METHOD, module=module, budget=budget))
        return ranked[0].layers

    search = None
    if search_needed:
        found = promotion_costs(quantizer.float_model)
        search = search_mixed_precision(
            quantizer, ranking, heldout, heldout_refs, target, mode=search_mode, precision=precision,
            int8_io=int8_io, measure_latency=measure_latency, costs={i: c.for_precision(precision) for i, c in found.items()},
            budget=budget, int16_first=int16_first, int16_costs={i: c.for_precision("int16") for i, c in found.items()},
            int16_opcodes=int16_opcodes,
        )
    if want_sensitivity:
        ranking()
    return (ranked[0] if ranked else None), search, budget.skipped


def untried(want_sensitivity: bool, search_mode: str | None, *, needed: bool = False) -> str:
    """What is not tried when the budget is spent before the ranking and the search start
    (``needed``: the int8 model is known to miss the target)."""
    if not search_mode:
        return "the sensitivity ranking"
    search = "the mixed-precision search (its sensitivity ranking and promotions" + (")" if needed else ", were the int8 model to miss the target)")
    return search + (", and the --sensitivity report" if want_sensitivity else "")
