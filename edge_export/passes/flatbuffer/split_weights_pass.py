"""Split the float filters of chosen operators in two halves that int8 holds (W = W_hi + W_lo).

Fully integer mixed precision past what int16 activations alone reach.

int16 activations leave int8 weights, and on random-weight MobileNetV2s int8 weights alone cap the
output at about 18 dB (docs/BENCHMARKS.md, "Sensitivity and mixed precision"). Writing each weight
as ``W = W_hi + W_lo``, with ``W_hi`` the per-channel symmetric int8 value of ``W`` and ``W_lo``
the per-channel int8 value of the remainder, gives about 16 bits of weight precision with int8
kernels only: ``conv(x, W) = conv(x, W_hi) + conv(x, W_lo)``, two int8-weight operators (int16x8
with int16 activations) and an ADD, which every integer runtime runs.

The pass runs on the FLOAT model, before ai-edge-quantizer: for each chosen CONV_2D,
DEPTHWISE_CONV_2D or FULLY_CONNECTED with a constant float filter,

- the operator's filter becomes ``W_hi``: exactly the values ai-edge-quantizer's per-channel int8
  rule (scale = max|w| / 127 per output channel, round half to even, [-127, 127]) reproduces, so
  quantizing it again is lossless (``tests/passes/test_split_weights_pass.py``);
- a second operator of the same kind reads the same input with ``W_lo = W - W_hi`` (the exact
  remainder, which quantization then rounds to its own per-channel int8 grid; a zero bias, no
  fused activation);
- both write new tensors (``<name>;split_hi``, ``<name>;split_lo``: the ``;`` part names no module,
  so provenance still finds the original module) and an ADD with the original fused activation
  writes the original output tensor, so outputs, signature names and every reader are unchanged.

In float, ``W_hi + W_lo`` equals ``W``, so the split model computes what the original does (up to
the order of the float sums).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import numpy as np

from ...errors import InternalError

__all__ = ["SPLIT_WEIGHT_OPCODES", "int8_per_channel", "split_weights_pass", "splittable_operators"]

# opcode -> the filter's output-channel axis (TFLite layouts: OHWI, 1HWO, OI)
SPLIT_WEIGHT_OPCODES = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}
HI_SUFFIX, LO_SUFFIX = ";split_hi", ";split_lo"
_MIN_BOUND = 1e-9  # ai-edge-quantizer's floor on a channel's max |w| (no zero scale)


def int8_per_channel(weights: np.ndarray, axis: int) -> np.ndarray:
    """``weights`` rounded to ai-edge-quantizer's per-channel symmetric int8 grid, as float32
    (uniform_quantize_tensor.tensor_zp_scale_from_min_max and uniform_quantize, in float32)."""
    w = np.asarray(weights, dtype=np.float32)
    reduce = tuple(d for d in range(w.ndim) if d != axis)
    bound = np.maximum(np.maximum(np.abs(w.min(axis=reduce, keepdims=True)), np.abs(w.max(axis=reduce, keepdims=True))), _MIN_BOUND)
    scale = (bound / 127.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127)
    return (q * scale).astype(np.float32)


def _name(tensor: Any) -> str:
    name = tensor.name
    return name.decode() if isinstance(name, bytes) else (name or "")


def _opcode(model: Any, op: Any) -> str:
    from ai_edge_litert import schema_py_generated as schema

    code = model.operatorCodes[op.opcodeIndex]
    value = max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)
    return next(k for k, v in vars(schema.BuiltinOperator).items() if v == value)


def _float_filter(model: Any, sg: Any, op: Any) -> np.ndarray | None:
    """The operator's filter as a float32 array, or None when it is not a constant float32 tensor
    held in the flatbuffer."""
    from .graph_edits import float32_constant

    return float32_constant(model, sg, int(op.inputs[1])) if len(op.inputs) >= 2 else None


def splittable_operators(model: Any) -> list[int]:
    """Indices (in the main subgraph) of the operators this pass can split."""
    sg = model.subgraphs[0]
    return [
        index for index, op in enumerate(sg.operators or ())
        if _opcode(model, op) in SPLIT_WEIGHT_OPCODES and _float_filter(model, sg, op) is not None
    ]


def _constant(model: Any, sg: Any, like: Any, name: str, values: np.ndarray) -> int:
    from ai_edge_litert import schema_py_generated as schema

    buffer = schema.BufferT()
    buffer.data = np.frombuffer(values.astype(np.float32).tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor = copy.deepcopy(like)
    tensor.name = name
    tensor.buffer = len(model.buffers) - 1
    tensor.quantization = None
    sg.tensors.append(tensor)
    return len(sg.tensors) - 1


def _activation_tensor(sg: Any, like: Any, name: str) -> int:
    tensor = copy.deepcopy(like)
    tensor.name = name
    tensor.buffer = 0  # buffer 0 is the empty sentinel: an activation
    tensor.quantization = None
    sg.tensors.append(tensor)
    return len(sg.tensors) - 1


def split_weights_pass(model: Any, operators: Iterable[int]) -> bool:
    """Split the filters of the main subgraph's ``operators`` (indices in the model as given);
    True if any changed. An index that is not a splittable operator is an internal error (the
    caller chose it from ``splittable_operators``)."""
    from ai_edge_litert import schema_py_generated as schema

    from .set_io_dtype_pass import _opcode_index

    sg = model.subgraphs[0]
    chosen = sorted(set(operators))
    if not chosen:
        return False
    ops = list(sg.operators or ())
    splittable = set(splittable_operators(model))
    wrong = [i for i in chosen if i not in splittable]
    if wrong:
        raise InternalError(f"split_weights_pass: operator(s) {wrong} have no constant float filter to split.")
    add_code = _opcode_index(model, schema.BuiltinOperator.ADD, 1, schema)
    # The weights are read before any is replaced: operators sharing a filter split the original.
    original = {ops[i].inputs[1]: _float_filter(model, sg, ops[i]) for i in chosen}
    in_place = _filters_split_in_place(sg, ops, chosen)
    new_ops: list[Any] = []
    for index, op in enumerate(ops):
        new_ops.append(op)
        if index in chosen:
            new_ops.extend(_split_operator(model, sg, op, original[op.inputs[1]], op.inputs[1] in in_place, add_code))
    sg.operators = new_ops
    return True


def _filters_split_in_place(sg: Any, ops: list, chosen: list[int]) -> set[int]:
    """The filters read only by chosen operators, through a buffer no other tensor holds: they
    become W_hi in place (no float constant left behind for the quantizer to keep); the others keep
    theirs and W_hi is a new constant."""
    readers: dict[int, int] = {}
    for op in ops:
        for t in op.inputs or ():
            if t >= 0:
                readers[t] = readers.get(t, 0) + 1
    filters = [ops[i].inputs[1] for i in chosen]
    buffer_holders: dict[int, int] = {}
    for tensor in sg.tensors:
        buffer_holders[tensor.buffer] = buffer_holders.get(tensor.buffer, 0) + 1
    return {t for t in set(filters) if readers.get(t) == filters.count(t) and buffer_holders.get(sg.tensors[t].buffer) == 1}


def _split_operator(model: Any, sg: Any, op: Any, weights: np.ndarray, in_place: bool, add_code: int) -> list[Any]:
    """Turn ``op`` into its W_hi half (in place) and return the W_lo operator and the ADD that
    writes the original output with the original fused activation."""
    from ai_edge_litert import schema_py_generated as schema

    axis = SPLIT_WEIGHT_OPCODES[_opcode(model, op)]
    hi = int8_per_channel(weights, axis)
    # the exact remainder: ai-edge-quantizer rounds it to int8 per channel when it quantizes
    # the model, and the float model computes what the original does
    lo = (weights - hi).astype(np.float32)
    filter_tensor = sg.tensors[op.inputs[1]]
    out_index = op.outputs[0]
    base = _name(sg.tensors[out_index])
    hi_filter = _hi_filter(model, sg, op.inputs[1], hi, in_place)
    lo_filter = _constant(model, sg, filter_tensor, _name(filter_tensor).removesuffix(HI_SUFFIX) + LO_SUFFIX, lo)
    hi_out = _activation_tensor(sg, sg.tensors[out_index], base + HI_SUFFIX)
    lo_out = _activation_tensor(sg, sg.tensors[out_index], base + LO_SUFFIX)
    activation = op.builtinOptions.fusedActivationFunction
    lo_op = copy.deepcopy(op)
    # a zero bias, not an absent one: LiteRT's CONV_2D refuses an optional bias ("Tensor at
    # index 2 was optional but was expected")
    zero_bias = _constant(model, sg, filter_tensor, base + LO_SUFFIX + "_bias", np.zeros(weights.shape[axis], np.float32))
    sg.tensors[zero_bias].shape = [weights.shape[axis]]
    sg.tensors[zero_bias].shapeSignature = None
    lo_op.inputs = [op.inputs[0], lo_filter, zero_bias]
    lo_op.outputs = [lo_out]
    lo_op.builtinOptions.fusedActivationFunction = schema.ActivationFunctionType.NONE
    op.inputs = [op.inputs[0], hi_filter, *op.inputs[2:]]
    op.outputs = [hi_out, *op.outputs[1:]]
    op.builtinOptions.fusedActivationFunction = schema.ActivationFunctionType.NONE
    add = schema.OperatorT()
    add.opcodeIndex = add_code
    add.inputs, add.outputs = [hi_out, lo_out], [out_index]
    add.builtinOptionsType = schema.BuiltinOptions.AddOptions
    add.builtinOptions = schema.AddOptionsT()
    add.builtinOptions.fusedActivationFunction = activation
    return [lo_op, add]


def _hi_filter(model: Any, sg: Any, filter_index: int, hi: np.ndarray, in_place: bool) -> int:
    """The tensor holding W_hi: the filter itself, rewritten once (by the first of the operators
    sharing it), or a new constant."""
    filter_tensor = sg.tensors[filter_index]
    if not in_place:
        return _constant(model, sg, filter_tensor, _name(filter_tensor) + HI_SUFFIX, hi)
    if not _name(filter_tensor).endswith(HI_SUFFIX):
        model.buffers[filter_tensor.buffer].data = np.frombuffer(hi.tobytes(), dtype=np.uint8)
        filter_tensor.name = _name(filter_tensor) + HI_SUFFIX
    return filter_index
