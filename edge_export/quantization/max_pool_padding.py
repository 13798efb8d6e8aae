"""A max pool's padding left out of the range its input is quantized with.

PyTorch's ``max_pool2d(padding=p)`` reaches the flatbuffer as ``PADV2(x, -inf)`` then a VALID
``MAX_POOL_2D``, and before int8 the -inf becomes -32 (``saturate_infinite_constants_pass``: int8
has no infinity). PADV2 quantizes its input with its output's scale, and the output's calibrated
range holds the pad value: DETR's ResNet stem, a ReLU from 0 to 0.94, was quantized over -32 to
0.77, seven int8 steps, and the whole model read 7 dB at int8 and at int16 alike.

A pad value at or below every input value gives the max pool the result -inf padding gives. In the
quantized model no input value is below the range's lower end, and the pad constant, quantized with
the same scale, is clamped to that lower end. So the PADV2 output's range is taken as its input's,
for each PADV2 whose pad value is a constant at or below the input's calibrated minimum and whose
output only max pools read: exact, not an approximation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..flatbuffer import FlatbufferModel

__all__ = ["max_pool_paddings", "without_max_pool_padding"]


def _pad_value(model: FlatbufferModel, op: Any) -> float | None:
    if op.opcode != "PADV2" or len(op.inputs) < 3 or op.inputs[2] < 0:
        return None
    tensor = model.tensors[op.inputs[2]]
    value = model.constant(op.inputs[2]) if tensor.is_constant and tensor.is_float else None
    return float(np.asarray(value).ravel()[0]) if value is not None and np.size(value) == 1 else None


def max_pool_paddings(model: FlatbufferModel) -> list[tuple[str, str, float]]:
    """(input name, output name, pad value) of every PADV2 of a constant that only MAX_POOL_2Ds read."""
    readers: dict[int, list[str]] = {}
    for op in model.operators:
        for i in set(op.inputs):
            readers.setdefault(i, []).append(op.opcode)
    found = []
    for op in model.operators:
        value = _pad_value(model, op)
        if value is None or len(op.outputs) != 1 or op.outputs[0] in model.outputs:
            continue
        read_by = readers.get(op.outputs[0], [])
        if read_by and all(opcode == "MAX_POOL_2D" for opcode in read_by):
            found.append((model.tensors[op.inputs[0]].name, model.tensors[op.outputs[0]].name, value))
    return found


def without_max_pool_padding(model: FlatbufferModel, qsvs: dict) -> tuple[dict, list[str]]:
    """``qsvs`` (tensor name -> min/max) with each max pool padding's output range set to its input's
    (see the module's doc), and the names of the tensors changed."""
    result, changed = dict(qsvs), []
    for source, padded, value in max_pool_paddings(model):
        inner, outer = qsvs.get(source), qsvs.get(padded)
        if inner is None or outer is None:
            continue
        low, high = float(np.min(inner["min"])), float(np.max(inner["max"]))
        if not (np.isfinite(low) and np.isfinite(high) and value <= low):
            continue  # a pad value above some input is a real value of the max: keep its range
        result[padded] = {**outer, "min": np.full(np.shape(outer["min"]), low, np.float32), "max": np.full(np.shape(outer["max"]), high, np.float32)}
        changed.append(padded)
    return result, changed
