"""Operators whose output jumps: their input stays float when they compute in float anyway.

``remainder``, ``floor``, ``round`` and their kin are step functions of their input: one int8
quantization step on the value they read moves it across a step, and the output changes by a whole
period (``torch.remainder(3 * x, 1.0)``: 13 dB in int8, values off by up to 1.0 where the input
crosses an integer). ai-edge-quantizer has no integer kernel for them, so they run in float between a
DEQUANTIZE and a QUANTIZE already; quantizing the operator that feeds them buys nothing for integer
hardware and costs the jump. The flatbuffer recipes leave that producer in float too, which keeps
such a model at the accuracy of its output's quantization alone (40 dB on the same model).
"""

from __future__ import annotations

from typing import Any

from ..flatbuffer import FlatbufferModel
from .operator_scopes import QuantizableOp, passthrough_ops, quantizable_ops

__all__ = ["DISCONTINUOUS_OPS", "feeders_of_discontinuous_ops", "keep_feeders_in_float"]

# Step functions of their input that ai-edge-quantizer leaves in float.
DISCONTINUOUS_OPS = frozenset({"FLOOR_MOD", "FLOOR_DIV", "FLOOR", "CEIL", "ROUND", "SIGN"})
# Operators that only move values: the walk back from a step function goes through them.
_MOVES = frozenset({"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS"})


def _stays_float(model: FlatbufferModel) -> list[int]:
    """Discontinuous operators that ai-edge-quantizer has no integer kernel for."""
    from ai_edge_quantizer.qtyping import TFLOperationName

    known = {m.value for m in TFLOperationName}
    return [op.index for op in model.operators if op.opcode in DISCONTINUOUS_OPS and op.opcode not in known]


def feeders_of_discontinuous_ops(model: FlatbufferModel) -> tuple[QuantizableOp, ...]:
    """The operators whose output reaches a discontinuous operator that stays float (through
    value-moving operators), with the layout operators and the model's INPUT/OUTPUT that then only
    connect float operators (``passthrough_ops``), in graph order."""
    steps = _stays_float(model)
    if not steps:
        return ()
    candidates = {op.index: op for op in quantizable_ops(model)}
    moves = {op.index: op for op in model.operators if op.opcode in _MOVES}
    producers = {i: op.index for op in model.operators for i in op.outputs if i >= 0}
    found: set[int] = set()
    pending = [i for s in steps for i in model.operators[s].inputs if i >= 0]
    while pending:  # each operator is taken once: bounded by the graph's size
        index = producers.get(pending.pop())
        if index is None or index in found:
            continue
        if index in candidates:
            found.add(index)
        elif index in moves:
            found.add(index)
            pending.extend(i for i in moves[index].inputs[:1] if i >= 0)
    chosen = [candidates[i] for i in sorted(found) if i in candidates]
    return tuple(chosen) + passthrough_ops(model, found | set(steps))


def keep_feeders_in_float(quantizer: Any, model: FlatbufferModel) -> tuple[QuantizableOp, ...]:
    """Set every feeder of a discontinuous operator to no quantization in ``quantizer``'s recipe (an
    ``ai_edge_quantizer.Quantizer``); returns the operators changed."""
    from ai_edge_quantizer.algorithm_manager import AlgorithmName
    from ai_edge_quantizer.qtyping import TFLOperationName

    feeders = feeders_of_discontinuous_ops(model)
    for op in feeders:
        quantizer.update_quantization_recipe(op.regex, TFLOperationName(op.opcode), algorithm_key=AlgorithmName.NO_QUANTIZE)
    return feeders
