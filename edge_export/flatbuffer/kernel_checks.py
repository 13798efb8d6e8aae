"""What the kernels trust: the checks a verified flatbuffer must also pass before a runtime reads it.

Structure (``verify``) says every offset lies inside the file; these say the values make sense to
the native kernels that follow them: operator input lists, the options table each kernel reads,
index inputs of an integer type, kernel options that are divisors or enum selectors, and operators
that run in file order without writing over an input or constant. Each rule names the crash that
found it (benchmarks/flatbuffer_fuzz.py and the mutation tests in tests/flatbuffer).
"""

from __future__ import annotations

import math
from typing import Any

from .malformed import OversizedTensorError, malformed
from .model import DTYPE_BITS, FLOAT_DTYPES, OperatorInfo, QuantParams, TensorInfo

__all__ = [
    "check_dataflow",
    "check_tensor_size",
    "inputs_problem",
    "operator_problem",
    "options_problem",
    "quantization_params",
    "tensor_shapes",
]

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


def tensor_shapes(where: str, tensor: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shape and shape signature of a schema ``TensorT``: no negative dimension, and a
    signature (-1 for a dynamic dimension) of the shape's rank."""
    shape = tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ()))
    sig = tuple(int(d) for d in tensor.shapeSignature) if tensor.shapeSignature is not None else shape
    if any(d < 0 for d in shape):
        raise malformed(f"{where} has a negative dimension in its shape {list(shape)}")
    if len(sig) != len(shape) or any(d < -1 for d in sig):
        raise malformed(f"{where} has a shape signature {list(sig)} that does not fit its shape")
    return shape, sig


def quantization_params(where: str, q: Any, dtype: str, shape: tuple[int, ...]) -> QuantParams | None:
    """The quantization of a tensor (None without scales): as many zero points as scales, one
    scale per channel of the quantized dimension, scales a kernel can divide by, zero points in
    the range of the tensor's type."""
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    if q.zeroPoint is not None and len(q.zeroPoint) not in (0, len(q.scale)):
        raise malformed(f"{where} has {len(q.scale)} scales but {len(q.zeroPoint)} zero points")
    qdim = int(q.quantizedDimension or 0)
    if len(q.scale) > 1 and not (0 <= qdim < len(shape) and shape[qdim] == len(q.scale)):
        raise malformed(f"{where} has {len(q.scale)} per-channel scales that do not fit its shape")
    # XNNPACK crashes on zero or subnormal scales of integer tensors; quantizers never
    # write them (ai-edge-quantizer clamps at 1e-9). On float tensors they are ignored.
    allowed_zero = dtype in FLOAT_DTYPES
    if not all((allowed_zero and float(x) == 0.0) or _FLOAT32_MIN_NORMAL <= float(x) < math.inf for x in q.scale):
        raise malformed(f"{where} has a zero, negative, subnormal or non-finite quantization scale")
    lo, hi = _ZERO_POINT_RANGES.get(dtype, (-(2**63), 2**63 - 1))
    if q.zeroPoint is not None and any(not lo <= int(z) <= hi for z in q.zeroPoint):
        raise malformed(f"{where} has a zero point outside the range of {dtype}")
    has_zero_points = q.zeroPoint is not None and len(q.zeroPoint)
    return QuantParams(
        scales=tuple(float(s) for s in q.scale),
        zero_points=tuple(int(z) for z in q.zeroPoint) if has_zero_points else (0,) * len(q.scale),
        quantized_dimension=qdim,
    )


def check_tensor_size(where: str, name: str, dtype: str, shape: tuple[int, ...], nbytes: int, sparse: bool) -> None:
    """A tensor LiteRT can allocate (under 2 GB), and a constant buffer (``nbytes``, 0 for an
    activation) that holds exactly the bytes its type and shape need (int4 packed or one a byte)."""
    bits = DTYPE_BITS.get(dtype)
    if bits and math.prod(max(d, 1) for d in shape) * bits // 8 > _MAX_TENSOR_BYTES:
        raise OversizedTensorError(
            f"The model cannot run in LiteRT: {where} has shape {list(shape)}, larger than a LiteRT "
            "tensor can be (2 GB).",
            "Re-export the model with smaller shapes.",
            name, list(shape), math.prod(max(d, 1) for d in shape) * bits // 8,
        )
    if nbytes and bits and not sparse:
        needed = (math.prod(shape) * bits + 7) // 8
        # int4 weights may also be stored one value per byte (unpacked).
        allowed = {needed, math.prod(shape)} if dtype == "int4" else {needed}
        if nbytes < needed:
            raise malformed(f"{where} needs {needed} bytes of constant data but its buffer holds {nbytes}")
        if nbytes not in allowed:
            raise malformed(f"{where} is {dtype} {list(shape)} ({needed} bytes) but its constant buffer holds {nbytes} bytes")


def operator_problem(opcode: str, inputs: tuple[int, ...], tensors: list[TensorInfo], options_type: str | None) -> str | None:
    """Why an operator's inputs or the options table it carries (``options_type``) would make its
    kernel read what is not there, or None."""
    problem = inputs_problem(opcode, inputs, tensors)
    expected = _OPERATOR_OPTIONS.get(opcode)
    if expected and options_type and options_type != expected:
        problem = f"carries {options_type}; its kernel reads {expected}"
    return problem


def inputs_problem(opcode: str, inputs: tuple[int, ...], tensors: list[TensorInfo] | None = None) -> str | None:
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


def check_dataflow(
    sg_index: int,
    ops: list[OperatorInfo],
    tensors: list[TensorInfo],
    inputs: tuple[int, ...],
    variables: set[int],
) -> None:
    """Operators run in file order: no tensor may be written twice, or over a subgraph input or a
    constant, or read before the operator that writes it. A mutated output index that broke this
    (a RESHAPE writing over a CONV_2D's output) segfaulted XNNPACK. The one variable an operator
    may write is a fused LSTM's state (inputs 18 and 19): the converter writes an initial state
    computed at run time there, and edge-export a FILL that resets it before every invocation."""
    constant = {t.index for t in tensors if t.is_constant or math.prod(t.shape) == 0}
    states = {op.inputs[k] for op in ops if op.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM" for k in (18, 19) if k < len(op.inputs)}
    writer: dict[int, int] = {}
    for op in ops:
        where = f"operator {op.index} of subgraph {sg_index} ({op.opcode})"
        for o in op.outputs:
            if o in writer:
                raise malformed(f"{where} writes tensor {o}, which operator {writer[o]} already writes")
            if o in inputs or o in constant or (o in variables and o not in states):
                raise malformed(f"{where} writes over tensor {o}, an input or constant of the subgraph")
            writer[o] = op.index
    # A tensor that no operator writes is left as the runtime allocates it (a test model may mean
    # "a weight computed at run time"); one written by a later operator is an ordering error.
    for op in ops:
        for i in op.inputs:
            if writer.get(i, -1) >= op.index:
                raise malformed(
                    f"operator {op.index} of subgraph {sg_index} ({op.opcode}) reads tensor {i} before "
                    f"operator {writer[i]} writes it"
                )


def options_problem(options: Any, num_subgraphs: int) -> str | None:
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
