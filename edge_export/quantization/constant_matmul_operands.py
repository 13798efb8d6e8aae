"""A BATCH_MATMUL operand that is a constant is quantized per tensor, not per channel.

ai-edge-quantizer quantizes every constant operand as a weight, per output channel. LiteRT's integer
BATCH_MATMUL reads one scale per operand: with per-channel constants it computed zeros. DETR's
decoder attends with queries that are constants once its first layer is folded (its queries start
from zeros), and its int8 model read 7 dB; per tensor, the operand is what the kernel expects.

At int16 the kernel takes an int8 operand only on the right of an int16 one, and ai-edge-quantizer has
no int16 constants for it: a BATCH_MATMUL whose constant is on the left stays int8 when mixed precision
asks for int16 (the variant would not load).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..flatbuffer import FlatbufferModel
from .operator_scopes import QuantizableOp, quantizable_ops

__all__ = ["matmuls_of_constants", "quantize_constant_operands_per_tensor"]


def _is_float_constant(model: FlatbufferModel, index: int) -> bool:
    return index >= 0 and model.tensors[index].is_constant and model.tensors[index].is_float


def matmuls_of_constants(model: FlatbufferModel) -> tuple[tuple[QuantizableOp, bool], ...]:
    """The BATCH_MATMULs of ``model`` that read a float constant, each with whether the constant is
    its left operand."""
    by_index = {op.index: op for op in model.operators}
    found = []
    for candidate in quantizable_ops(model):
        op = by_index[candidate.index]
        if op.opcode == "BATCH_MATMUL" and any(_is_float_constant(model, i) for i in op.inputs):
            found.append((candidate, _is_float_constant(model, op.inputs[0])))
    return tuple(found)


def quantize_constant_operands_per_tensor(quantizer: Any, model: FlatbufferModel, activation_bits: int | None,
                                          overrides: Mapping[QuantizableOp, str] | None = None) -> tuple[QuantizableOp, ...]:
    """Give each BATCH_MATMUL of a constant a per-tensor static config in ``quantizer``'s recipe, at
    ``activation_bits`` (None: the recipe leaves operators float) or the precision ``overrides`` gives
    it (left alone when that is float; int8 for int16 when the constant is on the left)."""
    from ai_edge_quantizer.qtyping import QuantGranularity, TFLOperationName

    bits = {"int8": 8, "int16": 16}
    changed = []
    for op, constant_on_left in matmuls_of_constants(model):
        precision = (overrides or {}).get(op)
        if precision == "float" or (precision is None and activation_bits is None):
            continue
        activations = 8 if constant_on_left else bits.get(precision, activation_bits)
        quantizer.add_static_config(op.regex, TFLOperationName.BATCH_MATMUL, activations, 8,
                                    weight_granularity=QuantGranularity.TENSORWISE)
        changed.append(op)
    return tuple(changed)
