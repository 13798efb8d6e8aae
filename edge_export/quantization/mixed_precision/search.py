"""One search to an accuracy target: the int8 model checked, then the prefix search at int16 or
float (int16 first, then float, for auto on cpu), then at int16 the weight-splitting phase; what it
keeps and reports (findings.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from ..budget import INT16_FIRST_SHARE, TimeBudget
from ..operator_scopes import has_int16_recipe
from ..promotion_steps import AccuracyTarget, TargetCheck, best_of_missed
from ..promotion_steps import sqnr_key as _sqnr_key
from ..sensitivity import LayerSensitivity, RecipeQuantizer, ops_by_index
from .findings import promoted_layers, search_reason, search_steps
from .order import TIE_BAND_DB, describe_order, promotion_order
from .prefix_search import Prefixes, search_prefixes
from .report import MixedPrecisionReport, MixedPrecisionSearch
from .split_phase import SPLIT_UNTRIED, split_weights_phase

__all__ = ["search_mixed_precision"]


def search_mixed_precision(
    quantizer: RecipeQuantizer,
    ranking: Sequence[LayerSensitivity] | Callable[[], Sequence[LayerSensitivity]],
    heldout: Sequence[tuple[np.ndarray, ...]],
    heldout_refs: list[list[np.ndarray]],
    target: AccuracyTarget,
    *,
    mode: str,
    precision: str,
    measure_latency: bool = True,
    int8_io: bool = False,
    costs: Mapping[int, float] | None = None,
    tie_band_db: float = TIE_BAND_DB,
    budget: TimeBudget | None = None,
    int16_first: bool = False,
    int16_costs: Mapping[int, float] | None = None,
    int16_opcodes: frozenset[str] | None = None,
) -> MixedPrecisionSearch:
    """``ranking``: the sensitivity ranking, or a function that measures it, called only when the
    int8 model misses the target (at int16, after every operator at int16 is measured).
    ``int16_first`` (with ``precision`` "float": auto on cpu): the search at int16 runs first, within
    INT16_FIRST_SHARE of the budget (ordered by ``int16_costs``), and its fully integer model is kept
    when it meets the target; only otherwise are operators raised to float (``_int16_then_float``).
    ``int8_io``: the model's inputs and outputs stay int8 whatever is promoted next to them
    (``--io-dtype int8|uint8``, micro: an int16 boundary cannot be given an 8-bit type).
    ``costs`` (op_index -> cost, lower is cheaper) breaks near-equal sensitivities
    (``promotion_order``); without it the order is the ranking's. ``budget`` (budget.TimeBudget):
    every candidate is a step; once it is spent no new candidate is measured, the best one measured
    is kept and the reason says what was not tried. ``int16_opcodes``: the operators the target runs
    at int16 (TargetPlugin.int16_opcodes; None: any): the others stay int8 at int16."""
    budget = budget if budget is not None else TimeBudget(None)
    search = partial(
        _search_at, quantizer, ranking, heldout, heldout_refs, target, mode=mode, measure_latency=measure_latency,
        int8_io=int8_io, tie_band_db=tie_band_db, budget=budget, int16_opcodes=int16_opcodes,
    )
    if int16_first and precision == "float":
        return _int16_then_float(search, budget, int16_costs, costs)
    return search(precision=precision, costs=costs)


def _int16_then_float(search: Callable[..., MixedPrecisionSearch], budget: TimeBudget,
                      int16_costs: Mapping[int, float] | None, float_costs: Mapping[int, float] | None) -> MixedPrecisionSearch:
    """The search at int16 (int16 activations, int8 weights: integer, but for operators without an
    int16 recipe, such as the fused LSTM, which stay float), then, only when it
    misses the target, the one at float, which starts from its int8 model. A recurrent cell or an
    output part that int8 activations cannot hold usually needs 16 bits, not float (the Silero VAD:
    21 of 23 operators raised to float before; int16x8 is fully integer). Of two misses, the better
    SQNR is kept (int16 on a tie)."""
    with budget.share(INT16_FIRST_SHARE, "int16 activations before float"):
        first = search(precision="int16", costs=int16_costs)
    tried = _int16_summary(first.report)
    if first.report.met and not first.report.promoted:  # its own int8 model meets the target
        return first
    if first.report.met:
        report = replace(first.report, reason=f"int16 activations tried before float: {first.report.reason}")
        return replace(first, report=report)
    second = search(precision="float", costs=float_costs, int8=first.int8_bytes)
    report, spent = second.report, {
        "seconds": first.report.seconds + second.report.seconds,
        "latency_seconds": first.report.latency_seconds + second.report.latency_seconds,
    }
    if not report.met and first.model_bytes is not None and _better_or_equal(first.report.sqnr_db, report.sqnr_db):
        kept = replace(first.report, reason=f"{first.report.reason}; float promotions, tried next, did not do better ({report.reason})", **spent)
        return replace(first, report=kept)
    return replace(second, report=replace(report, reason=f"{report.reason}; {tried}", **spent))


def _better_or_equal(sqnr_db: float | None, other_db: float | None) -> bool:
    known = [math.nan if x is None else x for x in (sqnr_db, other_db)]
    return _sqnr_key(known[0]) >= _sqnr_key(known[1])


def _int16_summary(report: MixedPrecisionReport) -> str:
    """What the int16 try before float found, in one clause."""
    every = max((step for step in report.steps if not step.split_weights), key=lambda step: step.promoted, default=None)
    found = f"the best reached {report.sqnr_db:.1f} dB" if report.sqnr_db is not None else "nothing was measured"
    if every is not None and every.promoted:
        found = f"{every.promoted} operator(s) at int16 read {every.sqnr_db:.1f} dB, {found}"
    return f"int16 activations were tried first and missed the target: {found}"


def _search_at(
    quantizer: RecipeQuantizer,
    ranking: Sequence[LayerSensitivity] | Callable[[], Sequence[LayerSensitivity]],
    heldout: Sequence[tuple[np.ndarray, ...]],
    heldout_refs: list[list[np.ndarray]],
    target: AccuracyTarget,
    *,
    mode: str,
    precision: str,
    measure_latency: bool,
    int8_io: bool,
    costs: Mapping[int, float] | None,
    tie_band_db: float,
    budget: TimeBudget,
    int8: bytes | None = None,
    int16_opcodes: frozenset[str] | None = None,
) -> MixedPrecisionSearch:
    """One precision's search (search_mixed_precision); ``int8``: the int8 model, already made."""
    from ..operator_scopes import held_at_int8
    from ..weight_splitting import int8_boundary
    start = time.perf_counter()
    boundary = int8_boundary(quantizer.float_model) if int8_io and precision == "int16" else {}
    if precision == "int16":  # what the target cannot run at int16 stays int8 in every candidate
        boundary.update(held_at_int8(quantizer.float_model, int16_opcodes))
    by_index = ops_by_index(quantizer)
    prefixes = Prefixes(quantizer, by_index, [], precision, boundary, heldout, heldout_refs, target, measure_latency)
    prefixes.int16_opcodes = int16_opcodes
    int8_bytes = int8 if int8 is not None else quantizer.quantize("int8")
    check = prefixes.record(0, prefixes.check(int8_bytes), int8_bytes)
    if not check.met and precision == "int16":
        _measure_every_operator(prefixes, budget)
    ranked = (ranking() if callable(ranking) else ranking) if not check.met else ()
    candidates, no_int16 = _promotable(_with_unranked(ranked, by_index), by_index, precision, int16_opcodes)
    order = prefixes.order = promotion_order(candidates, costs, tie_band_db)
    known = {k: found for k, (found, _) in prefixes.measured.items()}
    met_at, out_of_time = (None, None) if check.met else search_prefixes(prefixes.measure, len(order), budget, precision, known)
    kept_count = _kept_prefix(check, met_at, prefixes.measured)
    split = None
    if precision == "int16" and not check.met and met_at is None and len(order) in prefixes.measured:
        split = split_weights_phase(quantizer, order, heldout, heldout_refs, target, prefixes.measured, kept_count, int8_io, budget, int16_opcodes)
        if split is not None:
            kept_count = len(order)  # the split candidates have every operator at int16
    kept_check, kept_bytes = prefixes.measured[kept_count] if split is None else split.measured[split.kept]
    split_latency = _split_chain_latency(prefixes, split)
    reason = search_reason(prefixes, kept_count, kept_check, split, costs) + no_int16
    if out_of_time:
        reason += f"; the time budget ({budget.seconds:g} s) ended the search: {out_of_time} not tried"
    if split is not None and split.out_of_time:
        reason += f"; the time budget ({budget.seconds:g} s) ended the weight splitting: {split.out_of_time} not tried"
    elif SPLIT_UNTRIED in budget.skipped and not kept_check.met:
        reason += f"; the time budget ({budget.seconds:g} s) ended the search before {SPLIT_UNTRIED}"
    report = MixedPrecisionReport(
        mode=mode, precision=precision, target=target, met=kept_check.met, reason=reason,
        int8_sqnr_db=check.sqnr_db, int8_cosine=check.cosine, sqnr_db=kept_check.sqnr_db, cosine=kept_check.cosine,
        promoted=promoted_layers(prefixes, kept_count, split, split_latency), steps=search_steps(prefixes, split, split_latency),
        int8_size_bytes=len(int8_bytes), size_bytes=len(kept_bytes),
        # the prefixes' own timings, so the promoted operators' latency deltas add up to the difference
        int8_latency_ms=prefixes.latency.get(0),
        latency_ms=split_latency.get(split.kept) if split is not None else prefixes.latency.get(kept_count) if kept_count else None,
        seconds=time.perf_counter() - start,
        order=describe_order(precision, tie_band_db) if costs else "sensitivity", latency_seconds=prefixes.timing,
    )
    # The search's own int8 model is kept when it meets the target: the model the export started
    # from missed it (that is why the search ran), and may differ (the zoo's BEiT: 29.6 dB from the
    # backend, 30.1 dB from the int16-ready float model the search quantizes).
    kept = kept_bytes if kept_count or kept_check.met else None
    return MixedPrecisionSearch(report, kept, int8_bytes, quantizer.headroom_of_model(kept) if kept is not None else ())


def _measure_every_operator(prefixes: Prefixes, budget: TimeBudget) -> None:
    """The model with every operator that has an int16 recipe at int16, measured before the ranking:
    it needs no order, and when the ranking spends the time budget it is still there to keep (the
    zoo's MiniLM: the ranking of 109 operators used the 300 s, and the search measured int8 alone)."""
    every, _ = _promotable(_with_unranked((), prefixes.by_index), prefixes.by_index, prefixes.precision, prefixes.int16_opcodes)
    if not every or not budget.allows(f"promoting more than 0 of {len(every)} operators"):
        return
    prefixes.order = every
    prefixes.measure(len(every))


def _with_unranked(ranking: Sequence[LayerSensitivity], by_index: Mapping[int, Any]) -> list[LayerSensitivity]:
    """The ranking's operators, then those it left out (the time budget ended it first) in graph
    order, unmeasured (SQNR NaN: promotion_order keeps each in place): every operator stays a
    candidate, so the last prefix is always the whole model."""
    ranked = [layer for layer in ranking if layer.op_index in by_index]
    seen = {layer.op_index for layer in ranked}
    rest = [op for index, op in sorted(by_index.items()) if index not in seen]
    return ranked + [
        LayerSensitivity(rank=len(ranked) + i + 1, op_index=op.index, opcode=op.opcode, tensor=op.tensor,
                         module_path=None, module_type=None, source=None, sqnr_db=math.nan)
        for i, op in enumerate(rest)
    ]


def _promotable(
    candidates: list[LayerSensitivity], by_index: Mapping[int, Any], precision: str, int16_opcodes: frozenset[str] | None = None
) -> tuple[list[LayerSensitivity], str]:
    """The candidates that can go to ``precision``, and clauses naming those that cannot (at int16,
    the operators ai-edge-quantizer has no int16x8 recipe for: the recipe leaves them int8, and
    between int16 neighbours ai-edge-quantizer runs them in float; and those the target has no int16
    kernel for, not in ``int16_opcodes``: kept int8; "" when none)."""
    if precision != "int16":
        return candidates, ""
    no_recipe: dict[str, int] = {}
    no_kernel: dict[str, int] = {}
    kept = []
    for layer in candidates:
        opcode = by_index[layer.op_index].opcode
        left = no_recipe if not has_int16_recipe(opcode) else no_kernel if int16_opcodes is not None and opcode not in int16_opcodes else None
        if left is None:
            kept.append(layer)
        else:
            left[opcode] = left.get(opcode, 0) + 1
    return kept, _named(no_recipe, "in ai-edge-quantizer", "int8, or float between int16 neighbours: see integer_check") + _named(
        no_kernel, "on the target", "kept int8"
    )


def _named(left: Mapping[str, int], where: str, then: str) -> str:
    if not left:
        return ""
    named = ", ".join(f"{opcode} x{count}" for opcode, count in left.items())
    return f"; {sum(left.values())} operator(s) have no int16 kernel {where}: {named} ({then})"


def _kept_prefix(int8_check: TargetCheck, met_at: int | None, measured: Mapping[int, tuple[TargetCheck, bytes]]) -> int:
    """How many operators the kept model promotes: none when int8 meets the target, else the
    smallest prefix that met it, else the best prefix measured (promotion_steps.best_of_missed)."""
    if int8_check.met:
        return 0
    if met_at is not None:
        return met_at
    return best_of_missed({k: check.sqnr_db for k, (check, _) in measured.items()})


def _split_chain_latency(prefixes: Prefixes, split: Any) -> dict[int, float | None]:
    """Host latency of the kept chain of split-weight candidates (only those: int16 models are slow
    to time on reference kernels); 0 is the model with every operator at int16."""
    if split is None or not prefixes.measure_latency:
        return {}
    latency: dict[int, float | None] = {0: prefixes.latency.get(len(prefixes.order))}
    for k in sorted(split.measured):
        if 0 < k <= split.kept:
            latency[k] = prefixes.timed(split.measured[k][1])
    return latency
