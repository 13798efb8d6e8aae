"""Read a LiteRT flatbuffer into the typed model (``model.FlatbufferModel``), in pure Python (no
interpreter).

Every later stage (reports, target checkers, inspect) reads the model through here, so that what a
report says about a file is what the file holds. The buffer is verified first (``verify``: the bounds
rules of flatbuffers' C++ Verifier, which the native runtimes do not run), then parsed with
ai-edge-litert's generated schema reader and checked for what the kernels trust (``kernel_checks``:
indices, shapes, buffer sizes, quantization parameters, kernel options). A buffer that fails any of
this raises ``FlatbufferError`` before any runtime touches it: the fuzz test in tests/flatbuffer
shows which mutated files used to crash the XNNPACK delegate.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from ..errors import FlatbufferError, InternalError
from .kernel_checks import (
    FLOAT32_MIN_NORMAL,
    MAX_TENSOR_BYTES,
    OPERATOR_OPTIONS,
    ZERO_POINT_RANGES,
    check_dataflow,
    inputs_problem,
    options_problem,
)
from .malformed import OversizedTensorError, malformed
from .model import DTYPE_BITS, FLOAT_DTYPES, FlatbufferModel, OperatorInfo, QuantParams, TensorInfo
from .schema_reader import dtype_names, model_table, opcode_names, options_names
from .verify import verify_structure

__all__ = ["load_flatbuffer", "read_flatbuffer"]

_TFLITE_IDENTIFIER = b"TFL3"


def _decode(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _check_header(data: bytes, origin: str) -> None:
    if len(data) < 8:
        raise FlatbufferError(
            f"{origin} is not a LiteRT flatbuffer: it is only {len(data)} bytes long.",
            "Pass a .tflite file written by edge-export, litert-torch or the TFLite converter.",
        )
    root = struct.unpack_from("<I", data, 0)[0]
    if data[4:8] != _TFLITE_IDENTIFIER or root >= len(data):
        raise FlatbufferError(
            f"{origin} is not a LiteRT flatbuffer: its header does not carry the 'TFL3' identifier.",
            "Pass a .tflite file written by edge-export, litert-torch or the TFLite converter.",
        )


def read_flatbuffer(data: bytes, origin: str = "the model") -> FlatbufferModel:
    """Parse and verify ``data``. Raises FlatbufferError on anything malformed.

    Verification runs before any native code sees the buffer: every offset, table, vector and
    string must lie inside it (the rules of flatbuffers' C++ Verifier), and every index a runtime
    follows (opcode, tensor, buffer, subgraph) must exist, constant tensors must own at least the
    bytes their shape needs, and shapes must not be negative.
    """
    _check_header(data, origin)
    data = bytes(data)
    try:
        verify_structure(data)
        return _parse(data)
    except InternalError:
        raise
    except FlatbufferError as exc:
        named = origin[:1].upper() + origin[1:] if origin.startswith("the ") else origin
        exc.message = exc.message.replace("The model", named, 1)  # the same error (its class says what kind)
        exc.args = (exc.message,)
        raise exc from None
    except Exception as exc:  # the generated reader raises many kinds on malformed input
        raise FlatbufferError(
            f"{origin} is not a valid LiteRT flatbuffer: it could not be parsed "
            f"({type(exc).__name__}: {str(exc)[:120]}). The file may be truncated or corrupted.",
            "Re-export the model, or check that the file was copied completely.",
        ) from exc


def load_flatbuffer(path: str | Path) -> FlatbufferModel:
    """Read and verify the file at ``path``; the model carries its bytes (``.data``)."""
    p = Path(path)
    if not p.exists():
        raise FlatbufferError(f"No such file: {p}.", "Check the path to the .tflite file.")
    if p.is_dir():
        raise FlatbufferError(f"{p} is a directory, not a .tflite file.", "Pass the path of a .tflite file.")
    import stat

    from ..memory import ensure_memory_for

    try:
        info = p.stat()
        if not stat.S_ISREG(info.st_mode):
            # /dev/zero or a pipe never ends: reading it "whole" filled memory until the kernel killed us.
            raise FlatbufferError(
                f"{p} is not a regular file (a device, pipe or socket).", "Pass the path of a .tflite file."
            )
        ensure_memory_for(info.st_size, f"Reading {p}", "Check that this is the .tflite file you meant.", FlatbufferError)
        data = p.read_bytes()
    except OSError as exc:
        raise FlatbufferError(f"Cannot read {p}: {exc.strerror}.", "Check the file's permissions.") from exc
    return read_flatbuffer(data, origin=str(p))


def _parse(data: bytes) -> FlatbufferModel:
    import math

    import numpy as np
    from ai_edge_litert import schema_py_generated as schema

    dtype_name_of = dtype_names()
    opcode_name_of = opcode_names()
    options_name_of = options_names()

    model_t = schema.ModelT.InitFromObj(model_table(data))
    if not model_t.subgraphs:
        raise malformed("it has no subgraphs")
    buffers = model_t.buffers or []
    opcodes = model_t.operatorCodes or []
    num_subgraphs = len(model_t.subgraphs)

    def buffer_bytes(buffer_index: int) -> int:
        if buffer_index <= 0 or buffer_index >= len(buffers):
            return 0
        buf = buffers[buffer_index]
        if buf.offset or buf.size:
            # Data stored after the flatbuffer (models > 2 GB): offset and size must stay in the file.
            if buf.offset <= 1 or buf.offset + buf.size > len(data):
                raise malformed(f"buffer {buffer_index} points outside the file")
            return int(buf.size)
        return len(buf.data) if buf.data is not None else 0

    for oc_index, oc in enumerate(opcodes):
        if (oc.deprecatedBuiltinCode or 0) < 0 or (oc.builtinCode or 0) < 0:
            raise malformed(f"operator code {oc_index} has a negative builtin code")

    def opcode_name(index: int) -> str:
        if index < 0 or index >= len(opcodes):
            raise malformed(f"operator code index {index} is out of range")
        oc = opcodes[index]
        code = max(oc.builtinCode or 0, oc.deprecatedBuiltinCode or 0)
        if code == schema.BuiltinOperator.CUSTOM:
            return f"CUSTOM:{_decode(oc.customCode)}"
        return opcode_name_of.get(code, f"UNKNOWN_{code}")

    all_ops: list[tuple[OperatorInfo, ...]] = []
    main_tensors: tuple[TensorInfo, ...] = ()
    main_inputs: tuple[int, ...] = ()
    main_outputs: tuple[int, ...] = ()
    for sg_index, sg in enumerate(model_t.subgraphs):
        tensors = []
        for t_index, t in enumerate(sg.tensors or []):
            where = f"tensor {t_index} of subgraph {sg_index}"
            shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
            sig = tuple(int(d) for d in t.shapeSignature) if t.shapeSignature is not None else shape
            if any(d < 0 for d in shape):
                raise malformed(f"{where} has a negative dimension in its shape {list(shape)}")
            if len(sig) != len(shape) or any(d < -1 for d in sig):
                raise malformed(f"{where} has a shape signature {list(sig)} that does not fit its shape")
            dtype = dtype_name_of.get(t.type)
            if dtype is None:
                raise malformed(f"{where} has an unknown element type {t.type}")
            q = t.quantization
            quant = None
            if q is not None and q.scale is not None and len(q.scale) > 0:
                if q.zeroPoint is not None and len(q.zeroPoint) not in (0, len(q.scale)):
                    raise malformed(f"{where} has {len(q.scale)} scales but {len(q.zeroPoint)} zero points")
                qdim = int(q.quantizedDimension or 0)
                if len(q.scale) > 1 and not (0 <= qdim < len(shape) and shape[qdim] == len(q.scale)):
                    raise malformed(f"{where} has {len(q.scale)} per-channel scales that do not fit its shape")
                # XNNPACK crashes on zero or subnormal scales of integer tensors; quantizers never
                # write them (ai-edge-quantizer clamps at 1e-9). On float tensors they are ignored.
                allowed_zero = dtype in FLOAT_DTYPES
                if not all((allowed_zero and float(x) == 0.0) or FLOAT32_MIN_NORMAL <= float(x) < math.inf for x in q.scale):
                    raise malformed(f"{where} has a zero, negative, subnormal or non-finite quantization scale")
                lo, hi = ZERO_POINT_RANGES.get(dtype, (-(2**63), 2**63 - 1))
                if q.zeroPoint is not None and any(not lo <= int(z) <= hi for z in q.zeroPoint):
                    raise malformed(f"{where} has a zero point outside the range of {dtype}")
                zps = q.zeroPoint if q.zeroPoint is not None and len(q.zeroPoint) else np.zeros(len(q.scale), dtype=np.int64)
                quant = QuantParams(
                    scales=tuple(float(s) for s in q.scale),
                    zero_points=tuple(int(z) for z in zps),
                    quantized_dimension=qdim,
                )
            buffer_index = int(t.buffer or 0)
            if buffer_index >= max(len(buffers), 1):
                raise malformed(f"{where} refers to buffer {buffer_index}, which does not exist")
            nbytes = buffer_bytes(buffer_index)
            bits = DTYPE_BITS.get(dtype)
            if bits and math.prod(max(d, 1) for d in shape) * bits // 8 > MAX_TENSOR_BYTES:
                raise OversizedTensorError(
                    f"The model cannot run in LiteRT: {where} has shape {list(shape)}, larger than a LiteRT "
                    "tensor can be (2 GB).",
                    "Re-export the model with smaller shapes.",
                    _decode(t.name), list(shape), math.prod(max(d, 1) for d in shape) * bits // 8,
                )
            if nbytes and bits and t.sparsity is None:
                needed = (math.prod(shape) * bits + 7) // 8
                # int4 weights may also be stored one value per byte (unpacked).
                allowed = {needed, math.prod(shape)} if dtype == "int4" else {needed}
                if nbytes < needed:
                    raise malformed(f"{where} needs {needed} bytes of constant data but its buffer holds {nbytes}")
                if nbytes not in allowed:
                    raise malformed(
                        f"{where} is {dtype} {list(shape)} ({needed} bytes) but its constant buffer holds {nbytes} bytes"
                    )
            tensors.append(
                TensorInfo(
                    index=t_index,
                    name=_decode(t.name),
                    shape=shape,
                    shape_signature=sig,
                    dtype=dtype,
                    is_constant=nbytes > 0,
                    quant=quant,
                )
            )
        n = len(tensors)
        ops = []
        for o_index, op in enumerate(sg.operators or []):
            ins = tuple(int(i) for i in (op.inputs if op.inputs is not None else ()))
            outs = tuple(int(i) for i in (op.outputs if op.outputs is not None else ()))
            inter = tuple(int(i) for i in (op.intermediates if op.intermediates is not None else ()))
            for i in (*ins, *outs, *inter):
                if i < -1 or i >= n:
                    raise malformed(f"operator {o_index} of subgraph {sg_index} refers to tensor {i}, which does not exist")
            if any(i < 0 for i in outs):
                raise malformed(f"operator {o_index} of subgraph {sg_index} has an omitted output")
            opcode = opcode_name(op.opcodeIndex or 0)
            problem = inputs_problem(opcode, ins, tensors)
            expected_options = OPERATOR_OPTIONS.get(opcode)
            given_options = options_name_of.get(op.builtinOptionsType) if op.builtinOptionsType else None
            if expected_options and given_options and given_options != expected_options:
                problem = f"carries {given_options}; its kernel reads {expected_options}"
            if problem:
                raise malformed(f"operator {o_index} of subgraph {sg_index} ({opcode}) {problem}")
            for options in (op.builtinOptions, op.builtinOptions2):
                problem = options_problem(options, num_subgraphs) if options is not None else None
                if problem:
                    raise malformed(f"operator {o_index} of subgraph {sg_index} ({opcode_name(op.opcodeIndex or 0)}) {problem}")
            ops.append(
                OperatorInfo(
                    index=o_index,
                    opcode=opcode_name(op.opcodeIndex or 0),
                    inputs=ins,
                    outputs=outs,
                    options_type=options_name_of.get(op.builtinOptionsType) if op.builtinOptionsType else None,
                    options=op.builtinOptions,
                )
            )
        sg_inputs = tuple(int(i) for i in (sg.inputs if sg.inputs is not None else ()))
        sg_outputs = tuple(int(i) for i in (sg.outputs if sg.outputs is not None else ()))
        for i in (*sg_inputs, *sg_outputs):
            if i < 0 or i >= n:
                raise malformed(f"subgraph {sg_index} names tensor {i} as an input or output, which does not exist")
        check_dataflow(sg_index, ops, tensors, sg_inputs, {i for i, t in enumerate(sg.tensors or []) if t.isVariable})
        all_ops.append(tuple(ops))
        if sg_index == 0:
            main_tensors = tuple(tensors)
            main_inputs, main_outputs = sg_inputs, sg_outputs

    signatures = []
    for sd in model_t.signatureDefs or []:
        sg_index = int(sd.subgraphIndex or 0)
        if not 0 <= sg_index < num_subgraphs:
            raise malformed(f"signature {_decode(sd.signatureKey)!r} names subgraph {sg_index}, which does not exist")
        sg = model_t.subgraphs[sg_index]
        for kind, maps, allowed in (("input", sd.inputs, sg.inputs), ("output", sd.outputs, sg.outputs)):
            allowed = {int(i) for i in (allowed if allowed is not None else ())}
            for tm in maps or []:
                if int(tm.tensorIndex or 0) not in allowed:
                    raise malformed(
                        f"signature {_decode(sd.signatureKey)!r} names tensor {tm.tensorIndex} as an {kind}, "
                        f"but it is not an {kind} of subgraph {sg_index}"
                    )
        signatures.append(
            {
                "key": _decode(sd.signatureKey),
                "inputs": [_decode(tm.name) for tm in sd.inputs or []],
                "outputs": [_decode(tm.name) for tm in sd.outputs or []],
                "subgraph": sg_index,
                # Tensor indices in signature order (which need not be the subgraph's I/O order).
                "input_tensors": [int(tm.tensorIndex or 0) for tm in sd.inputs or []],
                "output_tensors": [int(tm.tensorIndex or 0) for tm in sd.outputs or []],
            }
        )

    min_runtime = None
    for md in model_t.metadata or []:
        if not 0 <= int(md.buffer or 0) < max(len(buffers), 1):
            raise malformed(f"metadata {_decode(md.name)!r} refers to buffer {md.buffer}, which does not exist")
        if _decode(md.name) == "min_runtime_version" and buffer_bytes(md.buffer):
            buf = buffers[md.buffer]
            raw = bytes(buf.data) if buf.data is not None else data[buf.offset : buf.offset + buf.size]
            min_runtime = raw.split(b"\0", 1)[0].decode("ascii", errors="replace") or None

    return FlatbufferModel(
        size_bytes=len(data),
        num_subgraphs=num_subgraphs,
        tensors=main_tensors,
        operators=all_ops[0],
        inputs=main_inputs,
        outputs=main_outputs,
        signatures=tuple(signatures),
        min_runtime_version=min_runtime,
        description=_decode(model_t.description) or None,
        subgraph_operators=tuple(all_ops),
        data=data,
    )
