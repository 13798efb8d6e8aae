"""Coral's published Edge TPU model requirements, one operator at a time: the supported operators
(``SUPPORTED_OPS``), int8/uint8 tensors, constant parameters, the 3-innermost-dimensions rank rule,
static shapes, and the per-operator constraints registered in ``EDGETPU_RULES``. ``own_rule`` is the
first requirement an operator breaks; the partitioning (``checks.py``) decides the rest."""

from __future__ import annotations

from typing import Mapping

from ...flatbuffer import FlatbufferModel, OperatorInfo, TensorInfo
from ...graph.provenance import flatbuffer_operator_module
from ..operator_rules import OperatorRules
from .mapping import OpStatus

__all__ = ["SUPPORTED_OPS", "EDGETPU_RULES", "edgetpu_rule", "INTEGER_ACTIVATION", "constant_values", "own_rule"]


# Coral's published operator list, as LiteRT builtin opcode names.
SUPPORTED_OPS = frozenset(
    {
        "ADD",
        "AVERAGE_POOL_2D",
        "CONCATENATION",
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "EXPAND_DIMS",
        "FULLY_CONNECTED",
        "L2_NORMALIZATION",
        "LOGISTIC",
        "LSTM",
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        "MAXIMUM",
        "MAX_POOL_2D",
        "MEAN",
        "MINIMUM",
        "MUL",
        "PACK",
        "PAD",
        "PRELU",
        "QUANTIZE",
        "REDUCE_MAX",
        "REDUCE_MIN",
        "RELU",
        "RELU6",
        "RELU_N1_TO_1",
        "RESHAPE",
        "RESIZE_BILINEAR",
        "RESIZE_NEAREST_NEIGHBOR",
        "RSQRT",
        "SLICE",
        "SOFTMAX",
        "SPACE_TO_DEPTH",
        "SPLIT",
        "SQUEEZE",
        "STRIDED_SLICE",
        "SUB",
        "SUM",
        "SQUARED_DIFFERENCE",
        "TANH",
        "TRANSPOSE",
        "TRANSPOSE_CONV",
    }
)

INTEGER_ACTIVATION = frozenset({"int8", "uint8"})
# Constant parameters may also be int32 (biases, shapes, axes, paddings) or int64 (shapes).
_INTEGER_CONSTANT = frozenset({"int8", "uint8", "int32", "int64"})
_SOFTMAX_MAX_ELEMENTS = 16000
# (weights input, bias input) of the operators whose parameters must be constant.
_PARAMETER_INPUTS = {
    "CONV_2D": (1, 2),
    "DEPTHWISE_CONV_2D": (1, 2),
    "FULLY_CONNECTED": (1, 2),
    "TRANSPOSE_CONV": (1, 3),
}


# ---- constant values (axes, paddings, strides) ---------------------------------------------------


def constant_values(model: FlatbufferModel, indices: set[int]) -> dict[int, list[int]]:
    """Integer values of the given int32/int64 constant tensors of the main subgraph (none for a
    model built without its bytes)."""
    if not model.data or not indices:
        return {}
    values: dict[int, list[int]] = {}
    for i in indices:
        if model.tensors[i].dtype in ("int32", "int64"):
            value = model.constant(i)
            if value is not None:
                values[i] = [int(v) for v in value.reshape(-1)]
    return values


# ---- per-operator rules -------------------------------------------------------------------------


def _activation_tensors(op: OperatorInfo, model: FlatbufferModel) -> list[TensorInfo]:
    return [model.tensors[i] for i in (*op.inputs, *op.outputs) if i >= 0 and not model.tensors[i].is_constant]


def _rank_violation(t: TensorInfo) -> bool:
    return any(d > 1 for d in t.shape[:-3])


def _xy_axes(rank: int) -> set[int]:
    # x/y are the two dimensions before the channel dimension (NHWC: 1 and 2; HWC: 0 and 1).
    return {rank - 3, rank - 2} if rank >= 3 else set()


def _float_consumers(op: OperatorInfo, model: FlatbufferModel) -> str:
    """The operators that read a DEQUANTIZE's float output, with their modules: the real culprits."""
    names = []
    for other in model.operators:
        if op.outputs[0] in other.inputs:
            found = flatbuffer_operator_module(model, other)
            where = f" in '{found.path or '<root>'}' ({found.type_name})" if found else ""
            names.append(f"{other.opcode} #{other.index}{where}")
    return ", ".join(names[:3]) if names else "the operations after it"


def _fused_activation(op: OperatorInfo) -> int:
    return int(getattr(op.options, "fusedActivationFunction", 0) or 0)


# Rules every supported operator must meet, in this order (the first broken one is reported):
# constant parameters, static shapes, integer tensors, the rank rule. Each returns the compiler's
# status and the reason, or None. The per-operator constraints follow (EDGETPU_RULES below).


def _constant_parameters(op: OperatorInfo, model: FlatbufferModel) -> tuple[OpStatus, str] | None:
    for pos, what in zip(_PARAMETER_INPUTS.get(op.opcode, ()), ("weights", "bias")):
        if pos < len(op.inputs) and op.inputs[pos] >= 0 and not model.tensors[op.inputs[pos]].is_constant:
            return OpStatus.UNSPECIFIED, f"the {what} are not constant (computed at run time)"
    return None


def _static_shapes(op: OperatorInfo, model: FlatbufferModel) -> tuple[OpStatus, str] | None:
    for t in _activation_tensors(op, model):
        if t.has_dynamic_dims:
            return OpStatus.UNSPECIFIED, (
                f"tensor '{t.name}' has a dynamic dimension (shape signature {list(t.shape_signature)}); "
                "the Edge TPU needs static shapes"
            )
    return None


def _integer_activations(op: OperatorInfo, model: FlatbufferModel) -> tuple[OpStatus, str] | None:
    for t in _activation_tensors(op, model):
        if t.dtype not in INTEGER_ACTIVATION:
            return OpStatus.UNSUPPORTED_DTYPE, (
                f"tensor '{t.name}' is {t.dtype}; the Edge TPU computes only on int8/uint8 tensors"
            )
    return None


def _integer_constants(op: OperatorInfo, model: FlatbufferModel) -> tuple[OpStatus, str] | None:
    for i in op.inputs:
        if i >= 0 and model.tensors[i].is_constant and model.tensors[i].dtype not in _INTEGER_CONSTANT:
            t = model.tensors[i]
            return OpStatus.UNSUPPORTED_DTYPE, f"constant '{t.name}' is {t.dtype}; it must be an 8-bit (or int32 bias) tensor"
    return None


def _innermost_rank(op: OperatorInfo, model: FlatbufferModel) -> tuple[OpStatus, str] | None:
    for t in _activation_tensors(op, model):
        if _rank_violation(t):
            return OpStatus.UNSUPPORTED_RANK, (
                f"tensor '{t.name}' has shape {list(t.shape)}: only the 3 innermost dimensions may "
                "be larger than 1"
            )
    return None


_COMMON_RULES = (_constant_parameters, _static_shapes, _integer_activations, _integer_constants, _innermost_rank)

# Per-operator constraints of Coral's operator table; a broken one leaves the operator "otherwise
# supported, but not mapped" (OpStatus.UNSPECIFIED).
EDGETPU_RULES = OperatorRules("Edge TPU")
edgetpu_rule = EDGETPU_RULES.rule


@edgetpu_rule("AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION")
def _no_fused_activation(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    if _fused_activation(op) != 0:
        return f"{op.opcode} has a fused activation; pooling and concatenation may not have one"
    return None


@edgetpu_rule("CONCATENATION")
def _concatenation_constant_inputs(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    n_const = sum(1 for i in op.inputs if i >= 0 and model.tensors[i].is_constant)
    if n_const and len(op.inputs) != 2:
        return (
            f"concatenation of {len(op.inputs)} inputs with a constant input; a constant input is "
            "only allowed with exactly 2 inputs"
        )
    return None


@edgetpu_rule("FULLY_CONNECTED")
def _fully_connected_default_weights(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    if int(getattr(op.options, "weightsFormat", 0) or 0) != 0:
        return "fully connected with a non-default (shuffled) weight format"
    return None


@edgetpu_rule("PAD")
def _pad_only_xy(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    src, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    paddings = constants.get(op.inputs[1]) if len(op.inputs) > 1 else None
    if paddings is not None:
        padded = {i // 2 for i, v in enumerate(paddings) if v != 0}
    else:  # without the constant, the shapes say which dimensions grew
        padded = {i for i, (a, b) in enumerate(zip(src.shape, out.shape)) if a != b}
    if not padded <= _xy_axes(len(src.shape)):
        return f"pad of dimensions {sorted(padded)} of {list(src.shape)}; only the x/y dimensions may be padded"
    return None


@edgetpu_rule("MEAN")
def _mean_only_xy(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    src = model.tensors[op.inputs[0]]
    rank = len(src.shape)
    axes = constants.get(op.inputs[1]) if len(op.inputs) > 1 else None
    if axes is None:
        return None
    axes_n = {a % rank for a in axes} if rank else set()
    if not axes_n <= _xy_axes(rank):
        return f"mean over axes {sorted(axes_n)} of {list(src.shape)}; only the x/y dimensions may be reduced"
    return None


@edgetpu_rule("SOFTMAX")
def _softmax_1d_and_small(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    shape = model.tensors[op.inputs[0]].shape
    non_unit = [d for d in shape if d != 1]
    elements = 1
    for d in shape:
        elements *= d
    if len(non_unit) > 1:
        return f"softmax input {list(shape)} is not 1-D"
    if elements > _SOFTMAX_MAX_ELEMENTS:
        return f"softmax over {elements} elements; at most {_SOFTMAX_MAX_ELEMENTS}"
    return None


@edgetpu_rule("SQUEEZE")
def _squeeze_leading_ones(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    shape = model.tensors[op.inputs[0]].shape
    dims = [int(d) for d in (getattr(op.options, "squeezeDims", None) if op.options is not None else None) or []]
    dims = sorted(d % len(shape) for d in dims) if dims else [i for i, d in enumerate(shape) if d == 1]
    if dims != list(range(len(dims))):
        return f"squeeze of dimensions {dims} of {list(shape)}; only leading 1s may be squeezed"
    return None


@edgetpu_rule("STRIDED_SLICE")
def _strided_slice_unit_strides(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    opts = op.options
    if opts is not None and (int(opts.ellipsisMask or 0) or int(opts.newAxisMask or 0)):
        return "strided slice with an ellipsis or new-axis mask"
    strides_index = op.inputs[3] if len(op.inputs) > 3 else -1
    if strides_index < 0 or not model.tensors[strides_index].is_constant:
        return "strided slice with run-time strides"
    strides = constants.get(strides_index)
    if strides is not None and any(s != 1 for s in strides):
        return f"strided slice with strides {strides}; all strides must be 1"
    return None


@edgetpu_rule("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def _resize_3d(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
    for t in (model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]):
        if len(t.shape) not in (3, 4) or (len(t.shape) == 4 and t.shape[0] != 1):
            return f"resize on {list(t.shape)}; input and output must be 3-D (batch 1)"
    return None


def own_rule(
    op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]
) -> tuple[OpStatus, str] | None:
    """The first published requirement ``op`` breaks, or None when it maps on its own."""
    if op.opcode not in SUPPORTED_OPS:
        if op.opcode == "DEQUANTIZE":
            return OpStatus.NOT_SUPPORTED, (
                "DEQUANTIZE inside the graph: the quantizer left "
                + _float_consumers(op, model)
                + " in float (a float island); the Edge TPU has no DEQUANTIZE"
            )
        return OpStatus.NOT_SUPPORTED, f"{op.opcode} is not on the Edge TPU's supported operator list"
    for common in _COMMON_RULES:
        found = common(op, model)
        if found is not None:
            return found
    reason = EDGETPU_RULES.first_violation(op, model, constants)
    return None if reason is None else (OpStatus.UNSPECIFIED, reason)
