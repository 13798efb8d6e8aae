"""What a search found, for its report: the steps measured, every promoted operator with the
prefixes around it, and the reason for the model kept."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from ..promotion_steps import PromotedLayer, TargetCheck
from .prefix_search import Prefixes
from .report import MixedPrecisionStep
from .split_phase import ranges_limit, split_reason, split_rows, split_steps

__all__ = ["promoted_layers", "search_reason", "search_steps"]


def search_steps(prefixes: Prefixes, split: Any, split_latency: Mapping[int, float | None]) -> tuple[MixedPrecisionStep, ...]:
    measured, latency = prefixes.measured, prefixes.latency
    steps = tuple(
        MixedPrecisionStep(k, measured[k][0].sqnr_db, measured[k][0].cosine, len(measured[k][1]), measured[k][0].met, latency.get(k))
        for k in sorted(measured)
    )
    return steps + (split_steps(split, len(prefixes.order), split_latency) if split is not None else ())


def promoted_layers(prefixes: Prefixes, kept_count: int, split: Any, split_latency: Mapping[int, float | None]) -> tuple[PromotedLayer, ...]:
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
        promoted += split_rows(split, len(chain), split_latency)
    return tuple(promoted)


def search_reason(
    prefixes: Prefixes, kept_count: int, kept_check: TargetCheck, split: Any, costs: Mapping[int, float] | None,
) -> str:
    """What the search kept and why (before the time budget's part)."""
    count, precision, target, samples = len(prefixes.order), prefixes.precision, prefixes.target, len(prefixes.heldout)
    along = f" (and {prefixes.carried[kept_count]} layout or input/output operator(s) between them)" if prefixes.carried.get(kept_count) else ""
    if split is not None:
        return split_reason(split, count, along, prefixes.measured[count][0], kept_check, target, samples, prefixes.measured[0][0])
    if kept_check.met and kept_count == 0:
        return f"the int8 model meets the target ({target.describe()}) on {samples} inputs apart from parity's: nothing promoted"
    if kept_check.met and kept_count == count:
        return f"promoted all {count} operators{along} to {precision}: {target.describe()} met on {samples} inputs apart from parity's"
    if kept_check.met:
        return (
            f"promoted {kept_count} of {count} operators{along} to {precision} in sensitivity order"
            f"{', the cheaper first among near-equal ones' if costs else ''}: "
            f"{target.describe()} met on {samples} inputs apart from parity's"
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
        limit = ranges_limit(prefixes.measured[0][0], kept_check)
        reason += limit or "; int16 activations still leave int8 weights: --mixed-precision auto may promote to float where the target allows it"
    return reason
