"""Choose a quantized model's input/output types: float32, int8 or uint8.

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
from dataclasses import dataclass

from ..config import IODtype
from ..errors import InternalError, QuantizationError
from ..flatbuffer_packing import pack_model

__all__ = ["IOQuantInfo", "describe_io", "set_io_dtype"]


@dataclass(frozen=True)
class IOQuantInfo:
    """One model input or output as an app sees it: dtype, and the params to (de)quantize with."""

    kind: str  # "input" | "output"
    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: float | None
    zero_point: int | None


def _signature_order(model_bytes: bytes) -> tuple[list[tuple[str, int]], list[tuple[str, int]]] | None:
    """(name, tensor index) pairs of the first signature's inputs and outputs, in signature order."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(model_bytes, 0)
    if model.SignatureDefsLength() == 0:
        return None
    sig = model.SignatureDefs(0)

    def pairs(n, get):
        return [(get(i).Name().decode(), int(get(i).TensorIndex())) for i in range(n)]

    return pairs(sig.InputsLength(), sig.Inputs), pairs(sig.OutputsLength(), sig.Outputs)


def describe_io(model_bytes: bytes) -> tuple[IOQuantInfo, ...]:
    """Inputs then outputs in subgraph order, named by the signature when there is one."""
    from ..flatbuffer import read_flatbuffer

    fb = read_flatbuffer(model_bytes)
    # Subgraph order (forward()'s arguments, flattened outputs), as the runners use; the signature
    # (sorted by name) only supplies the names.
    names: dict[int, str] = {}
    sig_order = _signature_order(bytes(model_bytes))
    if sig_order is not None:
        for pairs in sig_order:
            names.update({idx: name for name, idx in pairs})
    order = (
        [(names.get(i, fb.tensors[i].name), i) for i in fb.inputs],
        [(names.get(i, fb.tensors[i].name), i) for i in fb.outputs],
    )
    result = []
    for kind, pairs in zip(("input", "output"), order):
        for name, idx in pairs:
            t = fb.tensors[idx]
            q = t.quant if (t.quant and not t.quant.per_channel and t.dtype in ("int8", "uint8", "int16")) else None
            result.append(
                IOQuantInfo(
                    kind=kind,
                    name=name,
                    shape=t.shape,
                    dtype=t.dtype,
                    scale=q.scales[0] if q else None,
                    zero_point=q.zero_points[0] if q else None,
                )
            )
    return tuple(result)


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


def set_io_dtype(model_bytes: bytes, io_dtype: IODtype) -> bytes:
    """Return the model with every quantized input/output in ``io_dtype``.

    Only boundary tensors that are quantized integers (int8, or int16 for float32) change; other
    inputs (e.g. int32 token ids) and float boundaries are left alone.
    """
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    TT = schema.TensorType
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    if len(model.subgraphs) != 1:
        raise QuantizationError(
            f"Changing the I/O type of a model with {len(model.subgraphs)} subgraphs is not supported.",
            "Use --io-dtype int8 (the backends' native I/O type) for this model.",
        )
    sg = model.subgraphs[0]
    ops = list(sg.operators or [])
    inputs = list(sg.inputs or [])
    outputs = list(sg.outputs or [])
    changed = False
    new_in_ops = []
    new_out_ops = []

    def target_type(t) -> int | None:
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

    def inner_copy(index: int) -> int:
        t = sg.tensors[index]
        inner = copy.deepcopy(t)
        inner.name = (t.name.decode() if isinstance(t.name, bytes) else (t.name or "")) + "_quantized"
        inner.buffer = 0  # buffer 0 is the empty sentinel: an activation
        sg.tensors.append(inner)
        return len(sg.tensors) - 1

    def retype(index: int, new_type: int) -> None:
        t = sg.tensors[index]
        scale, zp = t.quantization.scale[0], t.quantization.zeroPoint[0]
        t.type = new_type
        if new_type == TT.FLOAT32:
            t.quantization = None
        elif new_type == TT.UINT8:
            t.quantization = _quant(scale, int(zp) + 128, schema)
        else:  # uint8 -> int8
            t.quantization = _quant(scale, int(zp) - 128, schema)

    for index in inputs:
        t = sg.tensors[index]
        new_type = target_type(t)
        if new_type is None:
            continue
        inner = inner_copy(index)
        for op in ops:
            op.inputs = [inner if i == index else i for i in (op.inputs or [])]
        if index in outputs:  # an input passed straight through to an output keeps its identity
            raise QuantizationError(
                "A model input is also a model output; its I/O type cannot be changed.",
                "Use --io-dtype int8 for this model.",
            )
        retype(index, new_type)
        q = schema.OperatorT()
        q.opcodeIndex = _opcode_index(model, schema.BuiltinOperator.QUANTIZE, _quantize_version(sg.tensors[inner].type, schema), schema)
        q.inputs, q.outputs = [index], [inner]
        q.builtinOptionsType = schema.BuiltinOptions.QuantizeOptions
        q.builtinOptions = schema.QuantizeOptionsT()
        new_in_ops.append(q)
        changed = True

    for index in outputs:
        t = sg.tensors[index]
        new_type = target_type(t)
        if new_type is None:
            continue
        inner = inner_copy(index)
        producers = 0
        for op in ops:
            if index in (op.outputs or []):
                op.outputs = [inner if o == index else o for o in op.outputs]
                producers += 1
            op.inputs = [inner if i == index else i for i in (op.inputs or [])]
        if producers != 1:
            raise InternalError(f"Output tensor {index} has {producers} producers, expected 1.")
        retype(index, new_type)
        q = schema.OperatorT()
        if new_type == TT.FLOAT32:
            q.opcodeIndex = _opcode_index(
                model, schema.BuiltinOperator.DEQUANTIZE, _dequantize_version(sg.tensors[inner].type, schema), schema
            )
            q.builtinOptionsType = schema.BuiltinOptions.DequantizeOptions
            q.builtinOptions = schema.DequantizeOptionsT()
        else:
            q.opcodeIndex = _opcode_index(model, schema.BuiltinOperator.QUANTIZE, 2, schema)
            q.builtinOptionsType = schema.BuiltinOptions.QuantizeOptions
            q.builtinOptions = schema.QuantizeOptionsT()
        q.inputs, q.outputs = [inner], [index]
        new_out_ops.append(q)
        changed = True

    if not changed:
        return bytes(model_bytes)
    sg.operators = new_in_ops + ops + new_out_ops
    return pack_model(model, source=model_bytes)
