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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FlatbufferError, InternalError
from .kernel_checks import check_dataflow, check_tensor_size, operator_problem, options_problem, quantization_params, tensor_shapes
from .malformed import malformed
from .model import FlatbufferModel, OperatorInfo, TensorInfo
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

    from ..processes.memory import ensure_memory_for

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
    """The typed model of verified ``data``, every piece checked for what the kernels trust."""
    from ai_edge_litert import schema_py_generated as schema

    model_t = schema.ModelT.InitFromObj(model_table(data))
    if not model_t.subgraphs:
        raise malformed("it has no subgraphs")
    reader = _ModelReader(data, model_t)
    subgraphs = [reader.subgraph(sg_index, sg) for sg_index, sg in enumerate(model_t.subgraphs)]
    signatures = reader.signatures()
    min_runtime = reader.min_runtime_version()
    main = subgraphs[0]
    return FlatbufferModel(
        size_bytes=len(data),
        num_subgraphs=len(subgraphs),
        tensors=main.tensors,
        operators=main.operators,
        inputs=main.inputs,
        outputs=main.outputs,
        signatures=signatures,
        min_runtime_version=min_runtime,
        description=_decode(model_t.description) or None,
        subgraph_operators=tuple(sg.operators for sg in subgraphs),
        data=data,
    )


@dataclass(frozen=True)
class _Subgraph:
    tensors: tuple[TensorInfo, ...]
    operators: tuple[OperatorInfo, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def _indices(values: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in (values if values is not None else ()))


class _ModelReader:
    """Reads the pieces of one file's ``ModelT`` into typed objects, checking each as it goes."""

    def __init__(self, data: bytes, model_t: Any) -> None:
        from ai_edge_litert import schema_py_generated as schema

        self.data, self.model_t = data, model_t
        self.buffers = model_t.buffers or []
        self.opcodes = model_t.operatorCodes or []
        self.num_subgraphs = len(model_t.subgraphs)
        self.dtype_name_of, self.opcode_name_of, self.options_name_of = dtype_names(), opcode_names(), options_names()
        self.custom_code = schema.BuiltinOperator.CUSTOM
        for oc_index, oc in enumerate(self.opcodes):
            if (oc.deprecatedBuiltinCode or 0) < 0 or (oc.builtinCode or 0) < 0:
                raise malformed(f"operator code {oc_index} has a negative builtin code")

    def buffer_bytes(self, buffer_index: int) -> int:
        """The bytes of constant data buffer ``buffer_index`` holds (0: none; buffer 0 is "no data")."""
        if buffer_index <= 0 or buffer_index >= len(self.buffers):
            return 0
        buf = self.buffers[buffer_index]
        if buf.offset or buf.size:
            # Data stored after the flatbuffer (models > 2 GB): offset and size must stay in the file.
            if buf.offset <= 1 or buf.offset + buf.size > len(self.data):
                raise malformed(f"buffer {buffer_index} points outside the file")
            return int(buf.size)
        return len(buf.data) if buf.data is not None else 0

    def opcode_name(self, index: int) -> str:
        if index < 0 or index >= len(self.opcodes):
            raise malformed(f"operator code index {index} is out of range")
        oc = self.opcodes[index]
        code = max(oc.builtinCode or 0, oc.deprecatedBuiltinCode or 0)
        if code == self.custom_code:
            return f"CUSTOM:{_decode(oc.customCode)}"
        return self.opcode_name_of.get(code, f"UNKNOWN_{code}")

    def subgraph(self, sg_index: int, sg: Any) -> _Subgraph:
        tensors = [
            self.tensor(f"tensor {t_index} of subgraph {sg_index}", t_index, t) for t_index, t in enumerate(sg.tensors or [])
        ]
        ops = [self.operator(sg_index, o_index, op, tensors) for o_index, op in enumerate(sg.operators or [])]
        sg_inputs, sg_outputs = _indices(sg.inputs), _indices(sg.outputs)
        for i in (*sg_inputs, *sg_outputs):
            if i < 0 or i >= len(tensors):
                raise malformed(f"subgraph {sg_index} names tensor {i} as an input or output, which does not exist")
        check_dataflow(sg_index, ops, tensors, sg_inputs, {i for i, t in enumerate(sg.tensors or []) if t.isVariable})
        return _Subgraph(tuple(tensors), tuple(ops), sg_inputs, sg_outputs)

    def tensor(self, where: str, t_index: int, t: Any) -> TensorInfo:
        shape, sig = tensor_shapes(where, t)
        dtype = self.dtype_name_of.get(t.type)
        if dtype is None:
            raise malformed(f"{where} has an unknown element type {t.type}")
        quant = quantization_params(where, t.quantization, dtype, shape)
        buffer_index = int(t.buffer or 0)
        if buffer_index >= max(len(self.buffers), 1):
            raise malformed(f"{where} refers to buffer {buffer_index}, which does not exist")
        nbytes = self.buffer_bytes(buffer_index)
        check_tensor_size(where, _decode(t.name), dtype, shape, nbytes, sparse=t.sparsity is not None)
        return TensorInfo(
            index=t_index,
            name=_decode(t.name),
            shape=shape,
            shape_signature=sig,
            dtype=dtype,
            is_constant=nbytes > 0,
            quant=quant,
        )

    def operator(self, sg_index: int, o_index: int, op: Any, tensors: list[TensorInfo]) -> OperatorInfo:
        ins, outs, inter = _indices(op.inputs), _indices(op.outputs), _indices(op.intermediates)
        for i in (*ins, *outs, *inter):
            if i < -1 or i >= len(tensors):
                raise malformed(f"operator {o_index} of subgraph {sg_index} refers to tensor {i}, which does not exist")
        if any(i < 0 for i in outs):
            raise malformed(f"operator {o_index} of subgraph {sg_index} has an omitted output")
        opcode = self.opcode_name(op.opcodeIndex or 0)
        options_type = self.options_name_of.get(op.builtinOptionsType) if op.builtinOptionsType else None
        problem = operator_problem(opcode, ins, tensors, options_type)
        for options in (op.builtinOptions, op.builtinOptions2):
            if problem is None and options is not None:
                problem = options_problem(options, self.num_subgraphs)
        if problem:
            raise malformed(f"operator {o_index} of subgraph {sg_index} ({opcode}) {problem}")
        return OperatorInfo(
            index=o_index, opcode=opcode, inputs=ins, outputs=outs, options_type=options_type, options=op.builtinOptions
        )

    def signatures(self) -> tuple[dict, ...]:
        return tuple(self._signature(sd) for sd in self.model_t.signatureDefs or [])

    def _signature(self, sd: Any) -> dict:
        key = _decode(sd.signatureKey)
        sg_index = int(sd.subgraphIndex or 0)
        if not 0 <= sg_index < self.num_subgraphs:
            raise malformed(f"signature {key!r} names subgraph {sg_index}, which does not exist")
        sg = self.model_t.subgraphs[sg_index]
        for kind, maps, allowed in (("input", sd.inputs, sg.inputs), ("output", sd.outputs, sg.outputs)):
            allowed = set(_indices(allowed))
            for tm in maps or []:
                if int(tm.tensorIndex or 0) not in allowed:
                    raise malformed(
                        f"signature {key!r} names tensor {tm.tensorIndex} as an {kind}, "
                        f"but it is not an {kind} of subgraph {sg_index}"
                    )
        return {
            "key": key,
            "inputs": [_decode(tm.name) for tm in sd.inputs or []],
            "outputs": [_decode(tm.name) for tm in sd.outputs or []],
            "subgraph": sg_index,
            # Tensor indices in signature order (which need not be the subgraph's I/O order).
            "input_tensors": [int(tm.tensorIndex or 0) for tm in sd.inputs or []],
            "output_tensors": [int(tm.tensorIndex or 0) for tm in sd.outputs or []],
        }

    def min_runtime_version(self) -> str | None:
        """The ``min_runtime_version`` metadata entry's text; every entry must name a buffer."""
        min_runtime = None
        for md in self.model_t.metadata or []:
            if not 0 <= int(md.buffer or 0) < max(len(self.buffers), 1):
                raise malformed(f"metadata {_decode(md.name)!r} refers to buffer {md.buffer}, which does not exist")
            if _decode(md.name) == "min_runtime_version" and self.buffer_bytes(md.buffer):
                buf = self.buffers[md.buffer]
                raw = bytes(buf.data) if buf.data is not None else self.data[buf.offset : buf.offset + buf.size]
                min_runtime = raw.split(b"\0", 1)[0].decode("ascii", errors="replace") or None
        return min_runtime
