"""The typed model every later stage reads: tensors, operators, quantization parameters and the
main subgraph's inputs and outputs of a verified LiteRT flatbuffer (``read_flatbuffer`` builds it).
A ``FlatbufferModel`` carries the bytes it was read from, so one value is the file: constants are
read from them on demand and ``mutable()`` gives a pass the schema's object to change.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..errors import InternalError
from ..output.serialize import json_field
from .schema_reader import model_table

__all__ = [
    "DTYPE_BITS",
    "FLOAT_DTYPES",
    "INTEGER_ACTIVATION_DTYPES",
    "FlatbufferModel",
    "OperatorInfo",
    "PerChannelQuantization",
    "PerTensorQuantization",
    "QuantParams",
    "TensorInfo",
]

FLOAT_DTYPES = frozenset({"float32", "float16", "float64", "bfloat16"})
# Operators that join or move dequantized parts into one float output (``output_join_ops``).
_OUTPUT_JOIN_OPS = frozenset({"CONCATENATION", "RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS"})
INTEGER_ACTIVATION_DTYPES = frozenset({"int8", "uint8", "int16", "int4"})
# Bits per element of each tensor type (int4 is packed): constant buffers are size-checked with it.
DTYPE_BITS = {
    "float32": 32, "float16": 16, "float64": 64, "bfloat16": 16, "int32": 32, "uint32": 32,
    "int64": 64, "uint64": 64, "int16": 16, "uint16": 16, "int8": 8, "uint8": 8, "bool": 8,
    "int4": 4, "complex64": 64, "complex128": 128,
}


@dataclass(frozen=True)
class QuantParams:
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    quantized_dimension: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scales) > 1

    def json_view(self) -> PerTensorQuantization | PerChannelQuantization:
        """What the JSON shows: one scale and zero point, or a summary of the per-channel scales."""
        if self.per_channel:
            return PerChannelQuantization(len(self.scales), self.quantized_dimension, min(self.scales), max(self.scales))
        return PerTensorQuantization(self.scales[0], self.zero_points[0])


@dataclass(frozen=True)
class PerTensorQuantization:
    scale: float
    zero_point: int
    per_channel: bool = False

    JSON_KEYS = ("per_channel", "scale", "zero_point")


@dataclass(frozen=True)
class PerChannelQuantization:
    channels: int
    quantized_dimension: int
    scale_min: float
    scale_max: float
    per_channel: bool = True

    JSON_KEYS = ("per_channel", "channels", "quantized_dimension", "scale_min", "scale_max")


@dataclass(frozen=True)
class TensorInfo:
    index: int
    name: str
    shape: tuple[int, ...]
    shape_signature: tuple[int, ...]
    dtype: str
    is_constant: bool = json_field(name="constant")
    quant: QuantParams | None = json_field(name="quantization")

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    @property
    def has_dynamic_dims(self) -> bool:
        return any(d < 0 for d in self.shape_signature)


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
    # The verified bytes this object was read from (empty for a model built by hand in a test):
    # one value carries the file, so stages pass the model, not a (bytes, model) pair.
    data: bytes = field(default=b"", repr=False, compare=False)

    # ---- the file's contents, read on first use --------------------------------------------
    @functools.cached_property
    def _buffer_table(self) -> Any:
        """The schema's lazy reader over ``data``: only the tables asked for are decoded."""
        if not self.data:
            raise InternalError("A FlatbufferModel built without its bytes was asked for constant data.")
        return model_table(self.data)

    def constant(self, index: int) -> Any | None:
        """The value of constant tensor ``index`` of the main subgraph as a numpy array of its dtype
        and shape (None for an activation). Reads only that tensor's buffer; int4 and other packed
        or sparse types come back as their raw uint8 bytes."""
        import numpy as np

        info = self.tensors[index]
        if not info.is_constant:
            return None
        model = self._buffer_table
        buf = model.Buffers(model.Subgraphs(0).Tensors(index).Buffer())
        if buf.Offset() > 1:  # data stored after the flatbuffer (models over 2 GB); verified in range
            raw = np.frombuffer(self.data, dtype=np.uint8, count=buf.Size(), offset=buf.Offset())
        else:
            raw = buf.DataAsNumpy()
        try:
            dtype = np.dtype(info.dtype)
        except TypeError:  # bfloat16, int4, ...: numpy has no such type
            return raw
        needed = int(np.prod(info.shape, dtype=np.int64)) * dtype.itemsize
        if raw.size < needed:
            return raw
        return raw[:needed].view(dtype.newbyteorder("<")).reshape(info.shape)

    def mutable(self) -> Any:
        """A fresh ``schema_py_generated.ModelT`` of ``data`` for a pass to change (see
        ``edge_export.passes.flatbuffer``); buffers stored after the flatbuffer are moved inside."""
        from .pack import read_model

        if not self.data:
            raise InternalError("A FlatbufferModel built without its bytes cannot be rewritten.")
        return read_model(self.data)

    # ---- I/O naming ------------------------------------------------------------------------
    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the main subgraph's inputs in subgraph order (forward()'s arguments): the
        first signature's name of each tensor, else the tensor's own name. The signature's lists
        are sorted by name ("output_10" < "output_2"), so they supply names, never the order."""
        return tuple(self._signature_names().get(i, self.tensors[i].name) for i in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the main subgraph's outputs in subgraph order (flattened outputs); see input_names."""
        return tuple(self._signature_names().get(i, self.tensors[i].name) for i in self.outputs)

    def _signature_names(self) -> dict[int, str]:
        sig = self.signatures[0] if self.signatures else None
        if sig is None or sig.get("input_tensors") is None:
            return {}
        return {**dict(zip(sig["input_tensors"], sig["inputs"])), **dict(zip(sig["output_tensors"], sig["outputs"]))}

    # ---- derived facts -------------------------------------------------------------------
    @property
    def op_counts(self) -> dict[str, int]:
        counts = Counter(op.opcode for ops in self.subgraph_operators or (self.operators,) for op in ops)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def has_inner_tensor_names(self) -> bool:
        """Whether any tensor besides the inputs and outputs has a name (``--strip-names`` drops them)."""
        boundary = {*self.inputs, *self.outputs}
        return any(t.name for t in self.tensors if t.index not in boundary)

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

    @functools.cached_property
    def output_join_ops(self) -> frozenset[int]:
        """Operators that make a float model output from integer parts, each with its own scale: a
        DEQUANTIZE per part, then the CONCATENATION (and value-moving operators) that join them,
        every tensor between them read by nothing else (quantization/output_joins.py). Like the
        DEQUANTIZE to a float output, they are the graph's edge, not a float island."""
        producer = {t: op for op in self.operators for t in op.outputs if t >= 0}
        readers = Counter(t for op in self.operators for t in op.inputs if t >= 0)
        found: set[int] = set()
        for output in self.outputs:
            tail, pending, joined = set(), [output], False
            while pending:  # each step takes one operator back: bounded by the graph's size
                tensor = pending.pop()
                op = producer.get(tensor)
                if op is None or (tensor != output and readers[tensor] != 1) or not self.tensors[tensor].is_float:
                    break
                if op.opcode == "DEQUANTIZE" and not self.tensors[op.inputs[0]].is_float and not self.tensors[op.inputs[0]].is_constant:
                    tail.add(op.index)
                    continue
                if op.opcode not in _OUTPUT_JOIN_OPS or op.index in tail:
                    break
                tail.add(op.index)
                joined = joined or op.opcode == "CONCATENATION"
                pending.extend(i for i in op.inputs[:None if op.opcode == "CONCATENATION" else 1] if i >= 0)
            else:
                found |= tail if joined else set()
        return frozenset(found)

    @property
    def float_tensors(self) -> list[TensorInfo]:
        """Float tensors inside the graph (model inputs and outputs, and the tensors an output join
        writes, excluded)."""
        io = set(self.inputs) | set(self.outputs)
        io |= {t for op in self.operators if op.index in self.output_join_ops for t in op.outputs}
        used = {i for op in self.operators for i in (*op.inputs, *op.outputs) if i >= 0}
        return [t for t in self.tensors if t.is_float and t.index not in io and t.index in used]

    @property
    def inner_quantize_ops(self) -> list[OperatorInfo]:
        """QUANTIZE ops from float that are not at a model input, and DEQUANTIZE ops to float that
        are not at a model output: the float islands of a mixed-precision graph."""
        inputs, outputs = set(self.inputs), set(self.outputs)
        found = []
        for op in self.operators:
            if op.index in self.output_join_ops:
                continue
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
    def float_operators(self) -> list[OperatorInfo]:
        """Operators that compute in float: a float activation read or written, except the QUANTIZE
        of a float model input and the DEQUANTIZE to a float model output. An operator between
        float model I/O has no float tensor *inside* the graph and no inner QUANTIZE, so the two
        properties above miss it (an int8 ReLU6 model whose one operator stayed float)."""
        inputs, outputs = set(self.inputs), set(self.outputs)
        found = []
        for op in self.operators:
            if op.opcode == "QUANTIZE" and all(i in inputs for i in op.inputs if i >= 0):
                continue
            if op.opcode == "DEQUANTIZE" and all(o in outputs for o in op.outputs if o >= 0):
                continue
            if op.index in self.output_join_ops:
                continue
            if any(self.tensors[i].is_float and not self.tensors[i].is_constant for i in (*op.inputs, *op.outputs) if i >= 0):
                found.append(op)
        return found

    @property
    def is_fully_integer(self) -> bool:
        """True when every operator computes on integers; float model I/O is allowed (a QUANTIZE
        at the input and a DEQUANTIZE at the output, as the Edge TPU compiler also allows)."""
        return not self.float_tensors and not self.inner_quantize_ops and not self.float_operators and self.num_operators > 0

    def producer_of(self, tensor_index: int) -> OperatorInfo | None:
        for op in self.operators:
            if tensor_index in op.outputs:
                return op
        return None
