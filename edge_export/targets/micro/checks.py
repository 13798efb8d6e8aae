"""A flatbuffer checked against TFLite Micro's rules (``check_micro``: kernels, the tensor types they
take, integer I/O) and its tensor arena estimated from the operator order (``estimate_arena_bytes``):
every byte of activation memory is in one arena whose size the firmware fixes at build time. The host interpreter
(``runner.MicroRunner``) measures the real figure."""

from __future__ import annotations

import math

from ...flatbuffer import FlatbufferModel
from .kernel_types import kernel_type_mismatches
from .kernels import resolver_method
from .report import MicroReport

__all__ = ["ARENA_ALIGNMENT", "check_micro", "estimate_arena_bytes"]

_DTYPE_BYTES = {"float32": 4, "float16": 2, "int32": 4, "int64": 8, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
# Bookkeeping TFLM keeps in the arena besides activations, measured on the host interpreter's
# RecordingMicroAllocator: a TfLiteEvalTensor (24 bytes) per tensor, a NodeAndRegistration
# (64 bytes) per operator, per-channel multipliers and shifts (8 bytes per channel).
_EVAL_TENSOR_BYTES = 24
_NODE_BYTES = 64
ARENA_ALIGNMENT = 16


def _tensor_bytes(model: FlatbufferModel, index: int) -> int:
    t = model.tensors[index]
    size = math.prod(max(d, 1) for d in t.shape) * _DTYPE_BYTES.get(t.dtype, 4)
    return -(-size // ARENA_ALIGNMENT) * ARENA_ALIGNMENT


def estimate_arena_bytes(model: FlatbufferModel) -> int:
    """Peak of live activation bytes over the operator order, plus TFLM's per-tensor/per-op
    bookkeeping. TFLM's greedy memory planner can do a little better or worse; MicroRunner
    measures the real figure."""
    first_use: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for i in model.inputs:
        first_use[i] = 0
    for step, op in enumerate(model.operators):
        for t in (*op.inputs, *op.outputs):
            if t < 0 or model.tensors[t].is_constant:
                continue
            first_use.setdefault(t, step)
            last_use[t] = step
    for o in model.outputs:
        last_use[o] = len(model.operators)
    peak = 0
    for step in range(len(model.operators) + 1):
        live = sum(_tensor_bytes(model, t) for t, s in first_use.items() if s <= step <= last_use.get(t, s))
        peak = max(peak, live)
    channels = sum(
        len(model.tensors[op.inputs[1]].quant.scales)
        for op in model.operators
        if len(op.inputs) > 1 and op.inputs[1] >= 0 and model.tensors[op.inputs[1]].quant is not None
    )
    overhead = _EVAL_TENSOR_BYTES * len(model.tensors) + _NODE_BYTES * len(model.operators) + 8 * channels
    return peak + overhead


def check_micro(model: FlatbufferModel, *, arena_bytes: int | None = None) -> MicroReport:
    """Check a verified model against TFLite Micro's rules. Never raises for a rule the model breaks:
    the report lists the problems (the pipeline turns them into a TargetError or a failed gate)."""
    ops: list[str] = []
    for sg_ops in model.subgraph_operators or (model.operators,):
        for op in sg_ops:
            if op.opcode not in ops:
                ops.append(op.opcode)
    return MicroReport(
        ops=tuple(ops),
        unsupported_ops=tuple(op for op in ops if resolver_method(op) is None),
        kernel_type_mismatches=kernel_type_mismatches(model),
        input_dtypes=tuple(t.dtype for t in model.input_tensors),
        output_dtypes=tuple(t.dtype for t in model.output_tensors),
        fully_integer=model.is_fully_integer,
        float_tensors=tuple(t.name for t in model.float_tensors),
        arena_estimate_bytes=estimate_arena_bytes(model),
        arena_bytes=arena_bytes,
    )
