"""Predict how ``edgetpu_compiler`` maps a full-integer LiteRT flatbuffer onto the Coral Edge TPU.

The checker implements Coral's published model requirements (supported operators, int8/uint8
tensors, constant parameters, the 3-innermost-dimensions rank rule, static shapes and the per-operator
constraints) and the compiler's partitioning rule: the graph is cut once, at the first operator that
cannot map, and that operator and everything after it run on the CPU even when supported. A QUANTIZE
of a float model input and a DEQUANTIZE to a float model output stay on the CPU without cutting, and
so does an output joined in float from parts with their own scales, when it comes last.

It works without the compiler and reports in the compiler's own vocabulary (the status strings of
its operation table), so that a prediction and a real compile can be compared line by line.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ...errors import TargetError
from ...flatbuffer import FlatbufferModel, OperatorInfo, TensorInfo, read_flatbuffer
from ...graph.provenance import describe_location, flatbuffer_operator_module, module_user_source, operator_module
from ...output.serialize import json_field
from ..operator_rules import OperatorRules

__all__ = [
    "OpStatus",
    "OpMapping",
    "TableRow",
    "UnmappedOp",
    "EdgeTPUReport",
    "SUPPORTED_OPS",
    "EDGETPU_RULES",
    "edgetpu_rule",
    "check_edgetpu",
    "check_edgetpu_bytes",
    "check_edgetpu_inputs",
    "module_path_from_tensor_name",
]


class OpStatus(str, enum.Enum):
    """The compiler's status strings (the third column of its operation table)."""

    MAPPED = "Mapped to Edge TPU"
    NOT_SUPPORTED = "Operation not supported"
    UNSUPPORTED_DTYPE = "Operation is working on an unsupported data type"
    UNSUPPORTED_RANK = "Tensor has unsupported rank (up to 3 innermost dimensions mapped)"
    UNSPECIFIED = "Operation is otherwise supported, but not mapped due to some unspecified limitation"
    AFTER_CUT = "More than one subgraph is not supported"


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

_INTEGER_ACTIVATION = frozenset({"int8", "uint8"})
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


@dataclass(frozen=True)
class OpMapping:
    """One operator: what the checker found on its own, and where the partition puts it."""

    index: int
    opcode: str
    status: OpStatus
    reason: str
    on_tpu: bool
    # True when the operator itself meets every rule (it may still run on the CPU after the cut).
    supported: bool
    input_names: tuple[str, ...] = json_field(skip=True, default=())
    output_names: tuple[str, ...] = json_field(skip=True, default=())
    module_path: str | None = None
    # unsupported: the aten call and the user's line it came from (operator_origins)
    aten: str | None = json_field(default=None, omit_none=True)
    source: str | None = json_field(default=None, omit_none=True)


@dataclass(frozen=True)
class TableRow:
    operator: str
    count: int
    status: str


@dataclass(frozen=True)
class UnmappedOp:
    """The operator where the compiler cuts the graph, and where it came from in PyTorch."""

    index: int
    opcode: str
    status: OpStatus
    reason: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    module_path: str | None
    module_type: str | None
    source: str | None  # "file.py:LINE" of the call, else of the module's class, when the PyTorch module was given
    ops_before: int  # operators that precede it (the share the TPU gets)
    aten: str | None = json_field(default=None, omit_none=True)  # "aten.gelu", when the graph shows it

    def describe(self) -> str:
        made = f" (from {self.aten})" if self.aten else ""
        where = describe_location(self.module_path, self.module_type, self.source)
        return f"operator #{self.index} {self.opcode}{made}{where}: {self.reason}"


@dataclass(frozen=True)
class EdgeTPUReport:
    ops: tuple[OpMapping, ...]
    model_problems: tuple[str, ...] = ()  # reasons the compiler would refuse the whole model
    first_unmapped: UnmappedOp | None = None
    table: tuple[TableRow, ...] = field(default=())

    JSON_KEYS = (
        "num_ops", "num_on_tpu", "num_on_cpu", "share_on_tpu", "num_segments", "fully_mapped",
        "model_problems", "first_unmapped", "table", "ops", "summary",
    )

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def num_on_tpu(self) -> int:
        return sum(op.on_tpu for op in self.ops)

    @property
    def num_on_cpu(self) -> int:
        return self.num_ops - self.num_on_tpu

    @property
    def share_on_tpu(self) -> float:
        return self.num_on_tpu / self.num_ops if self.ops else 0.0

    @property
    def num_segments(self) -> int:
        """Edge TPU segments: the compiler makes at most one (without -a)."""
        return 1 if self.num_on_tpu else 0

    @property
    def fully_mapped(self) -> bool:
        """Every operator on the TPU, apart from the float I/O QUANTIZE/DEQUANTIZE at the edges."""
        return not self.model_problems and self.first_unmapped is None and self.num_on_tpu > 0

    def summary(self) -> str:
        text = (
            f"{self.num_on_tpu} of {self.num_ops} operations predicted on the Edge TPU "
            f"({100 * self.share_on_tpu:.0f}%), {self.num_segments} TPU segment(s)"
        )
        if self.model_problems:
            text += "; the compiler would refuse the model: " + "; ".join(self.model_problems)
        elif self.first_unmapped is not None:
            text += "; the graph is cut at " + self.first_unmapped.describe()
        return text + "."

    def format_table(self) -> str:
        width = max([len("Operator")] + [len(r.operator) for r in self.table])
        lines = [f"{'Operator':<{width}}  {'Count':>5}  Status"]
        lines += [f"{r.operator:<{width}}  {r.count:>5}  {r.status}" for r in self.table]
        return "\n".join(lines)


# ---- module paths from tensor names -------------------------------------------------------------


def module_path_from_tensor_name(name: str, opcode: str | None = None) -> tuple[str, str | None] | None:
    """``(module_path, module_type)`` of the module a flatbuffer tensor came from (see
    edge_export.graph.provenance; for a fused operator ``opcode``, the module that computes it), or None
    when its name names none."""
    found = operator_module(name, opcode)
    return None if found is None else (found.path, found.type_name)


# ---- constant values (axes, paddings, strides) ---------------------------------------------------


def _constant_values(model: FlatbufferModel, indices: set[int]) -> dict[int, list[int]]:
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
        if t.dtype not in _INTEGER_ACTIVATION:
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


def _own_rule(
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


# ---- partitioning -------------------------------------------------------------------------------


def _is_boundary(op: OperatorInfo, model: FlatbufferModel) -> bool:
    """A QUANTIZE of a float model input, a DEQUANTIZE to a float model output, or an output join
    (``FlatbufferModel.output_join_ops``: parts dequantized, then joined in float) after every
    other operator, so that the compiler's one cut falls after the integer graph."""
    joins = model.output_join_ops
    if op.index in joins:
        return all(other.index in joins for other in model.operators[op.index:])
    if op.opcode == "QUANTIZE" and op.inputs:
        return op.inputs[0] in model.inputs and model.tensors[op.inputs[0]].is_float
    if op.opcode == "DEQUANTIZE" and op.outputs:
        return op.outputs[0] in model.outputs and model.tensors[op.outputs[0]].is_float
    return False


def _model_problems(model: FlatbufferModel) -> list[str]:
    problems = []
    for t in (*model.input_tensors, *model.output_tensors):
        if t.has_dynamic_dims:
            problems.append(
                f"model input/output '{t.name}' has a dynamic dimension {list(t.shape_signature)} "
                "(the compiler only supports static-sized tensors)"
            )
    if not model.operators:
        problems.append("the model has no operators")
    elif not any(t.dtype in _INTEGER_ACTIVATION for t in model.tensors if not t.is_constant):
        problems.append("the model is not quantized (no int8/uint8 activations)")
    return problems


def check_edgetpu(model: FlatbufferModel, *, source_module: Any = None) -> EdgeTPUReport:
    """Predict the compiler's mapping of ``model``'s main subgraph.

    The constant axes, paddings and strides come from the model's own bytes (``model.data``); a
    model built without them is checked from shapes where possible. ``source_module`` (the PyTorch
    module that was exported) adds, for each unsupported operator, the aten call and the line of the
    user's code it came from (``operator_origins``).
    """
    constants = _rule_constants(model)
    problems = _model_problems(model)
    mappings: list[OpMapping] = []
    cut: UnmappedOp | None = None
    for op in model.operators:
        found = flatbuffer_operator_module(model, op)
        status, reason, supported, on_tpu = _verdict(op, model, constants, cut, problems)
        mapping = OpMapping(
            index=op.index,
            opcode=op.opcode,
            status=status,
            reason=reason,
            on_tpu=on_tpu,
            supported=supported,
            input_names=tuple(model.tensors[i].name for i in op.inputs if i >= 0 and not model.tensors[i].is_constant),
            output_names=tuple(model.tensors[i].name for i in op.outputs if i >= 0),
            module_path=found.path if found else None,
        )
        if cut is None and not supported:
            cut = _cut_at(mapping, found.type_name if found else None, source_module)
        mappings.append(mapping)
    mappings, cut = _with_origins(model, mappings, cut, source_module)
    return EdgeTPUReport(ops=tuple(mappings), model_problems=tuple(problems), first_unmapped=cut, table=_compiler_table(mappings))


def _with_origins(model: FlatbufferModel, mappings: list[OpMapping], cut: UnmappedOp | None, source_module: Any) -> tuple[list[OpMapping], UnmappedOp | None]:
    """Each unsupported operator with the aten call and line it came from (one trace of the module)."""
    from dataclasses import replace

    from ...conversion.operator_origins import operator_origins_at

    origins = operator_origins_at(model, [m.index for m in mappings if not m.supported], source_module)
    if not origins or source_module is None:
        return mappings, cut
    named = [replace(m, aten=o.aten, source=o.source) if (o := origins.get(m.index)) else m for m in mappings]
    if cut is not None and (o := origins.get(cut.index)) is not None:
        cut = replace(cut, aten=o.aten, source=o.source or cut.source)
    return named, cut


def _rule_constants(model: FlatbufferModel) -> dict[int, list[int]]:
    """The integer constants the per-operator rules read: MEAN axes, PAD paddings, STRIDED_SLICE bounds."""
    wanted = set()
    for op in model.operators:
        if op.opcode in ("MEAN", "PAD", "STRIDED_SLICE"):
            wanted.update(i for i in op.inputs[1:] if i >= 0 and model.tensors[i].is_constant)
    return _constant_values(model, wanted)


def _verdict(
    op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]], cut: UnmappedOp | None, problems: list[str],
) -> tuple[OpStatus, str, bool, bool]:
    """(status, reason, supported, on_tpu) of one operator, given the cut so far (None: not cut yet)."""
    if _is_boundary(op, model):
        return (
            OpStatus.UNSUPPORTED_DTYPE,
            f"{op.opcode} between the float model I/O and the integer graph stays on the CPU (it does not cut the graph)",
            True,
            False,
        )
    rule = _own_rule(op, model, constants)
    if rule is not None:
        return rule[0], rule[1], False, False
    if cut is None:
        return OpStatus.MAPPED, "", True, not problems
    return OpStatus.AFTER_CUT, f"supported, but it comes after the cut at operator #{cut.index} {cut.opcode}", True, False


def _cut_at(mapping: OpMapping, module_type: str | None, source_module: Any) -> UnmappedOp:
    """The first unsupported operator, where the compiler cuts the graph, with its module's source line."""
    return UnmappedOp(
        index=mapping.index,
        opcode=mapping.opcode,
        status=mapping.status,
        reason=mapping.reason,
        input_names=mapping.input_names,
        output_names=mapping.output_names,
        module_path=mapping.module_path,
        module_type=module_type,
        source=module_user_source(source_module, mapping.module_path),
        ops_before=mapping.index,
    )


def _compiler_table(mappings: list[OpMapping]) -> tuple[TableRow, ...]:
    """The compiler's operation table: mapped rows first, then the rest, each by operator name."""
    counts = Counter((m.opcode, m.status.value) for m in mappings)
    return tuple(
        TableRow(operator=k[0], count=v, status=k[1])
        for k, v in sorted(counts.items(), key=lambda kv: (kv[0][1] != OpStatus.MAPPED.value, kv[0][1], kv[0][0]))
    )


def check_edgetpu_bytes(data: bytes, *, source_module: Any = None) -> EdgeTPUReport:
    """Parse ``data`` and check it (the constant-value rules included)."""
    return check_edgetpu(read_flatbuffer(data), source_module=source_module)


def check_edgetpu_inputs(input_specs: Sequence[Any]) -> None:
    """Refuse inputs the Edge TPU cannot take: a batch above 1 or a dynamic dimension.

    Accepts InputSpec objects (anything with ``.shape``) or plain shape tuples; ``None`` or a
    negative size marks a dynamic dimension.
    """
    for position, spec in enumerate(input_specs):
        shape = tuple(getattr(spec, "shape", spec))
        label = getattr(spec, "name", None) or f"input {position}"
        text = ",".join("?" if d is None or d < 0 else str(d) for d in shape)
        if any(d is None or d < 0 for d in shape):
            raise TargetError(
                f"The Edge TPU needs static shapes, but {label} has a dynamic dimension ({text}).",
                "Give every dimension a fixed size with --input-shape (e.g. 1,3,224,224).",
            )
        if len(shape) >= 2 and shape[0] > 1:
            raise TargetError(
                f"The Edge TPU runs batch 1, but {label} has batch {shape[0]} ({text}): a batch "
                "dimension above 1 breaks its rank rule (only the 3 innermost dimensions may exceed 1).",
                f"Export with batch 1 (--input-shape 1,{','.join(str(d) for d in shape[1:])}) and run "
                "the batch one sample at a time.",
            )
        if any(d > 1 for d in shape[:-4]):
            raise TargetError(
                f"{label} has shape ({text}): the Edge TPU maps only tensors whose dimensions "
                "beyond the 3 innermost are 1.",
                "Reshape the input to at most 4 dimensions with batch 1.",
            )
