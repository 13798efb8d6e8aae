"""An output made by joining parts of very different ranges: each part keeps its own scale.

A detector's head often ends in one CONCATENATION of boxes in pixels (0-800) and sigmoid class
scores (0-1). An int8 tensor has one scale, so the joined output's step is ~3 px and every score
rounds to zero (YOLO11n: class scores 0.0 dB, boxes 26.9 dB). The join itself computes nothing: the
flatbuffer recipes leave it in float, so each part is quantized with the range calibration found
for it and dequantized just before the join. The output keeps its name, shape and float32 type, so
apps and parity see the same tensor; the extra DEQUANTIZEs and the float join run at the model's
end, where a DEQUANTIZE to a float output runs anyway (on the Edge TPU, on the CPU after the graph).

Found from the calibrated ranges (``find_output_joins``): a CONCATENATION whose output reaches a
model output through value-moving operators only (RESHAPE, TRANSPOSE, SQUEEZE, EXPAND_DIMS), each
read by nothing else, and whose inputs' calibrated max |x| differ by ``PART_RANGE_FACTOR`` (10x)
or more between two neighbours when sorted: the rule parity uses to find an output's parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..flatbuffer import FlatbufferModel
from ..validators.output_parts import PART_RANGE_FACTOR
from .operator_scopes import QuantizableOp, passthrough_ops

__all__ = ["JoinedOutput", "OutputJoin", "PartScale", "find_output_joins", "joined_outputs", "keep_output_joins_in_float"]

# Operators that only move values between the join and the model output.
_MOVES = frozenset({"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS"})


@dataclass(frozen=True)
class OutputJoin:
    """One CONCATENATION joining parts of an output whose ranges differ 10x or more."""

    output: str  # the model output's tensor name
    operator: int  # the CONCATENATION's index in the float model
    scope: str  # its output tensor names, as ai-edge-quantizer scopes it
    part_max_abs: tuple[float, ...]  # calibrated max |x| of each joined part, in order

    @property
    def range_ratio(self) -> float:
        """The largest ratio between two neighbouring part ranges (sorted, zero ranges left out)."""
        levels = np.unique([m for m in self.part_max_abs if m > 0.0])
        return float(np.max(levels[1:] / levels[:-1])) if levels.size >= 2 else 1.0


def _consumers(model: FlatbufferModel) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for op in model.operators:
        for t in op.inputs:
            if t >= 0:
                found.setdefault(t, []).append(op.index)
    return found


def _join_before(model: FlatbufferModel, output: int, consumers: dict[int, list[int]]) -> Any | None:
    """The CONCATENATION an output comes from through value-moving operators read by nothing else."""
    producers = {t: op for op in model.operators for t in op.outputs if t >= 0}
    tensor = output
    for _ in range(len(model.operators)):  # each step goes one operator back: bounded by the graph
        op = producers.get(tensor)
        if op is None or (tensor != output and len(consumers.get(tensor, [])) != 1):
            return None
        if op.opcode == "CONCATENATION":
            return op
        if op.opcode not in _MOVES:
            return None
        tensor = op.inputs[0]
    return None


def _max_abs(qsv: Any) -> float | None:
    if not isinstance(qsv, dict) or "min" not in qsv or "max" not in qsv:
        return None
    value = max(float(np.max(np.abs(qsv["min"]))), float(np.max(np.abs(qsv["max"]))))
    return value if np.isfinite(value) else None


def find_output_joins(model: FlatbufferModel, qsvs: dict[str, Any]) -> tuple[OutputJoin, ...]:
    """The output joins of ``model`` (the float model) whose parts' calibrated ranges (``qsvs``,
    ai-edge-quantizer's min/max by tensor name) differ ``PART_RANGE_FACTOR`` or more."""
    consumers = _consumers(model)
    joins = []
    for output in model.outputs:
        op = _join_before(model, output, consumers)
        if op is None:
            continue
        ranges = [_max_abs(qsvs.get(model.tensors[i].name)) for i in op.inputs if i >= 0]
        if len(ranges) < 2 or any(r is None for r in ranges):
            continue  # a constant or uncalibrated part: nothing to judge it by
        names = [model.tensors[i].name for i in op.outputs if i >= 0 and model.tensors[i].name]
        join = OutputJoin(model.tensors[output].name, op.index, ";".join(names) + ";", tuple(ranges))
        if names and join.range_ratio >= PART_RANGE_FACTOR:
            joins.append(join)
    return tuple(joins)


def keep_output_joins_in_float(quantizer: Any, model: FlatbufferModel, joins: tuple[OutputJoin, ...]) -> tuple[QuantizableOp, ...]:
    """Set each join, the value-moving operators after it and the model's virtual OUTPUT operator
    (when every output is then float) to no quantization in ``quantizer``'s recipe; returns the
    operators changed."""
    from ai_edge_quantizer.algorithm_manager import AlgorithmName
    from ai_edge_quantizer.qtyping import TFLOperationName

    if not joins:
        return ()
    ops = tuple(QuantizableOp(j.operator, "CONCATENATION", j.scope.split(";")[0], j.scope) for j in joins)
    ops += passthrough_ops(model, {j.operator for j in joins})
    for op in ops:
        quantizer.update_quantization_recipe(op.regex, TFLOperationName(op.opcode), algorithm_key=AlgorithmName.NO_QUANTIZE)
    return ops


@dataclass(frozen=True)
class PartScale:
    """One part of a joined output as the quantized model holds it, before its DEQUANTIZE."""

    tensor: str
    dtype: str
    scale: float
    zero_point: int


@dataclass(frozen=True)
class JoinedOutput:
    """A float model output joined from integer parts, each with its own scale (the report's
    ``quantization.output_parts``)."""

    output: str  # the output's name as the app sees it
    parts: tuple[PartScale, ...]  # in the order the parts are joined


def _parts_of(model: FlatbufferModel, output: int) -> list[PartScale]:
    """The DEQUANTIZEd parts an output join reads, in join order (depth first from the output)."""
    producer = {t: op for op in model.operators for t in op.outputs if t >= 0}
    parts, pending = [], [output]
    while pending:  # the join ops form a tree over the graph: each is visited once
        op = producer.get(pending.pop())
        if op is None or op.index not in model.output_join_ops:
            continue
        if op.opcode == "DEQUANTIZE":
            t = model.tensors[op.inputs[0]]
            if t.quant is not None and not t.quant.per_channel:
                parts.append(PartScale(t.name, t.dtype, float(t.quant.scales[0]), int(t.quant.zero_points[0])))
            continue
        pending.extend(reversed([i for i in op.inputs if i >= 0]))
    return parts


def joined_outputs(model: FlatbufferModel) -> tuple[JoinedOutput, ...]:
    """The outputs of a quantized model made by an output join, with their parts' scales."""
    if not model.output_join_ops:
        return ()
    found = []
    for name, index in zip(model.output_names, model.outputs):
        parts = _parts_of(model, index)
        if len(parts) >= 2:
            found.append(JoinedOutput(name, tuple(parts)))
    return tuple(found)
