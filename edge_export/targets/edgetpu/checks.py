"""Predict how ``edgetpu_compiler`` maps a full-integer LiteRT flatbuffer onto the Coral Edge TPU.

The checker implements Coral's published model requirements (supported operators, int8/uint8
tensors, constant parameters, the 3-innermost-dimensions rank rule, static shapes and the per-operator
constraints) and the compiler's partitioning rule: the graph is cut once, at the first operator that
cannot map, and that operator and everything after it run on the CPU even when supported. A QUANTIZE
of a float model input and a DEQUANTIZE to a float model output stay on the CPU without cutting, and
so does an output joined in float from parts with their own scales, when it comes last.

It works without the compiler and reports in the compiler's own vocabulary (the status strings of
its operation table: ``mapping.py``), so that a prediction and a real compile can be compared line
by line. Each operator's own requirements are in ``rules.py``; this module partitions.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from ...errors import TargetError
from ...flatbuffer import FlatbufferModel, OperatorInfo, read_flatbuffer
from ...graph.provenance import flatbuffer_operator_module, module_user_source, operator_module
from .mapping import EdgeTPUReport, OpMapping, OpStatus, TableRow, UnmappedOp
from .rules import INTEGER_ACTIVATION, constant_values, own_rule

__all__ = [
    "check_edgetpu",
    "check_edgetpu_bytes",
    "check_edgetpu_inputs",
    "module_path_from_tensor_name",
]


# ---- module paths from tensor names -------------------------------------------------------------


def module_path_from_tensor_name(name: str, opcode: str | None = None) -> tuple[str, str | None] | None:
    """``(module_path, module_type)`` of the module a flatbuffer tensor came from (see
    edge_export.graph.provenance; for a fused operator ``opcode``, the module that computes it), or None
    when its name names none."""
    found = operator_module(name, opcode)
    return None if found is None else (found.path, found.type_name)


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
    elif not any(t.dtype in INTEGER_ACTIVATION for t in model.tensors if not t.is_constant):
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
    return constant_values(model, wanted)


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
    rule = own_rule(op, model, constants)
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
