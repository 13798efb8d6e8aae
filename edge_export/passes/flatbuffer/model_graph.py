"""Reading and editing the main subgraph of a mutable model (``ModelT``) for the passes that fold or
remove operators: opcode names, constant values as numpy arrays, and rewiring readers."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["opcode_name", "constant_value", "set_constant", "numpy_dtype", "replace_reads", "same_quantization", "drop_unused_tensors"]


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


def drop_unused_tensors(model: Any, sg_index: int = 0) -> None:
    """Remove the tensors of a subgraph that no operator reads or writes and that are not its inputs,
    outputs or signature entries (a folded or removed operator's), renumbering every reference;
    the data of a buffer only they held is dropped. ai-edge-quantizer reads every tensor while
    calibrating and fails on one that nothing writes."""
    sg = model.subgraphs[sg_index]
    used = {int(i) for i in (*(sg.inputs if sg.inputs is not None else []), *(sg.outputs if sg.outputs is not None else []))}
    for op in sg.operators:
        for field in (op.inputs, op.outputs, op.intermediates):
            used.update(int(i) for i in (field if field is not None else []) if i >= 0)
    for sd in model.signatureDefs or []:
        if int(sd.subgraphIndex or 0) == sg_index:
            used.update(int(tm.tensorIndex) for tm in (*(sd.inputs or []), *(sd.outputs or [])))
    if len(used) == len(sg.tensors):
        return
    keep = sorted(used)
    new_index = {old: new for new, old in enumerate(keep)}
    for old in set(range(len(sg.tensors))) - used:
        buffer = sg.tensors[old].buffer
        if buffer and sum(t.buffer == buffer for t in sg.tensors) == 1:
            model.buffers[buffer].data = None

    def remap(values: Any) -> Any:
        return None if values is None else [new_index[int(i)] if i >= 0 else int(i) for i in values]

    for op in sg.operators:
        op.inputs, op.outputs, op.intermediates = remap(op.inputs), remap(op.outputs), remap(op.intermediates)
    sg.inputs, sg.outputs = remap(sg.inputs), remap(sg.outputs)
    for sd in model.signatureDefs or []:
        if int(sd.subgraphIndex or 0) == sg_index:
            for tm in (*(sd.inputs or []), *(sd.outputs or [])):
                tm.tensorIndex = new_index[int(tm.tensorIndex)]
    sg.tensors = [sg.tensors[i] for i in keep]
