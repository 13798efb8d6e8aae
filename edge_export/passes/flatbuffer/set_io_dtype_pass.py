"""Set a quantized model's input/output types: float32, int8 or uint8 (``--io-dtype``).

Both quantization backends write int8 (int16 for int16x8) model inputs and outputs. Apps differ in
what they want: float I/O is the easiest to call, int8 avoids the boundary conversions, and uint8 is
what many Coral/Edge TPU apps (PyCoral's adapters) feed. We rewrite the flatbuffer's boundary in
pure Python rather than calling TFLite's ``modify_model_interface`` (shipped in ai-edge-litert as
``_pywrap_modify_model_interface``), because that tool only goes from float I/O with boundary
QUANTIZE/DEQUANTIZE ops to integer I/O, while our models start from integer I/O.

The rewrite keeps each boundary tensor's index (so the signature still names it) and gives it the new
type; the integer tensor the graph computes on becomes a new inner tensor, joined to the boundary by
one QUANTIZE (float->int or uint8->int8 requantize) at an input and one DEQUANTIZE (int->float) or
QUANTIZE (int8->uint8) at an output. A uint8 zero point is the int8 one plus 128 at the same scale,
so the requantize is exact.
"""

from __future__ import annotations

import copy
from typing import Any

from ...config import IODtype
from ...errors import InternalError, QuantizationError

__all__ = ["set_io_dtype_pass"]


# TFLite op versions (tensorflow/lite/tools/versioning/op_version.cc): QUANTIZE 2 for int8/uint8,
# 3 for int16 output; DEQUANTIZE 2 for int8, 3 for int16.
def _quantize_version(out_type: int, schema) -> int:
    return 3 if out_type == schema.TensorType.INT16 else 2


def _dequantize_version(in_type: int, schema) -> int:
    return 3 if in_type == schema.TensorType.INT16 else 2


def _opcode_index(model, builtin: int, version: int, schema) -> int:
    codes = model.operatorCodes or []
    for i, oc in enumerate(codes):
        code = max(oc.builtinCode or 0, oc.deprecatedBuiltinCode or 0)
        if code == builtin:
            oc.version = max(oc.version or 1, version)
            return i
    oc = schema.OperatorCodeT()
    oc.builtinCode = builtin
    oc.deprecatedBuiltinCode = min(builtin, 127)
    oc.version = version
    codes.append(oc)
    model.operatorCodes = codes
    return len(codes) - 1


def _quant(scale: float, zero_point: int, schema):
    q = schema.QuantizationParametersT()
    q.scale = [float(scale)]
    q.zeroPoint = [int(zero_point)]
    q.quantizedDimension = 0
    return q


def set_io_dtype_pass(model: Any, io_dtype: IODtype) -> bool:
    """Give every quantized input/output of ``model`` the type ``io_dtype``; True if any changed.

    Only boundary tensors that are quantized integers (int8, or int16 for float32) change; other
    inputs (e.g. int32 token ids) and float boundaries are left alone.
    """
    from ai_edge_litert import schema_py_generated as schema

    # Only the main subgraph has the model's inputs and outputs; the others are bodies an operator
    # calls (a scatter's update function, a while loop's condition), whose tensors are left as they are.
    sg = model.subgraphs[0]
    ops = list(sg.operators or [])
    outputs = list(sg.outputs or [])
    new_in_ops = []
    for index in list(sg.inputs or []):
        new_type = _target_type(sg.tensors[index], io_dtype, schema)
        if new_type is not None:
            new_in_ops.append(_retype_input(model, sg, ops, outputs, index, new_type, schema))
    new_out_ops = []
    for index in outputs:
        new_type = _target_type(sg.tensors[index], io_dtype, schema)
        if new_type is not None:
            new_out_ops.append(_retype_output(model, sg, ops, index, new_type, schema))
    if new_in_ops or new_out_ops:
        sg.operators = new_in_ops + ops + new_out_ops
    return bool(new_in_ops or new_out_ops)


def _target_type(t: Any, io_dtype: IODtype, schema: Any) -> int | None:
    """The type a boundary tensor gets, or None when it stays as it is."""
    TT = schema.TensorType
    if t.quantization is None or not t.quantization.scale or len(t.quantization.scale) != 1:
        return None
    if io_dtype == IODtype.FLOAT32 and t.type in (TT.INT8, TT.INT16):
        return TT.FLOAT32
    if io_dtype == IODtype.UINT8 and t.type == TT.INT8:
        return TT.UINT8
    if io_dtype == IODtype.INT8 and t.type == TT.UINT8:
        return TT.INT8
    if io_dtype in (IODtype.INT8, IODtype.UINT8) and t.type == TT.INT16:
        raise QuantizationError(
            f"The model's I/O is int16 (int16x8 mode); it cannot be given {io_dtype.value} I/O.",
            "Use --io-dtype float32 with --quantize int16x8.",
        )
    return None


def _inner_copy(sg: Any, index: int) -> int:
    """A copy of boundary tensor ``index`` as a new inner activation (``<name>_quantized``)."""
    t = sg.tensors[index]
    inner = copy.deepcopy(t)
    inner.name = (t.name.decode() if isinstance(t.name, bytes) else (t.name or "")) + "_quantized"
    inner.buffer = 0  # buffer 0 is the empty sentinel: an activation
    sg.tensors.append(inner)
    return len(sg.tensors) - 1


def _retype(sg: Any, index: int, new_type: int, schema: Any) -> None:
    t = sg.tensors[index]
    scale, zp = t.quantization.scale[0], t.quantization.zeroPoint[0]
    t.type = new_type
    if new_type == schema.TensorType.FLOAT32:
        t.quantization = None
    elif new_type == schema.TensorType.UINT8:
        t.quantization = _quant(scale, int(zp) + 128, schema)
    else:  # uint8 -> int8
        t.quantization = _quant(scale, int(zp) - 128, schema)


def _boundary_op(model: Any, schema: Any, dequantize: bool, version: int, inputs: list[int], outputs: list[int]) -> Any:
    """A QUANTIZE (or a DEQUANTIZE) from ``inputs`` to ``outputs``."""
    q = schema.OperatorT()
    if dequantize:
        q.opcodeIndex = _opcode_index(model, schema.BuiltinOperator.DEQUANTIZE, version, schema)
        q.builtinOptionsType = schema.BuiltinOptions.DequantizeOptions
        q.builtinOptions = schema.DequantizeOptionsT()
    else:
        q.opcodeIndex = _opcode_index(model, schema.BuiltinOperator.QUANTIZE, version, schema)
        q.builtinOptionsType = schema.BuiltinOptions.QuantizeOptions
        q.builtinOptions = schema.QuantizeOptionsT()
    q.inputs, q.outputs = inputs, outputs
    return q


def _retype_input(model: Any, sg: Any, ops: list, outputs: list[int], index: int, new_type: int, schema: Any) -> Any:
    """Input ``index`` takes ``new_type``; the graph reads an inner copy, made by the QUANTIZE returned."""
    inner = _inner_copy(sg, index)
    for op in ops:
        op.inputs = [inner if i == index else i for i in (op.inputs or [])]
    if index in outputs:  # an input passed straight through to an output keeps its identity
        raise QuantizationError(
            "A model input is also a model output; its I/O type cannot be changed.",
            "Use --io-dtype int8 for this model.",
        )
    _retype(sg, index, new_type, schema)
    return _boundary_op(model, schema, False, _quantize_version(sg.tensors[inner].type, schema), [index], [inner])


def _retype_output(model: Any, sg: Any, ops: list, index: int, new_type: int, schema: Any) -> Any:
    """Output ``index`` takes ``new_type``; the graph writes an inner copy, which the DEQUANTIZE
    (to float) or QUANTIZE (int8 <-> uint8) returned converts."""
    inner = _inner_copy(sg, index)
    producers = 0
    for op in ops:
        if index in (op.outputs or []):
            op.outputs = [inner if o == index else o for o in op.outputs]
            producers += 1
        op.inputs = [inner if i == index else i for i in (op.inputs or [])]
    if producers != 1:
        raise InternalError(f"Output tensor {index} has {producers} producers, expected 1.")
    _retype(sg, index, new_type, schema)
    if new_type == schema.TensorType.FLOAT32:
        return _boundary_op(model, schema, True, _dequantize_version(sg.tensors[inner].type, schema), [inner], [index])
    return _boundary_op(model, schema, False, 2, [inner], [index])
