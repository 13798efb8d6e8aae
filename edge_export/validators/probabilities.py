"""Outputs that are probabilities (softmax, log-softmax, sigmoid), and the decisions read from them.

SQNR over a probability output says little about what a reader does with it: a pitch tracker takes
the argmax of 360 sigmoid bins per frame, a classifier the argmax of a softmax, a multi-label tagger
each label's side of 0.5. So such an output is judged by those decisions and by the error of the
probabilities themselves (config.KIND_THRESHOLDS[PROBABILITIES]).

An output is probabilities when, unless ``--output-kind`` says otherwise or its name says embedding:

1. ``graph``: the exported model's operator producing it (past QUANTIZE/DEQUANTIZE, which only
   change its type, and TRANSPOSE/RESHAPE, which only move its values) is SOFTMAX, LOG_SOFTMAX or
   LOGISTIC (what aten softmax, log_softmax and sigmoid lower to);
2. ``values``: PyTorch's values on every parity sample are finite, in [0, 1] and sum to 1 along one
   axis (at least 2 entries), within SUM_TOLERANCE: a softmax computed some other way.

A softmax's classes need not lie along the last axis: MTCNN's face probability is a softmax over the
channels of ``[1, 2, H, W]`` (one decision per position), which TFLite computes as TRANSPOSE,
SOFTMAX (always along the last axis), TRANSPOSE. The axis is read from PyTorch's values (the axis
along which they sum to 1, the last one first), recorded as ``activation_axis``, and decisions are
taken along it. A softmax reached through a layout operator whose values sum to 1 along no axis (a
flattened distribution) is not judged as probabilities: there is no axis to decide along.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from ..config import OutputKind
from ..errors import InternalError
from .metrics import NotComputable
from .output_kinds import KindDecision, KindSource

__all__ = [
    "DECISION_TIE_MARGIN",
    "activation_axis",
    "distribution_axis",
    "SIGMOID_THRESHOLD",
    "SUM_TOLERANCE",
    "as_probabilities",
    "decision_agreement",
    "decision_count",
    "decision_slack",
    "graph_activation",
    "holds_sigmoid_parts",
    "probability_kinds",
    "sigmoid_segments",
    "threshold_agreement",
    "values_activation",
]

# Two classes (or a value and the 0.5 threshold) closer than this in PyTorch are a tie: either
# decision agrees. It is one step of an int8 probability (TFLite fixes a quantized softmax's and
# logistic's output scale at 1/256), the finest difference an int8 output can show.
DECISION_TIE_MARGIN = 1.0 / 256.0
# A sigmoid output's decision per value (multi-label): positive when the probability is >= 0.5.
SIGMOID_THRESHOLD = 0.5
# How far from 1 a float32 softmax row may sum (rounding over a few thousand entries stays far below).
SUM_TOLERANCE = 1e-3

_OPCODE_ACTIVATION = {"SOFTMAX": "softmax", "LOG_SOFTMAX": "log_softmax", "LOGISTIC": "sigmoid"}
_TYPE_ONLY = frozenset({"QUANTIZE", "DEQUANTIZE"})
_LAYOUT_ONLY = frozenset({"TRANSPOSE", "RESHAPE"})
# Operators walked back from an output: type changes and layout moves around one activation (a
# channel softmax is TRANSPOSE, SOFTMAX, TRANSPOSE, then QUANTIZE/DEQUANTIZE at float I/O).
_MAX_WALK = 8


def _graph_walk(model: Any, output_name: str) -> tuple[str | None, bool]:
    """The activation producing the named output (past type and layout operators), and whether a
    layout operator (TRANSPOSE, RESHAPE) lies between them."""
    names = list(getattr(model, "output_names", ()) or ())
    if output_name not in names:
        return None, False
    tensor, moved = model.outputs[names.index(output_name)], False
    for _ in range(_MAX_WALK):
        op = model.producer_of(tensor)
        if op is None:
            return None, moved
        if op.opcode in _OPCODE_ACTIVATION:
            return _OPCODE_ACTIVATION[op.opcode], moved
        if op.opcode not in _TYPE_ONLY | _LAYOUT_ONLY or not op.inputs:
            return None, moved
        moved = moved or op.opcode in _LAYOUT_ONLY
        tensor = op.inputs[0]
    return None, moved


def graph_activation(model: Any, output_name: str) -> str | None:
    """``softmax``, ``log_softmax`` or ``sigmoid`` when that operator produces the named output of the
    flatbuffer model (past QUANTIZE/DEQUANTIZE, TRANSPOSE and RESHAPE), else None."""
    return _graph_walk(model, output_name)[0]


def _producer_past(model: Any, tensor: int, skipped: frozenset[str]) -> Any:
    """The operator producing ``tensor``, past the ``skipped`` ones (each read through its first input)."""
    for _ in range(_MAX_WALK):
        op = model.producer_of(tensor)
        if op is None or op.opcode not in skipped or not op.inputs:
            return op
        tensor = op.inputs[0]
    return None


def _constant(model: Any, index: int) -> Any:
    """A constant tensor's value, or None (an activation, or a model built without its bytes)."""
    try:
        return model.constant(index) if index >= 0 else None
    except InternalError:
        return None


def _join_axis(model: Any, tensor: int) -> tuple[Any, int, int] | None:
    """The CONCATENATION producing ``tensor`` (past type changes, TRANSPOSEs and RESHAPEs that keep
    every axis up to the joined one: a flatten of the axes after it), the axis it joins along, and
    that axis in ``tensor``; None when no such concatenation makes it (or the file's shapes and
    permutations do not add up: a model is read as hostile)."""
    moves = []
    op = model.producer_of(tensor)
    for _ in range(_MAX_WALK):
        if op is None or op.opcode not in _TYPE_ONLY | _LAYOUT_ONLY or not op.inputs:
            break
        moves.append(op)
        op = model.producer_of(op.inputs[0])
    if op is None or op.opcode != "CONCATENATION" or getattr(op.options, "axis", None) is None or not op.outputs:
        return None
    rank = len(model.tensor(op.outputs[0]).shape)
    if not -rank <= int(op.options.axis) < rank:
        return None
    joined = axis = int(op.options.axis) % rank
    for move in reversed(moves):  # from the concatenation towards the output
        before, after = (tuple(model.tensor(t).shape) for t in (move.inputs[0], move.outputs[0]))
        if move.opcode == "TRANSPOSE":
            perm = _constant(model, move.inputs[1]) if len(move.inputs) > 1 else None
            if perm is None or axis not in [int(i) for i in perm]:
                return None
            axis = [int(i) for i in perm].index(axis)
        elif move.opcode == "RESHAPE" and before[: axis + 1] != after[: axis + 1]:
            return None
    return op, joined, axis


def sigmoid_segments(model: Any, output_name: str, shape: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """``(axis, start, stop)`` of each run of the named output a sigmoid makes: the inputs of the
    CONCATENATION producing it that a LOGISTIC produces, past type changes (a detector's class
    scores beside its boxes). Axes count in ``shape``, PyTorch's shape of one sample, which the
    flatbuffer's output must have."""
    names = list(getattr(model, "output_names", ()) or ())
    if output_name not in names or not len(shape):
        return ()
    tensor = model.outputs[names.index(output_name)]
    found = _join_axis(model, tensor) if tuple(model.tensor(tensor).shape) == tuple(shape) else None
    if found is None or not found[2] < len(shape):
        return ()
    join, joined_axis, axis = found
    segments, start = [], 0
    for part in join.inputs:
        if part < 0 or len(model.tensor(part).shape) <= joined_axis:
            return ()
        stop = start + int(model.tensor(part).shape[joined_axis])
        op = _producer_past(model, part, _TYPE_ONLY)
        if op is not None and op.opcode == "LOGISTIC":
            segments.append((axis, start, stop))
        start = stop
    return tuple(segments) if start == shape[axis] else ()


def holds_sigmoid_parts(model: Any) -> bool:
    """Whether an output of ``model`` is joined from a sigmoid's run and other values
    (sigmoid_segments over its own output shapes): a detector's class scores beside its boxes."""
    names = list(getattr(model, "output_names", ()) or ())
    return any(sigmoid_segments(model, name, model.tensor(t).shape) for name, t in zip(names, model.outputs))


def _sums_to_one(references: Sequence[np.ndarray], axis: int) -> bool:
    for ref in references:
        total = np.sum(ref, axis=axis)
        if not np.max(np.abs(total - 1.0)) <= SUM_TOLERANCE:  # NaN-safe: a NaN sum is not 1
            return False
    return True


def distribution_axis(references: Sequence[np.ndarray], log: bool = False) -> int | None:
    """The axis (of the output's shape, the last one tried first) along which every reference array
    is finite, in [0, 1] and sums to 1 within SUM_TOLERANCE, with at least 2 entries; ``log``: the
    arrays are log-probabilities (their exponentials are tried). None when no axis is."""
    if not references:
        return None
    arrays = [np.asarray(r, dtype=np.float64) for r in references]
    shape = arrays[0].shape
    if not shape or any(a.shape != shape or a.size == 0 or not np.all(np.isfinite(a)) for a in arrays):
        return None
    if log:
        arrays = [np.exp(np.minimum(a, 0.0)) for a in arrays]
    if any(a.min() < 0.0 or a.max() > 1.0 for a in arrays):
        return None
    for axis in reversed(range(len(shape))):
        if shape[axis] >= 2 and _sums_to_one(arrays, axis):
            return axis
    return None


def values_activation(references: Sequence[np.ndarray]) -> str | None:
    """``softmax`` when every reference array is finite, in [0, 1] and sums to 1 along one of its
    axes (of at least 2 entries) within SUM_TOLERANCE; else None."""
    return "softmax" if distribution_axis(references) is not None else None


def activation_axis(activation: str | None, references: Sequence[np.ndarray]) -> int | None:
    """The axis a softmax or log-softmax output's classes lie along (distribution_axis of PyTorch's
    values); None for a sigmoid (each value is its own decision) or when no axis sums to 1."""
    if activation not in ("softmax", "log_softmax"):
        return None
    return distribution_axis(references, log=activation == "log_softmax")


def as_probabilities(values: np.ndarray, activation: str | None) -> np.ndarray:
    """The output as probabilities: a log-softmax's values exponentiated, any other as it is."""
    v = np.asarray(values, dtype=np.float64)
    return np.exp(np.minimum(v, 0.0)) if activation == "log_softmax" else v


def _rows(ref: np.ndarray, out: np.ndarray, axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays as rows of classes: ``axis`` (default the last) moved last, the others flattened."""
    if ref.shape != out.shape:
        raise ValueError(f"shape mismatch: reference {ref.shape} vs output {out.shape}")
    if not (np.all(np.isfinite(ref)) and np.all(np.isfinite(out))):
        raise NotComputable("the arrays hold NaN or Inf")
    if ref.ndim == 0 or ref.size == 0:
        raise NotComputable("the output is empty or a scalar: it has no axis to decide along")
    if axis is not None:
        if not -ref.ndim <= axis < ref.ndim:
            raise NotComputable(f"the output has {ref.ndim} axes, none numbered {axis} to decide along")
        ref, out = np.moveaxis(ref, axis, -1), np.moveaxis(out, axis, -1)
    return ref.reshape(-1, ref.shape[-1]), out.reshape(-1, out.shape[-1])


def decision_agreement(ref: np.ndarray, out: np.ndarray, margin: float = DECISION_TIE_MARGIN, axis: int | None = None) -> float:
    """Fraction of rows (every sample, frame, token or position: all axes but the classes', ``axis``,
    default the last) where the class the exported model picks (its argmax along that axis) is one
    PyTorch scores within ``margin`` of its own top; a tie at the exported model's top agrees when
    any tied class does."""
    r, o = _rows(np.asarray(ref, dtype=np.float64), np.asarray(out, dtype=np.float64), axis)
    if r.shape[1] < 2:
        raise NotComputable("one value along the last axis: there is no argmax to decide")
    picked = o == o.max(axis=1, keepdims=True)
    best = np.where(picked, r, -np.inf).max(axis=1)
    return float(np.mean(best >= r.max(axis=1) - margin))


def decision_count(shape: Sequence[int], axis: int | None = None, per_value: bool = False) -> int:
    """How many decisions an array of ``shape`` holds: one per value (``per_value``: a sigmoid's
    decisions at 0.5), else one per row along ``axis`` (default the last)."""
    size = int(np.prod(shape)) if len(shape) else 1
    if per_value or not len(shape):
        return size
    classes = shape[-1 if axis is None else axis]
    return size // classes if classes else 0


def decision_slack(gate: float, decisions: int) -> float:
    """The decision-agreement floor on ``decisions`` decisions: ``gate``, or where that would demand
    every decision (fewer than 1 / (1 - gate) of them: 8 at 0.9), all but one (1 - 1/n: 7 of 8
    passes). Agreement moves in steps of 1/n, so on few decisions the gate would fail the single
    flip it means to allow; on enough decisions it is the gate itself (8 of 11 and 28 of 32 still
    fail 0.9). One decision, or none, leaves the gate as it is."""
    if decisions < 2:
        return gate
    return min(gate, 1.0 - 1.0 / decisions)


def threshold_agreement(
    ref: np.ndarray, out: np.ndarray, threshold: float = SIGMOID_THRESHOLD, margin: float = DECISION_TIE_MARGIN
) -> float:
    """Fraction of values whose decision (>= ``threshold``) is the same in both; a value PyTorch puts
    within ``margin`` of the threshold agrees either way."""
    r, o = _rows(np.asarray(ref, dtype=np.float64), np.asarray(out, dtype=np.float64))
    same = (r >= threshold) == (o >= threshold)
    return float(np.mean(same | (np.abs(r - threshold) <= margin)))


def _refined(decision: KindDecision, graph: str | None, moved: bool, references: Sequence[np.ndarray]) -> KindDecision:
    """``moved``: a TRANSPOSE or RESHAPE lies between the graph's activation and the output."""
    if decision.source is KindSource.OPTION:
        if decision.kind is not OutputKind.PROBABILITIES:
            return decision
        activation = graph or values_activation(references)
        return replace(decision, activation=activation, axis=activation_axis(activation, references))
    if decision.kind is OutputKind.EMBEDDING:  # its name says what it is: vectors compared by direction
        return decision
    axis = activation_axis(graph, references)
    if graph is not None and not (moved and graph != "sigmoid" and axis is None):
        return replace(decision, kind=OutputKind.PROBABILITIES, source=KindSource.GRAPH, activation=graph, axis=axis)
    axis = distribution_axis(references)
    if axis is not None:
        return replace(decision, kind=OutputKind.PROBABILITIES, source=KindSource.VALUES, activation="softmax", axis=axis)
    return decision


def probability_kinds(
    decisions: Sequence[KindDecision], model: Any, names: Sequence[str], references: Sequence[Sequence[np.ndarray]]
) -> list[KindDecision]:
    """``decisions`` with the outputs that are probabilities (by the graph, then the values) made so;
    ``references[s][k]`` is PyTorch's output k on sample s."""
    refined = []
    for k, decision in enumerate(decisions):
        graph, moved = _graph_walk(model, names[k]) if model is not None and k < len(names) else (None, False)
        refined.append(_refined(decision, graph, moved, [sample[k] for sample in references]))
    return refined
