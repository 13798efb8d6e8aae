"""Small edits of a mutable model (ai-edge-litert's ``ModelT``) shared by the layout passes
(``rewrite_reduction_axes_pass``, ``fold_layout_chains_pass``): reading opcodes and constant
operands, adding constant and activation tensors and operators, and dropping the tensors and
buffers no operator uses any more. Not a pass itself (its name does not end in ``_pass``).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

__all__ = [
    "opcode_name",
    "opcode_index",
    "consumers_of",
    "producers_of",
    "constant_values",
    "float32_constant",
    "add_int32_constant",
    "add_float32_constant",
    "add_activation_like",
    "new_operator",
    "same_quantization",
    "static_shape",
    "drop_unused_tensors",
    "unique_name",
]


def opcode_name(model: Any, op: Any) -> str:
    from ...flatbuffer import opcode_names

    code = model.operatorCodes[op.opcodeIndex]
    return opcode_names().get(max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0), "UNKNOWN")


def opcode_index(model: Any, builtin: int) -> int:
    """The model's operator code for ``builtin`` (version 1 when it is new)."""
    from ai_edge_litert import schema_py_generated as schema

    codes = model.operatorCodes or []
    for index, code in enumerate(codes):
        if max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0) == builtin:
            return index
    code = schema.OperatorCodeT()
    code.builtinCode = builtin
    code.deprecatedBuiltinCode = min(builtin, 127)
    code.version = 1
    codes.append(code)
    model.operatorCodes = codes
    return len(codes) - 1


def consumers_of(sg: Any) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {}
    for op in sg.operators or ():
        for index in op.inputs if op.inputs is not None else ():
            if index >= 0 and op not in found.setdefault(int(index), []):
                found[int(index)].append(op)
    return found


def producers_of(sg: Any) -> dict[int, Any]:
    return {int(index): op for op in sg.operators or () for index in (op.outputs if op.outputs is not None else ())}


def _constant_array(model: Any, sg: Any, index: int, dtypes: dict) -> np.ndarray | None:
    """A constant tensor's values in its shape when its type is one of ``dtypes`` (TensorType ->
    numpy dtype); None for an activation, another type or an empty buffer."""
    if index < 0:
        return None
    tensor = sg.tensors[index]
    data = model.buffers[tensor.buffer].data if tensor.buffer else None
    dtype = dtypes.get(tensor.type)
    if data is None or len(data) == 0 or dtype is None:
        return None
    values = np.frombuffer(np.asarray(data, dtype=np.uint8).tobytes(), dtype=dtype)
    shape = list(tensor.shape) if tensor.shape is not None else None
    # a scalar, or a shape the buffer does not fill (a hostile file): the flat values
    return values.reshape(shape) if shape is not None and int(np.prod(shape)) == values.size else values


def constant_values(model: Any, sg: Any, index: int) -> np.ndarray | None:
    """An int32/int64 constant operand (a permutation, axes, a shape) as an int64 vector; None
    for an activation or another type."""
    from ai_edge_litert import schema_py_generated as schema

    found = _constant_array(model, sg, index, {schema.TensorType.INT32: np.int32, schema.TensorType.INT64: np.int64})
    return None if found is None else found.astype(np.int64).ravel()


def float32_constant(model: Any, sg: Any, index: int) -> np.ndarray | None:
    """A float32 constant tensor's values in its shape (a filter, a bias); None for an activation,
    another type or an empty buffer."""
    from ai_edge_litert import schema_py_generated as schema

    return _constant_array(model, sg, index, {schema.TensorType.FLOAT32: np.float32})


def unique_name(sg: Any, name: str) -> str:
    """``name``, or ``name`` with ``_2``, ``_3``... when a tensor of the subgraph has it already:
    ai-edge-quantizer refuses a model whose tensor names repeat (two MEANs sharing one axes
    constant, each rewritten, gave two ``<axes>;nhwc`` constants and failed FocalNet's int8)."""
    taken = {t.name.decode() if isinstance(t.name, bytes) else (t.name or "") for t in sg.tensors}
    if name not in taken:
        return name
    number = 2
    while f"{name}_{number}" in taken:
        number += 1
    return f"{name}_{number}"


def add_int32_constant(model: Any, sg: Any, values: Any, name: str) -> int:
    from ai_edge_litert import schema_py_generated as schema

    array = np.asarray(values, dtype=np.int32).ravel()
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(array.astype("<i4").tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor = schema.TensorT()
    tensor.name = unique_name(sg, name)
    tensor.shape = [int(array.size)]
    tensor.type = schema.TensorType.INT32
    tensor.buffer = len(model.buffers) - 1
    sg.tensors.append(tensor)
    return len(sg.tensors) - 1


def add_float32_constant(model: Any, sg: Any, values: np.ndarray, name: str) -> int:
    """A new float32 constant tensor holding ``values`` in their shape (a buffer of its own)."""
    from ai_edge_litert import schema_py_generated as schema

    array = np.ascontiguousarray(values, dtype=np.float32)
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(array.astype("<f4").tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor = schema.TensorT()
    tensor.name = unique_name(sg, name)
    tensor.shape = [int(d) for d in array.shape]
    tensor.type = schema.TensorType.FLOAT32
    tensor.buffer = len(model.buffers) - 1
    sg.tensors.append(tensor)
    return len(sg.tensors) - 1


def add_activation_like(sg: Any, like: int, shape: Any, suffix: str) -> int:
    """A new activation tensor with ``like``'s type and quantization, ``shape``, and ``like``'s name
    plus ``suffix`` (a ``;`` part names no module, so provenance still finds ``like``'s module)."""
    tensor = copy.deepcopy(sg.tensors[like])
    name = tensor.name.decode() if isinstance(tensor.name, bytes) else (tensor.name or "")
    tensor.name = unique_name(sg, name + suffix)
    tensor.shape = [int(d) for d in shape]
    tensor.shapeSignature = None
    tensor.buffer = 0  # buffer 0 is the empty sentinel: an activation
    sg.tensors.append(tensor)
    return len(sg.tensors) - 1


def new_operator(model: Any, opcode: str, inputs: list[int], outputs: list[int], options: Any = None) -> Any:
    """An operator of builtin ``opcode`` (its options object, a ``*OptionsT``, named after it)."""
    from ai_edge_litert import schema_py_generated as schema

    op = schema.OperatorT()
    op.opcodeIndex = opcode_index(model, getattr(schema.BuiltinOperator, opcode))
    op.inputs, op.outputs = list(inputs), list(outputs)
    if options is not None:
        op.builtinOptionsType = getattr(schema.BuiltinOptions, type(options).__name__[:-1])
        op.builtinOptions = options
    return op


def _quant_key(tensor: Any) -> tuple:
    q = tensor.quantization
    if q is None or q.scale is None or not len(q.scale):
        return ()
    zero = q.zeroPoint if q.zeroPoint is not None else ()
    return (tuple(float(s) for s in q.scale), tuple(int(z) for z in zero), int(q.quantizedDimension or 0))


def same_quantization(sg: Any, *indices: int) -> bool:
    """Whether the tensors have one type and one quantization (what a layout operator keeps)."""
    keys = {(sg.tensors[i].type, _quant_key(sg.tensors[i])) for i in indices}
    return len(keys) == 1


def static_shape(sg: Any, index: int) -> tuple[int, ...] | None:
    """The tensor's shape, or None when a dimension is dynamic (-1 in its shape signature)."""
    tensor = sg.tensors[index]
    signature = tensor.shapeSignature
    if signature is not None and any(int(d) < 0 for d in signature):
        return None
    return tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ()))


def drop_unused_tensors(model: Any) -> None:
    """Remove the tensors of every subgraph that no operator, subgraph input/output or signature
    refers to, renumbering the rest, then the buffers no tensor refers to any more."""
    for sg_index, sg in enumerate(model.subgraphs or ()):
        used = {int(i) for i in (*(sg.inputs if sg.inputs is not None else ()), *(sg.outputs if sg.outputs is not None else ()))}
        for op in sg.operators or ():
            used.update(int(i) for i in (*(op.inputs if op.inputs is not None else ()), *(op.outputs if op.outputs is not None else ())) if i >= 0)
            used.update(int(i) for i in (op.intermediates if op.intermediates is not None else ()))
        for sig in model.signatureDefs or ():
            if int(sig.subgraphIndex or 0) == sg_index:
                used.update(int(m.tensorIndex) for m in (*(sig.inputs or ()), *(sig.outputs or ())))
        if len(used) == len(sg.tensors):
            continue
        order = sorted(used)
        new = {old: i for i, old in enumerate(order)}
        sg.tensors = [sg.tensors[old] for old in order]
        remap = lambda values: [new[int(i)] if i >= 0 else int(i) for i in values]  # noqa: E731
        sg.inputs, sg.outputs = remap(sg.inputs if sg.inputs is not None else ()), remap(sg.outputs if sg.outputs is not None else ())
        for op in sg.operators or ():
            op.inputs, op.outputs = remap(op.inputs if op.inputs is not None else ()), remap(op.outputs if op.outputs is not None else ())
            if op.intermediates is not None:
                op.intermediates = remap(op.intermediates)
        for sig in model.signatureDefs or ():
            if int(sig.subgraphIndex or 0) == sg_index:
                for m in (*(sig.inputs or ()), *(sig.outputs or ())):
                    m.tensorIndex = new[int(m.tensorIndex)]
    _drop_unreferenced_buffers(model)


def _drop_unreferenced_buffers(model: Any) -> None:
    buffers = model.buffers or []
    used = {0}
    for sg in model.subgraphs or ():
        used.update(int(t.buffer) for t in sg.tensors or ())
    used.update(int(md.buffer) for md in model.metadata or ())
    if len(used) >= len(buffers):
        return
    order = sorted(b for b in used if b < len(buffers))
    new = {old: i for i, old in enumerate(order)}
    model.buffers = [buffers[old] for old in order]
    for sg in model.subgraphs or ():
        for t in sg.tensors or ():
            t.buffer = new[int(t.buffer)]
    for md in model.metadata or ():
        md.buffer = new[int(md.buffer)]
