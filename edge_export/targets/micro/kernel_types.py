"""Which tensor types each TFLite Micro kernel takes, and the operators of a model it would refuse.

A kernel existing (``kernels.py``) does not mean it runs every type: TFLM's SQRT is float32 only,
so an int8 model with SQRT passes an operator check and then fails when TFLM invokes it
(``elementwise.cc: input->type != expected_type (INT8 != FLOAT32)``). ``TFLM_KERNEL_INPUT_TYPES``
lists, per operator, the types of its data input (``_DATA_INPUT``: the tensor TFLM's type switch
reads) that the kernel runs, among the three a quantized model gives it: float32, int8, int16.
A tensor of any other type (int32 shape arithmetic, bool masks) is not judged here.

Measured, not read from TFLM's source: tflite-micro 0.dev20261023182759 (the pinned
``tflite_micro``), each operator as a one-operator flatbuffer built from LiteRT's schema with its
activations float32, int8 (asymmetric, as ai-edge-quantizer writes it) or int16 (symmetric, zero
point 0), the fixed output scales LiteRT gives LOGISTIC, TANH, SOFTMAX, LOG_SOFTMAX and
L2_NORMALIZATION, int8 weights with int32 (int8) or int64 (int16x8) biases, and index operands as
int32 constants; each run through ``runner.MicroRunner`` (prepare and invoke). A type is listed
when the operator ran; every refusal recorded was TFLM saying the type is not supported (in Prepare
for CEIL, EXP, ROUND, L2_POOL_2D, ADD_N, CUMSUM, DEPTH_TO_SPACE, SPACE_TO_DEPTH, EMBEDDING_LOOKUP,
GATHER, GATHER_ND, L2_NORMALIZATION; in Invoke for the rest; MIRROR_PAD's int16 refusal prints
nothing). The builder and the measurement are ``tests/targets/micro_kernel_models.py`` and
``tests/targets/test_targets_micro_kernel_types.py``, which checks every entry against the installed
interpreter. PRELU runs an int16 input with an int8 slope (its Prepare refuses any other slope type
for an integer input). POW and GELU have no TFLM kernel at all (``kernels.py``).

The converting operators are measured on the conversions an export writes: QUANTIZE from float32
to int8, int8 to int16 and int16 to int8 (the boundaries of --mixed-precision's int16 operators;
int8 to int8, float32 to int16 and int16 to int16 run too), DEQUANTIZE from int8 or int16 to
float32 (it refuses a float32 input: there is nothing to dequantize), CAST to int32, and FILL's
value (its data input). The TFLM kernels left out take no judged type (LOGICAL_*, REDUCE_ALL: bool;
SHAPE, BROADCAST_ARGS: int32), are control flow or resource variables, or are the recurrent
SVDF and UNIDIRECTIONAL_SEQUENCE_LSTM, whose integer kernels need their own multi-tensor
quantization to be measured at all: an operator not in the table is not judged here, and the
parity run on TFLite Micro remains the check behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...flatbuffer import FlatbufferModel, OperatorInfo

__all__ = [
    "JUDGED_TYPES", "TFLM_KERNEL_INPUT_TYPES", "INT16_KERNELS", "KernelTypeMismatch", "kernel_type_mismatches",
    "kernel_type_fix", "data_input",
]

JUDGED_TYPES = ("float32", "int8", "int16")  # the types a quantized or float model gives a kernel

_FLOAT32 = frozenset({"float32"})
_FLOAT32_INT8 = frozenset({"float32", "int8"})
_ALL = frozenset(JUDGED_TYPES)

# Operator -> the types of its data input TFLM's kernel runs (measured: see the module docstring).
TFLM_KERNEL_INPUT_TYPES: dict[str, frozenset[str]] = {
    **dict.fromkeys((
        "CEIL", "COS", "EXP", "FLOOR", "FLOOR_DIV", "FLOOR_MOD", "L2_POOL_2D", "LOG", "NEG", "ROUND", "SIN",
        "SQRT", "SQUARE",
    ), _FLOAT32),
    "DEQUANTIZE": frozenset({"int8", "int16"}),
    **dict.fromkeys((
        "ADD_N", "ARG_MAX", "ARG_MIN", "BATCH_TO_SPACE_ND", "CUMSUM", "DEPTH_TO_SPACE", "DIV", "ELU",
        "EMBEDDING_LOOKUP", "EQUAL", "FILL", "GATHER", "GATHER_ND", "GREATER_EQUAL", "HARD_SWISH", "L2_NORMALIZATION",
        "LESS", "LESS_EQUAL", "LOG_SOFTMAX", "MIRROR_PAD", "NOT_EQUAL", "REDUCE_MAX", "REDUCE_MIN",
        "RESIZE_BILINEAR", "SPACE_TO_BATCH_ND", "SPACE_TO_DEPTH", "ZEROS_LIKE",
    ), _FLOAT32_INT8),
    **dict.fromkeys((
        "ABS", "ADD", "AVERAGE_POOL_2D", "BATCH_MATMUL", "BROADCAST_TO", "CAST", "CONCATENATION", "CONV_2D",
        "DEPTHWISE_CONV_2D", "DYNAMIC_UPDATE_SLICE", "EXPAND_DIMS", "FULLY_CONNECTED", "GREATER", "LEAKY_RELU",
        "LOGISTIC", "MAX_POOL_2D", "MAXIMUM", "MEAN", "MINIMUM", "MUL", "PACK", "PAD", "PADV2", "PRELU", "QUANTIZE",
        "RELU", "RELU6", "RESHAPE", "RESIZE_NEAREST_NEIGHBOR", "REVERSE_V2", "RSQRT", "SELECT_V2", "SLICE", "SOFTMAX",
        "SPLIT", "SPLIT_V", "SQUARED_DIFFERENCE", "SQUEEZE", "STRIDED_SLICE", "SUB", "SUM", "TANH", "TRANSPOSE",
        "TRANSPOSE_CONV", "UNPACK",
    ), _ALL),
}

# The operators whose TFLM kernel takes an int16 data input: --mixed-precision raises no other one to
# int16 on micro (the others stay int8 between int16 neighbours, with a QUANTIZE each way).
INT16_KERNELS = frozenset(op for op, types in TFLM_KERNEL_INPUT_TYPES.items() if "int16" in types)

# The input whose type the kernel switches on, where it is not the first: SPLIT's first input is
# its axis, TRANSPOSE_CONV's the output shape, SELECT_V2's the condition, EMBEDDING_LOOKUP's the ids,
# FILL's the output shape.
_DATA_INPUT = {"SPLIT": 1, "TRANSPOSE_CONV": 2, "SELECT_V2": 1, "EMBEDDING_LOOKUP": 1, "FILL": 1}

# What to write instead of a float-only operator: an operator whose TFLM kernel the table shows
# running int8 (whether the converter keeps that form is the model author's to check).
_INT8_REWRITES = {
    # measured on the Silero VAD's magnitude: it runs, and keeps 0.36 of the decisions at int8
    "SQRT": "sqrt(x) as x * torch.rsqrt(x) for x > 0 (TFLM's RSQRT and MUL take int8; over an x spanning decades, "
            "a power spectrum's, the product loses accuracy: check its parity)",
    "SQUARE": "x * x (TFLM's MUL takes int8)",
    "NEG": "-x as x * -1 (TFLM's MUL takes int8)",
    "EXP": "an exp inside a softmax or sigmoid as torch.softmax or torch.sigmoid (TFLM's SOFTMAX and LOGISTIC take int8)",
    "LOG": "a log of a softmax as torch.log_softmax (TFLM's LOG_SOFTMAX takes int8)",
}


@dataclass(frozen=True)
class KernelTypeMismatch:
    """An operator whose TFLM kernel does not take the type the model gives its data input."""

    opcode: str
    operator_index: int  # in the main subgraph: TFLM's node number
    input_type: str
    kernel_types: tuple[str, ...]  # the types TFLM's kernel takes, in JUDGED_TYPES order


def data_input(op: OperatorInfo) -> int | None:
    """The tensor index of ``op``'s data input (None when it has none)."""
    position = _DATA_INPUT.get(op.opcode, 0)
    return op.inputs[position] if position < len(op.inputs) and op.inputs[position] >= 0 else None


def kernel_type_mismatches(model: FlatbufferModel) -> tuple[KernelTypeMismatch, ...]:
    """The operators of the main subgraph (the one TFLM invokes; the parsed model exposes only its
    tensors) whose data input has a judged type the TFLM kernel does not take."""
    found = []
    for op in model.operators:
        accepted, tensor = TFLM_KERNEL_INPUT_TYPES.get(op.opcode), data_input(op)
        if accepted is None or tensor is None:
            continue
        dtype = model.tensors[tensor].dtype
        if dtype in JUDGED_TYPES and dtype not in accepted:
            kernel_types = tuple(t for t in JUDGED_TYPES if t in accepted)
            found.append(KernelTypeMismatch(op.opcode, op.index, dtype, kernel_types))
    return tuple(found)


def kernel_type_fix(mismatch: KernelTypeMismatch) -> str:
    """What to do about ``mismatch``, in one sentence (the options named exist for --target micro,
    which exports integer models only: int16 comes from --mixed-precision)."""
    op, takes = mismatch.opcode, " and ".join(mismatch.kernel_types)
    if "int8" in mismatch.kernel_types:
        return (
            f"TFLite Micro runs {op} in {takes}, not {mismatch.input_type}: export without --mixed-precision "
            f"(or with --mixed-precision off) so that it stays int8."
        )
    rewrite = _INT8_REWRITES.get(op)
    instead = f", write {rewrite}" if rewrite else ""
    return (
        f"TFLite Micro runs {op} in {takes} only: compute it outside the model{instead}, or, for a "
        "microcontroller with a floating-point unit, export a float model with --target cpu --quantize none "
        "(--target micro exports integer models only)."
    )
