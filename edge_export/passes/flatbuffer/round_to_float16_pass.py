"""Round a float model's weights and every operator's activations to float16, the way the GPU delegate
stores them by default (``--target gpu``'s precision check, ``targets/gpu/precision.py``).

The delegate, unless an app forces float32, keeps weights and activations in float16: each operator
reads float16 tensors and writes a float16 tensor. This pass makes the CPU interpreter see the same
values: every float32 constant is rounded to float16 in place (kept float32, so every kernel still
takes it), and every float32 activation the main subgraph computes, model inputs included, goes
through a CAST to float16 and a CAST back before anything reads it. A value above 65504 becomes
Inf there, as on the GPU, and a small one underflows to zero.

The rewrite keeps each tensor's index and name for the rounded value (the operator now writes a new
``<name>/unrounded`` tensor), so the signature, the model's outputs and every consumer read the
rounded tensor (a model input stays the input; the operators read its rounding, ``<name>/rounded``), and a tensor of the rounded run is compared by name with the same tensor of the
float32 run. What it does not model: the arithmetic inside an operator (the delegate may also
accumulate in float16 on some GPUs; here each operator computes in float32 between roundings) and the
delegate's operator fusions. Only the main subgraph is rewritten.
"""

from __future__ import annotations

import copy
from typing import Any

from .graph_edits import opcode_index

__all__ = ["round_to_float16_pass", "UNROUNDED_SUFFIX"]

UNROUNDED_SUFFIX = "/unrounded"


def _round_constants(model: Any, sg: Any, float32: int) -> bool:
    import numpy as np

    changed = False
    for t in sg.tensors or []:
        buf = model.buffers[t.buffer] if t.buffer else None
        if t.type != float32 or buf is None or buf.data is None or len(buf.data) == 0:
            continue
        values = np.frombuffer(np.asarray(buf.data, dtype=np.uint8).tobytes(), dtype="<f4")
        with np.errstate(over="ignore"):  # a weight beyond ±65504 is Inf in float16, as on the GPU
            rounded = values.astype(np.float16).astype("<f4")
        if not np.array_equal(rounded, values, equal_nan=True):
            buf.data = np.frombuffer(rounded.tobytes(), dtype=np.uint8).copy()
            changed = True
    return changed


def _cast(src: int, dst: int, cast_code: int, schema: Any) -> Any:
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = cast_code, [src], [dst]
    return op


def round_to_float16_pass(model: Any) -> bool:
    """Round float32 constants to float16 values and every float32 activation of the main subgraph
    to float16 after the operator (or model input) that makes it; True when anything changed."""
    from ai_edge_litert import schema_py_generated as schema

    float32, float16 = schema.TensorType.FLOAT32, schema.TensorType.FLOAT16
    sg = model.subgraphs[0]
    changed = _round_constants(model, sg, float32)
    tensors = list(sg.tensors or [])
    constant = {i for i, t in enumerate(tensors) if t.buffer and model.buffers[t.buffer].data is not None and len(model.buffers[t.buffer].data)}
    cast_code = opcode_index(model, schema.BuiltinOperator.CAST)
    empty = len(model.buffers)
    model.buffers.append(schema.BufferT())

    def new_tensor(like: Any, name: str, dtype: int) -> int:
        t = copy.deepcopy(like)
        t.name, t.type, t.buffer, t.quantization = name.encode() if isinstance(name, str) else name, dtype, empty, None
        tensors.append(t)
        return len(tensors) - 1

    def rounding(index: int) -> tuple[int, list[Any]]:
        """(the tensor the producer now writes, the two CASTs that fill ``index`` from it)."""
        name = _name(tensors[index])
        raw = new_tensor(tensors[index], name + UNROUNDED_SUFFIX, float32)
        half = new_tensor(tensors[index], name + "/float16", float16)
        return raw, [_cast(raw, half, cast_code, schema), _cast(half, index, cast_code, schema)]

    operators: list[Any] = []
    replaced: dict[int, int] = {}  # model input -> its rounding, which the graph reads instead
    for index in sg.inputs or []:
        if tensors[index].type == float32:
            name = _name(tensors[index])
            half = new_tensor(tensors[index], name + "/float16", float16)
            replaced[index] = new_tensor(tensors[index], name + "/rounded", float32)
            operators += [_cast(index, half, cast_code, schema), _cast(half, replaced[index], cast_code, schema)]
    for op in sg.operators or []:
        op.inputs = [replaced.get(i, i) for i in op.inputs or []]
        operators.append(op)
        outputs = list(op.outputs or [])
        for position, index in enumerate(outputs):
            if index >= 0 and index not in constant and tensors[index].type == float32:
                outputs[position], casts = rounding(index)
                operators += casts
        op.outputs = outputs
    if len(operators) == len(sg.operators or []):
        model.buffers.pop()
        return changed
    sg.tensors, sg.operators = tensors, operators
    return True


def _name(tensor: Any) -> str:
    return tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name or "")
