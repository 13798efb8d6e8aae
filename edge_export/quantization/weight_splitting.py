"""The second phase of an integer mixed-precision search: split int8 weights in two.

    search_split_weights(quantizer, ranking, heldout, heldout_refs, target, baseline) -> SplitSearch

int16 activations (the first phase, mixed_precision.search_mixed_precision) leave int8 weights; on
the random-weight MobileNetV2s of the benchmark the weights alone cap the output near 18 dB. When
every operator is at int16 and the target is still missed, this phase splits the filters of the
weighted operators (``passes/flatbuffer/split_weights_pass.py``: ``W = W_hi + W_lo``, two int8-weight
operators and an ADD, still fully integer) in sensitivity order, with the first phase's pattern (one
at a time for the first ``SINGLE_STEPS``, then doubling groups, bisection inside the group that
overshoots): the fewest splits that meet the target.

Ranges are calibrated once, on the float model with every candidate split; each candidate reuses
them (``RecipeQuantizer.with_ranges``). A partially split model has a subset of those tensors with the
same values: an operator's original output tensor (now the ADD's) holds what it held before, and
the two halves' outputs exist only where that operator is split and are computed the same way
whatever else is split (tests/quantization/test_quantization_split_weights.py compares them with a
fresh calibration). Every candidate quantizes all operators to int16 activations (int16x8).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import Any

import numpy as np

from .sensitivity import LayerSensitivity, QuantizableOp, RecipeQuantizer, parity_outputs

__all__ = ["SPLIT_PRECISION", "SplitSearch", "int8_boundary", "search_split_weights", "split_float_model", "split_rows", "splittable_layers"]

SPLIT_PRECISION = "int16+split-weights"  # PromotedLayer.precision of an operator whose weights were split


@dataclass(frozen=True)
class SplitSearch:
    """The candidates measured (number of operators split -> (TargetCheck, model bytes)), the
    weighted operators in the order they are split, and the count kept."""

    order: tuple[LayerSensitivity, ...]
    measured: dict[int, tuple[Any, bytes]]
    kept: int
    seconds: float
    calibration_seconds: float
    out_of_time: str | None = None  # what the time budget left untried (None: it did not stop the search)

    @property
    def met(self) -> bool:
        return self.measured[self.kept][0].met


def splittable_layers(float_bytes: bytes, ranking: Sequence[LayerSensitivity]) -> tuple[LayerSensitivity, ...]:
    """The ranked operators whose filters the pass can split, in ranking order."""
    from ..flatbuffer import read_model
    from ..passes.flatbuffer.split_weights_pass import splittable_operators

    can = set(splittable_operators(read_model(float_bytes)))
    return tuple(layer for layer in ranking if layer.op_index in can)


def split_float_model(float_bytes: bytes, op_indices: Sequence[int]) -> bytes:
    """The float model with the filters of ``op_indices`` (operator indices of ``float_bytes``) split."""
    from ..passes.flatbuffer import run_flatbuffer_passes, split_weights_pass

    if not op_indices:
        return bytes(float_bytes)
    return run_flatbuffer_passes(
        float_bytes, [partial(split_weights_pass, operators=list(op_indices))], origin="the split-weight float model"
    ).model.data


def fewest_prefix(meets, count: int, groups: Sequence[int]) -> int | None:
    """The smallest prefix length in 1..count for which ``meets(k)`` holds, measured in ``groups``
    (sizes summing to ``count``) and bisected inside the group that first meets; None if none does."""
    done = 0
    for size in groups:
        previous, done = done, done + size
        if meets(done):
            low, high = previous, done
            while high - low > 1:
                mid = (low + high) // 2
                if meets(mid):
                    high = mid
                else:
                    low = mid
            return high
    return None


def search_split_weights(
    quantizer: RecipeQuantizer,
    ranking: Sequence[LayerSensitivity],
    heldout: Sequence[tuple[np.ndarray, ...]],
    heldout_refs: list[list[np.ndarray]],
    target: Any,
    baseline: tuple[Any, bytes],
    *,
    int8_io: bool = False,
    budget: Any = None,
    int16_opcodes: frozenset[str] | None = None,
) -> SplitSearch:
    """Split weights in ``ranking`` order until ``target`` is met; ``baseline`` is the measured
    model with every operator at int16 and nothing split (count 0). ``int8_io``: the model's
    inputs and outputs stay int8 (ai-edge-quantizer requantizes to int16 behind them). ``budget``
    (budget.TimeBudget): each candidate is a step; once it is spent the best candidate measured is
    kept and ``out_of_time`` says what was not tried. ``int16_opcodes``: the operators the target runs
    at int16 (None: any); the others stay int8 (operator_scopes.held_at_int8)."""
    from .budget import TimeBudget
    from .operator_scopes import held_at_int8
    from .promotion_steps import best_of_missed, evaluate_target
    from .promotion_steps import step_sizes as _groups

    budget = budget if budget is not None else TimeBudget(None)

    start = time.perf_counter()
    order = splittable_layers(quantizer.float_bytes, ranking)
    measured: dict[int, tuple[Any, bytes]] = {0: baseline}
    if not order:
        return SplitSearch(order, measured, 0, time.perf_counter() - start, 0.0)
    calibrated = time.perf_counter()
    all_split = RecipeQuantizer(
        split_float_model(quantizer.float_bytes, [layer.op_index for layer in order]), quantizer.calibration,
        observer=quantizer.observer, verbose=quantizer.verbose, weight_rounding=False,
        part_scales=quantizer.part_scales,
    )
    # the unsplit model's rounded filters, found by name: an operator not split in a candidate keeps them
    all_split.rounding = quantizer.rounding
    all_split.headroom_of = quantizer.headroom_of  # one record: the search asks it for the model kept
    calibration_seconds = time.perf_counter() - calibrated

    def meets(k: int) -> bool:
        if k not in measured:
            if not budget.allows(f"splitting the weights of {k} of {len(order)} operators"):
                raise _OutOfTime(k)
            budget.step("Mixed precision: splitting int8 weights", len(measured) - 1, len(order))
            if k == len(order):
                candidate = all_split
            else:
                candidate = RecipeQuantizer.with_ranges(split_float_model(quantizer.float_bytes, [layer.op_index for layer in order[:k]]), all_split)
            overrides = {**(int8_boundary(candidate.float_model) if int8_io else {}), **held_at_int8(candidate.float_model, int16_opcodes)}
            model = candidate.quantize("int16", overrides)
            measured[k] = (evaluate_target(parity_outputs(model, heldout), heldout_refs, target), model)
        return measured[k][0].met

    out_of_time = None
    try:
        met_at = fewest_prefix(meets, len(order), _groups(len(order)))
    except _OutOfTime as stop:
        out_of_time = f"splitting the weights of {stop.count} of {len(order)} operators"
        met = [k for k in measured if measured[k][0].met]
        met_at = min(met) if met else None
    kept = met_at if met_at is not None else best_of_missed({k: check.sqnr_db for k, (check, _) in measured.items()})
    return SplitSearch(order, measured, kept, time.perf_counter() - start, calibration_seconds, out_of_time)


class _OutOfTime(Exception):
    """The time budget stopped the split search before candidate ``count``."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


def int8_boundary(model: Any) -> dict[QuantizableOp, str]:
    """Recipe overrides that keep the model's inputs and outputs int8 (ai-edge-quantizer's virtual
    INPUT and OUTPUT operators, scoped as sensitivity.passthrough_ops scopes them) in a model
    otherwise at int16: ``set_io_dtype_pass`` cannot give an int16 boundary int8 or uint8 I/O."""
    found = {}
    for index, key, tensors in ((-1, "INPUT", model.inputs), (-2, "OUTPUT", model.outputs)):
        names = [model.tensors[t].name for t in tensors if model.tensors[t].name]
        if names:
            found[QuantizableOp.named(index, key, names)] = "int8"
    return found


def split_rows(split: SplitSearch, first_step: int, latency: Mapping[int, float | None] | None = None) -> list[Any]:
    """A PromotedLayer per split operator (``SPLIT_PRECISION``), steps numbered from ``first_step``,
    with the SQNR, size and (``latency``: split count -> median ms, when timed) latency of the
    measured candidates around each."""
    from .promotion_steps import PromotedLayer

    chain = [k for k in sorted(split.measured) if k <= split.kept]
    rows = []
    for step, (low, high) in enumerate(pairwise(chain), start=first_step):
        before, after = split.measured[low], split.measured[high]
        ms_before, ms_after = (latency or {}).get(low), (latency or {}).get(high)
        latency_change = None if ms_before is None or ms_after is None else round(ms_after - ms_before, 3)
        for layer in split.order[low:high]:
            rows.append(
                PromotedLayer(
                    layer.op_index, layer.opcode, layer.tensor, layer.module_path, layer.module_type, layer.source,
                    SPLIT_PRECISION, layer.rank, step, before[0].sqnr_db, after[0].sqnr_db, len(after[1]) - len(before[1]),
                    latency_change,
                )
            )
    return rows
