"""A normalization's RSQRT range without the rows that are constant.

LayerNorm and RMSNorm reach the flatbuffer as ``z * RSQRT(MEAN(z * z) + eps)`` (z = x - mean for
LayerNorm, x for RMSNorm). On a row where z is all zeros (a class token a model initialises to
zeros and no patch is added to, a padded frame) the output is 0 whatever RSQRT gives, but the
calibrated RSQRT range reaches 1/sqrt(eps): 1e6 for eps = 1e-12. Every other row's 1/sqrt(var + eps)
(2 to 10 in the zoo's DeiT) then falls inside one int8 step, and the model reads 1 dB. A constant
row calibrated nothing the model needs, so the RSQRT's upper bound is taken over the other rows.
Only rows whose MEAN(z * z) + eps rounds to eps are left out (z is 0 there, or below float32's
resolution of eps), and only RSQRTs that MULs alone read: on those rows the products are 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..flatbuffer import FlatbufferModel

# Operators that compute z * z (SQUARED_DIFFERENCE: (a - b)^2, ai-edge-quantizer's int16 path has it
# as SUB then MUL of the difference with itself).
_SQUARES = ("SQUARE", "SQUARED_DIFFERENCE", "MUL")


# Operators that only move values: a RSQRT output reshaped for broadcasting has its range.
_LAYOUT = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "BROADCAST_TO")


@dataclass(frozen=True)
class NormalizationRsqrt:
    """RSQRT(``sum_name`` = MEAN(z * z) + ``epsilon``) -> ``output_name``, in one model, and the
    tensors layout operators make of that output (``copies``)."""

    sum_name: str
    output_name: str
    epsilon: float
    copies: tuple[str, ...] = ()


def _constant_scalar(model: FlatbufferModel, index: int) -> float | None:
    tensor = model.tensors[index]
    if not tensor.is_constant or int(np.prod(tensor.shape, dtype=np.int64)) != 1 or not tensor.is_float:
        return None
    value = model.constant(index)
    return float(np.asarray(value, dtype=np.float64).ravel()[0]) if value is not None and np.size(value) == 1 else None


def _source(model: FlatbufferModel, index: int) -> int:
    """The tensor ``index`` is a layout copy of (itself when a computing operator makes it)."""
    for _ in range(len(model.operators)):  # each step goes one operator back: bounded by their number
        op = model.producer_of(index)
        if op is None or op.opcode not in _LAYOUT or not op.inputs:
            return index
        index = op.inputs[0]
    return index


def _producer(model: FlatbufferModel, index: int) -> Any:
    """The computing operator behind tensor ``index``, past layout operators."""
    return model.producer_of(_source(model, index))


def _is_square(model: FlatbufferModel, index: int) -> bool:
    op = _producer(model, index)
    if op is None or op.opcode not in _SQUARES:
        return False
    return op.opcode != "MUL" or (len(op.inputs) == 2 and _source(model, op.inputs[0]) == _source(model, op.inputs[1]))


def normalization_rsqrts(model: FlatbufferModel) -> list[NormalizationRsqrt]:
    """Every RSQRT of a mean of squares plus a positive constant, in ``model``'s main subgraph."""
    found = []
    for op in model.operators:
        if op.opcode != "RSQRT" or len(op.inputs) != 1:
            continue
        add = _producer(model, op.inputs[0])
        if add is None or add.opcode != "ADD" or len(add.inputs) != 2:
            continue
        for mean_side, eps_side in ((0, 1), (1, 0)):
            eps = _constant_scalar(model, add.inputs[eps_side])
            mean = _producer(model, add.inputs[mean_side])
            if eps is not None and eps > 0 and mean is not None and mean.opcode == "MEAN" and _is_square(model, mean.inputs[0]):
                copies = _layout_copies(model, op.outputs[0])
                if _only_products_read(model, (op.outputs[0], *copies)):
                    found.append(NormalizationRsqrt(model.tensors[op.inputs[0]].name, model.tensors[op.outputs[0]].name, eps,
                                                    tuple(model.tensors[i].name for i in copies)))
                break
    return found


def _layout_copies(model: FlatbufferModel, index: int) -> tuple[int, ...]:
    """The tensors layout operators make of tensor ``index``, transitively (each operator once)."""
    copies, todo, seen = [], [index], set()
    while todo:
        current = todo.pop()
        for op in model.operators:
            if op.index in seen or op.opcode not in _LAYOUT or not op.inputs or op.inputs[0] != current:
                continue
            seen.add(op.index)
            copies.append(op.outputs[0])
            todo.append(op.outputs[0])
    return tuple(copies)


def _only_products_read(model: FlatbufferModel, tensors: tuple[int, ...]) -> bool:
    """Whether only MULs (and the layout copies themselves) read these tensors: a product with a
    zero row is zero whatever the RSQRT gave, which is what makes leaving constant rows out exact.
    A RSQRT read any other way (an output, an ADD) keeps its calibrated range."""
    if any(i in model.outputs for i in tensors):
        return False
    readers = [op for op in model.operators if any(i in tensors for i in op.inputs)]
    return all(op.opcode == "MUL" or (op.opcode in _LAYOUT and op.outputs[0] in tensors) for op in readers)


def without_constant_rows(model: FlatbufferModel, samples: Sequence[Sequence[np.ndarray]], qsvs: dict) -> tuple[dict, list[str]]:
    """``qsvs`` (tensor name -> min/max) with the upper bound of each normalization's RSQRT taken
    over the rows whose MEAN(z * z) is not 0, when calibration saw such a row; and the names of the
    tensors changed (RSQRT outputs and their layout copies). The float model is run once more over
    ``samples`` (with those sums as outputs), only when a constant row was seen."""
    seen = [n for n in normalization_rsqrts(model) if n.sum_name in qsvs and n.output_name in qsvs
            and float(np.min(qsvs[n.sum_name]["min"])) <= n.epsilon]
    if not seen:
        return qsvs, []
    upper = _upper_bounds_without_constant_rows(model, samples, seen)
    result, changed = dict(qsvs), []
    for norm in seen:
        bound = upper.get(norm.output_name)
        for name in (norm.output_name, *norm.copies):
            old = qsvs.get(name)
            if bound is None or old is None or not bound < float(np.max(old["max"])):
                continue
            result[name] = {**old, "max": np.full(np.shape(old["max"]), bound, dtype=np.float32)}
            changed.append(name)
    return result, changed


def _upper_bounds_without_constant_rows(model: FlatbufferModel, samples: Sequence[Sequence[np.ndarray]],
                                        norms: Sequence[NormalizationRsqrt]) -> dict[str, float]:
    """RSQRT output name -> the largest 1/sqrt(MEAN(z * z) + eps) over rows whose mean is not 0.

    The sums are read as extra outputs of the model run as apps run it (expose_tensors_pass), not
    with every tensor kept: on the zoo's YOLOS that made this run 22.6 s of a 26.6 s quantization."""
    from functools import partial

    from ..passes.flatbuffer import expose_tensors_pass, run_flatbuffer_passes
    from ..runtime.interpreter import TFLiteRunner

    names = {norm.sum_name for norm in norms}
    exposed = run_flatbuffer_passes(model, [partial(expose_tensors_pass, names=names)], origin="the float model with its normalization sums as outputs").model
    runner = TFLiteRunner(exposed)
    by_name = {exposed.tensors[i].name: i for i in exposed.outputs if exposed.tensors[i].name in names}
    smallest: dict[str, float] = {}
    for sample in samples:
        runner.run(list(sample))
        for norm in norms:
            if norm.sum_name not in by_name:
                continue
            sums = np.asarray(runner.tensor(by_name[norm.sum_name]), dtype=np.float32).ravel()
            live = sums[np.isfinite(sums) & (sums > np.float32(norm.epsilon))]
            if live.size:
                smallest[norm.output_name] = min(smallest.get(norm.output_name, np.inf), float(live.min()))
    return {name: float(np.float32(1.0) / np.sqrt(np.float32(low))) for name, low in smallest.items()}
