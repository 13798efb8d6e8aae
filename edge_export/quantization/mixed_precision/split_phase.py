"""The second, integer-only phase of an int16 search: split the int8 weights of the weighted
operators (weight_splitting.py) when every operator at int16 still misses the target; its steps,
rows and reason, and what limits a model neither phase helped."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..promotion_steps import AccuracyTarget, PromotedLayer, TargetCheck
from ..promotion_steps import sqnr_key as _sqnr_key
from .report import MixedPrecisionStep

__all__ = ["SPLIT_UNTRIED", "ranges_limit", "split_reason", "split_rows", "split_steps", "split_weights_phase"]


SPLIT_UNTRIED = "splitting int8 weights (the integer phase after every operator at int16)"


def split_weights_phase(quantizer, order, heldout, heldout_refs, target, measured, best_int16, int8_io, budget, int16_opcodes=None):
    """Run weight splitting from the model with every operator at int16; its result when it beats
    the best int16 model (meets the target, or a higher SQNR), else None."""
    from ..weight_splitting import search_split_weights

    if not budget.allows(SPLIT_UNTRIED):
        return None
    split = search_split_weights(
        quantizer, order, heldout, heldout_refs, target, measured[len(order)], int8_io=int8_io, budget=budget, int16_opcodes=int16_opcodes
    )
    best = split.measured[split.kept][0]
    if split.kept and (best.met or _sqnr_key(best.sqnr_db) > _sqnr_key(measured[best_int16][0].sqnr_db)):
        return split
    return None


def split_steps(split, promoted: int, latency: Mapping[int, float | None]) -> tuple[MixedPrecisionStep, ...]:
    return tuple(
        MixedPrecisionStep(promoted, check.sqnr_db, check.cosine, len(model), check.met, latency.get(k), split_weights=k)
        for k, (check, model) in sorted(split.measured.items()) if k
    )


def split_rows(split, first_step: int, latency: Mapping[int, float | None]) -> list[PromotedLayer]:
    from ..weight_splitting import split_rows

    return split_rows(split, first_step, latency)


def split_reason(split, count: int, along: str, int16_check: TargetCheck, kept: TargetCheck, target: AccuracyTarget, samples: int,
                  int8_check: TargetCheck) -> str:
    done = (
        f"promoted all {count} operators{along} to int16 ({int16_check.sqnr_db:.1f} dB: int8 weights limit it), "
        f"then split the int8 weights of {split.kept} of {len(split.order)} weighted operators in sensitivity order "
        "(W = W_hi + W_lo: two int8-weight operators and an ADD each, so the model stays fully integer)"
    )
    if kept.met:
        return f"{done}: {target.describe()} met on {samples} inputs apart from parity's"
    return (
        f"the target ({target.describe()}) was not met even with all {count} operators at int16 and weights split "
        f"({'; '.join(kept.failed)}); kept the best model found: {done}, {kept.sqnr_db:.1f} dB" + ranges_limit(int8_check, kept)
    )


# Less than this gained by int16 activations and split weights together: precision is not the limit.
_NO_GAIN_DB = 1.0


def ranges_limit(int8_check: TargetCheck, kept: TargetCheck) -> str:
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
