"""Outputs that are probabilities (softmax, log-softmax, sigmoid), and the decisions read from them.

SQNR over a probability output says little about what a reader does with it: a pitch tracker takes
the argmax of 360 sigmoid bins per frame, a classifier the argmax of a softmax, a multi-label tagger
each label's side of 0.5. So such an output is judged by those decisions and by the error of the
probabilities themselves (config.KIND_THRESHOLDS[PROBABILITIES]).

An output is probabilities when, unless ``--output-kind`` says otherwise or its name says embedding:

1. ``graph``: the exported model's operator producing it (past a QUANTIZE/DEQUANTIZE, which only
   changes its type) is SOFTMAX, LOG_SOFTMAX or LOGISTIC (what aten softmax, log_softmax and
   sigmoid lower to);
2. ``values``: PyTorch's values on every parity sample are finite, in [0, 1] and sum to 1 along the
   last axis (at least 2 entries), within SUM_TOLERANCE: a softmax computed some other way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from ..config import OutputKind
from .metrics import NotComputable
from .output_kinds import KindDecision, KindSource

__all__ = [
    "DECISION_TIE_MARGIN",
    "SIGMOID_THRESHOLD",
    "SUM_TOLERANCE",
    "as_probabilities",
    "decision_agreement",
    "graph_activation",
    "probability_kinds",
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


def graph_activation(model: Any, output_name: str) -> str | None:
    """``softmax``, ``log_softmax`` or ``sigmoid`` when that operator produces the named output of the
    flatbuffer model (past QUANTIZE/DEQUANTIZE), else None."""
    names = list(getattr(model, "output_names", ()) or ())
    if output_name not in names:
        return None
    tensor = model.outputs[names.index(output_name)]
    for _ in range(4):  # a float-I/O integer model has at most a DEQUANTIZE (and a QUANTIZE) after it
        op = model.producer_of(tensor)
        if op is None:
            return None
        if op.opcode in _OPCODE_ACTIVATION:
            return _OPCODE_ACTIVATION[op.opcode]
        if op.opcode not in _TYPE_ONLY or not op.inputs:
            return None
        tensor = op.inputs[0]
    return None


def values_activation(references: Sequence[np.ndarray]) -> str | None:
    """``softmax`` when every reference array is finite, in [0, 1] and sums to 1 along its last axis
    (of at least 2 entries) within SUM_TOLERANCE; else None."""
    if not references:
        return None
    for ref in references:
        r = np.asarray(ref, dtype=np.float64)
        if r.ndim == 0 or r.shape[-1] < 2 or r.size == 0 or not np.all(np.isfinite(r)):
            return None
        if r.min() < 0.0 or r.max() > 1.0 or np.max(np.abs(r.sum(axis=-1) - 1.0)) > SUM_TOLERANCE:
            return None
    return "softmax"


def as_probabilities(values: np.ndarray, activation: str | None) -> np.ndarray:
    """The output as probabilities: a log-softmax's values exponentiated, any other as it is."""
    v = np.asarray(values, dtype=np.float64)
    return np.exp(np.minimum(v, 0.0)) if activation == "log_softmax" else v


def _rows(ref: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if ref.shape != out.shape:
        raise ValueError(f"shape mismatch: reference {ref.shape} vs output {out.shape}")
    if not (np.all(np.isfinite(ref)) and np.all(np.isfinite(out))):
        raise NotComputable("the arrays hold NaN or Inf")
    if ref.ndim == 0 or ref.size == 0:
        raise NotComputable("the output is empty or a scalar: it has no last axis to decide along")
    return ref.reshape(-1, ref.shape[-1]), out.reshape(-1, out.shape[-1])


def decision_agreement(ref: np.ndarray, out: np.ndarray, margin: float = DECISION_TIE_MARGIN) -> float:
    """Fraction of rows (every sample, frame or token: all axes but the last) where the class the
    exported model picks (its argmax over the last axis) is one PyTorch scores within ``margin`` of
    its own top; a tie at the exported model's top agrees when any tied class does."""
    r, o = _rows(np.asarray(ref, dtype=np.float64), np.asarray(out, dtype=np.float64))
    if r.shape[1] < 2:
        raise NotComputable("one value along the last axis: there is no argmax to decide")
    picked = o == o.max(axis=1, keepdims=True)
    best = np.where(picked, r, -np.inf).max(axis=1)
    return float(np.mean(best >= r.max(axis=1) - margin))


def threshold_agreement(
    ref: np.ndarray, out: np.ndarray, threshold: float = SIGMOID_THRESHOLD, margin: float = DECISION_TIE_MARGIN
) -> float:
    """Fraction of values whose decision (>= ``threshold``) is the same in both; a value PyTorch puts
    within ``margin`` of the threshold agrees either way."""
    r, o = _rows(np.asarray(ref, dtype=np.float64), np.asarray(out, dtype=np.float64))
    same = (r >= threshold) == (o >= threshold)
    return float(np.mean(same | (np.abs(r - threshold) <= margin)))


def _refined(decision: KindDecision, graph: str | None, references: Sequence[np.ndarray]) -> KindDecision:
    if decision.source is KindSource.OPTION:
        if decision.kind is not OutputKind.PROBABILITIES:
            return decision
        return replace(decision, activation=graph or values_activation(references))
    if decision.kind is OutputKind.EMBEDDING:  # its name says what it is: vectors compared by direction
        return decision
    if graph is not None:
        return replace(decision, kind=OutputKind.PROBABILITIES, source=KindSource.GRAPH, activation=graph)
    values = values_activation(references)
    if values is not None:
        return replace(decision, kind=OutputKind.PROBABILITIES, source=KindSource.VALUES, activation=values)
    return decision


def probability_kinds(
    decisions: Sequence[KindDecision], model: Any, names: Sequence[str], references: Sequence[Sequence[np.ndarray]]
) -> list[KindDecision]:
    """``decisions`` with the outputs that are probabilities (by the graph, then the values) made so;
    ``references[s][k]`` is PyTorch's output k on sample s."""
    refined = []
    for k, decision in enumerate(decisions):
        graph = graph_activation(model, names[k]) if model is not None and k < len(names) else None
        refined.append(_refined(decision, graph, [sample[k] for sample in references]))
    return refined
