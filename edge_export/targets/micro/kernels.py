"""TFLite Micro's kernels: which operators it runs, and the C++ op-resolver lines registering them.

What TFLM can run is narrower than LiteRT: only the kernels an application registers in its
``MicroMutableOpResolver``. Where TFLM_SUPPORTED_OPS comes from: the tflite-micro package does not
expose its resolver's list to Python. The table below is the builtin-operator list of TFLM's host
``PythonOpsResolver`` (tflite-micro ``python/tflite_micro/python_ops_resolver.cc``, which calls one
``AddXxx()`` of ``micro_mutable_op_resolver.h`` per operator), brought up to the installed package:
every entry has a ``Register_<OP>`` kernel exported by the installed ``tflite_micro/_runtime.so``
(tflite-micro 0.dev20261023; ``installed_tflm_kernels`` reads them, and a test checks the table
against them), and BATCH_MATMUL, REDUCE_MIN, REDUCE_ALL and REVERSE_V2 (newer than the public
resolver file) were confirmed by running models through the host interpreter. GELU, SIGN and
REDUCE_ANY were confirmed missing ("Didn't find op for builtin opcode").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from ...errors import TargetError, UsageError

__all__ = [
    "TFLM_OP_RESOLVER_METHODS", "TFLM_SUPPORTED_OPS", "TFLM_CUSTOM_OP_METHODS", "resolver_method", "installed_tflm_kernels",
    "emit_op_resolver", "write_op_resolver",
]


# Builtin operator (schema name) -> MicroMutableOpResolver method that registers its kernel.
TFLM_OP_RESOLVER_METHODS: dict[str, str] = {
    "ABS": "AddAbs",
    "ADD": "AddAdd",
    "ADD_N": "AddAddN",
    "ARG_MAX": "AddArgMax",
    "ARG_MIN": "AddArgMin",
    "ASSIGN_VARIABLE": "AddAssignVariable",
    "AVERAGE_POOL_2D": "AddAveragePool2D",
    "BATCH_MATMUL": "AddBatchMatMul",
    "BATCH_TO_SPACE_ND": "AddBatchToSpaceNd",
    "BROADCAST_ARGS": "AddBroadcastArgs",
    "BROADCAST_TO": "AddBroadcastTo",
    "CALL_ONCE": "AddCallOnce",
    "CAST": "AddCast",
    "CEIL": "AddCeil",
    "CONCATENATION": "AddConcatenation",
    "CONV_2D": "AddConv2D",
    "COS": "AddCos",
    "CUMSUM": "AddCumSum",
    "DEPTH_TO_SPACE": "AddDepthToSpace",
    "DEPTHWISE_CONV_2D": "AddDepthwiseConv2D",
    "DEQUANTIZE": "AddDequantize",
    "DIV": "AddDiv",
    "DYNAMIC_UPDATE_SLICE": "AddDynamicUpdateSlice",
    "ELU": "AddElu",
    "EMBEDDING_LOOKUP": "AddEmbeddingLookup",
    "EQUAL": "AddEqual",
    "EXP": "AddExp",
    "EXPAND_DIMS": "AddExpandDims",
    "FILL": "AddFill",
    "FLOOR": "AddFloor",
    "FLOOR_DIV": "AddFloorDiv",
    "FLOOR_MOD": "AddFloorMod",
    "FULLY_CONNECTED": "AddFullyConnected",
    "GATHER": "AddGather",
    "GATHER_ND": "AddGatherNd",
    "GREATER": "AddGreater",
    "GREATER_EQUAL": "AddGreaterEqual",
    "HARD_SWISH": "AddHardSwish",
    "IF": "AddIf",
    "L2_NORMALIZATION": "AddL2Normalization",
    "L2_POOL_2D": "AddL2Pool2D",
    "LEAKY_RELU": "AddLeakyRelu",
    "LESS": "AddLess",
    "LESS_EQUAL": "AddLessEqual",
    "LOG": "AddLog",
    "LOG_SOFTMAX": "AddLogSoftmax",
    "LOGICAL_AND": "AddLogicalAnd",
    "LOGICAL_NOT": "AddLogicalNot",
    "LOGICAL_OR": "AddLogicalOr",
    "LOGISTIC": "AddLogistic",
    "MAX_POOL_2D": "AddMaxPool2D",
    "MAXIMUM": "AddMaximum",
    "MEAN": "AddMean",
    "MINIMUM": "AddMinimum",
    "MIRROR_PAD": "AddMirrorPad",
    "MUL": "AddMul",
    "NEG": "AddNeg",
    "NOT_EQUAL": "AddNotEqual",
    "PACK": "AddPack",
    "PAD": "AddPad",
    "PADV2": "AddPadV2",
    "PRELU": "AddPrelu",
    "QUANTIZE": "AddQuantize",
    "READ_VARIABLE": "AddReadVariable",
    "REDUCE_ALL": "AddReduceAll",
    "REDUCE_MAX": "AddReduceMax",
    "REDUCE_MIN": "AddReduceMin",
    "RELU": "AddRelu",
    "RELU6": "AddRelu6",
    "RESHAPE": "AddReshape",
    "RESIZE_BILINEAR": "AddResizeBilinear",
    "RESIZE_NEAREST_NEIGHBOR": "AddResizeNearestNeighbor",
    "REVERSE_V2": "AddReverseV2",
    "ROUND": "AddRound",
    "RSQRT": "AddRsqrt",
    "SELECT_V2": "AddSelectV2",
    "SHAPE": "AddShape",
    "SIN": "AddSin",
    "SLICE": "AddSlice",
    "SOFTMAX": "AddSoftmax",
    "SPACE_TO_BATCH_ND": "AddSpaceToBatchNd",
    "SPACE_TO_DEPTH": "AddSpaceToDepth",
    "SPLIT": "AddSplit",
    "SPLIT_V": "AddSplitV",
    "SQRT": "AddSqrt",
    "SQUARE": "AddSquare",
    "SQUARED_DIFFERENCE": "AddSquaredDifference",
    "SQUEEZE": "AddSqueeze",
    "STRIDED_SLICE": "AddStridedSlice",
    "SUB": "AddSub",
    "SUM": "AddSum",
    "SVDF": "AddSvdf",
    "TANH": "AddTanh",
    "TRANSPOSE": "AddTranspose",
    "TRANSPOSE_CONV": "AddTransposeConv",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "AddUnidirectionalSequenceLSTM",
    "UNPACK": "AddUnpack",
    "VAR_HANDLE": "AddVarHandle",
    "WHILE": "AddWhile",
    "ZEROS_LIKE": "AddZerosLike",
}
TFLM_SUPPORTED_OPS = frozenset(TFLM_OP_RESOLVER_METHODS)
# Custom operators (opcode CUSTOM with this name) that TFLM ships kernels for.
TFLM_CUSTOM_OP_METHODS: dict[str, str] = {
    "TFLite_Detection_PostProcess": "AddDetectionPostprocess",
    "CIRCULAR_BUFFER": "AddCircularBuffer",
    # The Arm Ethos-U NPU's operator in a Vela-compiled model (registered when TFLM is built with
    # the Ethos-U driver; the host interpreter has no kernel for it).
    "ethos-u": "AddEthosU",
}


def resolver_method(op: str) -> str | None:
    if op.startswith("CUSTOM:"):
        return TFLM_CUSTOM_OP_METHODS.get(op.split(":", 1)[1])
    return TFLM_OP_RESOLVER_METHODS.get(op)


def installed_tflm_kernels() -> frozenset[str]:
    """Builtin operators the installed tflite-micro host runtime has a Register_<OP> kernel for.

    Read from the exported symbols of its extension module (the package has no Python API for it).
    """
    from importlib.util import find_spec

    from ai_edge_litert import schema_py_generated as schema

    spec = find_spec("tflite_micro.python.tflite_micro._runtime")
    if spec is None or spec.origin is None:
        raise TargetError(
            "The tflite-micro package is not installed, so the micro target cannot be checked or run.",
            "Install it with `pip install edge-export[micro]`.",
        )
    names = set(re.findall(rb"Register_([A-Z0-9_]+?)Ev", Path(spec.origin).read_bytes()))
    builtins = {k for k in vars(schema.BuiltinOperator) if not k.startswith("_")}
    return frozenset(n.decode() for n in names) & builtins



def emit_op_resolver(ops: Iterable[str], variable: str = "resolver", *, function: str | None = None) -> str:
    """C++ lines registering exactly these operators (names as in FlatbufferModel.op_counts), in a
    function named ``function`` (default ``RegisterEdgeExportOps``)."""
    ops = list(dict.fromkeys(ops))
    missing = [op for op in ops if resolver_method(op) is None]
    if missing:
        raise TargetError(
            f"Cannot write a TFLite Micro op resolver: TFLite Micro has no kernel for {', '.join(missing)}.",
            "Change the model so that it does not use these operators, or register your own kernels.",
        )
    if not variable.isidentifier():
        raise UsageError(f"{variable!r} is not a C++ identifier.", "Use a name such as `resolver`.")
    methods = sorted({resolver_method(op) for op in ops})
    n = len(methods)
    fn = function or ("RegisterEdgeExportOps" if variable == "resolver" else f"Register_{variable}")
    lines = [
        f"// TFLite Micro op resolver for the {n} operators of this model (written by edge-export).",
        '#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"',
        "",
        "// Registers exactly the operators the model uses. Before creating the MicroInterpreter:",
        f"//   static tflite::MicroMutableOpResolver<{n}> {variable};",
        f"//   if ({fn}({variable}) != kTfLiteOk) {{ /* handle the error */ }}",
        f"inline TfLiteStatus {fn}(tflite::MicroMutableOpResolver<{n}>& {variable}) {{",
    ]
    lines += [f"  if ({variable}.{m}() != kTfLiteOk) return kTfLiteError;" for m in methods]
    lines += ["  return kTfLiteOk;", "}"]
    return "\n".join(lines) + "\n"


def write_op_resolver(path: str | Path, ops: Iterable[str]) -> Path:
    """Write emit_op_resolver's lines to ``path`` (for ``--emit-op-resolver PATH``)."""
    p = Path(path)
    text = emit_op_resolver(ops)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    except OSError as exc:
        raise UsageError(f"Cannot write the op resolver to {p}: {exc.strerror}.", "Choose a writable path.") from exc
    return p
