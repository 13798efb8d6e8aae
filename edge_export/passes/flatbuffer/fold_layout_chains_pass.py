"""Fold chains of TRANSPOSE and RESHAPE operators into the one operator they amount to (or none).

A NHWC feature map handed to code written for NCHW leaves chains of layout operators: a TRANSPOSE
back to NCHW and the RESHAPE of a ``flatten``; a TRANSPOSE that only moves size-1 axes
(``[N, 1, 1, C]`` to ``[N, C, 1, 1]``, after a reduction with ``keep_dims``); a TRANSPOSE whose
next TRANSPOSE undoes it. Each TRANSPOSE copies its input (arena and time on a microcontroller) and
splits NPU and GPU partitions where a RESHAPE costs nothing (TFLite runs it in place; Vela removes
it).

A chain is a run of TRANSPOSE, RESHAPE, SQUEEZE and EXPAND_DIMS operators, each reading the one
before it and the only reader of its input (no subgraph output in the middle), with static shapes
and one type and quantization throughout (layout operators never requantize). What the chain does
is computed, not pattern-matched: the flat indices of its input (``arange``, of the input's shape)
are sent through every operator with numpy; then

- if they come out in order, the chain only changes the shape: one RESHAPE, or nothing when the
  shape does not change either (readers take the chain's input);
- else if two or more of its operators amount to one permutation of the input's axes: one
  TRANSPOSE.

So the result is exact by construction: the same elements in the same order. A chain of a single
RESHAPE-like operator is left as it is; a feature map above ``MAX_ELEMENTS`` elements is skipped
(the index arrays are built in memory).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .graph_edits import add_int32_constant, consumers_of, drop_unused_tensors, new_operator, opcode_name, same_quantization, static_shape

__all__ = ["LAYOUT_OPCODES", "MAX_ELEMENTS", "fold_layout_chains_pass"]

LAYOUT_OPCODES = frozenset({"TRANSPOSE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS"})
MAX_ELEMENTS = 1 << 24  # 16 Mi elements: 64 MiB of int32 indices per step
SUFFIX = ";layout"


def fold_layout_chains_pass(model: Any) -> bool:
    """Replace each chain of layout operators by the single RESHAPE or TRANSPOSE it amounts to
    (or by nothing); True if any chain changed."""
    changed = False
    for sg in model.subgraphs or ():
        # Each fold removes an operator or turns a TRANSPOSE into a RESHAPE: bounded.
        while _fold_one(model, sg):
            changed = True
    if changed:
        drop_unused_tensors(model)
    return changed


def _fold_one(model: Any, sg: Any) -> bool:
    readers = consumers_of(sg)
    boundary = {int(i) for i in (*(sg.inputs if sg.inputs is not None else ()), *(sg.outputs if sg.outputs is not None else ()))}
    for op in sg.operators or ():
        chain = _chain_from(model, sg, op, readers, boundary)
        # The longest foldable start of the chain: [T, T^-1, RESHAPE, T'] may fold only its first two.
        for end in range(len(chain), 0, -1):
            part = chain[:end]
            if (len(part) > 1 or opcode_name(model, part[0]) == "TRANSPOSE") and _replace(model, sg, part, readers, boundary):
                return True
    return False


def _chain_from(model: Any, sg: Any, op: Any, readers: dict[int, list[Any]], boundary: set[int]) -> list[Any]:
    if opcode_name(model, op) not in LAYOUT_OPCODES:
        return []
    chain = [op]
    while True:
        out = int(chain[-1].outputs[0])
        nxt = readers.get(out, [])
        if out in boundary or len(nxt) != 1 or opcode_name(model, nxt[0]) not in LAYOUT_OPCODES or int(nxt[0].inputs[0]) != out:
            return chain
        chain.append(nxt[0])


def _indices_through(model: Any, sg: Any, chain: list[Any]) -> np.ndarray | None:
    """The input's flat indices after every operator of the chain; None when not computable."""
    from .graph_edits import constant_values

    shape = static_shape(sg, int(chain[0].inputs[0]))
    if shape is None or int(np.prod(shape, dtype=np.int64)) > MAX_ELEMENTS:
        return None
    indices = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int32).reshape(shape)
    for op in chain:
        out_shape = static_shape(sg, int(op.outputs[0]))
        if out_shape is None:
            return None
        if opcode_name(model, op) == "TRANSPOSE":
            perm = constant_values(model, sg, int(op.inputs[1])) if len(op.inputs) > 1 else None
            if perm is None or sorted(perm.tolist()) != list(range(indices.ndim)):
                return None
            indices = np.transpose(indices, perm.tolist())
        if indices.size != int(np.prod(out_shape, dtype=np.int64)):
            return None
        indices = indices.reshape(out_shape)
    return indices


def _replace(model: Any, sg: Any, chain: list[Any], readers: dict[int, list[Any]], boundary: set[int]) -> bool:
    first_in, last_out = int(chain[0].inputs[0]), int(chain[-1].outputs[0])
    if not same_quantization(sg, first_in, *(int(op.outputs[0]) for op in chain)):
        return False
    indices = _indices_through(model, sg, chain)
    if indices is None:
        return False
    if np.array_equal(indices.ravel(), np.arange(indices.size)):
        if static_shape(sg, first_in) == indices.shape and last_out not in boundary:
            for reader in readers.get(last_out, []):
                reader.inputs = [first_in if int(i) == last_out else int(i) for i in reader.inputs]
            _remove(sg, chain)
            return True
        _splice(sg, chain, _reshape(model, sg, first_in, last_out, indices.shape))
        return True
    perm = _single_permutation(static_shape(sg, first_in), indices)
    if perm is None or len(chain) < 2:
        return False
    _splice(sg, chain, _transpose(model, sg, first_in, last_out, perm))
    return True


def _single_permutation(in_shape: tuple[int, ...], indices: np.ndarray) -> list[int] | None:
    """The permutation of the input's axes that gives ``indices``, if one does (rank 6 at most)."""
    if len(in_shape) != indices.ndim or indices.ndim > 6 or sorted(in_shape) != sorted(indices.shape):
        return None
    source = np.arange(indices.size, dtype=np.int32).reshape(in_shape)
    for perm in itertools.permutations(range(len(in_shape))):
        if tuple(in_shape[p] for p in perm) == indices.shape and np.array_equal(np.transpose(source, perm), indices):
            return list(perm)
    return None


def _reshape(model: Any, sg: Any, source: int, target: int, shape: tuple[int, ...]) -> Any:
    from ai_edge_litert import schema_py_generated as schema

    options = schema.ReshapeOptionsT()
    options.newShape = [int(d) for d in shape]
    new_shape = add_int32_constant(model, sg, list(shape), _name(sg, target) + SUFFIX + "_shape")
    return new_operator(model, "RESHAPE", [source, new_shape], [target], options)


def _transpose(model: Any, sg: Any, source: int, target: int, perm: list[int]) -> Any:
    from ai_edge_litert import schema_py_generated as schema

    constant = add_int32_constant(model, sg, perm, _name(sg, target) + SUFFIX + "_perm")
    return new_operator(model, "TRANSPOSE", [source, constant], [target], schema.TransposeOptionsT())


def _splice(sg: Any, chain: list[Any], replacement: Any) -> None:
    """Put ``replacement`` where the chain's last operator was (its readers come after it) and
    remove the chain."""
    at = next(i for i, op in enumerate(sg.operators) if op is chain[-1])
    sg.operators.insert(at, replacement)
    _remove(sg, chain)


def _remove(sg: Any, chain: list[Any]) -> None:
    sg.operators = [op for op in sg.operators if not any(op is c for c in chain)]


def _name(sg: Any, index: int) -> str:
    name = sg.tensors[index].name
    return name.decode() if isinstance(name, bytes) else (name or "")
