"""A sigmoid's input range, cut to where its quantized output still changes.

An integer LOGISTIC writes a fixed scale: 1/256 at int8, 1/32768 at int16. Below
``-SIGMOID_INPUT_BOUND[activations]`` its output rounds to 0 and above ``+bound`` to its top step, so the
part of the calibrated input range beyond the bound buys nothing and costs resolution where the
output moves. A detector's class logits show it: Ultralytics initialises the class bias at
log(5 / nc / cells), about -11.5, so YOLO11n's calibrated logits span about -28..+2 and int8 gave
them a step of 0.117; cut to -6.24..+2 the step is 0.032. The values cut off saturate at the bound,
where the sigmoid's int8 output is 0 either way.

Only tensors that nothing else reads are cut: a LOGISTIC's input read by every one of its readers
as a LOGISTIC, followed back through value-moving operators and concatenations to the operators that
compute it, each read only on that path.

A SiLU's input (``x * sigmoid(x)``: read by one LOGISTIC and by MULs of x and that LOGISTIC's
output) keeps its top, which the MUL passes on, and loses its bottom below ``-bound``: there the
integer sigmoid is 0, so the product is 0 whatever x is (the float product's largest |value| below
the bound is bound / 512 = 0.012 at int8, under the product's own step). A trained YOLO11n's first
convolutions reach -49..55, -93..84 and -90..17 before their SiLU, so int8 gave them steps of 0.4-0.7;
cut at -6.24 the third's is 0.09. Simulated on the trained detector, that cut alone took its class
scores from 5.2 to 10.9 dB and its boxes from 23.9 to 27.7 dB (docs/BENCHMARKS.md section 36).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..config import QuantizeMode
from ..flatbuffer import FlatbufferModel
from ..quantize_modes import mode_spec

__all__ = ["SIGMOID_INPUT_BOUND", "cut_sigmoid_input_ranges"]

# |x| beyond which the integer LOGISTIC's output no longer changes: its output rounds to 0 below
# -bound (sigmoid(x) < half a step); the top step is reached at a smaller |x|, kept symmetric.
# Keyed by the mode's integer activation dtype (modes.ModeSpec.activations).
SIGMOID_INPUT_BOUND = {
    "int8": math.log(2 * 256 - 1),  # 6.24: sigmoid(-6.24) = 1/512, half of 1/256
    "int16": math.log(2 * 32768 - 1),  # 11.09
}
# Operators a logit goes through unchanged (their output tensor has the same range as the inputs).
_PASS_THROUGH = frozenset({"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "CONCATENATION"})


def _sigmoid_only_inputs(model: FlatbufferModel) -> list[int]:
    """The tensors read by LOGISTIC operators only."""
    readers: dict[int, list[str]] = {}
    for op in model.operators:
        for t in op.inputs:
            if t >= 0:
                readers.setdefault(t, []).append(op.opcode)
    return [t for t, ops in readers.items() if set(ops) == {"LOGISTIC"} and t not in model.inputs]


def _logit_tensors(model: FlatbufferModel) -> set[int]:
    """The sigmoid-only inputs and, back through value-moving operators, the tensors they copy."""
    producer = {t: op for op in model.operators for t in op.outputs if t >= 0}
    readers: dict[int, int] = {}
    for op in model.operators:
        for t in op.inputs:
            if t >= 0:
                readers[t] = readers.get(t, 0) + 1
    found: set[int] = set()
    pending = _sigmoid_only_inputs(model)
    while pending:  # each tensor is taken once: bounded by the graph's size
        tensor = pending.pop()
        if tensor in found or model.tensors[tensor].is_constant:
            continue
        found.add(tensor)
        op = producer.get(tensor)
        if op is not None and op.opcode in _PASS_THROUGH:
            inputs = op.inputs if op.opcode == "CONCATENATION" else op.inputs[:1]
            pending.extend(t for t in inputs if t >= 0 and readers.get(t) == 1)
    return found


def _silu_inputs(model: FlatbufferModel) -> list[int]:
    """The tensors x read by exactly one LOGISTIC and otherwise only by MULs of x and its output."""
    readers: dict[int, list[Any]] = {}
    for op in model.operators:
        for t in set(op.inputs):
            if t >= 0:
                readers.setdefault(t, []).append(op)
    found = []
    for tensor, ops in readers.items():
        logistics = [op for op in ops if op.opcode == "LOGISTIC"]
        if len(logistics) != 1 or tensor in model.inputs or model.tensors[tensor].is_constant:
            continue
        sigmoid = logistics[0].outputs[0]
        products = [op for op in ops if op is not logistics[0]]
        if products and all(op.opcode == "MUL" and sorted(op.inputs) == sorted((tensor, sigmoid)) for op in products):
            found.append(tensor)
    return found


def cut_sigmoid_input_ranges(model: FlatbufferModel, qsvs: dict[str, Any], mode: QuantizeMode) -> tuple[dict[str, Any], list[str]]:
    """``qsvs`` (ai-edge-quantizer's min/max by tensor name) with every logit tensor's range cut to
    the mode's bound and every SiLU input's bottom cut to -bound; returns them and the names of the
    tensors cut."""
    bound = SIGMOID_INPUT_BOUND.get(mode_spec(mode).activations or "")
    if bound is None:
        return qsvs, []
    result, cut = dict(qsvs), []
    for index in sorted(_logit_tensors(model)):
        name = model.tensors[index].name
        qsv = qsvs.get(name)
        if not isinstance(qsv, dict) or "min" not in qsv or "max" not in qsv:
            continue
        lo, hi = np.asarray(qsv["min"], np.float32), np.asarray(qsv["max"], np.float32)
        new_lo, new_hi = np.clip(lo, -bound, bound), np.clip(hi, -bound, bound)  # monotone: lo <= hi kept
        if np.array_equal(new_lo, lo) and np.array_equal(new_hi, hi):
            continue
        result[name] = {**qsv, "min": new_lo.astype(np.float32), "max": new_hi.astype(np.float32)}
        cut.append(name)
    for index in _silu_inputs(model):
        name = model.tensors[index].name
        qsv = result.get(name)
        if not isinstance(qsv, dict) or "min" not in qsv or "max" not in qsv:
            continue
        lo, hi = np.asarray(qsv["min"], np.float32), np.asarray(qsv["max"], np.float32)
        # the bottom only, and only where the top is above the bound (else all of it is near 0)
        new_lo = np.where(hi > -bound, np.maximum(lo, np.float32(-bound)), lo)
        if not np.array_equal(new_lo, lo):
            result[name] = {**qsv, "min": new_lo.astype(np.float32)}
            cut.append(name)
    return result, cut
