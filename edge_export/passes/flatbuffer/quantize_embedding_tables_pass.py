"""Store an embedding table in the integer type its lookup's result is quantized to.

ai-edge-quantizer's static recipes leave EMBEDDING_LOOKUP out: the gather reads a float32 table
and a QUANTIZE right after it turns the rows to int8 (or int16). So every text encoder stayed "not
fully integer", with the largest weight of the model (a vocabulary x width table) in float32.
Quantizing each row after the gather is the same as gathering rows of the table quantized once with
the QUANTIZE's scale and zero point (the lookup copies rows; LiteRT's kernel copies integer rows as
it copies float ones). The lookup then writes the QUANTIZE's output tensor itself, the QUANTIZE
goes, and the table shrinks 4x (2x for int16).

Only a lookup whose float result feeds exactly one per-tensor QUANTIZE (and nothing else, not a
graph output) is rewritten; a table other operators also read stays as it is for them.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .graph_edits import consumers_of, unique_name
from .model_graph import constant_value, drop_unused_tensors, opcode_name

__all__ = ["quantize_embedding_tables_pass"]

_INTEGER_TYPES = {"INT8": (np.int8, -128, 127), "INT16": (np.int16, -32768, 32767)}


def _tensor_type_name(tensor: Any) -> str:
    from ai_edge_litert import schema_py_generated as schema

    return next((k for k, v in vars(schema.TensorType).items() if v == tensor.type and not k.startswith("_")), "")


def _per_tensor_params(tensor: Any) -> tuple[float, int] | None:
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) != 1 or q.zeroPoint is None or len(q.zeroPoint) != 1:
        return None
    scale = float(np.asarray(q.scale)[0])
    return (scale, int(np.asarray(q.zeroPoint)[0])) if np.isfinite(scale) and scale > 0 else None


def quantized_rows(table: np.ndarray, scale: float, zero_point: int, type_name: str) -> np.ndarray:
    """``table`` quantized as LiteRT's QUANTIZE kernel does it here: x / scale in float32, rounded
    half to even, plus the zero point, saturated to the type (measured bit for bit against the
    kernel at int8 and int16; rounding half away from zero differed at int16)."""
    dtype, low, high = _INTEGER_TYPES[type_name]
    scaled = table.astype(np.float32) / np.float32(scale)
    return np.clip(np.round(scaled) + zero_point, low, high).astype(dtype)


def _rewritable(model: Any, sg: Any, op: Any, readers: dict[int, list[Any]], outputs: set[int]) -> tuple | None:
    """(QUANTIZE op, float table, scale, zero point, integer type) when ``op`` can read an integer table."""
    if opcode_name(model, op) != "EMBEDDING_LOOKUP" or len(op.inputs) != 2 or len(op.outputs) != 1:
        return None
    gathered = int(op.outputs[0])
    after = readers.get(gathered, [])
    if gathered in outputs or len(after) != 1 or opcode_name(model, after[0]) != "QUANTIZE":
        return None
    table = constant_value(model, sg, int(op.inputs[1]))
    if table is None or table.dtype != np.float32 or _tensor_type_name(sg.tensors[gathered]) != "FLOAT32":
        return None
    quantized_out = sg.tensors[int(after[0].outputs[0])]
    params, type_name = _per_tensor_params(quantized_out), _tensor_type_name(quantized_out)
    if params is None or type_name not in _INTEGER_TYPES or not np.all(np.isfinite(table)):
        return None
    return after[0], table, params[0], params[1], type_name


def _integer_table(model: Any, sg: Any, float_index: int, values: np.ndarray, like: int) -> int:
    """A new constant tensor holding ``values``, named after the float table, typed and quantized
    as ``like`` (the QUANTIZE's output)."""
    from .model_graph import set_constant

    tensor = copy.deepcopy(sg.tensors[like])
    source = sg.tensors[float_index]
    name = source.name.decode() if isinstance(source.name, bytes) else (source.name or "")
    tensor.name = unique_name(sg, name + ";quantized")
    tensor.shape, tensor.shapeSignature = [int(d) for d in source.shape], None
    sg.tensors.append(tensor)
    set_constant(model, sg, len(sg.tensors) - 1, values)
    return len(sg.tensors) - 1


def quantize_embedding_tables_pass(model: Any) -> bool:
    """Rewrite every float lookup followed by its QUANTIZE in the main subgraph; True when any was."""
    sg = model.subgraphs[0]
    readers = consumers_of(sg)
    outputs = {int(i) for i in (sg.outputs if sg.outputs is not None else [])}
    dropped: set[int] = set()
    for op in sg.operators:
        found = _rewritable(model, sg, op, readers, outputs)
        if found is None:
            continue
        quantize, table, scale, zero_point, type_name = found
        result = int(quantize.outputs[0])
        integer_table = _integer_table(model, sg, int(op.inputs[1]), quantized_rows(table, scale, zero_point, type_name), result)
        op.inputs = [int(op.inputs[0]), integer_table]
        op.outputs = [result]
        dropped.add(id(quantize))
    if not dropped:
        return False
    sg.operators = [op for op in sg.operators if id(op) not in dropped]
    drop_unused_tensors(model)
    return True
