"""Reading and editing the main subgraph of a mutable model (``ModelT``) for the passes that fold or
remove operators: opcode names, constant values as numpy arrays, and rewiring readers."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["opcode_name", "constant_value", "set_constant", "numpy_dtype", "replace_reads", "same_quantization"]


def opcode_name(model: Any, op: Any) -> str:
    from ai_edge_litert import schema_py_generated as schema

    code = model.operatorCodes[op.opcodeIndex]
    value = max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)
    return next((k for k, v in vars(schema.BuiltinOperator).items() if v == value), str(value))


def numpy_dtype(tensor: Any) -> np.dtype | None:
    """The numpy dtype of a tensor's type, or None for types numpy has no plain type for."""
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    name = names.get(tensor.type, "")
    try:
        return np.dtype("bool" if name == "bool" else name)
    except TypeError:
        return None


def constant_value(model: Any, sg: Any, index: int) -> np.ndarray | None:
    """Tensor ``index``'s value when it is a constant the model holds, else None."""
    if index < 0:
        return None
    tensor = sg.tensors[index]
    data = model.buffers[tensor.buffer].data if tensor.buffer else None
    dtype = numpy_dtype(tensor)
    if data is None or len(data) == 0 or dtype is None:
        return None
    shape = [int(d) for d in (tensor.shape if tensor.shape is not None else [])]
    raw = np.asarray(data, dtype=np.uint8).tobytes()
    if len(raw) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        return None
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape)


def set_constant(model: Any, sg: Any, index: int, value: np.ndarray) -> None:
    """Make tensor ``index`` a constant holding ``value`` (in a buffer of its own)."""
    from ai_edge_litert import schema_py_generated as schema

    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    sg.tensors[index].buffer = len(model.buffers) - 1


def replace_reads(sg: Any, old: int, new: int) -> None:
    """Every operator that reads tensor ``old`` reads ``new`` instead."""
    for op in sg.operators:
        if op.inputs is not None and old in list(op.inputs):
            op.inputs = [new if i == old else i for i in op.inputs]


def same_quantization(a: Any, b: Any) -> bool:
    """Whether two tensors carry the same quantization parameters (both none counts)."""
    def key(tensor: Any) -> tuple:
        q = tensor.quantization
        if q is None or q.scale is None or len(q.scale) == 0:
            return ()
        return (tuple(np.asarray(q.scale).tolist()), tuple(np.asarray(q.zeroPoint).tolist()), q.quantizedDimension)

    return key(a) == key(b)
