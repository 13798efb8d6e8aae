"""Mixed precision to an accuracy target: raise the precision of the most sensitive operators of an
int8 model, in sensitivity order (the cheaper first among operators of near-equal sensitivity),
until the output meets the target on held-out inputs.

    run_sensitivity_and_mixed_precision(...) -> (QuantizationResult, SensitivityReport | None,
                                                 MixedPrecisionReport | None)

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

The search: the plain int8 model is checked first; only when it misses the target does anything
else run. Then operators are promoted in sensitivity order, cumulatively: one at a time for the
first ``SINGLE_STEPS``, then in doubling groups (2, 4, 8, ...: a model that needs many promotions
costs a logarithmic number of candidates, not one per operator); when a group overshoots, the
smallest prefix that meets the target is found by bisection inside it. Every promoted operator gets
the SQNR of the measured prefixes before and after it. When the target is never met, the best model
found is kept and the report says why. Steps are listed in ``steps`` (``promoted`` = prefix length).
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
timed (median host latency, XNNPACK, 1 thread: ``_median_latency``), so each step's latency change
is reported beside its size change.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import pairwise
from typing import Any

import numpy as np

from .promotion_steps import SINGLE_STEPS, AccuracyTarget, PromotedLayer, TargetCheck, evaluate_target  # noqa: F401  (re-exported)
from .promotion_steps import sqnr_key as _sqnr_key
from .promotion_steps import step_sizes as _groups

from ..errors import QuantizationError, UsageError, first_line
from ..output.serialize import json_field
from .budget import INT16_FIRST_SHARE, RANKING_SHARE, TimeBudget
from .operator_scopes import has_int16_recipe, passthrough_ops
from .sensitivity import SENSITIVITY_METHOD, LayerSensitivity, RecipeQuantizer, SensitivityReport, measure_sensitivity, ops_by_index, parity_outputs

__all__ = [
    "MIXED_PRECISION_MODES",
    "SENSITIVITY_SAMPLES",
    "SINGLE_STEPS",
    "TIE_BAND_DB",
    "AccuracyTarget",
    "MixedPrecisionReport",
    "MixedPrecisionStep",
    "PromotedLayer",
    "PromotionCost",
    "check_mixed_precision_option",
    "evaluate_target",
    "kept_int16_operators",
    "promotion_costs",
    "promotion_order",
    "promotion_overrides",
    "int16_ready",
    "run_sensitivity_and_mixed_precision",
    "search_mixed_precision",
]

MIXED_PRECISION_MODES = ("auto", "int16", "off")
SENSITIVITY_SAMPLES = 8  # calibration samples the ranking is measured on
# Sensitivities closer than this count as equal (promotion_order): the ranking of 8 samples,
# re-measured on 8 others, moves an operator's SQNR by at most 0.82 dB on the benchmark CNNs
# (median gap between adjacent operators 0.54 dB; BENCHMARKS.md §16).
TIE_BAND_DB = 1.0
# Timing each measured prefix (_median_latency): at least LATENCY_MIN_RUNS timed runs, more up to
# LATENCY_MAX_RUNS while under LATENCY_BUDGET_S seconds of timed work, after one warm-up run.
LATENCY_MIN_RUNS, LATENCY_MAX_RUNS, LATENCY_BUDGET_S = 3, 10, 0.3


def check_mixed_precision_option(value: str | None) -> None:
    if value is not None and value not in MIXED_PRECISION_MODES:
        raise UsageError(
            f"--mixed-precision {value} is not known.", f"Use one of {', '.join(MIXED_PRECISION_MODES)}."
        )


@dataclass(frozen=True)
class MixedPrecisionStep:
    promoted: int  # the prefix of the ranking promoted in this candidate
    sqnr_db: float
    cosine: float
    size_bytes: int
    met: bool
    latency_ms: float | None = json_field(default=None, digits=3)  # median host latency, when measured
    split_weights: int = 0  # weighted operators whose int8 weights were split (int16 only; weight_splitting.py)


@dataclass(frozen=True)
class MixedPrecisionReport:
    mode: str  # the --mixed-precision mode in force ("auto" | "int16")
    precision: str  # what operators were promoted to: "int16" | "float"
    target: AccuracyTarget
    met: bool
    reason: str
    int8_sqnr_db: float | None  # the plain int8 model (the one kept when none is needed)
    int8_cosine: float | None
    sqnr_db: float | None  # the model kept
    cosine: float | None
    promoted: tuple[PromotedLayer, ...] = ()
    steps: tuple[MixedPrecisionStep, ...] = ()
    int8_size_bytes: int | None = None
    size_bytes: int | None = None
    # median host latency (LiteRT CPU + XNNPACK, 1 thread) of the plain int8 model and the one kept
    int8_latency_ms: float | None = json_field(default=None, digits=3)
    latency_ms: float | None = json_field(default=None, digits=3)
    fully_integer: bool | None = None
    backend: str = "flatbuffer"
    seconds: float = json_field(default=0.0, digits=3)
    # the promotion order: "sensitivity" or "sensitivity, cheapest first within <band> dB (<cost>)"
    order: str = "sensitivity"
    latency_seconds: float = json_field(default=0.0, digits=3)  # of ``seconds``, spent timing prefixes


@dataclass(frozen=True)
class MixedPrecisionSearch:
    """What the isolated search hands back: the report and the model bytes kept (None: the model
    the export started from)."""

    report: MixedPrecisionReport
    model_bytes: bytes | None
    int8_bytes: bytes | None


@dataclass(frozen=True)
class PromotionCost:
    """What raising one operator above int8 is expected to cost, from the float model's shapes."""

    op_index: int
    float_bytes: int  # bytes its constants gain at float32 over int8 (weights 1 -> 4 bytes, biases stay 4)
    int16_bytes: int  # at int16x8 (weights stay int8, int32 biases become int64)
    macs: int  # multiply-accumulates per inference (elements touched, for an operator without weights)

    def for_precision(self, precision: str) -> int:
        """The cost that decides the order at ``precision`` (see the module docstring)."""
        return self.float_bytes if precision == "float" else self.macs


def _elements(shape: Sequence[int]) -> int:
    return math.prod(max(int(d), 1) for d in shape)  # a dynamic dimension (-1) counts as 1


def promotion_costs(model: Any, op_indices: Sequence[int] | None = None) -> dict[int, PromotionCost]:
    """The ``PromotionCost`` of each operator (all of the main subgraph's, or ``op_indices``) of the
    float model ``model`` (a FlatbufferModel)."""
    wanted = None if op_indices is None else set(op_indices)
    costs = {}
    for op in model.operators:
        if wanted is not None and op.index not in wanted:
            continue
        constants = [model.tensors[t] for t in op.inputs if t >= 0 and model.tensors[t].is_constant and model.tensors[t].is_float]
        weights = [t for t in constants if len(t.shape) >= 2]
        biases = [t for t in constants if len(t.shape) < 2]
        outputs = [model.tensors[t] for t in op.outputs if t >= 0]
        out = max((_elements(t.shape) for t in outputs), default=0)
        if weights:  # conv, depthwise, fully connected: each output element reads weights / out_channels
            w = weights[0]
            channels = max(int(outputs[0].shape[-1]), 1) if outputs and outputs[0].shape else 1
            macs = out * max(_elements(w.shape) // channels, 1)
        elif op.opcode == "BATCH_MATMUL" and op.inputs and model.tensors[op.inputs[0]].shape:  # K from the first operand
            macs = out * max(int(model.tensors[op.inputs[0]].shape[-1]), 1)
        else:
            inputs = [model.tensors[t] for t in op.inputs if t >= 0]
            macs = max([out, *(_elements(t.shape) for t in inputs)])
        costs[op.index] = PromotionCost(
            op.index,
            float_bytes=3 * sum(_elements(t.shape) for t in weights),
            int16_bytes=4 * sum(_elements(t.shape) for t in biases),
            macs=int(macs),
        )
    return costs


def _cost_key(cost: float | None) -> float:
    """A cost as a sort key: unknown or NaN sorts last, like a missing one."""
    return math.inf if cost is None or math.isnan(cost) else cost


def _near(a: float, b: float, band_db: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= band_db


def promotion_order(
    ranking: Sequence[LayerSensitivity], costs: Mapping[int, float] | None, band_db: float = TIE_BAND_DB
) -> list[LayerSensitivity]:
    """The ranking's order, with near-equal sensitivities broken by cost: the operators whose SQNR is
    within ``band_db`` of the most sensitive operator not yet placed form a band, promoted cheapest
    first (ties by rank); then the next band starts at the next operator. Bands are anchored on
    their first operator, not chained, so a ranking whose SQNRs rise in small steps is not merged
    into one band ordered by cost alone. ``costs`` maps op_index to a number (lower is cheaper);
    without it, or for an operator it lacks (or whose cost is NaN), the ranking's order stands.

    A NaN sensitivity is not a measurement (sensitivity.measure_sensitivity): such an operator is a
    band of its own, at its place in the ranking, and never joins or anchors another. Every pass
    places at least the first operator left, so the loop ends after at most ``len(ranking)`` passes."""
    if not costs:
        return list(ranking)
    rest = list(ranking)
    order: list[LayerSensitivity] = []
    while rest:
        anchor = rest[0]
        band = [anchor]
        if not math.isnan(anchor.sqnr_db):
            band += [layer for layer in rest[1:] if not math.isnan(layer.sqnr_db) and _near(layer.sqnr_db, anchor.sqnr_db, band_db)]
        band.sort(key=lambda layer: (_cost_key(costs.get(layer.op_index)), layer.rank))
        order += band
        placed = {layer.op_index for layer in band}
        rest = [layer for layer in rest if layer.op_index not in placed]
    return order


def _describe_order(precision: str, band_db: float = TIE_BAND_DB) -> str:
    cost = "bytes added" if precision == "float" else "multiply-accumulates"
    return f"sensitivity, cheapest first within {band_db:g} dB ({cost})"


def promotion_overrides(quantizer: RecipeQuantizer, ops: Sequence[Any], precision: str) -> dict[Any, str]:
    """The recipe overrides that raise ``ops`` to ``precision``, with the layout operators (and the
    model's inputs and outputs) that only connect promoted operators (sensitivity.passthrough_ops)."""
    overrides = {op: precision for op in ops}
    overrides.update({op: precision for op in passthrough_ops(quantizer.float_model, {op.index for op in ops})})
    return overrides


def _median_latency(
    model_bytes: bytes, *, min_runs: int = LATENCY_MIN_RUNS, max_runs: int = LATENCY_MAX_RUNS, budget_s: float = LATENCY_BUDGET_S
) -> float | None:
    """Median host latency (LiteRT + XNNPACK, 1 thread) after one warm-up run: at least
    ``min_runs`` timed runs, then more up to ``max_runs`` while under ``budget_s`` of timed work
    (a slow int16x8 model gets ``min_runs``, a fast one ``max_runs``)."""
    from ..flatbuffer import read_flatbuffer
    from ..runtime.latency import random_inputs
    from ..runtime.interpreter import Resolver, TFLiteRunner

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


def _search_prefixes(measure: Callable[[int], TargetCheck], count: int, budget: TimeBudget, precision: str,
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


class _Prefixes:
    """The candidates of one search: the model with the first k operators of ``order`` promoted,
    measured once each (prefix length -> (check, bytes)), timed on the host when asked."""

    def __init__(self, quantizer: RecipeQuantizer, by_index: Mapping[int, Any], order: Sequence[LayerSensitivity], precision: str,
                 boundary: Mapping[Any, str], heldout: Sequence[tuple[np.ndarray, ...]], heldout_refs: list[list[np.ndarray]], target: AccuracyTarget,
                 measure_latency: bool) -> None:
        self.quantizer, self.order, self.precision, self.boundary = quantizer, order, precision, boundary
        self.heldout, self.heldout_refs, self.target, self.measure_latency = heldout, heldout_refs, target, measure_latency
        self.by_index = by_index
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
        overrides = promotion_overrides(self.quantizer, [self.by_index[layer.op_index] for layer in self.order[:k]], self.precision)
        overrides.update(self.boundary)
        self.carried[k] = sum(1 for raised in overrides.values() if raised == self.precision) - k
        candidate = self.quantizer.quantize("int8", overrides)
        return self.record(k, self.check(candidate), candidate)


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
    is kept and the reason says what was not tried."""
    budget = budget if budget is not None else TimeBudget(None)
    search = partial(
        _search_at, quantizer, ranking, heldout, heldout_refs, target, mode=mode, measure_latency=measure_latency,
        int8_io=int8_io, tie_band_db=tie_band_db, budget=budget,
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
) -> MixedPrecisionSearch:
    """One precision's search (search_mixed_precision); ``int8``: the int8 model, already made."""
    from .weight_splitting import int8_boundary
    start = time.perf_counter()
    boundary = int8_boundary(quantizer.float_model) if int8_io and precision == "int16" else {}
    by_index = ops_by_index(quantizer)
    prefixes = _Prefixes(quantizer, by_index, [], precision, boundary, heldout, heldout_refs, target, measure_latency)
    int8_bytes = int8 if int8 is not None else quantizer.quantize("int8")
    check = prefixes.record(0, prefixes.check(int8_bytes), int8_bytes)
    if not check.met and precision == "int16":
        _measure_every_operator(prefixes, budget)
    ranked = (ranking() if callable(ranking) else ranking) if not check.met else ()
    candidates, no_int16 = _promotable(_with_unranked(ranked, by_index), by_index, precision)
    order = prefixes.order = promotion_order(candidates, costs, tie_band_db)
    known = {k: found for k, (found, _) in prefixes.measured.items()}
    met_at, out_of_time = (None, None) if check.met else _search_prefixes(prefixes.measure, len(order), budget, precision, known)
    kept_count = _kept_prefix(check, met_at, prefixes.measured)
    split = None
    if precision == "int16" and not check.met and met_at is None and len(order) in prefixes.measured:
        split = _split_weights_phase(quantizer, order, heldout, heldout_refs, target, prefixes.measured, kept_count, boundary, budget)
        if split is not None:
            kept_count = len(order)  # the split candidates have every operator at int16
    kept_check, kept_bytes = prefixes.measured[kept_count] if split is None else split.measured[split.kept]
    split_latency = _split_chain_latency(prefixes, split)
    reason = _search_reason(prefixes, kept_count, kept_check, split, costs) + no_int16
    if out_of_time:
        reason += f"; the time budget ({budget.seconds:g} s) ended the search: {out_of_time} not tried"
    if split is not None and split.out_of_time:
        reason += f"; the time budget ({budget.seconds:g} s) ended the weight splitting: {split.out_of_time} not tried"
    elif _SPLIT_UNTRIED in budget.skipped and not kept_check.met:
        reason += f"; the time budget ({budget.seconds:g} s) ended the search before {_SPLIT_UNTRIED}"
    report = MixedPrecisionReport(
        mode=mode, precision=precision, target=target, met=kept_check.met, reason=reason,
        int8_sqnr_db=check.sqnr_db, int8_cosine=check.cosine, sqnr_db=kept_check.sqnr_db, cosine=kept_check.cosine,
        promoted=_promoted_layers(prefixes, kept_count, split, split_latency), steps=_steps(prefixes, split, split_latency),
        int8_size_bytes=len(int8_bytes), size_bytes=len(kept_bytes),
        # the prefixes' own timings, so the promoted operators' latency deltas add up to the difference
        int8_latency_ms=prefixes.latency.get(0),
        latency_ms=split_latency.get(split.kept) if split is not None else prefixes.latency.get(kept_count) if kept_count else None,
        seconds=time.perf_counter() - start,
        order=_describe_order(precision, tie_band_db) if costs else "sensitivity", latency_seconds=prefixes.timing,
    )
    # The search's own int8 model is kept when it meets the target: the model the export started
    # from missed it (that is why the search ran), and may differ (the zoo's BEiT: 29.6 dB from the
    # backend, 30.1 dB from the int16-ready float model the search quantizes).
    return MixedPrecisionSearch(report, kept_bytes if kept_count or kept_check.met else None, int8_bytes)


def _measure_every_operator(prefixes: _Prefixes, budget: TimeBudget) -> None:
    """The model with every operator that has an int16 recipe at int16, measured before the ranking:
    it needs no order, and when the ranking spends the time budget it is still there to keep (the
    zoo's MiniLM: the ranking of 109 operators used the 300 s, and the search measured int8 alone)."""
    every, _ = _promotable(_with_unranked((), prefixes.by_index), prefixes.by_index, prefixes.precision)
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


def _promotable(candidates: list[LayerSensitivity], by_index: Mapping[int, Any], precision: str) -> tuple[list[LayerSensitivity], str]:
    """The candidates that can go to ``precision``, and a clause naming those that cannot (at int16,
    the operators ai-edge-quantizer has no int16x8 recipe for: the recipe leaves them int8, and
    between int16 neighbours ai-edge-quantizer runs them in float; "" when none)."""
    if precision != "int16":
        return candidates, ""
    kept = [layer for layer in candidates if has_int16_recipe(by_index[layer.op_index].opcode)]
    left: dict[str, int] = {}
    for layer in candidates:
        if layer not in kept:
            opcode = by_index[layer.op_index].opcode
            left[opcode] = left.get(opcode, 0) + 1
    if not left:
        return kept, ""
    named = ", ".join(f"{opcode} x{count}" for opcode, count in left.items())
    return kept, (
        f"; {sum(left.values())} operator(s) have no int16 kernel in ai-edge-quantizer: {named}"
        " (int8, or float between int16 neighbours: see integer_check)"
    )


def _kept_prefix(int8_check: TargetCheck, met_at: int | None, measured: Mapping[int, tuple[TargetCheck, bytes]]) -> int:
    """How many operators the kept model promotes: none when int8 meets the target, else the
    smallest prefix that met it, else the best prefix measured (the fewer on a tie)."""
    if int8_check.met:
        return 0
    if met_at is not None:
        return met_at
    return max(measured, key=lambda k: (_sqnr_key(measured[k][0].sqnr_db), -k))


def _split_chain_latency(prefixes: _Prefixes, split: Any) -> dict[int, float | None]:
    """Host latency of the kept chain of split-weight candidates (only those: int16 models are slow
    to time on reference kernels); 0 is the model with every operator at int16."""
    if split is None or not prefixes.measure_latency:
        return {}
    latency: dict[int, float | None] = {0: prefixes.latency.get(len(prefixes.order))}
    for k in sorted(split.measured):
        if 0 < k <= split.kept:
            latency[k] = prefixes.timed(split.measured[k][1])
    return latency


def _steps(prefixes: _Prefixes, split: Any, split_latency: Mapping[int, float | None]) -> tuple[MixedPrecisionStep, ...]:
    measured, latency = prefixes.measured, prefixes.latency
    steps = tuple(
        MixedPrecisionStep(k, measured[k][0].sqnr_db, measured[k][0].cosine, len(measured[k][1]), measured[k][0].met, latency.get(k))
        for k in sorted(measured)
    )
    return steps + (_split_steps(split, len(prefixes.order), split_latency) if split is not None else ())


def _promoted_layers(prefixes: _Prefixes, kept_count: int, split: Any, split_latency: Mapping[int, float | None]) -> tuple[PromotedLayer, ...]:
    """Every promoted operator with the measured prefixes around it: (k_{i-1}, k_i] is step i."""
    measured, latency = prefixes.measured, prefixes.latency
    chain = [k for k in sorted(measured) if k <= kept_count]
    promoted: list[PromotedLayer] = []
    for step, (low, high) in enumerate(pairwise(chain), start=1):
        before, after = measured[low], measured[high]
        latency_change = None if latency.get(low) is None or latency.get(high) is None else round(latency[high] - latency[low], 3)
        for layer in prefixes.order[low:high]:
            promoted.append(
                PromotedLayer(
                    layer.op_index, layer.opcode, layer.tensor, layer.module_path, layer.module_type, layer.source,
                    prefixes.precision, layer.rank, step, before[0].sqnr_db, after[0].sqnr_db, len(after[1]) - len(before[1]),
                    latency_change,
                )
            )
    if split is not None:
        promoted += _split_rows(split, len(chain), split_latency)
    return tuple(promoted)


def _search_reason(
    prefixes: _Prefixes, kept_count: int, kept_check: TargetCheck, split: Any, costs: Mapping[int, float] | None,
) -> str:
    """What the search kept and why (before the time budget's part)."""
    count, precision, target, samples = len(prefixes.order), prefixes.precision, prefixes.target, len(prefixes.heldout)
    along = f" (and {prefixes.carried[kept_count]} layout or input/output operator(s) between them)" if prefixes.carried.get(kept_count) else ""
    if split is not None:
        return _split_reason(split, count, along, prefixes.measured[count][0], kept_check, target, samples, prefixes.measured[0][0])
    if kept_check.met and kept_count == 0:
        return f"the int8 model meets the target ({target.describe()}) on {samples} held-out inputs: nothing promoted"
    if kept_check.met and kept_count == count:
        return f"promoted all {count} operators{along} to {precision}: {target.describe()} met on {samples} held-out inputs"
    if kept_check.met:
        return (
            f"promoted {kept_count} of {count} operators{along} to {precision} in sensitivity order"
            f"{', the cheaper first among near-equal ones' if costs else ''}: "
            f"{target.describe()} met on {samples} held-out inputs"
        )
    kept = f"kept the best model found ({kept_count} promoted, {kept_check.sqnr_db:.1f} dB)"
    if count not in prefixes.measured:  # the time budget ended the search first: claim nothing of all
        largest = max(prefixes.measured)
        return (
            f"the target ({target.describe()}) was not met by the {len(prefixes.measured)} model(s) measured, "
            f"the largest with {largest} of {count} candidate operators at {precision}; {kept}"
        )
    reason = (
        f"the target ({target.describe()}) was not met even with all {count} candidate operators "
        f"at {precision} ({'; '.join(kept_check.failed)}); {kept}"
    )
    if precision == "int16":
        limit = _ranges_limit(prefixes.measured[0][0], kept_check)
        reason += limit or "; int16 activations still leave int8 weights: --mixed-precision auto may promote to float where the target allows it"
    return reason


# ---- the second, integer-only phase: split weights (weight_splitting.py) ---------------------------


def kept_int16_operators(quant: Any, report: MixedPrecisionReport | None) -> bool:
    """Whether ``quant`` (the QuantizationResult an export keeps) is the mixed model with operators
    at int16 (int16x8 kernels), rather than the plain int8 model the search fell back to."""
    return report is not None and report.precision == "int16" and bool(report.promoted) and quant.recipe == _recipe(report)


def _recipe(report: MixedPrecisionReport) -> str:
    raised = len({p.op_index for p in report.promoted})
    if not raised:
        return "static_wi8_ai8"
    split = sum(1 for p in report.promoted if p.precision != report.precision)
    return f"static_wi8_ai8 + {raised} operator(s) at {report.precision}" + (f", {split} with split int8 weights" if split else "")


_SPLIT_UNTRIED = "splitting int8 weights (the integer phase after every operator at int16)"


def _split_weights_phase(quantizer, order, heldout, heldout_refs, target, measured, best_int16, boundary, budget):
    """Run weight splitting from the model with every operator at int16; its result when it beats
    the best int16 model (meets the target, or a higher SQNR), else None."""
    from .weight_splitting import search_split_weights

    if not budget.allows(_SPLIT_UNTRIED):
        return None
    split = search_split_weights(quantizer, order, heldout, heldout_refs, target, measured[len(order)], int8_io=bool(boundary), budget=budget)
    best = split.measured[split.kept][0]
    if split.kept and (best.met or _sqnr_key(best.sqnr_db) > _sqnr_key(measured[best_int16][0].sqnr_db)):
        return split
    return None


def _split_steps(split, promoted: int, latency: Mapping[int, float | None]) -> tuple[MixedPrecisionStep, ...]:
    return tuple(
        MixedPrecisionStep(promoted, check.sqnr_db, check.cosine, len(model), check.met, latency.get(k), split_weights=k)
        for k, (check, model) in sorted(split.measured.items()) if k
    )


def _split_rows(split, first_step: int, latency: Mapping[int, float | None]) -> list[PromotedLayer]:
    from .weight_splitting import split_rows

    return split_rows(split, first_step, latency)


def _split_reason(split, count: int, along: str, int16_check: TargetCheck, kept: TargetCheck, target: AccuracyTarget, samples: int,
                  int8_check: TargetCheck) -> str:
    done = (
        f"promoted all {count} operators{along} to int16 ({int16_check.sqnr_db:.1f} dB: int8 weights limit it), "
        f"then split the int8 weights of {split.kept} of {len(split.order)} weighted operators in sensitivity order "
        "(W = W_hi + W_lo: two int8-weight operators and an ADD each, so the model stays fully integer)"
    )
    if kept.met:
        return f"{done}: {target.describe()} met on {samples} held-out inputs"
    return (
        f"the target ({target.describe()}) was not met even with all {count} operators at int16 and weights split "
        f"({'; '.join(kept.failed)}); kept the best model found: {done}, {kept.sqnr_db:.1f} dB" + _ranges_limit(int8_check, kept)
    )


# Less than this gained by int16 activations and split weights together: precision is not the limit.
_NO_GAIN_DB = 1.0


def _ranges_limit(int8_check: TargetCheck, kept: TargetCheck) -> str:
    """When neither int16 activations nor split weights moved the SQNR, what does limit it: values
    outside the calibrated ranges are clipped at any precision (the zoo's ViT: 6.5 dB at int8, 7.0
    with everything at int16 and weights split, 45 dB with float promotions)."""
    gain = kept.sqnr_db - int8_check.sqnr_db
    if not math.isfinite(gain) or gain >= _NO_GAIN_DB:
        return ""
    return (
        f"; raising precision gained {gain:.1f} dB over int8, so precision does not limit it: "
        "the calibrated activation ranges do (held-out values beyond them are clipped at any precision). "
        "Calibrate on inputs like the held-out ones (--calibration-data), or use --mixed-precision auto "
        "(float operators have no ranges)"
    )


def _child_run(
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
    if not budget.allows(_untried(want_sensitivity, search_mode if search_needed else None, needed=True)):
        return None, None, budget.skipped
    quantizer = RecipeQuantizer(float_bytes, calibration, verbose=verbose)
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
        )
    if want_sensitivity:
        ranking()
    return (ranked[0] if ranked else None), search, budget.skipped


def _untried(want_sensitivity: bool, search_mode: str | None, *, needed: bool = False) -> str:
    """What is not tried when the budget is spent before the ranking and the search start
    (``needed``: the int8 model is known to miss the target)."""
    if not search_mode:
        return "the sensitivity ranking"
    search = "the mixed-precision search (its sensitivity ranking and promotions" + (")" if needed else ", were the int8 model to miss the target)")
    return search + (", and the --sensitivity report" if want_sensitivity else "")


def int16_ready(float_bytes: bytes) -> bytes:
    """The float model with the operators ai-edge-quantizer cannot raise to int16 written as ones it
    can (SQUARED_DIFFERENCE as SUB and MUL, the same float values): what an int16 search starts from."""
    from ..passes.flatbuffer import run_flatbuffer_passes, split_squared_difference_pass

    return run_flatbuffer_passes(float_bytes, [split_squared_difference_pass], origin="the float model for int16").model.data


def _finished_mixed_model(model_bytes: bytes, io_dtype: Any) -> Any:
    """The search's model with what every quantized candidate gets (integer embedding tables, shared
    quantization vectors), then the export's I/O type."""
    from ..passes.flatbuffer import quantize_embedding_tables_pass, run_flatbuffer_passes, set_io_dtype_pass, share_quantization_vectors_pass

    origin = "the mixed-precision model"
    shared = run_flatbuffer_passes(model_bytes, [quantize_embedding_tables_pass, share_quantization_vectors_pass], origin=origin).model
    return run_flatbuffer_passes(shared, [partial(set_io_dtype_pass, io_dtype=io_dtype)], origin=origin).model


def _not_integer_warning(report: MixedPrecisionReport, check: Any) -> str:
    """Why the mixed model is not fully integer: its float promotions, or (at int16, whose
    operators are integer) the operators computing in float that integer_check names."""
    if report.precision == "float":
        return f"Mixed precision left {len(report.promoted)} operator(s) in float: the model is not fully integer."
    opcodes = ", ".join(dict.fromkeys(op.opcode for op in check.float_operators)) or "none; float tensors only"
    return (
        f"Mixed precision raised {len({p.op_index for p in report.promoted})} operator(s) to int16, but the model is not fully "
        f"integer: operators computing in float: {opcodes} (see integer_check)."
    )


def run_sensitivity_and_mixed_precision(
    base: Any,
    *,
    float_bytes: bytes,
    export_module: Any,
    calibration: Any,
    heldout: Sequence[tuple[np.ndarray, ...]],
    want_sensitivity: bool,
    search_mode: str | None,
    precision: str,
    target: AccuracyTarget,
    io_dtype: Any,
    source_module: Any = None,
    verbose: bool = False,
    measure_latency: bool = True,
    budget: TimeBudget | None = None,
    int16_first: bool = False,
) -> tuple[Any, SensitivityReport | None, MixedPrecisionReport | None]:
    """The sensitivity ranking (``want_sensitivity``) and, when ``search_mode`` is set and the
    quantized model ``base`` (a QuantizationResult) misses ``target`` on ``heldout``, the search
    (``measure_latency``: time every measured prefix on this CPU), within ``budget`` (what it left
    untried is added to it; its progress reaches ``budget.on_progress``); ``int16_first``: at float,
    int16 activations are tried first (search_mixed_precision). Returns the QuantizationResult to
    keep (``base`` unless a mixed model replaced it)."""
    budget = budget if budget is not None else TimeBudget(None)
    from ..config import IODtype
    from ..processes.isolation import run_isolated
    from .io_types import describe_io
    from .selection import check_integer, reference_outputs

    if not budget.allows(_untried(want_sensitivity, search_mode)):
        return base, None, None  # spent before anything here started: not even the references
    int16_first = int16_first and precision == "float"
    float_bytes = int16_ready(float_bytes) if search_mode is not None and (precision == "int16" or int16_first) else float_bytes
    ranking_samples = list(calibration.samples[:SENSITIVITY_SAMPLES])
    ranking_refs = reference_outputs(export_module, ranking_samples)
    heldout_refs = reference_outputs(export_module, heldout) if heldout else []
    sensitivity, search, skipped = run_isolated(
        _child_run, float_bytes, calibration, ranking_samples, ranking_refs, list(heldout), heldout_refs,
        module=source_module, want_sensitivity=want_sensitivity, search_mode=search_mode, precision=precision,
        target=target, base_model_bytes=base.model.data if search_mode is not None and base is not None else None, verbose=verbose,
        int8_io=io_dtype in (IODtype.INT8, IODtype.UINT8),
        measure_latency=measure_latency, budget=budget, int16_first=int16_first, progress=budget.on_progress,
        stage="sensitivity and mixed precision", backend="ai-edge-quantizer (flatbuffer backend)",
        hint="Run with --mixed-precision off (and without --sensitivity) to export the plain int8 model.",
        preload=("ai_edge_quantizer", "ai_edge_quantizer.calibrator"),
    )
    budget.extend(skipped)
    if search is None:
        return base, sensitivity, None
    report = search.report
    if search.model_bytes is None:
        return base, sensitivity, report
    try:
        final = _finished_mixed_model(search.model_bytes, io_dtype)
    except Exception as exc:  # a pass that cannot apply to the mixed model: keep the int8 one, say why
        return base, sensitivity, replace(report, reason=report.reason + f"; not kept: {first_line(exc)}", met=False)
    check = check_integer(final, export_module)
    report = replace(report, fully_integer=check.fully_integer)
    if not check.fully_integer and report.precision == "float":
        report = replace(report, reason=report.reason + "; the promoted operators run in float, so the model is not fully integer")
    warnings = tuple(w for w in base.warnings if "not fully integer" not in w)
    if not check.fully_integer:
        warnings += (_not_integer_warning(report, check),)
    quant = replace(
        base, model=final, backend="flatbuffer",
        recipe=_recipe(report),
        reason=base.reason + f"; mixed precision: {report.reason}",
        fully_integer=check.fully_integer, integer_check=check, io=describe_io(final),
        sqnr_db=None, cosine=None, warnings=warnings,
    )
    if quant.size_bytes <= 0:
        raise QuantizationError("The mixed-precision model is empty.")
    return quant, sensitivity, report
