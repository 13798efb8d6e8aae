"""The LiteRT GPU delegate's operators: which it takes, at which versions, under which constraints
(``GPU_MAX_VERSIONS``, and one rule per operator in ``GPU_RULES``).

The operator table and its source
---------------------------------
The published list (LiteRT/TFLite "GPU delegates", section "Supported ops": float16 and float32;
"by default, all ops are only supported at version 1", with the listed exceptions):

    ADD, AVERAGE_POOL_2D, CONCATENATION, CONV_2D, DEPTHWISE_CONV_2D (v1-2), EXP, FULLY_CONNECTED,
    LOGICAL_AND, LOGISTIC, LSTM (v2, basic LSTM only), MAX_POOL_2D, MAXIMUM, MINIMUM, MUL, PAD, PRELU,
    RELU, RELU6, RESHAPE, RESIZE_BILINEAR (v1-3), SOFTMAX, STRIDED_SLICE, SUB, TRANSPOSE_CONV

plus the operators the delegate's model builder parses and its compatibility checker accepts
(tensorflow/lite/tools/versioning/gpu_compatibility.cc, tensorflow/lite/delegates/gpu/common/
model_builder.cc), which the converter emits for ordinary PyTorch models: HARD_SWISH, TANH, GELU, MEAN,
TRANSPOSE, SLICE, SPLIT, BATCH_MATMUL, DIV, RSQRT, SQRT,
SQUARED_DIFFERENCE, ABS, COS, SIN, LOG, NEG, POW, SQUARE, ELU, LEAKY_RELU, RESIZE_NEAREST_NEIGHBOR,
SPACE_TO_DEPTH, DEPTH_TO_SPACE, REDUCE_MAX, REDUCE_MIN, SUM, REDUCE_PROD, QUANTIZE/DEQUANTIZE
(float16 weights). The version limits of ``GPU_MAX_VERSIONS`` are the published ones where the list
gives one (DEPTHWISE_CONV_2D 2, RESIZE_BILINEAR 3, LSTM 2) and the model builder's
``CheckMaxSupportedOpVersion`` where it was read (ADD 2, CONCATENATION 2, CONV_2D 5, FULLY_CONNECTED 9).
The published "version 1 only" default is not applied: the converter writes FULLY_CONNECTED v5
(keep_num_dims) for every Linear, which the delegate's builder takes. Other operators are checked by
name, dtype and their rules only; a newer version usually means integer inputs, which the dtype
check refuses anyway.

Newer delegate builds accept more (CUMSUM, ONE_HOT, SELECT_V2, DYNAMIC_UPDATE_SLICE and
EMBEDDING_LOOKUP appear in the current gpu_compatibility.cc); this table predicts the published set, so a model using those is reported as
partitioned here, and the analyzer cross-check (below) is where a newer runtime can disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ..operator_rules import OperatorRules

if TYPE_CHECKING:
    from ...flatbuffer import FlatbufferModel, OperatorInfo

__all__ = ["GPU_MAX_VERSIONS", "GPU_RULES", "FLOAT_DTYPES", "INDEX_CONSTANT_DTYPES"]

# Operator -> highest version the delegate takes, or None where neither the published list nor the
# model builder's CheckMaxSupportedOpVersion gives one that was checked here (no version limit applied).
GPU_MAX_VERSIONS: Mapping[str, int | None] = {
    "ADD": 2,  # model_builder.cc
    "AVERAGE_POOL_2D": None,
    "CONCATENATION": 2,  # model_builder.cc
    "CONV_2D": 5,  # model_builder.cc
    "DEPTHWISE_CONV_2D": 2,  # published: v1-2
    "EXP": None,
    "FULLY_CONNECTED": 9,  # model_builder.cc
    "LOGICAL_AND": None,
    "LOGISTIC": None,
    "LSTM": 2,  # published: v2, basic LSTM only
    "MAX_POOL_2D": None,
    "MAXIMUM": None,
    "MINIMUM": None,
    "MUL": None,
    "PAD": None,
    # MIRROR_PAD: the model builder's PadOperationParser (REFLECT only, see its rule); LiteRT's own
    # analyzer (the cross-check) passes it too. A 1-D reflect pad becomes one (rewrite_reflect_replicate_pads_pass).
    "MIRROR_PAD": None,
    "PRELU": None,
    "RELU": None,
    "RELU6": None,
    "RESHAPE": None,
    "RESIZE_BILINEAR": 3,  # published: v1-3
    "SOFTMAX": None,
    "STRIDED_SLICE": None,
    "SUB": None,
    "TRANSPOSE_CONV": None,
    # parsed by the delegate's model builder beyond the published list
    "HARD_SWISH": None,
    "TANH": None,
    # GELU: a one-argument elementwise operator in gpu_compatibility.cc (with ABS, EXP, LOG, TANH...)
    # and a unary operation of LiteRT's ML Drift GPU delegate (ml_drift_delegate/tflite/convert/
    # convert_elementwise.cc); every Hugging Face transformer's MLP has one.
    "GELU": None,
    "MEAN": None,
    "TRANSPOSE": None,
    "SLICE": None,
    "SPLIT": None,
    "BATCH_MATMUL": None,
    "DIV": None,
    "RSQRT": None,
    "SQRT": None,
    "SQUARED_DIFFERENCE": None,
    "ABS": None,
    "COS": None,
    "SIN": None,
    "LOG": None,
    "NEG": None,
    "POW": None,
    "SQUARE": None,
    "ELU": None,
    "LEAKY_RELU": None,
    "RESIZE_NEAREST_NEIGHBOR": None,
    "SPACE_TO_DEPTH": None,
    "DEPTH_TO_SPACE": None,
    "REDUCE_MAX": None,
    "REDUCE_MIN": None,
    "SUM": None,
    "REDUCE_PROD": None,
    "DEQUANTIZE": None,  # float16 weights (--quantize fp16), dequantized inside the delegate
    "QUANTIZE": None,
}

FLOAT_DTYPES = frozenset({"float32", "float16"})
# Integer tensors the delegate accepts: shapes, axes, paddings, indices (constant inputs only).
INDEX_CONSTANT_DTYPES = frozenset({"int32", "int64"})
_WEIGHT_INPUTS = {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "TRANSPOSE_CONV": 1}
# Fused activations the delegate implements (schema ActivationFunctionType: NONE, RELU, RELU_N1_TO_1,
# RELU6, TANH, SIGN_BIT=5 is not; see IsActivationSupported).
_FUSED_OK = frozenset({0, 1, 2, 3, 4})

GPU_RULES = OperatorRules("LiteRT GPU delegate")
gpu_rule = GPU_RULES.rule


@gpu_rule("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV")
def _constant_weights(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    pos = _WEIGHT_INPUTS[op.opcode]
    if pos < len(op.inputs) and op.inputs[pos] >= 0 and not _constant_or_float16_constant(op.inputs[pos], model):
        return f"{op.opcode} with run-time weights; the delegate needs constant weights"
    return None


def _constant_or_float16_constant(index: int, model: FlatbufferModel) -> bool:
    """A constant, or the DEQUANTIZE of a constant (how --quantize fp16 stores weights): the delegate
    reads float16 weights through that DEQUANTIZE as constants (it drops the op, keeping the weights)."""
    if model.tensors[index].is_constant:
        return True
    for other in model.operators:
        if index in other.outputs:
            return other.opcode == "DEQUANTIZE" and bool(other.inputs) and model.tensors[other.inputs[0]].is_constant
    return False


@gpu_rule("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV", "AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION")
def _supported_fused_activation(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    fused = int(getattr(op.options, "fusedActivationFunction", 0) or 0)
    if fused not in _FUSED_OK:
        return f"{op.opcode} with fused activation {fused}, which the delegate does not implement"
    return None


@gpu_rule("ADD", "MUL", "SUB", "DIV")
def _broadcast_the_delegate_knows(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    # CheckAddMulBroadcastCompatibility (default flags): operands of different ranks above 1 must be
    # 4-D with batch 1 against 3-D, [1, 1], or [b, c] against [b, x, y, c].
    if len(op.inputs) != 2 or min(op.inputs) < 0:
        return f"{op.opcode} needs two input tensors"
    a, b = (model.tensors[i].shape for i in op.inputs)
    if len(a) > 1 and len(b) > 1 and len(a) != len(b):
        long, short = (a, b) if len(a) >= len(b) else (b, a)
        ok = (len(long) == 4 and len(short) == 3 and long[0] == 1) or (
            len(long) == 4 and len(short) == 2 and long[0] == short[0] and long[3] == short[1]
        ) or (len(long) == 4 and tuple(short) == (1, 1) and long[0] == 1)
        if not ok:
            return f"{op.opcode} broadcasting {list(a)} with {list(b)}, which the delegate does not support"
    return None


@gpu_rule("MIRROR_PAD")
def _reflective_mirror_pad(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    # "Only Reflective padding is supported for Mirror Pad operation." (MirrorPadMode REFLECT = 0)
    mode = int(getattr(op.options, "mode", 0) or 0)
    return None if mode == 0 else "MIRROR_PAD in SYMMETRIC mode (the delegate takes REFLECT only)"


@gpu_rule("FULLY_CONNECTED")
def _fully_connected_default_weights(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    if int(getattr(op.options, "weightsFormat", 0) or 0) != 0:
        return "fully connected with shuffled weights"
    return None


@gpu_rule("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD")
def _constant_axes(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    if len(op.inputs) > 1 and op.inputs[1] >= 0 and not model.tensors[op.inputs[1]].is_constant:
        return f"{op.opcode} with run-time axes"
    return None


