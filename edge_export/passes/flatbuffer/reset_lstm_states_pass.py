"""Give each UNIDIRECTIONAL_SEQUENCE_LSTM state a FILL that sets it to zero before every invocation.

The fused LSTM keeps its hidden and cell state in variable tensors (inputs 18 and 19) that its
kernel overwrites with the final state; LiteRT zeroes them only when tensors are allocated. So an
exported LSTM whose initial state is zero started the second invocation from the first one's final
state (a 3-layer LSTM's output fell from 135 dB to 25 dB SQNR on its second call, the same input).
A FILL of the state's zero in front of the graph writes it at every invocation (for a quantized
state a BROADCAST_TO of its zero point: TFLite Micro's FILL takes only float32); the tensor stays
variable, as the kernel requires. States another operator
writes (an initial state from the model's inputs) are left alone, and so is a state holding a
non-zero constant (never written by ``rewrite_lstms_as_sequence_lstm_pass``).

``drop_lstm_state_resets`` undoes it (the TFLite calibrator quantizes the state of an LSTM only
when nothing writes it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph_edits import add_int32_constant, drop_unused_tensors, new_operator, opcode_name, producers_of, unique_name

__all__ = ["reset_lstm_states_pass", "drop_lstm_state_resets"]

_STATES = (18, 19)  # the hidden and cell state operands of UNIDIRECTIONAL_SEQUENCE_LSTM
_RESETS = ("FILL", "BROADCAST_TO")


def _state_tensors(model: Any, sg: Any) -> list[int]:
    found = []
    for op in sg.operators or ():
        if opcode_name(model, op) == "UNIDIRECTIONAL_SEQUENCE_LSTM" and op.inputs is not None and len(op.inputs) > 19:
            found += [int(op.inputs[k]) for k in _STATES if op.inputs[k] >= 0 and sg.tensors[op.inputs[k]].isVariable]
    return found


def _holds_nonzero(model: Any, tensor: Any) -> bool:
    data = model.buffers[tensor.buffer].data if tensor.buffer else None
    return data is not None and len(data) > 0 and bool(np.any(np.asarray(data, dtype=np.uint8)))


def _zero_value(model: Any, sg: Any, state: int) -> int:
    """A scalar constant of the state's type and quantization holding its zero."""
    import copy

    from ai_edge_litert import schema_py_generated as schema

    tensor = sg.tensors[state]
    q = tensor.quantization
    zero = int(q.zeroPoint[0]) if q is not None and q.zeroPoint is not None and len(q.zeroPoint) else 0
    dtype = {schema.TensorType.FLOAT32: "<f4", schema.TensorType.INT8: "i1", schema.TensorType.INT16: "<i2"}[tensor.type]
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.array(zero, dtype=dtype).tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    value = copy.deepcopy(tensor)
    shape = [] if tensor.type == schema.TensorType.FLOAT32 else [1] * len(tensor.shape)  # FILL's scalar, BROADCAST_TO's input
    value.name, value.shape, value.shapeSignature = unique_name(sg, f"{_name(tensor)};zero"), shape, None
    value.isVariable, value.buffer = False, len(model.buffers) - 1
    sg.tensors.append(value)
    return len(sg.tensors) - 1


def _name(tensor: Any) -> str:
    return tensor.name.decode() if isinstance(tensor.name, bytes) else (tensor.name or "")


def reset_lstm_states_pass(model: Any) -> bool:
    """Prepend a FILL for every variable LSTM state nothing writes; True when any was added."""
    from ai_edge_litert import schema_py_generated as schema

    sg = model.subgraphs[0]
    written = set(producers_of(sg)) | {int(i) for i in sg.inputs}
    fills = []
    for state in dict.fromkeys(_state_tensors(model, sg)):
        tensor = sg.tensors[state]
        if state in written or _holds_nonzero(model, tensor) or tensor.type not in (
                schema.TensorType.FLOAT32, schema.TensorType.INT8, schema.TensorType.INT16):
            continue
        dims = add_int32_constant(model, sg, tensor.shape, f"{_name(tensor)};shape")
        zero = _zero_value(model, sg, state)
        if tensor.type == schema.TensorType.FLOAT32:
            fills.append(new_operator(model, "FILL", [dims, zero], [state], schema.FillOptionsT()))
        else:
            fills.append(new_operator(model, "BROADCAST_TO", [zero, dims], [state], schema.BroadcastToOptionsT()))
            code = model.operatorCodes[fills[-1].opcodeIndex]
            code.version = max(code.version or 1, 2)  # LiteRT registers BROADCAST_TO from version 2
        tensor.buffer = 0  # an activation now: the FILL writes it
    sg.operators = fills + list(sg.operators)
    return bool(fills)


def drop_lstm_state_resets(model: Any) -> bool:
    """Remove the resets ``reset_lstm_states_pass`` added, their constants, and the operator codes
    nothing else uses (the calibrator's interpreter has no FILL kernel and refuses a model that
    lists it); True when any was removed."""
    sg = model.subgraphs[0]
    states = set(_state_tensors(model, sg))
    kept = [op for op in sg.operators if not (opcode_name(model, op) in _RESETS and int(op.outputs[0]) in states)]
    if len(kept) == len(sg.operators):
        return False
    sg.operators = kept
    drop_unused_tensors(model)
    _drop_unused_operator_codes(model)
    return True


def _drop_unused_operator_codes(model: Any) -> None:
    used = sorted({int(op.opcodeIndex) for sg in model.subgraphs for op in sg.operators or ()})
    new = {old: i for i, old in enumerate(used)}
    model.operatorCodes = [model.operatorCodes[old] for old in used]
    for sg in model.subgraphs:
        for op in sg.operators or ():
            op.opcodeIndex = new[int(op.opcodeIndex)]
