"""Headroom for 16-bit activations: a tensor an operator writes at int16 gets a wider range than
the calibration samples gave it, by as much as its extremes grew from half of those samples to all
of them (at most ``HEADROOM_CAP``).

Calibration sees a few dozen samples, and an input beyond them can drive a tensor past its
calibrated extremes, where a quantized tensor clips. A random-weight YOLO11n (BatchNorm measured on
photos) shows it: two held-out crops exceed the calibrated ranges by up to 1.44x, and its int16
model's class scores fell to 2.6-4.8 dB on them while every calibration-like crop stayed at
20-33 dB; with the ranges doubled they stayed at 19.6-25.0 dB (docs/BENCHMARKS.md section 42).

A wider range is not free where int16's resolution is what limits a tensor (a residual stream whose
outlier dimensions are 50x the rest: doubling it cost a test encoder 5.6 dB, 31.3 to 25.7). So each
tensor is widened by what its own extremes say: the samples are calibrated in two halves, and the
ratio of the larger half's largest |value| to the smaller's is how much more one doubling of the
data found; the range is widened by that ratio once more. YOLO11n's per-crop extremes vary
(median ratio 2.2), a Gaussian-fed encoder's hardly. Fewer than ``MIN_SPLIT_SAMPLES`` samples say
nothing about it: the cap. An int8 tensor keeps its range (one bit of eight is dear), and so do
an int16 tensor an int8 operator also reads (int16_only_tensors) and ranges narrowed on purpose
(``percentile``, ``mse``).

A normalization's statistics are left alone: z * z, its mean, the epsilon added and the RSQRT or
SQRT of the sum span the square of their input's ratio, so a small variance already sits a few
steps above zero and one bit less loses it. Doubling them took the pretrained MiniLM's int16
embeddings from 26.1 to 10.3 dB; every other tensor doubled, 26.3 dB (section 43).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..flatbuffer import FlatbufferModel

__all__ = ["HEADROOM_CAP", "MIN_SPLIT_SAMPLES", "RangeHeadroom", "growth_between", "int16_only_tensors", "int16_operators", "statistic_tensors", "union_of", "with_headroom"]

HEADROOM_CAP = 2.0
MIN_SPLIT_SAMPLES = 4


@dataclass(frozen=True)
class RangeHeadroom:
    """One int16 tensor whose range was widened beyond its calibrated extremes (the report's
    ``quantization.int16_headroom``): its int16 step is ``factor`` times coarser for it."""

    tensor: str
    factor: float

_SQUARES = ("SQUARE", "SQUARED_DIFFERENCE")
# Operators that carry a statistic on: a reduction of it, a constant added, its root, a layout move.
_STATISTIC_FOLLOWERS = frozenset({
    "MEAN", "SUM", "ADD", "RSQRT", "SQRT", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "BROADCAST_TO",
})


def _is_self_product(model: FlatbufferModel, op: Any) -> bool:
    if op.opcode != "MUL" or len(op.inputs) != 2:
        return False
    from .normalization_ranges import _source

    return _source(model, op.inputs[0]) == _source(model, op.inputs[1])


def statistic_tensors(model: FlatbufferModel) -> frozenset[str]:
    """The names of the tensors a square makes (SQUARE, SQUARED_DIFFERENCE, x * x) and those made
    from them alone by ``_STATISTIC_FOLLOWERS`` (constants aside), in the main subgraph. Operators
    are in execution order, so one pass sees every producer before its readers."""
    found: set[int] = set()
    for op in model.operators:
        outputs = [i for i in op.outputs if i >= 0]
        if op.opcode in _SQUARES or _is_self_product(model, op):
            found.update(outputs)
            continue
        fed = [i for i in op.inputs if i >= 0 and not model.tensors[i].is_constant]
        if op.opcode in _STATISTIC_FOLLOWERS and fed and all(i in found for i in fed):
            found.update(outputs)
    return frozenset(model.tensors[i].name for i in found)


def int16_only_tensors(model: FlatbufferModel, operators: Iterable[int]) -> frozenset[str]:
    """The names of the tensors that the given operators (indices in the main subgraph) write, and
    of the model's inputs, that only those operators read (or nothing: a model output). A tensor
    an int8 operator also reads is requantized to int8 from the same range, where one bit of eight
    is dear: it keeps its range (MTCNN R-Net's three int16 operators feeding int8 ones, widened,
    took its face probability's error from under 0.05 to 0.097)."""
    chosen = set(operators)
    readers: dict[int, set[int]] = {}
    for op in model.operators:
        for i in op.inputs:
            if i >= 0:
                readers.setdefault(i, set()).add(op.index)
    # the model's inputs too: the QUANTIZE in front of an int16 reader takes their range
    written = {i for op in model.operators if op.index in chosen for i in op.outputs if i >= 0} | set(model.inputs)
    return frozenset(model.tensors[i].name for i in written if readers.get(i, set()) <= chosen)


def int16_operators(model: FlatbufferModel) -> set[int]:
    """The operators an all-int16 recipe (int16x8) runs at int16: those ai-edge-quantizer has an
    int16 recipe for (SQUARED_DIFFERENCE, for one, it has not)."""
    from .operator_scopes import has_int16_recipe

    return {op.index for op in model.operators if has_int16_recipe(op.opcode)}


def _max_abs(qsv: Any) -> float:
    return max(abs(float(np.min(qsv["min"]))), abs(float(np.max(qsv["max"]))))


def union_of(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The min/max ranges over both halves' samples (what one calibration over all of them gives)."""
    result = {**second, **first}
    for name in first.keys() & second.keys():
        a, b = first[name], second[name]
        if isinstance(a, dict) and isinstance(b, dict) and {"min", "max"} <= a.keys() & b.keys():
            # the halves' own dtype kept: float64 bounds would round scales differently from float32 ones
            result[name] = {**a, "min": np.minimum(a["min"], b["min"]), "max": np.maximum(a["max"], b["max"])}
    return result


def growth_between(first: dict[str, Any], second: dict[str, Any]) -> dict[str, float]:
    """Per tensor, the larger half's largest |value| over the smaller's, clipped to [1, HEADROOM_CAP]
    (a tensor one half never saw move, or not a number, gets the cap; one that is 0 in both, 1)."""
    growth = {}
    for name in first.keys() & second.keys():
        a, b = first[name], second[name]
        if not (isinstance(a, dict) and isinstance(b, dict) and {"min", "max"} <= a.keys() & b.keys()):
            continue
        big, small = sorted((_max_abs(a), _max_abs(b)), reverse=True)
        if not (np.isfinite(big) and np.isfinite(small)):
            growth[name] = HEADROOM_CAP
        elif big == 0.0:
            growth[name] = 1.0
        else:
            growth[name] = float(np.clip(big / small, 1.0, HEADROOM_CAP)) if small > 0 else HEADROOM_CAP
    return growth


def with_headroom(
    qsvs: dict[str, Any], names: Iterable[str], model: FlatbufferModel, growth: dict[str, float]
) -> tuple[dict[str, Any], tuple[RangeHeadroom, ...]]:
    """``qsvs`` (ai-edge-quantizer's min/max by tensor name) with each named tensor's range
    multiplied by its ``growth`` (zero stays inside; a range on one side of zero grows away from
    it), except constants, a normalization's statistics and tensors without a growth above 1;
    returns them and the tensors widened, by name."""
    skip = statistic_tensors(model) | {t.name for t in model.tensors if t.is_constant}
    result, widened = dict(qsvs), []
    for name in sorted(set(names) - skip):
        qsv, factor = qsvs.get(name), growth.get(name, 1.0)
        if not isinstance(qsv, dict) or "min" not in qsv or "max" not in qsv or not factor > 1.0:
            continue
        lo, hi = np.asarray(qsv["min"], np.float64), np.asarray(qsv["max"], np.float64)
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            continue  # a range that is not a number is not made wider (quantize_flatbuffer reports it)
        new_lo, new_hi = np.minimum(lo, 0.0) * factor, np.maximum(hi, 0.0) * factor
        if np.any(np.abs(new_lo) > np.finfo(np.float32).max) or np.any(new_hi > np.finfo(np.float32).max):
            continue  # beyond float32: the calibrated range is kept
        result[name] = {**qsv, "min": new_lo.astype(np.float32), "max": new_hi.astype(np.float32)}
        widened.append(RangeHeadroom(name, math.ceil(float(factor) * 1000) / 1000))  # rounded up: above 1 as it is
    return result, tuple(widened)
