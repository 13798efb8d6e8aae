"""Read a LiteRT flatbuffer into small typed objects, in pure Python (no interpreter).

Every later stage (reports, target checkers, inspect) reads the model through here, so that what a
report says about a file is what the file holds. The buffer is verified first (see ``_Verifier``:
the bounds rules of flatbuffers' C++ Verifier, which the native runtimes do not run), then parsed
with ai-edge-litert's generated schema reader and checked for what the kernels trust (indices,
shapes, buffer sizes, quantization parameters, kernel options). A buffer that fails any of this
raises ``FlatbufferError`` before any runtime touches it: the fuzz test in tests/flatbuffer shows which
mutated files used to crash the XNNPACK delegate.
"""

from __future__ import annotations

import functools
import json
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FlatbufferError, InternalError
from .serialize import json_field

__all__ = [
    "QuantParams",
    "TensorInfo",
    "OperatorInfo",
    "FlatbufferModel",
    "OversizedTensorError",
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
        from ai_edge_litert import schema_py_generated as schema

        if not self.data:
            raise InternalError("A FlatbufferModel built without its bytes was asked for constant data.")
        return schema.Model.GetRootAs(self.data, 0)

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
        from .flatbuffer_packing import read_model

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
    """Parse and verify ``data``. Raises FlatbufferError on anything malformed.

    Verification runs before any native code sees the buffer: every offset, table, vector and
    string must lie inside it (the rules of flatbuffers' C++ Verifier), and every index a runtime
    follows (opcode, tensor, buffer, subgraph) must exist, constant tensors must own at least the
    bytes their shape needs, and shapes must not be negative.
    """
    _check_header(data, origin)
    data = bytes(data)
    try:
        _Verifier(data).verify_model()
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

    from .memory import ensure_memory_for

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


class OversizedTensorError(FlatbufferError):
    """A tensor larger than LiteRT can allocate: a well-formed file (a converter writes such a model
    for a pooling window far larger than its input), which no runtime can prepare."""

    def __init__(self, message: str, hint: str | None, tensor_name: str, shape: list[int], nbytes: int) -> None:
        super().__init__(message, hint)
        self.tensor_name, self.shape, self.nbytes = tensor_name, shape, nbytes


def _bad(origin_detail: str) -> FlatbufferError:
    return FlatbufferError(
        f"The model is not a valid LiteRT flatbuffer: {origin_detail}. The file may be truncated "
        "or corrupted.",
        "Re-export the model, or check that the file was copied completely.",
    )


# Bytes per element of the tensor types whose constant buffers we size-check (int4 is packed).
_DTYPE_BITS = {
    "float32": 32, "float16": 16, "float64": 64, "bfloat16": 16, "int32": 32, "uint32": 32,
    "int64": 64, "uint64": 64, "int16": 16, "uint16": 16, "int8": 8, "uint8": 8, "bool": 8,
    "int4": 4, "complex64": 64, "complex128": 128,
}


_FLOAT32_MIN_NORMAL = 1.1754943508222875e-38
_MAX_TENSOR_BYTES = 2**31 - 1  # LiteRT sizes tensors in int32 arithmetic in places
_ZERO_POINT_RANGES = {
    "int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
    "int4": (-8, 7), "int32": (-(2**31), 2**31 - 1),
}
# Options fields that kernels use as divisors or loop steps (a 0 there crashes native kernels), and
# enum fields whose value selects a code path (an unknown value reads past a table in some kernels).
_POSITIVE_OPTION_FIELDS = ("strideW", "strideH", "strideD", "filterWidth", "filterHeight",
                           "dilationWFactor", "dilationHFactor", "dilationDFactor", "depthMultiplier")


# What each kernel reads from its inputs: (how many inputs it needs at least, which input positions
# may be -1, "omitted"). Kernels fetch their mandatory inputs without a null check, so an omitted
# TRANSPOSE permutation or RESHAPE shape is a segfault in the native runtime; only the positions a
# kernel fetches with GetOptionalInputTensor may be omitted. An operator not listed here (custom ops
# included) may omit none of its inputs.
_LSTM_OPTIONAL = frozenset({1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23})
_OPERATOR_INPUTS: dict[str, tuple[int, frozenset[int]]] = {
    **{op: (1, frozenset()) for op in (
        "ABS", "AVERAGE_POOL_2D", "CAST", "CEIL", "CONCATENATION", "COS", "DEPTH_TO_SPACE", "DEQUANTIZE",
        "ELU", "EXP", "FLOOR", "GELU", "HARD_SWISH", "L2_NORMALIZATION", "L2_POOL_2D", "LEAKY_RELU",
        "LOCAL_RESPONSE_NORMALIZATION", "LOG", "LOGICAL_NOT", "LOGISTIC", "LOG_SOFTMAX", "MAX_POOL_2D",
        "NEG", "PACK", "QUANTIZE", "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1", "RESHAPE", "ROUND",
        "RSQRT", "SHAPE", "SIGN", "SIN", "SOFTMAX", "SPACE_TO_DEPTH", "SQRT", "SQUARE", "SQUEEZE",
        "TANH", "UNPACK", "ZEROS_LIKE", "ADD_N", "RANK", "WHERE", "UNIQUE",
    )},
    **{op: (2, frozenset()) for op in (
        "ADD", "ARG_MAX", "ARG_MIN", "ATAN2", "BATCH_MATMUL", "BROADCAST_ARGS", "BROADCAST_TO", "CUMSUM",
        "DIV", "EMBEDDING_LOOKUP", "EQUAL", "EXPAND_DIMS", "FILL", "FLOOR_DIV", "FLOOR_MOD", "GATHER",
        "GATHER_ND", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "LOGICAL_AND", "LOGICAL_OR",
        "MAXIMUM", "MEAN", "MINIMUM", "MIRROR_PAD", "MUL", "NOT_EQUAL", "PAD", "POW", "PRELU",
        "REDUCE_ANY", "REDUCE_ALL", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "RESIZE_BILINEAR",
        "RESIZE_NEAREST_NEIGHBOR", "REVERSE_V2", "SPLIT", "SQUARED_DIFFERENCE", "SUB", "SUM", "TILE",
        "TOPK_V2", "TRANSPOSE", "SEGMENT_SUM", "BITWISE_XOR", "RIGHT_SHIFT",
    )},
    **{op: (3, frozenset()) for op in (
        "BATCH_TO_SPACE_ND", "DYNAMIC_UPDATE_SLICE", "RANGE", "SCATTER_ND", "SELECT", "SELECT_V2",
        "SLICE", "SPACE_TO_BATCH_ND", "SPLIT_V", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN",
        "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_SUM", "REVERSE_SEQUENCE",
    )},
    "STRIDED_SLICE": (4, frozenset()),
    "ONE_HOT": (4, frozenset()),
    "CONV_2D": (2, frozenset({2})),  # bias
    "DEPTHWISE_CONV_2D": (2, frozenset({2})),
    "FULLY_CONNECTED": (2, frozenset({2})),
    "CONV_3D": (2, frozenset({2})),
    "TRANSPOSE_CONV": (3, frozenset({3})),  # output shape, weights, input; bias
    "CONV_3D_TRANSPOSE": (3, frozenset({3})),
    "PADV2": (2, frozenset({2})),  # constant value
    "SVDF": (4, frozenset({3})),
    "LSH_PROJECTION": (2, frozenset({2})),
    "LSTM": (20, _LSTM_OPTIONAL),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (20, _LSTM_OPTIONAL),
    "RNN": (5, frozenset()),
    "UNIDIRECTIONAL_SEQUENCE_RNN": (5, frozenset()),
}


# The options table each kernel reads its parameters from. A file that gives an operator another
# operator's table (a SPLIT carrying Conv2DOptions) makes the kernel read fields that are not there:
# found by benchmarks/flatbuffer_fuzz.py as a segfault. Only operators whose kernels read options.
_OPERATOR_OPTIONS = {
    **dict.fromkeys(("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"), "Pool2DOptions"),
    **dict.fromkeys(("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY"), "ReducerOptions"),
    "ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions",
    "CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions", "CONV_3D": "Conv3DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions", "RESHAPE": "ReshapeOptions", "SOFTMAX": "SoftmaxOptions",
    "CONCATENATION": "ConcatenationOptions", "SPLIT": "SplitOptions", "SPLIT_V": "SplitVOptions",
    "STRIDED_SLICE": "StridedSliceOptions", "SQUEEZE": "SqueezeOptions", "GATHER": "GatherOptions",
    "BATCH_MATMUL": "BatchMatMulOptions", "TRANSPOSE_CONV": "TransposeConvOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions", "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "LEAKY_RELU": "LeakyReluOptions", "PACK": "PackOptions", "UNPACK": "UnpackOptions", "SHAPE": "ShapeOptions",
    "DEPTH_TO_SPACE": "DepthToSpaceOptions", "SPACE_TO_DEPTH": "SpaceToDepthOptions",
    "ARG_MAX": "ArgMaxOptions", "ARG_MIN": "ArgMinOptions", "GELU": "GeluOptions", "CUMSUM": "CumsumOptions",
    "L2_NORMALIZATION": "L2NormOptions", "LOCAL_RESPONSE_NORMALIZATION": "LocalResponseNormalizationOptions",
    "MIRROR_PAD": "MirrorPadOptions", "ONE_HOT": "OneHotOptions", "WHILE": "WhileOptions", "IF": "IfOptions",
    "LSTM": "LSTMOptions", "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
    "SVDF": "SVDFOptions", "RNN": "RNNOptions",
}


# Inputs whose data kernels (and XNNPACK's graph builder) read as integer indices, shapes or axes:
# a float tensor there (a TRANSPOSE turned into a SPLIT whose "axis" is the float image) segfaulted.
_INDEX_INPUTS: dict[str, tuple[int, ...]] = {
    "TRANSPOSE": (1,), "RESHAPE": (1,), "SPLIT": (0,), "SPLIT_V": (1, 2), "MEAN": (1,), "SUM": (1,),
    "REDUCE_MAX": (1,), "REDUCE_MIN": (1,), "REDUCE_PROD": (1,), "REDUCE_ANY": (1,), "REDUCE_ALL": (1,),
    "PAD": (1,), "PADV2": (1,), "MIRROR_PAD": (1,), "STRIDED_SLICE": (1, 2, 3), "SLICE": (1, 2),
    "GATHER": (1,), "GATHER_ND": (1,), "TILE": (1,), "EXPAND_DIMS": (1,), "RESIZE_BILINEAR": (1,),
    "RESIZE_NEAREST_NEIGHBOR": (1,), "BROADCAST_TO": (1,), "ARG_MAX": (1,), "ARG_MIN": (1,),
    "CUMSUM": (1,), "TRANSPOSE_CONV": (0,), "BATCH_TO_SPACE_ND": (1, 2), "SPACE_TO_BATCH_ND": (1, 2),
    "FILL": (0,), "ONE_HOT": (1,), "TOPK_V2": (1,), "REVERSE_V2": (1,), "SCATTER_ND": (0, 2),
}
_INDEX_DTYPES = frozenset({"int16", "int32", "int64"})


def _inputs_problem(opcode: str, inputs: tuple[int, ...], tensors: list[TensorInfo] | None = None) -> str | None:
    """Why an operator's input list would make its kernel read a missing tensor, or None."""
    needed, optional = _OPERATOR_INPUTS.get(opcode, (0, frozenset()))
    if len(inputs) < needed:
        return f"has {len(inputs)} inputs; the kernel needs at least {needed}"
    for position, tensor in enumerate(inputs):
        if tensor < 0 and position not in optional:
            return f"omits its input {position} (-1), which the kernel requires"
    for position in _INDEX_INPUTS.get(opcode, ()) if tensors is not None else ():
        if position < len(inputs) and inputs[position] >= 0 and tensors[inputs[position]].dtype not in _INDEX_DTYPES:
            dtype = tensors[inputs[position]].dtype
            return f"takes a {dtype} tensor as its input {position}, which the kernel reads as integer indices"
    return None


def _check_dataflow(
    sg_index: int,
    ops: list[OperatorInfo],
    tensors: list[TensorInfo],
    inputs: tuple[int, ...],
    variables: set[int],
) -> None:
    """Operators run in file order: no tensor may be written twice, or over a subgraph input or a
    constant, or read before the operator that writes it. A mutated output index that broke this
    (a RESHAPE writing over a CONV_2D's output) segfaulted XNNPACK."""
    import math

    constant = {t.index for t in tensors if t.is_constant or math.prod(t.shape) == 0}
    writer: dict[int, int] = {}
    for op in ops:
        where = f"operator {op.index} of subgraph {sg_index} ({op.opcode})"
        for o in op.outputs:
            if o in writer:
                raise _bad(f"{where} writes tensor {o}, which operator {writer[o]} already writes")
            if o in inputs or o in constant or o in variables:
                raise _bad(f"{where} writes over tensor {o}, an input or constant of the subgraph")
            writer[o] = op.index
    # A tensor that no operator writes is left as the runtime allocates it (a test model may mean
    # "a weight computed at run time"); one written by a later operator is an ordering error.
    for op in ops:
        for i in op.inputs:
            if writer.get(i, -1) >= op.index:
                raise _bad(
                    f"operator {op.index} of subgraph {sg_index} ({op.opcode}) reads tensor {i} before "
                    f"operator {writer[i]} writes it"
                )


def _options_problem(options: Any, num_subgraphs: int) -> str | None:
    """Why a builtin-options object cannot be handed to a kernel, or None."""
    from ai_edge_litert import schema_py_generated as schema

    fields = vars(options)
    for attr, value in fields.items():
        if attr.lower().endswith("subgraphindex") and not 0 <= int(value) < num_subgraphs:
            return f"calls subgraph {value}, which does not exist"
        if attr in _POSITIVE_OPTION_FIELDS and int(value) < 1 and type(options).__name__ != "DepthwiseConv2DOptionsT":
            return f"has {attr} = {value}; it must be at least 1"
    enums = {"padding": schema.Padding, "fusedActivationFunction": schema.ActivationFunctionType}
    for attr, enum_cls in enums.items():
        if attr in fields:
            allowed = {v for k, v in vars(enum_cls).items() if not k.startswith("_")}
            if fields[attr] not in allowed:
                return f"has an unknown {attr} value {fields[attr]}"
    if "strideW" in fields and type(options).__name__ == "DepthwiseConv2DOptionsT":
        if min(fields["strideW"], fields["strideH"], fields.get("dilationWFactor", 1), fields.get("dilationHFactor", 1)) < 1:
            return "has a stride or dilation below 1"
    return None


def _parse(data: bytes) -> FlatbufferModel:
    import math

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
    num_subgraphs = len(model_t.subgraphs)

    def buffer_bytes(buffer_index: int) -> int:
        if buffer_index <= 0 or buffer_index >= len(buffers):
            return 0
        buf = buffers[buffer_index]
        if buf.offset or buf.size:
            # Data stored after the flatbuffer (models > 2 GB): offset and size must stay in the file.
            if buf.offset <= 1 or buf.offset + buf.size > len(data):
                raise _bad(f"buffer {buffer_index} points outside the file")
            return int(buf.size)
        return len(buf.data) if buf.data is not None else 0

    for oc_index, oc in enumerate(opcodes):
        if (oc.deprecatedBuiltinCode or 0) < 0 or (oc.builtinCode or 0) < 0:
            raise _bad(f"operator code {oc_index} has a negative builtin code")

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
    main_inputs: tuple[int, ...] = ()
    main_outputs: tuple[int, ...] = ()
    for sg_index, sg in enumerate(model_t.subgraphs):
        tensors = []
        for t_index, t in enumerate(sg.tensors or []):
            where = f"tensor {t_index} of subgraph {sg_index}"
            shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
            sig = tuple(int(d) for d in t.shapeSignature) if t.shapeSignature is not None else shape
            if any(d < 0 for d in shape):
                raise _bad(f"{where} has a negative dimension in its shape {list(shape)}")
            if len(sig) != len(shape) or any(d < -1 for d in sig):
                raise _bad(f"{where} has a shape signature {list(sig)} that does not fit its shape")
            dtype = dtype_names.get(t.type)
            if dtype is None:
                raise _bad(f"{where} has an unknown element type {t.type}")
            q = t.quantization
            quant = None
            if q is not None and q.scale is not None and len(q.scale) > 0:
                if q.zeroPoint is not None and len(q.zeroPoint) not in (0, len(q.scale)):
                    raise _bad(f"{where} has {len(q.scale)} scales but {len(q.zeroPoint)} zero points")
                qdim = int(q.quantizedDimension or 0)
                if len(q.scale) > 1 and not (0 <= qdim < len(shape) and shape[qdim] == len(q.scale)):
                    raise _bad(f"{where} has {len(q.scale)} per-channel scales that do not fit its shape")
                # XNNPACK crashes on zero or subnormal scales of integer tensors; quantizers never
                # write them (ai-edge-quantizer clamps at 1e-9). On float tensors they are ignored.
                allowed_zero = dtype in FLOAT_DTYPES
                if not all((allowed_zero and float(x) == 0.0) or _FLOAT32_MIN_NORMAL <= float(x) < math.inf for x in q.scale):
                    raise _bad(f"{where} has a zero, negative, subnormal or non-finite quantization scale")
                lo, hi = _ZERO_POINT_RANGES.get(dtype, (-(2**63), 2**63 - 1))
                if q.zeroPoint is not None and any(not lo <= int(z) <= hi for z in q.zeroPoint):
                    raise _bad(f"{where} has a zero point outside the range of {dtype}")
                zps = q.zeroPoint if q.zeroPoint is not None and len(q.zeroPoint) else np.zeros(len(q.scale), dtype=np.int64)
                quant = QuantParams(
                    scales=tuple(float(s) for s in q.scale),
                    zero_points=tuple(int(z) for z in zps),
                    quantized_dimension=qdim,
                )
            buffer_index = int(t.buffer or 0)
            if buffer_index >= max(len(buffers), 1):
                raise _bad(f"{where} refers to buffer {buffer_index}, which does not exist")
            nbytes = buffer_bytes(buffer_index)
            bits = _DTYPE_BITS.get(dtype)
            if bits and math.prod(max(d, 1) for d in shape) * bits // 8 > _MAX_TENSOR_BYTES:
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
                    raise _bad(f"{where} needs {needed} bytes of constant data but its buffer holds {nbytes}")
                if nbytes not in allowed:
                    raise _bad(
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
                    raise _bad(f"operator {o_index} of subgraph {sg_index} refers to tensor {i}, which does not exist")
            if any(i < 0 for i in outs):
                raise _bad(f"operator {o_index} of subgraph {sg_index} has an omitted output")
            opcode = opcode_name(op.opcodeIndex or 0)
            problem = _inputs_problem(opcode, ins, tensors)
            expected_options = _OPERATOR_OPTIONS.get(opcode)
            given_options = options_names.get(op.builtinOptionsType) if op.builtinOptionsType else None
            if expected_options and given_options and given_options != expected_options:
                problem = f"carries {given_options}; its kernel reads {expected_options}"
            if problem:
                raise _bad(f"operator {o_index} of subgraph {sg_index} ({opcode}) {problem}")
            for options in (op.builtinOptions, op.builtinOptions2):
                problem = _options_problem(options, num_subgraphs) if options is not None else None
                if problem:
                    raise _bad(f"operator {o_index} of subgraph {sg_index} ({opcode_name(op.opcodeIndex or 0)}) {problem}")
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
        sg_inputs = tuple(int(i) for i in (sg.inputs if sg.inputs is not None else ()))
        sg_outputs = tuple(int(i) for i in (sg.outputs if sg.outputs is not None else ()))
        for i in (*sg_inputs, *sg_outputs):
            if i < 0 or i >= n:
                raise _bad(f"subgraph {sg_index} names tensor {i} as an input or output, which does not exist")
        _check_dataflow(sg_index, ops, tensors, sg_inputs, {i for i, t in enumerate(sg.tensors or []) if t.isVariable})
        all_ops.append(tuple(ops))
        if sg_index == 0:
            main_tensors = tuple(tensors)
            main_inputs, main_outputs = sg_inputs, sg_outputs

    signatures = []
    for sd in model_t.signatureDefs or []:
        sg_index = int(sd.subgraphIndex or 0)
        if not 0 <= sg_index < num_subgraphs:
            raise _bad(f"signature {_decode(sd.signatureKey)!r} names subgraph {sg_index}, which does not exist")
        sg = model_t.subgraphs[sg_index]
        for kind, maps, allowed in (("input", sd.inputs, sg.inputs), ("output", sd.outputs, sg.outputs)):
            allowed = {int(i) for i in (allowed if allowed is not None else ())}
            for tm in maps or []:
                if int(tm.tensorIndex or 0) not in allowed:
                    raise _bad(
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
            raise _bad(f"metadata {_decode(md.name)!r} refers to buffer {md.buffer}, which does not exist")
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


# ---- structural verification -------------------------------------------------------------------
# Neither the `flatbuffers` Python package nor ai-edge-litert exposes the C++ flatbuffers Verifier,
# and the native interpreter reads the buffer without verifying it (a bad offset is a segfault).
# So we verify in Python with the same rules as flatbuffers' C++ Verifier: every table, vtable,
# field, string and vector must lie inside the buffer, properly aligned. Which field of which table
# is a string, a vector, a sub-table or a union is read once from ai-edge-litert's generated schema
# module, so the check covers every table of the schema (all builtin options included) without a
# hand-written copy of it.

_MAX_DEPTH = 64
_MAX_TABLES = 1_000_000
_SCALAR_SIZES = {
    "Bool": 1, "Int8": 1, "Uint8": 1, "Int16": 2, "Uint16": 2, "Int32": 4, "Uint32": 4,
    "Int64": 8, "Uint64": 8, "Float32": 4, "Float64": 8,
}


@dataclass(frozen=True)
class _FieldSpec:
    slot: int  # vtable byte offset (4 + 2 * field id)
    kind: str  # scalar | string | table | table_vector | scalar_vector | union
    size: int = 0  # scalar or vector element size
    target: str | None = None  # table class name, or union creator name
    type_slot: int | None = None  # a union's type field


@dataclass(frozen=True)
class _SchemaLayout:
    tables: dict[str, tuple[_FieldSpec, ...]]  # table name -> its fields
    unions: dict[str, dict[int, str]]  # union creator name -> {type value: table name}


# The layout of the pinned ai-edge-litert schema (constraints.txt), shipped with the package:
# deriving it parses the generated module's source, ~0.6 s that every export would pay.
# Regenerate after changing the pin: `python -m edge_export.flatbuffer --write-layout`
# (tests/flatbuffer/test_flatbuffer_schema_layout.py checks the shipped file against the installed schema).
_SHIPPED_LAYOUT = Path(__file__).with_name("flatbuffer_schema_layout.json")


def _schema_source_digest() -> str:
    """SHA-256 of the installed generated schema module's source: which schema a layout is for."""
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("ai_edge_litert.schema_py_generated")
    if spec is None or not spec.origin:
        raise InternalError("ai-edge-litert's generated schema module (schema_py_generated) is not installed.")
    return hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()


def _layout_to_json(layout: _SchemaLayout, schema_digest: str) -> str:
    """Deterministic JSON, one table or union a line (readable diffs when the pin moves)."""

    def section(items: dict) -> str:
        return ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(items.items()))

    tables = {k: [vars(f) for f in v] for k, v in layout.tables.items()}
    unions = {k: {str(t): n for t, n in sorted(v.items())} for k, v in layout.unions.items()}
    return (
        f'{{\n"schema_sha256": {json.dumps(schema_digest)},\n'
        f'"tables": {{\n{section(tables)}\n}},\n"unions": {{\n{section(unions)}\n}}\n}}\n'
    )


def _layout_from_json(text: str) -> tuple[_SchemaLayout, str]:
    raw = json.loads(text)
    layout = _SchemaLayout(
        tables={k: tuple(_FieldSpec(**f) for f in v) for k, v in raw["tables"].items()},
        unions={k: {int(t): n for t, n in v.items()} for k, v in raw["unions"].items()},
    )
    return layout, raw["schema_sha256"]


@functools.lru_cache(maxsize=1)
def _schema_layout() -> _SchemaLayout:
    """The shipped layout when it was written for the installed schema; with another
    ai-edge-litert's schema (the pin admits a range), the layout derived from it, once per process."""
    try:
        layout, digest = _layout_from_json(_SHIPPED_LAYOUT.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InternalError(f"The flatbuffer verifier's schema layout ({_SHIPPED_LAYOUT.name}) is missing or damaged: {exc}.") from exc
    if digest == _schema_source_digest():
        return layout
    return _derive_schema_layout()


def write_schema_layout(path: Path = _SHIPPED_LAYOUT) -> Path:
    """Write the layout derived from the installed schema (the data file shipped in the package)."""
    path.write_text(_layout_to_json(_derive_schema_layout(), _schema_source_digest()), encoding="utf-8")
    return path


def _derive_schema_layout() -> _SchemaLayout:
    """Map each table of the generated schema to its fields, by reading the generated code."""
    import ast
    import inspect
    import re

    from ai_edge_litert import schema_py_generated as schema

    tree = ast.parse(inspect.getsource(schema))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    creators: dict[str, dict[int, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.endswith("Creator"):
            mapping = {}
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare):
                    member = stmt.test.comparators[0]
                    ret = stmt.body[0]
                    if isinstance(member, ast.Attribute) and isinstance(ret, ast.Return):
                        enum_cls = getattr(schema, member.value.id)
                        cls_name = ast.unparse(ret.value).split(".", 1)[0]
                        mapping[int(getattr(enum_cls, member.attr))] = cls_name[:-1]  # FooT -> Foo
            creators[node.name] = mapping

    layout: dict[str, tuple[_FieldSpec, ...]] = {}
    for name, cls in classes.items():
        methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
        if "Init" not in methods or f"{name}T" not in classes:
            continue
        # Union fields: the object API's _UnPack names the creator and the type field.
        union_creators = {}
        unpack = next((m for m in classes[f"{name}T"].body if isinstance(m, ast.FunctionDef) and m.name == "_UnPack"), None)
        if unpack is not None:
            for m in re.finditer(r"self\.(\w+) = (\w+Creator)\(self\.(\w+),", ast.unparse(unpack)):
                union_creators[m.group(1)[0].upper() + m.group(1)[1:]] = (m.group(2), m.group(3)[0].upper() + m.group(3)[1:])
        slots = {}
        for mname, meth in methods.items():
            src = ast.unparse(meth)
            found = re.search(r"self\._tab\.Offset\((\d+)\)", src)
            if not found:
                continue
            slots[mname] = (int(found.group(1)), src)
        fields = []
        for mname, (slot, src) in slots.items():
            if mname.endswith(("Length", "IsNone")):
                continue
            if mname.endswith("AsNumpy"):
                flags = re.search(r"GetVectorAsNumpy\(flatbuffers\.number_types\.(\w+)Flags", src)
                fields.append(_FieldSpec(slot, "scalar_vector", _SCALAR_SIZES[flags.group(1)]))
                continue
            if ".Union(" in src:
                creator, type_method = union_creators[mname]
                fields.append(_FieldSpec(slot, "union", target=creator, type_slot=slots[type_method][0]))
            elif "Indirect(x)" in src:
                fields.append(_FieldSpec(slot, "table_vector", 4, re.search(r"obj = (\w+)\(\)", src).group(1)))
            elif "Indirect(o + self._tab.Pos)" in src:
                fields.append(_FieldSpec(slot, "table", target=re.search(r"obj = (\w+)\(\)", src).group(1)))
            elif "String(o + self._tab.Pos)" in src:
                fields.append(_FieldSpec(slot, "string"))
            elif "Vector(o)" in src:
                if f"{mname}AsNumpy" not in methods:  # a vector of strings or structs: not in this schema
                    raise InternalError(f"The flatbuffer verifier does not know the kind of schema field {name}.{mname}.")
            else:
                flags = re.search(r"Get\(flatbuffers\.number_types\.(\w+)Flags, o \+ self\._tab\.Pos\)", src)
                if flags:
                    fields.append(_FieldSpec(slot, "scalar", _SCALAR_SIZES[flags.group(1)]))
        layout[name] = tuple(sorted(fields, key=lambda f: f.slot))
    # If a future generated schema changed shape, fail loudly rather than verify nothing.
    model_fields = {f.target for f in layout.get("Model", ()) if f.kind == "table_vector"}
    if not {"SubGraph", "Buffer", "OperatorCode"} <= model_fields or "Conv2DOptions" not in layout:
        raise InternalError("The flatbuffer verifier could not read ai-edge-litert's generated schema.")
    return _SchemaLayout(tables=layout, unions=creators)


class _Verifier:
    """The checks of flatbuffers' C++ Verifier, on the TFLite schema."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        layout = _schema_layout()
        self.tables_layout, self.unions = layout.tables, layout.unions
        self.tables = 0

    def fail(self, what: str) -> FlatbufferError:
        return _bad(what)

    def u16(self, pos: int) -> int:
        return struct.unpack_from("<H", self.data, pos)[0]

    def u32(self, pos: int) -> int:
        return struct.unpack_from("<I", self.data, pos)[0]

    def check_range(self, pos: int, length: int, align: int, what: str) -> None:
        if pos < 0 or length < 0 or pos + length > self.size:
            raise self.fail(f"{what} lies outside the file")
        if align > 1 and pos % align:
            raise self.fail(f"{what} is misaligned")

    def deref(self, field_pos: int, what: str) -> int:
        self.check_range(field_pos, 4, 4, what)
        off = self.u32(field_pos)
        target = field_pos + off
        if off == 0 or target >= self.size or off >= 2**31:
            raise self.fail(f"{what} points outside the file")
        return target

    def verify_string(self, pos: int, what: str) -> None:
        self.check_range(pos, 4, 4, what)
        n = self.u32(pos)
        self.check_range(pos + 4, n + 1, 1, what)
        if self.data[pos + 4 + n] != 0:
            raise self.fail(f"{what} is not terminated")
        try:  # the runtime's Python bindings decode names as UTF-8
            self.data[pos + 4 : pos + 4 + n].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    def verify_vector(self, pos: int, elem_size: int, what: str) -> int:
        self.check_range(pos, 4, 4, what)
        n = self.u32(pos)
        if n * elem_size >= 2**31:
            raise self.fail(f"{what} claims {n} elements")
        self.check_range(pos + 4, n * elem_size, 1, what)
        return n

    def verify_table(self, pos: int, cls: str, depth: int) -> None:
        what = f"the {cls} table at byte {pos}"
        self.tables += 1
        if depth > _MAX_DEPTH or self.tables > _MAX_TABLES:
            raise self.fail("its tables nest too deeply or are too many")
        self.check_range(pos, 4, 4, what)
        vtable = pos - struct.unpack_from("<i", self.data, pos)[0]
        self.check_range(vtable, 4, 2, f"the vtable of {what}")
        vsize, tsize = self.u16(vtable), self.u16(vtable + 2)
        if vsize < 4 or vsize % 2:
            raise self.fail(f"the vtable of {what} is malformed")
        self.check_range(vtable, vsize, 2, f"the vtable of {what}")
        self.check_range(pos, tsize, 1, what)
        for spec in self.tables_layout[cls]:
            voff = self.u16(vtable + spec.slot) if spec.slot < vsize else 0
            if voff == 0:
                continue
            field = pos + voff
            fwhat = f"a field of {what}"
            if spec.kind == "scalar":
                self.check_range(field, spec.size, spec.size, fwhat)
            elif spec.kind == "string":
                self.verify_string(self.deref(field, fwhat), fwhat)
            elif spec.kind == "table":
                self.verify_table(self.deref(field, fwhat), spec.target, depth + 1)
            elif spec.kind == "scalar_vector":
                self.verify_vector(self.deref(field, fwhat), spec.size, fwhat)
            elif spec.kind == "table_vector":
                start = self.deref(field, fwhat)
                for i in range(self.verify_vector(start, 4, fwhat)):
                    self.verify_table(self.deref(start + 4 + 4 * i, fwhat), spec.target, depth + 1)
            elif spec.kind == "union":
                tvoff = self.u16(vtable + spec.type_slot) if spec.type_slot < vsize else 0
                if tvoff == 0:
                    continue
                self.check_range(pos + tvoff, 1, 1, fwhat)
                member = self.unions[spec.target].get(self.data[pos + tvoff])
                if member is not None:  # unknown union members are skipped by readers too
                    self.verify_table(self.deref(field, fwhat), member, depth + 1)

    def verify_model(self) -> None:
        self.verify_table(self.deref(0, "the root table"), "Model", 0)


def _main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m edge_export.flatbuffer")
    parser.add_argument(
        "--write-layout", action="store_true", required=True,
        help=f"Write {_SHIPPED_LAYOUT.name} (the verifier's schema layout) from the installed ai-edge-litert.",
    )
    parser.parse_args(argv)
    print(f"wrote {write_schema_layout()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
