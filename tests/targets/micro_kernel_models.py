"""One-operator flatbuffers built directly from LiteRT's schema, to ask TFLite Micro's host
interpreter which tensor types each kernel takes (``edge_export/targets/micro/kernel_types.py``).

Each case is one operator whose data input (and output, and every other activation) has the type
measured: float32, or int8 / int16 quantized the way ai-edge-quantizer quantizes (int8 asymmetric,
int16 symmetric), with the fixed output scales TFLM's LOGISTIC, TANH, SOFTMAX, LOG_SOFTMAX and
L2_NORMALIZATION check for. Index-like operands (axes, sizes, positions) are int32 constants,
weights int8 constants. ``run_case`` answers None (it ran) or TFLM's refusal; a refusal that is not
about a type would be a bug in the case here, not a fact about TFLM (the test says which).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from edge_export.errors import RuntimeRunError

MEASURED_TYPES = ("float32", "int8", "int16")

# Activation quantization as ai-edge-quantizer writes it: int8 asymmetric, int16 symmetric.
_ACTIVATION_QUANT = {"int8": (0.05, -10), "int16": (1 / 2048, 0)}
# Outputs whose scale the kernel fixes (TFLM checks them in Prepare), per type.
_FIXED_OUTPUT = {
    "LOGISTIC": {"int8": (1 / 256, -128), "int16": (1 / 32768, 0)},
    "SOFTMAX": {"int8": (1 / 256, -128), "int16": (1 / 32768, 0)},
    "TANH": {"int8": (1 / 128, 0), "int16": (1 / 32768, 0)},
    "LOG_SOFTMAX": {"int8": (16 / 256, 127), "int16": (16 / 32768, 0)},
    "L2_NORMALIZATION": {"int8": (1 / 128, 0), "int16": (1 / 32768, 0)},
}
_SCHEMA_TYPES = {
    "float32": "FLOAT32", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "bool": "BOOL",
}


@dataclass(frozen=True)
class Operand:
    shape: tuple[int, ...]
    dtype: str
    quant: tuple[float | list[float], int | list[int]] | None = None
    value: np.ndarray | None = None  # a constant; None: a model input (or the output)


@dataclass(frozen=True)
class OneOperator:
    opcode: str
    inputs: tuple[Operand | None, ...]  # None: an omitted optional input
    outputs: tuple[Operand, ...]
    options: Any = field(default=None, compare=False)


def activation(shape: tuple[int, ...], dtype: str, quant: tuple[float, int] | None = None) -> Operand:
    """A model input or output of the measured type, quantized as ai-edge-quantizer would."""
    if dtype in _ACTIVATION_QUANT:
        return Operand(shape, dtype, quant or _ACTIVATION_QUANT[dtype])
    return Operand(shape, dtype)


def int32_constant(values) -> Operand:
    array = np.asarray(values, dtype=np.int32)
    return Operand(array.shape, "int32", value=array)


def weights(shape: tuple[int, ...], dtype: str) -> Operand:
    """Float weights for a float model, int8 symmetric weights for an int8 or int16x8 one."""
    rng = np.random.default_rng(0)
    if dtype == "float32":
        return Operand(shape, "float32", value=rng.standard_normal(shape).astype(np.float32))
    return Operand(shape, "int8", (0.01, 0), rng.integers(-100, 100, shape).astype(np.int8))


def bias(channels: int, dtype: str) -> Operand:
    """The bias LiteRT pairs with the weights: float, int32 for int8, int64 for int16x8."""
    if dtype == "float32":
        return Operand((channels,), "float32", value=np.zeros(channels, np.float32))
    kind = "int32" if dtype == "int8" else "int64"
    return Operand((channels,), kind, (_ACTIVATION_QUANT[dtype][0] * 0.01, 0), np.zeros(channels, kind))


def options(name: str, **fields) -> Any:
    from ai_edge_litert import schema_py_generated as schema

    made = getattr(schema, f"{name}OptionsT")()
    for key, value in fields.items():
        setattr(made, key, value)
    return made


def build_model(case: OneOperator) -> bytes:
    """The flatbuffer of ``case``: its non-constant inputs are the model's inputs, in order."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model, graph = schema.ModelT(), schema.SubGraphT()
    code = schema.OperatorCodeT()
    code.builtinCode = getattr(schema.BuiltinOperator, case.opcode)
    code.deprecatedBuiltinCode, code.version = min(code.builtinCode, 127), 1
    model.version, model.operatorCodes, model.buffers, graph.tensors = 3, [code], [schema.BufferT()], []
    positions = [None if o is None else _add_tensor(model, graph, o, f"t{k}") for k, o in enumerate(case.inputs)]
    outputs = [_add_tensor(model, graph, o, f"out{k}") for k, o in enumerate(case.outputs)]
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [-1 if p is None else p for p in positions], outputs
    if case.options is not None:
        op.builtinOptionsType = getattr(schema.BuiltinOptions, type(case.options).__name__[:-1])
        op.builtinOptions = case.options
    graph.operators, graph.outputs = [op], outputs
    graph.inputs = [p for p, o in zip(positions, case.inputs) if o is not None and o.value is None]
    model.subgraphs = [graph]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), b"TFL3")
    return bytes(builder.Output())


def _add_tensor(model: Any, graph: Any, operand: Operand, name: str) -> int:
    from ai_edge_litert import schema_py_generated as schema

    tensor = schema.TensorT()
    tensor.name, tensor.shape = name.encode(), list(operand.shape)
    tensor.type, tensor.buffer = getattr(schema.TensorType, _SCHEMA_TYPES[operand.dtype]), 0
    if operand.value is not None:
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(np.ascontiguousarray(operand.value).tobytes(), np.uint8)
        model.buffers.append(buffer)
        tensor.buffer = len(model.buffers) - 1
    if operand.quant is not None:
        scale, zero_point = operand.quant
        tensor.quantization = schema.QuantizationParametersT()
        tensor.quantization.scale = list(np.atleast_1d(scale).astype(float))
        tensor.quantization.zeroPoint = list(np.atleast_1d(zero_point).astype(int))
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def run_case(case: OneOperator) -> RuntimeRunError | None:
    """None when TFLM's host interpreter prepared and invoked the operator, else its refusal
    (``message`` quotes TFLM's log, ``hint`` is what the runner advises)."""
    from edge_export.errors import RuntimeRunError
    from edge_export.targets.micro.runner import MicroRunner

    try:
        runner = MicroRunner(build_model(case), arena_size=64 * 1024)
        runner.run_raw([_positive_input(spec.shape, spec.dtype) for spec in runner.inputs])
    except RuntimeRunError as error:
        return error
    return None


def _positive_input(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values above every activation's zero point (SQRT, LOG and RSQRT are defined there)."""
    values = np.arange(int(np.prod(shape)), dtype=np.int64) % 20 + 1
    if dtype == "float32":
        return (values * 0.25).astype(np.float32).reshape(shape)
    return values.astype(dtype).reshape(shape)


# ---- the cases: one function per operator family, each (opcode, dtype) -> OneOperator ----------

_X = (1, 4, 4, 2)  # a small NHWC activation


def _unary(opcode: str, dtype: str) -> OneOperator:
    out = activation(_X, dtype, _FIXED_OUTPUT.get(opcode, {}).get(dtype))
    extra = {
        "SOFTMAX": options("Softmax", beta=1.0),
        "LEAKY_RELU": options("LeakyRelu", alpha=0.1),
        "LOG_SOFTMAX": options("LogSoftmax"),
        "L2_NORMALIZATION": options("L2Norm"),
    }.get(opcode)
    return OneOperator(opcode, (activation(_X, dtype),), (out,), extra)


def _binary(opcode: str, dtype: str) -> OneOperator:
    extra = {
        "ADD": options("Add"), "SUB": options("Sub"), "MUL": options("Mul"), "DIV": options("Div"),
    }.get(opcode)
    return OneOperator(opcode, (activation(_X, dtype), activation(_X, dtype)), (activation(_X, dtype),), extra)


def _prelu(dtype: str) -> OneOperator:
    """Its slope is a constant (a PReLU's weight): int8 for every integer model, as TFLM's Prepare
    demands, so an int16 refusal is about the input."""
    return OneOperator("PRELU", (activation(_X, dtype), weights((1, 1, 2), dtype)), (activation(_X, dtype),))


def _reduction(opcode: str, dtype: str) -> OneOperator:
    out = activation((1, 1, 1, 2), dtype)
    return OneOperator(opcode, (activation(_X, dtype), int32_constant([1, 2])), (out,), options("Reducer", keepDims=True))


def _comparison(opcode: str, dtype: str) -> OneOperator:
    return OneOperator(opcode, (activation(_X, dtype), activation(_X, dtype)), (Operand(_X, "bool"),))


def _pool(opcode: str, dtype: str) -> OneOperator:
    pool = options("Pool2D", padding=1, strideW=2, strideH=2, filterWidth=2, filterHeight=2)
    return OneOperator(opcode, (activation(_X, dtype),), (activation((1, 2, 2, 2), dtype),), pool)


def _resize(opcode: str, dtype: str) -> OneOperator:
    extra = options("ResizeBilinear") if opcode == "RESIZE_BILINEAR" else options("ResizeNearestNeighbor")
    return OneOperator(opcode, (activation(_X, dtype), int32_constant([8, 8])), (activation((1, 8, 8, 2), dtype),), extra)


def _weighted(opcode: str, dtype: str) -> OneOperator:
    """Convolutions and FULLY_CONNECTED: int8 weights and a 32-bit (int8) or 64-bit (int16x8) bias."""
    x = activation(_X, dtype)
    if opcode == "FULLY_CONNECTED":
        made = (activation((1, 8), dtype), weights((4, 8), dtype), bias(4, dtype))
        return OneOperator(opcode, made, (activation((1, 4), dtype),), options("FullyConnected"))
    if opcode == "CONV_2D":
        conv = options("Conv2D", strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1)
        return OneOperator(opcode, (x, weights((3, 1, 1, 2), dtype), bias(3, dtype)), (activation((1, 4, 4, 3), dtype),), conv)
    if opcode == "DEPTHWISE_CONV_2D":
        conv = options("DepthwiseConv2D", strideW=1, strideH=1, depthMultiplier=1, dilationWFactor=1, dilationHFactor=1)
        return OneOperator(opcode, (x, weights((1, 1, 1, 2), dtype), bias(2, dtype)), (activation(_X, dtype),), conv)
    transposed = options("TransposeConv", strideW=1, strideH=1)
    made = (int32_constant([1, 4, 4, 3]), weights((3, 1, 1, 2), dtype), x, bias(3, dtype))
    return OneOperator(opcode, made, (activation((1, 4, 4, 3), dtype),), transposed)


def _batch_matmul(dtype: str) -> OneOperator:
    lhs, rhs = activation((1, 2, 4), dtype), activation((1, 4, 3), dtype)
    return OneOperator("BATCH_MATMUL", (lhs, rhs), (activation((1, 2, 3), dtype),), options("BatchMatMul"))


def _same_type_constant(shape: tuple[int, ...], dtype: str) -> Operand:
    """A constant of the measured type (PADV2's pad value, SELECT_V2's condition is bool instead)."""
    quant = _ACTIVATION_QUANT.get(dtype)
    return Operand(shape, dtype, quant, np.ones(shape, dtype))


def _layout(opcode: str, dtype: str) -> OneOperator:
    """Operators that move values without computing: one activation in, index constants beside it."""
    x, a = activation(_X, dtype), (lambda shape: activation(shape, dtype))
    made = {
        "PAD": lambda: ((x, int32_constant([[0, 0], [1, 1], [1, 1], [0, 0]])), (a((1, 6, 6, 2)),), None),
        "PADV2": lambda: ((x, int32_constant([[0, 0], [1, 1], [1, 1], [0, 0]]), _same_type_constant((), dtype)), (a((1, 6, 6, 2)),), None),
        "MIRROR_PAD": lambda: ((x, int32_constant([[0, 0], [1, 1], [1, 1], [0, 0]])), (a((1, 6, 6, 2)),), options("MirrorPad")),
        "TRANSPOSE": lambda: ((x, int32_constant([0, 3, 1, 2])), (a((1, 2, 4, 4)),), None),
        "STRIDED_SLICE": lambda: ((x, int32_constant([0] * 4), int32_constant([1, 2, 2, 2]), int32_constant([1] * 4)), (a((1, 2, 2, 2)),), options("StridedSlice")),
        "SLICE": lambda: ((x, int32_constant([0] * 4), int32_constant([1, 2, 2, 2])), (a((1, 2, 2, 2)),), None),
        "SPLIT": lambda: ((int32_constant(3), x), (a((1, 4, 4, 1)), a((1, 4, 4, 1))), options("Split", numSplits=2)),
        "SPLIT_V": lambda: ((x, int32_constant([1, 1]), int32_constant(3)), (a((1, 4, 4, 1)), a((1, 4, 4, 1))), options("SplitV", numSplits=2)),
        "PACK": lambda: ((x, x), (a((2, 1, 4, 4, 2)),), options("Pack", valuesCount=2, axis=0)),
        "UNPACK": lambda: ((x,), tuple(a((1, 4, 2)) for _ in range(4)), options("Unpack", num=4, axis=1)),
        "CONCATENATION": lambda: ((x, x), (a((1, 4, 4, 4)),), options("Concatenation", axis=3)),
        "GATHER": lambda: ((x, int32_constant([0, 2])), (a((1, 2, 4, 2)),), options("Gather", axis=1)),
        "GATHER_ND": lambda: ((a((4, 2)), int32_constant([[0], [2]])), (a((2, 2)),), None),
        "BROADCAST_TO": lambda: ((a((1, 1, 4, 2)), int32_constant([1, 4, 4, 2])), (x,), None),
        "SPACE_TO_DEPTH": lambda: ((x,), (a((1, 2, 2, 8)),), options("SpaceToDepth", blockSize=2)),
        "DEPTH_TO_SPACE": lambda: ((a((1, 2, 2, 8)),), (x,), options("DepthToSpace", blockSize=2)),
        "RESHAPE": lambda: ((x, int32_constant([1, 32])), (a((1, 32)),), options("Reshape", newShape=[1, 32])),
        "SQUEEZE": lambda: ((a((1, 1, 8)),), (a((1, 8)),), options("Squeeze", squeezeDims=[1])),
        "EXPAND_DIMS": lambda: ((x, int32_constant([0])), (a((1, 1, 4, 4, 2)),), None),
        "REVERSE_V2": lambda: ((x, int32_constant([1])), (x,), None),
        "SPACE_TO_BATCH_ND": lambda: ((x, int32_constant([2, 2]), int32_constant([[0, 0], [0, 0]])), (a((4, 2, 2, 2)),), None),
        "BATCH_TO_SPACE_ND": lambda: ((a((4, 2, 2, 2)), int32_constant([2, 2]), int32_constant([[0, 0], [0, 0]])), (x,), None),
        "DYNAMIC_UPDATE_SLICE": lambda: ((x, a((1, 2, 2, 2)), int32_constant([0, 1, 1, 0])), (x,), None),
        "SELECT_V2": lambda: ((Operand(_X, "bool", value=np.ones(_X, bool)), x, x), (x,), None),
        "EMBEDDING_LOOKUP": lambda: ((int32_constant([0, 2]), a((4, 2))), (a((2, 2)),), None),
        "ADD_N": lambda: ((x, x), (x,), None),
        "ZEROS_LIKE": lambda: ((x,), (x,), None),
        "CUMSUM": lambda: ((x, int32_constant(1)), (x,), options("Cumsum")),
        "ARG_MAX": lambda: ((x, int32_constant([3])), (Operand((1, 4, 4), "int32"),), options("ArgMax", outputType=2)),
        "ARG_MIN": lambda: ((x, int32_constant([3])), (Operand((1, 4, 4), "int32"),), options("ArgMin", outputType=2)),
    }[opcode]()
    return OneOperator(opcode, *made)


# The conversions an export writes: float input to int8, and both ways between int8 and int16 (the
# boundaries of --mixed-precision's int16 operators).
_QUANTIZED_TO = {"float32": "int8", "int8": "int16", "int16": "int8"}


def _converting(opcode: str, dtype: str) -> OneOperator:
    """QUANTIZE and DEQUANTIZE change the type, so the output's is chosen, not the measured one:
    QUANTIZE to ``_QUANTIZED_TO``, DEQUANTIZE to float32 (a float32 input is no DEQUANTIZE at all,
    and TFLM says so), CAST to int32, FILL the measured type from a scalar value."""
    x = activation(_X, dtype)
    if opcode == "QUANTIZE":
        return OneOperator(opcode, (x,), (activation(_X, _QUANTIZED_TO[dtype], (0.07, 3) if dtype == "int16" else None),))
    if opcode == "DEQUANTIZE":
        return OneOperator(opcode, (x,), (activation(_X, "float32"),))
    if opcode == "CAST":
        return OneOperator(opcode, (x,), (Operand(_X, "int32"),))
    return OneOperator(opcode, (int32_constant(list(_X)), _same_type_constant((), dtype)), (x,))


def _cases_of(make: Callable[[str, str], OneOperator], *opcodes: str) -> dict[str, Callable[[str], OneOperator]]:
    return {op: (lambda dtype, op=op: make(op, dtype)) for op in opcodes}


CASES: dict[str, Callable[[str], OneOperator]] = {
    **_cases_of(
        _unary, "ABS", "CEIL", "COS", "ELU", "EXP", "FLOOR", "HARD_SWISH", "L2_NORMALIZATION", "LEAKY_RELU", "LOG",
        "LOG_SOFTMAX", "LOGISTIC", "NEG", "RELU", "RELU6", "ROUND", "RSQRT", "SIN", "SOFTMAX", "SQRT", "SQUARE", "TANH",
    ),
    **_cases_of(
        _binary, "ADD", "DIV", "FLOOR_DIV", "FLOOR_MOD", "MAXIMUM", "MINIMUM", "MUL", "SQUARED_DIFFERENCE", "SUB",
    ),
    **_cases_of(_reduction, "MEAN", "REDUCE_MAX", "REDUCE_MIN", "SUM"),
    **_cases_of(_comparison, "EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "NOT_EQUAL"),
    **_cases_of(_pool, "AVERAGE_POOL_2D", "L2_POOL_2D", "MAX_POOL_2D"),
    **_cases_of(_resize, "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"),
    **_cases_of(_weighted, "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"),
    **_cases_of(
        _layout, "ADD_N", "ARG_MAX", "ARG_MIN", "BATCH_TO_SPACE_ND", "BROADCAST_TO", "CONCATENATION", "CUMSUM",
        "DEPTH_TO_SPACE", "DYNAMIC_UPDATE_SLICE", "EMBEDDING_LOOKUP", "EXPAND_DIMS", "GATHER", "GATHER_ND",
        "MIRROR_PAD", "PACK", "PAD", "PADV2", "RESHAPE", "REVERSE_V2", "SELECT_V2", "SLICE", "SPACE_TO_BATCH_ND",
        "SPACE_TO_DEPTH", "SPLIT", "SPLIT_V", "SQUEEZE", "STRIDED_SLICE", "TRANSPOSE", "UNPACK", "ZEROS_LIKE",
    ),
    **_cases_of(_converting, "CAST", "DEQUANTIZE", "FILL", "QUANTIZE"),
    "BATCH_MATMUL": _batch_matmul,
    "PRELU": _prelu,
}
