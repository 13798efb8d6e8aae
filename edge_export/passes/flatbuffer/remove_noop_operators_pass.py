"""Remove operators that return their input unchanged: a BROADCAST_TO, RESHAPE, EXPAND_DIMS or
SQUEEZE to the shape the tensor already has, a TRANSPOSE by the identity permutation.

An ``x.expand(1, -1, -1)`` of a ``[1, 1, 192]`` tensor (a ViT's class token at batch 1) is such an
operator: it computes nothing, costs a copy, and a BROADCAST_TO is not on the GPU delegate's list,
so it also splits the GPU partition. Readers of its output read its input instead. An operator
whose output is a subgraph output, or whose input and output differ in type or quantization, stays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model_graph import constant_value, drop_unused_tensors, opcode_name, replace_reads, same_quantization

__all__ = ["remove_noop_operators_pass"]

_SHAPE_OPERATORS = ("BROADCAST_TO", "RESHAPE", "EXPAND_DIMS", "SQUEEZE")


def _is_noop(model: Any, sg: Any, op: Any) -> bool:
    opcode = opcode_name(model, op)
    if opcode not in (*_SHAPE_OPERATORS, "TRANSPOSE") or not op.inputs or len(op.outputs) != 1:
        return False
    src, out = sg.tensors[op.inputs[0]], sg.tensors[op.outputs[0]]
    if op.outputs[0] in set(sg.outputs) or src.type != out.type or not same_quantization(src, out):
        return False
    if list(src.shape if src.shape is not None else []) != list(out.shape if out.shape is not None else []):
        return False
    if any(d < 0 for d in (src.shapeSignature if src.shapeSignature is not None else [])):
        return False  # a dynamic dimension: equal static shapes say nothing
    if opcode == "TRANSPOSE":
        perm = constant_value(model, sg, op.inputs[1])
        return perm is not None and list(np.asarray(perm).ravel()) == list(range(len(src.shape)))
    return True


def remove_noop_operators_pass(model: Any) -> bool:
    """Drop the main subgraph's operators that return their input unchanged; readers are rewired."""
    sg = model.subgraphs[0]
    kept, changed = [], False
    for op in sg.operators:
        if _is_noop(model, sg, op) and not any(o >= 0 and sg.tensors[o].isVariable for o in op.outputs):  # a state reset writes it
            replace_reads(sg, op.outputs[0], op.inputs[0])
            changed = True
        else:
            kept.append(op)
    sg.operators = kept
    if changed:
        drop_unused_tensors(model)  # the removed operators' outputs
    return changed
