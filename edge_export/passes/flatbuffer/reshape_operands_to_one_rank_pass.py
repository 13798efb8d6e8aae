"""Give an elementwise ADD/SUB/MUL/DIV's two operands one rank: the lower-rank one is reshaped.

litert-torch lowers a Linear on ``[1, T, D]`` as a FULLY_CONNECTED on ``[T, D]``, and LiteRT's
converter folds the RESHAPE back to ``[1, T, D]`` into the residual ADD that reads it, which
broadcasts ``[T, D]`` against ``[1, T, D]``. The GPU delegate takes operands of different ranks
only in a few 4-D forms (CheckAddMulBroadcastCompatibility): a ViT's 8 residual ADDs of ``[197,
192]`` and ``[1, 197, 192]`` were left on the CPU, 9 GPU partitions. Here the lower-rank operand
gets leading 1s: a constant by a second tensor over the same buffer, an activation by a RESHAPE
inserted before the operator (the same type and quantization; it moves no value), so the result
is the same tensor bit for bit. Operands of rank 0 or 1 broadcast on the GPU already and are left.
"""

from __future__ import annotations

import copy
from typing import Any

from .graph_edits import add_activation_like, add_int32_constant, new_operator, opcode_name

__all__ = ["reshape_operands_to_one_rank_pass"]

_ELEMENTWISE = frozenset({"ADD", "SUB", "MUL", "DIV"})


def _ranked(sg: Any, op: Any) -> tuple[int, tuple[int, ...]] | None:
    """(position of the lower-rank operand, the shape it is given) when the operands' ranks differ
    and both are above 1, else None."""
    if op.inputs is None or len(op.inputs) != 2 or min(int(i) for i in op.inputs) < 0:
        return None
    shapes = [tuple(int(d) for d in (sg.tensors[int(i)].shape if sg.tensors[int(i)].shape is not None else ())) for i in op.inputs]
    if min(len(s) for s in shapes) < 2 or len(shapes[0]) == len(shapes[1]):
        return None
    low = 0 if len(shapes[0]) < len(shapes[1]) else 1
    return low, (1,) * (len(shapes[1 - low]) - len(shapes[low])) + shapes[low]


def _constant_view(model: Any, sg: Any, index: int, shape: tuple[int, ...]) -> int:
    """A second tensor over ``index``'s buffer with ``shape`` (the same row-major bytes)."""
    tensor = copy.deepcopy(sg.tensors[index])
    tensor.shape, tensor.shapeSignature = list(shape), None
    sg.tensors.append(tensor)
    return len(sg.tensors) - 1


def _reshaped(model: Any, sg: Any, index: int, shape: tuple[int, ...]) -> tuple[int, Any]:
    """(the reshaped activation tensor, the RESHAPE operator writing it)."""
    from ai_edge_litert import schema_py_generated as schema

    out = add_activation_like(sg, index, shape, ";rank")
    name = sg.tensors[out].name
    target = add_int32_constant(model, sg, shape, (name.decode() if isinstance(name, bytes) else name) + ";shape")
    options = schema.ReshapeOptionsT()
    options.newShape = list(shape)
    return out, new_operator(model, "RESHAPE", [index, target], [out], options)


def _is_constant(model: Any, sg: Any, index: int) -> bool:
    buffer = sg.tensors[index].buffer
    return bool(buffer) and model.buffers[buffer].data is not None and len(model.buffers[buffer].data) > 0


def reshape_operands_to_one_rank_pass(model: Any) -> bool:
    """Reshape the lower-rank operand of every elementwise binary operator whose operands' ranks
    (both above 1) differ, in the main subgraph; True when any was."""
    sg = model.subgraphs[0]
    rewritten: list[Any] = []
    changed = False
    for op in sg.operators:
        found = _ranked(sg, op) if opcode_name(model, op) in _ELEMENTWISE else None
        if found is not None:
            position, shape = found
            index = int(op.inputs[position])
            if _is_constant(model, sg, index):
                replacement = _constant_view(model, sg, index, shape)
            else:
                replacement, reshape = _reshaped(model, sg, index, shape)
                rewritten.append(reshape)
            inputs = [int(i) for i in op.inputs]
            inputs[position] = replacement
            op.inputs, changed = inputs, True
        rewritten.append(op)
    sg.operators = rewritten
    return changed
