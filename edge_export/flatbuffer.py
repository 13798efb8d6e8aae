"""Read a LiteRT flatbuffer into small typed objects, in pure Python (no interpreter).

Every later stage (reports, target checkers, inspect) reads the model through here, so that what a
report says about a file is what the file holds. Parsing uses ai-edge-litert's generated schema
reader; a buffer that does not parse, or whose indices point outside the model, raises
``FlatbufferError`` before any runtime touches it.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FlatbufferError

__all__ = [
    "QuantParams",
    "TensorInfo",
    "OperatorInfo",
    "FlatbufferModel",
    "read_flatbuffer",
    "load_flatbuffer",
    "FLOAT_DTYPES",
    "INTEGER_ACTIVATION_DTYPES",
]

FLOAT_DTYPES = frozenset({"float32", "float16", "float64", "bfloat16"})
INTEGER_ACTIVATION_DTYPES = frozenset({"int8", "uint8", "int16", "int4"})

_TFLITE_IDENTIFIER = b"TFL3"


@dataclass(frozen=True)
class QuantParams:
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    quantized_dimension: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scales) > 1

    def to_dict(self) -> dict:
        if self.per_channel:
            return {
                "per_channel": True,
                "channels": len(self.scales),
                "quantized_dimension": self.quantized_dimension,
                "scale_min": min(self.scales),
                "scale_max": max(self.scales),
            }
        return {"per_channel": False, "scale": self.scales[0], "zero_point": self.zero_points[0]}


@dataclass(frozen=True)
class TensorInfo:
    index: int
    name: str
    shape: tuple[int, ...]
    shape_signature: tuple[int, ...]
    dtype: str
    is_constant: bool
    quant: QuantParams | None

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    @property
    def has_dynamic_dims(self) -> bool:
        return any(d < 0 for d in self.shape_signature)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "shape": list(self.shape),
            "shape_signature": list(self.shape_signature),
            "dtype": self.dtype,
            "constant": self.is_constant,
            "quantization": self.quant.to_dict() if self.quant else None,
        }


@dataclass(frozen=True)
class OperatorInfo:
    index: int
    opcode: str
    inputs: tuple[int, ...]  # -1 marks an omitted optional input
    outputs: tuple[int, ...]
    options_type: str | None
    options: Any = field(default=None, compare=False, repr=False)  # the schema's *OptionsT object


@dataclass(frozen=True)
class FlatbufferModel:
    """The main subgraph of a flatbuffer, plus model-level facts."""

    size_bytes: int
    num_subgraphs: int
    tensors: tuple[TensorInfo, ...]
    operators: tuple[OperatorInfo, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    signatures: tuple[dict, ...]
    min_runtime_version: str | None
    description: str | None
    # Operators and tensors of every subgraph (index 0 is the main one), for checkers that care.
    subgraph_operators: tuple[tuple[OperatorInfo, ...], ...] = field(default=(), repr=False)

    # ---- derived facts -------------------------------------------------------------------
    @property
    def op_counts(self) -> dict[str, int]:
        counts = Counter(op.opcode for ops in self.subgraph_operators or (self.operators,) for op in ops)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def num_operators(self) -> int:
        return sum(len(ops) for ops in (self.subgraph_operators or (self.operators,)))

    def tensor(self, index: int) -> TensorInfo:
        return self.tensors[index]

    @property
    def input_tensors(self) -> list[TensorInfo]:
        return [self.tensors[i] for i in self.inputs]

    @property
    def output_tensors(self) -> list[TensorInfo]:
        return [self.tensors[i] for i in self.outputs]

    @property
    def float_tensors(self) -> list[TensorInfo]:
        """Float tensors inside the graph (model inputs and outputs excluded)."""
        io = set(self.inputs) | set(self.outputs)
        used = {i for op in self.operators for i in (*op.inputs, *op.outputs) if i >= 0}
        return [t for t in self.tensors if t.is_float and t.index not in io and t.index in used]

    @property
    def inner_quantize_ops(self) -> list[OperatorInfo]:
        """QUANTIZE ops from float that are not at a model input, and DEQUANTIZE ops to float that
        are not at a model output: the float islands of a mixed-precision graph."""
        inputs, outputs = set(self.inputs), set(self.outputs)
        found = []
        for op in self.operators:
            if op.opcode == "QUANTIZE":
                src = self.tensors[op.inputs[0]]
                if src.is_float and op.inputs[0] not in inputs:
                    found.append(op)
            elif op.opcode == "DEQUANTIZE":
                src = self.tensors[op.inputs[0]]
                # A DEQUANTIZE of a constant fp16/int8 weight is a weight decompression, not an island.
                if not src.is_constant and op.outputs[0] not in outputs:
                    found.append(op)
        return found

    @property
    def is_fully_integer(self) -> bool:
        """True when every operator computes on integers; float model I/O is allowed (a QUANTIZE
        at the input and a DEQUANTIZE at the output, as the Edge TPU compiler also allows)."""
        return not self.float_tensors and not self.inner_quantize_ops and self.num_operators > 0

    def producer_of(self, tensor_index: int) -> OperatorInfo | None:
        for op in self.operators:
            if tensor_index in op.outputs:
                return op
        return None


def _dtype_names() -> dict[int, str]:
    from ai_edge_litert import schema_py_generated as schema

    return {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}


def _opcode_names() -> dict[int, str]:
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def _options_names() -> dict[int, str]:
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOptions).items() if not k.startswith("_")}


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
    """Parse and structurally verify ``data``. Raises FlatbufferError on anything malformed."""
    _check_header(data, origin)
    try:
        return _parse(bytes(data))
    except FlatbufferError:
        raise
    except Exception as exc:  # the generated reader raises many kinds on malformed input
        raise FlatbufferError(
            f"{origin} is not a valid LiteRT flatbuffer: it could not be parsed "
            f"({type(exc).__name__}: {str(exc)[:120]}). The file may be truncated or corrupted.",
            "Re-export the model, or check that the file was copied completely.",
        ) from exc


def load_flatbuffer(path: str | Path) -> tuple[bytes, FlatbufferModel]:
    p = Path(path)
    if not p.exists():
        raise FlatbufferError(f"No such file: {p}.", "Check the path to the .tflite file.")
    if p.is_dir():
        raise FlatbufferError(f"{p} is a directory, not a .tflite file.", "Pass the path of a .tflite file.")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise FlatbufferError(f"Cannot read {p}: {exc.strerror}.", "Check the file's permissions.") from exc
    return data, read_flatbuffer(data, origin=str(p))


def _bad(origin_detail: str) -> FlatbufferError:
    return FlatbufferError(
        f"The model is not a valid LiteRT flatbuffer: {origin_detail}. The file may be truncated "
        "or corrupted.",
        "Re-export the model, or check that the file was copied completely.",
    )


def _parse(data: bytes) -> FlatbufferModel:
    import numpy as np
    from ai_edge_litert import schema_py_generated as schema

    dtype_names = _dtype_names()
    opcode_names = _opcode_names()
    options_names = _options_names()

    model = schema.Model.GetRootAs(data, 0)
    model_t = schema.ModelT.InitFromObj(model)
    if not model_t.subgraphs:
        raise _bad("it has no subgraphs")
    buffers = model_t.buffers or []
    opcodes = model_t.operatorCodes or []

    def buffer_nonempty(buffer_index: int) -> bool:
        if buffer_index <= 0 or buffer_index >= len(buffers):
            return False
        buf = buffers[buffer_index]
        if buf.offset and buf.size:
            if buf.offset + buf.size > len(data):
                raise _bad(f"buffer {buffer_index} points past the end of the file")
            return True
        return buf.data is not None and len(buf.data) > 0

    def opcode_name(index: int) -> str:
        if index < 0 or index >= len(opcodes):
            raise _bad(f"operator code index {index} is out of range")
        oc = opcodes[index]
        code = max(oc.builtinCode or 0, oc.deprecatedBuiltinCode or 0)
        if code == schema.BuiltinOperator.CUSTOM:
            return f"CUSTOM:{_decode(oc.customCode)}"
        return opcode_names.get(code, f"UNKNOWN_{code}")

    all_ops: list[tuple[OperatorInfo, ...]] = []
    main_tensors: tuple[TensorInfo, ...] = ()
    for sg_index, sg in enumerate(model_t.subgraphs):
        tensors = []
        for t_index, t in enumerate(sg.tensors or []):
            shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
            sig = tuple(int(d) for d in t.shapeSignature) if t.shapeSignature is not None else shape
            q = t.quantization
            quant = None
            if q is not None and q.scale is not None and len(q.scale) > 0:
                zps = q.zeroPoint if q.zeroPoint is not None else np.zeros(len(q.scale), dtype=np.int64)
                quant = QuantParams(
                    scales=tuple(float(s) for s in q.scale),
                    zero_points=tuple(int(z) for z in zps),
                    quantized_dimension=int(q.quantizedDimension or 0),
                )
            if t.buffer is not None and t.buffer >= len(buffers) and len(buffers) > 0:
                raise _bad(f"tensor {t_index} refers to buffer {t.buffer}, which does not exist")
            tensors.append(
                TensorInfo(
                    index=t_index,
                    name=_decode(t.name),
                    shape=shape,
                    shape_signature=sig,
                    dtype=dtype_names.get(t.type, f"type{t.type}"),
                    is_constant=buffer_nonempty(t.buffer or 0),
                    quant=quant,
                )
            )
        n = len(tensors)
        ops = []
        for o_index, op in enumerate(sg.operators or []):
            ins = tuple(int(i) for i in (op.inputs if op.inputs is not None else ()))
            outs = tuple(int(i) for i in (op.outputs if op.outputs is not None else ()))
            for i in (*ins, *outs):
                if i < -1 or i >= n:
                    raise _bad(f"operator {o_index} refers to tensor {i}, which does not exist")
            ops.append(
                OperatorInfo(
                    index=o_index,
                    opcode=opcode_name(op.opcodeIndex or 0),
                    inputs=ins,
                    outputs=outs,
                    options_type=options_names.get(op.builtinOptionsType) if op.builtinOptionsType else None,
                    options=op.builtinOptions,
                )
            )
        for i in (*(sg.inputs if sg.inputs is not None else ()), *(sg.outputs if sg.outputs is not None else ())):
            if i < 0 or i >= n:
                raise _bad(f"subgraph {sg_index} names tensor {i} as an input or output, which does not exist")
        all_ops.append(tuple(ops))
        if sg_index == 0:
            main_tensors = tuple(tensors)
            main_inputs = tuple(int(i) for i in (sg.inputs if sg.inputs is not None else ()))
            main_outputs = tuple(int(i) for i in (sg.outputs if sg.outputs is not None else ()))

    signatures = []
    for sd in model_t.signatureDefs or []:
        signatures.append(
            {
                "key": _decode(sd.signatureKey),
                "inputs": [_decode(tm.name) for tm in sd.inputs or []],
                "outputs": [_decode(tm.name) for tm in sd.outputs or []],
                "subgraph": int(sd.subgraphIndex or 0),
            }
        )

    min_runtime = None
    for md in model_t.metadata or []:
        if _decode(md.name) == "min_runtime_version" and 0 < md.buffer < len(buffers):
            buf = buffers[md.buffer]
            raw = bytes(buf.data) if buf.data is not None else data[buf.offset : buf.offset + buf.size]
            min_runtime = raw.split(b"\0", 1)[0].decode("ascii", errors="replace") or None

    return FlatbufferModel(
        size_bytes=len(data),
        num_subgraphs=len(model_t.subgraphs),
        tensors=main_tensors,
        operators=all_ops[0],
        inputs=main_inputs,
        outputs=main_outputs,
        signatures=tuple(signatures),
        min_runtime_version=min_runtime,
        description=_decode(model_t.description) or None,
        subgraph_operators=tuple(all_ops),
    )
