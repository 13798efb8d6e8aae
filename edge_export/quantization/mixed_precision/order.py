"""The promotion order: the sensitivity ranking, near-equal sensitivities broken by what a
promotion costs (``promotion_costs``, from the float model's shapes; see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..operator_scopes import passthrough_ops
from ..sensitivity import LayerSensitivity, RecipeQuantizer

__all__ = ["TIE_BAND_DB", "PromotionCost", "describe_order", "promotion_costs", "promotion_order", "promotion_overrides"]


# Sensitivities closer than this count as equal (promotion_order): the ranking of 8 samples,
# re-measured on 8 others, moves an operator's SQNR by at most 0.82 dB on the benchmark CNNs
# (median gap between adjacent operators 0.54 dB; BENCHMARKS.md §16).
TIE_BAND_DB = 1.0


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


def describe_order(precision: str, band_db: float = TIE_BAND_DB) -> str:
    cost = "bytes added" if precision == "float" else "multiply-accumulates"
    return f"sensitivity, cheapest first within {band_db:g} dB ({cost})"


def promotion_overrides(
    quantizer: RecipeQuantizer, ops: Sequence[Any], precision: str, int16_opcodes: frozenset[str] | None = None
) -> dict[Any, str]:
    """The recipe overrides that raise ``ops`` to ``precision``, with the layout operators (and the
    model's inputs and outputs) that only connect promoted operators (sensitivity.passthrough_ops);
    at int16 only layout operators in ``int16_opcodes`` (None: any), the ones the target runs."""
    overrides = {op: precision for op in ops}
    allowed = int16_opcodes if precision == "int16" else None
    overrides.update({op: precision for op in passthrough_ops(quantizer.float_model, {op.index for op in ops}, allowed)})
    return overrides
