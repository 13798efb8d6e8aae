"""Flatten a NHWC feature map as it lies and permute the fully connected weights that read it instead.

A classifier written for NCHW flattens its last feature map (``nn.Flatten()``, ``x.view(N, -1)``)
into a Linear: the order of the flattened vector is C, H, W. In a NHWC graph the converter keeps
that order with a TRANSPOSE of the map to NCHW before the RESHAPE: a copy of the activation. The
elements are the same in either order, only the Linear's weight columns must follow: for
``TRANSPOSE(p) -> RESHAPE [N, K] -> FULLY_CONNECTED`` with a constant weight ``W`` of shape
``[O, K]``, the RESHAPE reads the TRANSPOSE's input and each FULLY_CONNECTED gets ``W[:, q]``, where
``q`` sends a position of the NHWC-flattened vector to its position in the NCHW-flattened one (found by
sending flat indices through the TRANSPOSE and the RESHAPE with numpy). Each output is the same sum
of the same products, in another order: exact for integer accumulation (int8), equal up to float
rounding otherwise.

Applies when the permutation keeps the batch axis first, every reader of the RESHAPE is a
FULLY_CONNECTED taking it as its input, and every weight is a constant float32, float16 or int8
tensor quantized (if at all) per output row. The permuted weights are new buffers; the old ones
go when nothing else reads them.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .graph_edits import constant_values, consumers_of, drop_unused_tensors, opcode_name, producers_of, same_quantization, static_shape, unique_name

__all__ = ["permute_fully_connected_weights_pass"]

SUFFIX = ";nhwc"
MAX_ELEMENTS = 1 << 24


def permute_fully_connected_weights_pass(model: Any) -> bool:
    """Let every RESHAPE that flattens a TRANSPOSE into fully connected layers read the
    TRANSPOSE's input, the layers' weight columns permuted to match; True if any changed."""
    changed = False
    for sg in model.subgraphs or ():
        readers, producers = consumers_of(sg), producers_of(sg)
        touched = [t for op in list(sg.operators or ()) if (t := _rewrite(model, sg, op, readers, producers)) is not None]
        if touched:
            readers = consumers_of(sg)
            outputs = {int(i) for i in (sg.outputs if sg.outputs is not None else ())}
            unread = [t for t in touched if int(t.outputs[0]) not in outputs and not readers.get(int(t.outputs[0]))]
            sg.operators = [op for op in sg.operators if not any(op is t for t in unread)]
            changed = True
    if changed:
        drop_unused_tensors(model)
    return changed


def _column_order(model: Any, sg: Any, transpose: Any, reshape: Any) -> np.ndarray | None:
    """``q``: column ``j`` of the NHWC-flattened input is column ``q[j]`` of the NCHW-flattened one."""
    in_shape, out_shape = static_shape(sg, int(transpose.inputs[0])), static_shape(sg, int(reshape.outputs[0]))
    perm = constant_values(model, sg, int(transpose.inputs[1])) if len(transpose.inputs) > 1 else None
    if in_shape is None or out_shape is None or len(out_shape) != 2 or perm is None or perm.size != len(in_shape):
        return None
    if sorted(perm.tolist()) != list(range(perm.size)) or perm[0] != 0 or int(np.prod(in_shape)) > MAX_ELEMENTS:
        return None
    rows, width = out_shape
    indices = np.arange(int(np.prod(in_shape)), dtype=np.int64).reshape(in_shape).transpose(perm.tolist()).reshape(out_shape)
    if not np.array_equal(indices, indices[:1] + width * np.arange(rows)[:, None]):  # each row one sample, in order
        return None
    order = np.empty(width, dtype=np.int64)
    order[indices[0]] = np.arange(width)
    return order


def _weights(model: Any, sg: Any, fc: Any, width: int) -> np.ndarray | None:
    from ai_edge_litert import schema_py_generated as schema

    if len(fc.inputs) < 2 or fc.inputs[1] < 0:
        return None
    tensor = sg.tensors[int(fc.inputs[1])]
    dtype = {schema.TensorType.FLOAT32: np.float32, schema.TensorType.FLOAT16: np.float16, schema.TensorType.INT8: np.int8}.get(tensor.type)
    data = model.buffers[tensor.buffer].data if tensor.buffer else None
    shape = tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ()))
    if dtype is None or data is None or tensor.sparsity is not None or len(shape) != 2 or shape[1] != width:
        return None
    q = tensor.quantization
    if q is not None and q.scale is not None and len(q.scale) > 1 and int(q.quantizedDimension or 0) != 0:
        return None
    raw = np.asarray(data, dtype=np.uint8).tobytes()
    if len(raw) != shape[0] * shape[1] * np.dtype(dtype).itemsize:
        return None
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _rewrite(model: Any, sg: Any, reshape: Any, readers: dict, producers: dict) -> Any:
    """Rewrite one RESHAPE and its readers; the TRANSPOSE it read, else None."""
    if opcode_name(model, reshape) != "RESHAPE":
        return None
    transpose = producers.get(int(reshape.inputs[0]))
    if transpose is None or opcode_name(model, transpose) != "TRANSPOSE":
        return None
    out = int(reshape.outputs[0])
    fcs = readers.get(out, [])
    outputs = {int(i) for i in (sg.outputs if sg.outputs is not None else ())}
    if out in outputs or not fcs or any(opcode_name(model, fc) != "FULLY_CONNECTED" or int(fc.inputs[0]) != out for fc in fcs):
        return None
    if not same_quantization(sg, int(transpose.inputs[0]), int(transpose.outputs[0]), out):
        return None
    order = _column_order(model, sg, transpose, reshape)
    if order is None:
        return None
    weights = [_weights(model, sg, fc, order.size) for fc in fcs]
    if any(w is None for w in weights):
        return None
    for fc, w in zip(fcs, weights):
        fc.inputs = [int(fc.inputs[0]), _permuted_copy(model, sg, int(fc.inputs[1]), np.ascontiguousarray(w[:, order])), *fc.inputs[2:]]
    reshape.inputs = [int(transpose.inputs[0]), *reshape.inputs[1:]]
    # The flattened tensor now holds the NHWC order, not PyTorch's NCHW one: it keeps no module's
    # name, so per-layer parity does not compare it with the module's output (the Linear after it is).
    sg.tensors[out].name = f"nhwc_flatten_{out}{SUFFIX}"
    return transpose


def _permuted_copy(model: Any, sg: Any, index: int, values: np.ndarray) -> int:
    from ai_edge_litert import schema_py_generated as schema

    buffer = schema.BufferT()
    buffer.data = np.frombuffer(values.tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor = copy.deepcopy(sg.tensors[index])
    name = tensor.name.decode() if isinstance(tensor.name, bytes) else (tensor.name or "")
    tensor.name = unique_name(sg, name + SUFFIX)
    tensor.buffer = len(model.buffers) - 1
    sg.tensors.append(tensor)
    return len(sg.tensors) - 1
