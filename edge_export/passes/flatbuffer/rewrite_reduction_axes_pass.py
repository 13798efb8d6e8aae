"""Reduce an NHWC tensor over NHWC axes instead of transposing it to NCHW first.

litert-torch's layout pass keeps a CNN's feature maps NHWC only while they stay 4-D: a reduction
that drops axes (``x.mean((2, 3))``, ``x.amax(1)``, ``x.sum((2, 3))``: how most hand-written CNNs
pool) is traced as NCHW, so the converter writes a TRANSPOSE of the whole feature map to NCHW
before the MEAN. On a microcontroller that TRANSPOSE is a copy of the largest activation (arena
and time); Vela then also leaves the MEAN over axes (2, 3) on the Cortex-M (the NPU reduces over
H and W of NHWC only).

For a TRANSPOSE with permutation ``p`` feeding a reduction over ``axes`` (MEAN, SUM, REDUCE_MAX,
REDUCE_MIN, REDUCE_PROD, REDUCE_ANY, REDUCE_ALL), the reduction reads the TRANSPOSE's input over
``p[axes]`` instead: the same elements are reduced, so the values are the same (up to the order of
a float sum). What is left of the permutation is applied to the (much smaller) result, and only
when it moves something: without ``keep_dims`` the kept axes of ``x.mean((2, 3))`` are N and C in
both layouts, so nothing is left; with ``keep_dims`` the result is ``[N, 1, 1, C]`` and a TRANSPOSE
to ``[N, C, 1, 1]``, which moves only size-1 axes and which ``fold_layout_chains_pass`` turns into
a RESHAPE (or folds into the flatten after it). The TRANSPOSE disappears once nothing else reads
it.

An elementwise operator between the TRANSPOSE and reductions (the DEQUANTIZE in front of a
reduction the quantizer kept in float, an activation) is moved above the TRANSPOSE first: it
computes the same values in either layout.

Quantized models: the TRANSPOSE's input and output must have the same type and quantization
(TFLite's int8 TRANSPOSE requires it, and both backends write it so); the reduction's own output
quantization is kept. A reduction whose axes or permutation are not constants is left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph_edits import (
    add_activation_like,
    add_int32_constant,
    constant_values,
    consumers_of,
    drop_unused_tensors,
    new_operator,
    opcode_name,
    producers_of,
    same_quantization,
    static_shape,
)

__all__ = ["REDUCTION_OPCODES", "rewrite_reduction_axes_pass"]

REDUCTION_OPCODES = frozenset({"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL"})
# Elementwise operators of one input: they commute with a TRANSPOSE.
ELEMENTWISE_OPCODES = frozenset({
    "DEQUANTIZE", "QUANTIZE", "RELU", "RELU6", "LOGISTIC", "TANH", "ABS", "NEG", "EXP", "LOG", "SQRT", "SQUARE",
    "HARD_SWISH", "LEAKY_RELU", "GELU",
})
SUFFIX = ";nhwc"  # the reduction's result before the permutation left over (names no module)


def rewrite_reduction_axes_pass(model: Any) -> bool:
    """Let every reduction fed by a constant TRANSPOSE reduce the TRANSPOSE's input over the
    permuted axes; True if any changed."""
    changed = False
    for sg in model.subgraphs or ():
        hoisted = [op for op in list(sg.operators or ()) if _hoist_above_transpose(model, sg, op)]
        producers = producers_of(sg)
        sources = [source for op in list(sg.operators or ()) if (source := _rewrite(model, sg, op, producers)) is not None]
        changed = changed or bool(hoisted)
        if sources:
            _drop_unread(sg, sources)
            changed = True
    if changed:
        drop_unused_tensors(model)
    return changed


def _hoist_above_transpose(model: Any, sg: Any, op: Any) -> bool:
    """``TRANSPOSE -> op -> reductions`` becomes ``op -> TRANSPOSE -> reductions`` for an
    elementwise ``op`` (a DEQUANTIZE/QUANTIZE around an operator the quantizer kept in float, an
    activation), so the new TRANSPOSE, read by reductions only, is removed by the rewrite below."""
    if opcode_name(model, op) not in ELEMENTWISE_OPCODES or len(op.inputs) != 1:
        return False
    source = producers_of(sg).get(int(op.inputs[0]))
    if source is None or opcode_name(model, source) != "TRANSPOSE" or len(source.inputs) < 2:
        return False
    readers = consumers_of(sg).get(int(op.outputs[0]), [])
    if not readers or int(op.outputs[0]) in set(sg.outputs or ()):
        return False
    # only when every reader is a reduction the rewrite below takes (constant axes), else the
    # TRANSPOSE would be doubled, not removed
    if any(opcode_name(model, r) not in REDUCTION_OPCODES or len(r.inputs) < 2 or constant_values(model, sg, int(r.inputs[1])) is None for r in readers):
        return False
    if not same_quantization(sg, int(source.inputs[0]), int(source.outputs[0])) or static_shape(sg, int(source.inputs[0])) is None:
        return False
    output = int(op.outputs[0])
    early = add_activation_like(sg, output, static_shape(sg, int(source.inputs[0])), SUFFIX)
    op.inputs, op.outputs = [int(source.inputs[0])], [early]
    after = new_operator(model, "TRANSPOSE", [early, int(source.inputs[1])], [output], _transpose_options())
    sg.operators.insert(next(i for i, o in enumerate(sg.operators) if o is op) + 1, after)
    _drop_unread(sg, [source])
    return True


def _transpose_feeding(model: Any, sg: Any, op: Any, producers: dict[int, Any]) -> tuple[Any, np.ndarray] | None:
    """The TRANSPOSE feeding reduction ``op`` and its permutation, when the rewrite applies."""
    if opcode_name(model, op) not in REDUCTION_OPCODES or len(op.inputs) < 2:
        return None
    source = producers.get(int(op.inputs[0]))
    if source is None or opcode_name(model, source) != "TRANSPOSE" or len(source.inputs) < 2:
        return None
    perm = constant_values(model, sg, int(source.inputs[1]))
    if perm is None or sorted(perm.tolist()) != list(range(perm.size)):
        return None
    if not same_quantization(sg, int(source.inputs[0]), int(source.outputs[0])):
        return None
    if static_shape(sg, int(source.inputs[0])) is None:
        return None
    return source, perm


def _rewrite(model: Any, sg: Any, op: Any, producers: dict[int, Any]) -> Any:
    """Rewrite reduction ``op`` when it reads a TRANSPOSE; that TRANSPOSE, else None."""
    found = _transpose_feeding(model, sg, op, producers)
    if found is None:
        return None
    source, perm = found
    rank = perm.size
    axes = constant_values(model, sg, int(op.inputs[1]))
    if axes is None or any(not -rank <= a < rank for a in axes.tolist()):
        return None
    reduced = sorted({int(a) % rank for a in axes.tolist()})
    new_axes = sorted(int(perm[a]) for a in reduced)
    keep_dims = bool(getattr(op.builtinOptions, "keepDims", False))
    # The permutation still to apply to the new result: all of ``perm`` with keep_dims (the reduced
    # axes stay, size 1), else the order of the kept axes.
    kept = [int(perm[j]) for j in range(rank) if j not in reduced]
    left = perm.tolist() if keep_dims else [sorted(kept).index(k) for k in kept]
    in_shape = static_shape(sg, int(source.inputs[0]))
    name = sg.tensors[int(op.inputs[1])].name
    op.inputs = [int(source.inputs[0]), add_int32_constant(model, sg, new_axes, _text(name) + SUFFIX), *op.inputs[2:]]
    if left == list(range(len(left))):
        return source
    output = int(op.outputs[0])
    shape = [1 if d in new_axes else in_shape[d] for d in range(rank)] if keep_dims else [in_shape[d] for d in sorted(kept)]
    result = add_activation_like(sg, output, shape, SUFFIX)
    op.outputs = [result, *op.outputs[1:]]
    transpose = new_operator(model, "TRANSPOSE", [result, add_int32_constant(model, sg, left, _text(sg.tensors[output].name) + SUFFIX + "_perm")], [output], _transpose_options())
    sg.operators.insert(sg.operators.index(op) + 1, transpose)
    return source


def _drop_unread(sg: Any, transposes: list[Any]) -> None:
    """Remove those of ``transposes`` whose result nothing reads any more (nor is a subgraph output)."""
    readers = consumers_of(sg)
    outputs = {int(i) for i in (sg.outputs if sg.outputs is not None else ())}
    unread = [t for t in transposes if int(t.outputs[0]) not in outputs and not readers.get(int(t.outputs[0]))]
    sg.operators = [op for op in sg.operators if not any(op is t for t in unread)]


def _transpose_options() -> Any:
    from ai_edge_litert import schema_py_generated as schema

    return schema.TransposeOptionsT()


def _text(name: Any) -> str:
    return name.decode() if isinstance(name, bytes) else (name or "")
