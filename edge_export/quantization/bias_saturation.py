"""Integer biases that hit the limit of their type: the layer's output is off by what was cut.

A quantized convolution or fully connected layer stores its bias in the accumulator's units,
``bias / (input_scale * weight_scale)``, as int32 (int16x8 too: ai-edge-quantizer rounds the bias to
32 bits before it stores it as int64). Tiny activations with a large bias overflow it: a
random-weight detector's class branch (BatchNorm left at mean 0 / variance 1 shrinks activations to
1e-7, while the class bias is about -11.5) gets a scale of ~1e-11 and a bias of 1e12 steps, which is
clipped to 2**31 - 1. No finer activation type helps (int16 divides the input scale by 256, so the
overflow grows); only a wider input range, real calibration data or a float layer does. The export
names every such operator in the report (``quantization.saturated_biases``) and warns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..flatbuffer import FlatbufferModel

__all__ = ["SaturatedBias", "saturated_biases"]

# The bias input's position per operator that accumulates into int32 (or int64).
_BIAS_INPUT = {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2, "TRANSPOSE_CONV": 3, "CONV_3D": 2}
_INT32_LIMITS = (np.iinfo(np.int32).min, np.iinfo(np.int32).max)


@dataclass(frozen=True)
class SaturatedBias:
    """One operator whose quantized bias reached the int32 limits on some channels."""

    operator: int  # its index in the quantized model
    opcode: str
    tensor: str  # the bias tensor's name (it names the layer's module)
    saturated: int  # channels whose bias was clipped
    channels: int


def saturated_biases(model: FlatbufferModel) -> tuple[SaturatedBias, ...]:
    """The operators of a quantized model whose integer bias sits at the int32 limits."""
    found = []
    for op in model.operators:
        position = _BIAS_INPUT.get(op.opcode)
        if position is None or len(op.inputs) <= position or op.inputs[position] < 0:
            continue
        tensor = model.tensors[op.inputs[position]]
        if tensor.dtype not in ("int32", "int64") or not tensor.is_constant:
            continue
        values = model.constant(tensor.index)
        if values is None or values.dtype.kind != "i":
            continue
        values = values.astype(np.int64).ravel()
        clipped = int(np.count_nonzero((values <= _INT32_LIMITS[0]) | (values >= _INT32_LIMITS[1])))
        if clipped:
            found.append(SaturatedBias(op.index, op.opcode, tensor.name, clipped, int(values.size)))
    return tuple(found)
