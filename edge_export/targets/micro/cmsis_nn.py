"""The quantization rules Arm's CMSIS-NN kernels assume, checked on a flatbuffer (``check_cmsis_nn``).

TFLite Micro on a Cortex-M uses CMSIS-NN's optimized kernels where it has them. They are bit-exact
with the reference kernels (what the host parity runs) only under the rules they assume
(``../shared/notes/deployment.md``, "Microcontrollers and Arm NPUs"):

- CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED weights are int8, symmetric (zero point 0), and
  per-channel for the convolutions;
- int16 activations have zero point 0, and the bias of those layers is int64 (int32 with int8);
- TRANSPOSE_CONV, MINIMUM, MAXIMUM, SVDF, PAD, PADV2 and TRANSPOSE have no int16 CMSIS-NN kernel.

A tensor or operator that breaks a rule either runs the slow reference kernel (an operator
without an int16 kernel) or may compute differently on the device than the host parity check
measured (a kernel that assumes what the model does not hold). The models edge-export quantizes
itself (int8 and int16x8) break none of the quantization rules; an int16x8 model can still hold an
operator without an int16 kernel. The check never raises: it lists what it found, each with the
PyTorch module it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..registry import ReportSection

if TYPE_CHECKING:
    from ...flatbuffer import FlatbufferModel, OperatorInfo

__all__ = ["MAY_DIFFER", "REFERENCE_KERNEL", "CmsisNNReport", "KernelRuleViolation", "check_cmsis_nn"]

REFERENCE_KERNEL = "runs the slower reference kernel"
MAY_DIFFER = "may compute differently on the device than the host parity check measured"

_WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
_PER_CHANNEL = ("CONV_2D", "DEPTHWISE_CONV_2D")
# The output-channel axis of each convolution's weights (OHWI for CONV_2D, 1HWO for depthwise).
_CHANNEL_AXIS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3}
_NO_INT16_KERNEL = ("TRANSPOSE_CONV", "MINIMUM", "MAXIMUM", "SVDF", "PAD", "PADV2", "TRANSPOSE")
_BIAS_DTYPE = {"int8": "int32", "int16": "int64"}


@dataclass(frozen=True)
class KernelRuleViolation:
    operator_index: int
    opcode: str
    tensor_index: int | None  # None: the rule is about the operator itself
    tensor: str | None
    module: str | None  # the PyTorch module (provenance of the operator's output name)
    rule: str  # what CMSIS-NN assumes
    found: str  # what the model holds
    consequence: str  # REFERENCE_KERNEL or MAY_DIFFER

    def describe(self) -> str:
        where = f"{self.opcode} #{self.operator_index}" + (f" (module {self.module})" if self.module else "")
        return f"{where}: {self.found}; CMSIS-NN assumes {self.rule}, so it {self.consequence}"


@dataclass(frozen=True)
class CmsisNNReport:
    """The report's ``target.cmsis_nn``: every tensor or operator that breaks a CMSIS-NN rule."""

    checked_operators: int
    violations: tuple[KernelRuleViolation, ...]

    JSON_KEYS = ("ok", "checked_operators", "violations", "note")

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def note(self) -> str:
        if self.ok:
            return "Every operator meets the quantization rules CMSIS-NN's optimized kernels assume."
        return (
            "On a Cortex-M with CMSIS-NN, these operators run the slower reference kernel or may compute "
            "differently from the reference kernels the host parity check ran."
        )


def _module_of(model: FlatbufferModel, op: OperatorInfo) -> str | None:
    from ...provenance import operator_module

    # The output names the op's own module (for a fused op, the module that computes the opcode); then its weights (owned by the layer, and named after
    # it even when the output is a graph output); then the activations it reads.
    constants = [i for i in op.inputs if i >= 0 and model.tensors[i].is_constant]
    activations = [i for i in op.inputs if i >= 0 and not model.tensors[i].is_constant]
    for index in (*op.outputs, *constants, *activations):
        found = operator_module(model.tensors[index].name, op.opcode)
        if found is not None:
            return found.path or found.type_name
    return None


def _zero_points(model: FlatbufferModel, index: int) -> tuple[int, ...]:
    quant = model.tensors[index].quant
    return quant.zero_points if quant is not None else ()


def check_cmsis_nn(model: FlatbufferModel) -> CmsisNNReport:
    """Every tensor or operator of the main subgraph that breaks a rule CMSIS-NN assumes."""
    found: list[KernelRuleViolation] = []
    int16_zero_point_reported: set[int] = set()

    for op in model.operators:
        module = _module_of(model, op)

        def add(tensor_index: int | None, rule: str, what: str, consequence: str, op: OperatorInfo = op, module: str | None = module) -> None:
            name = model.tensors[tensor_index].name if tensor_index is not None else None
            found.append(KernelRuleViolation(op.index, op.opcode, tensor_index, name, module, rule, what, consequence))

        activation = model.tensors[op.inputs[0]] if op.inputs and op.inputs[0] >= 0 else None
        act_dtype = activation.dtype if activation is not None and activation.quant is not None else None

        if op.opcode in _NO_INT16_KERNEL and act_dtype == "int16":
            add(None, "an int8 operator (it has no int16 kernel)", "int16 input", REFERENCE_KERNEL)

        for index in (*op.inputs, *op.outputs):  # int16 activations: symmetric
            t = model.tensors[index] if index >= 0 else None
            if t is None or t.is_constant or t.dtype != "int16" or t.quant is None or index in int16_zero_point_reported:
                continue
            if any(zp != 0 for zp in t.quant.zero_points):
                int16_zero_point_reported.add(index)
                add(index, "int16 activations with zero point 0", f"int16 activation with zero point {t.quant.zero_points[0]}", MAY_DIFFER)

        if op.opcode not in _WEIGHTED or act_dtype not in _BIAS_DTYPE or len(op.inputs) < 2 or op.inputs[1] < 0:
            continue
        weights = model.tensors[op.inputs[1]]
        if weights.dtype != "int8" or weights.quant is None:
            add(op.inputs[1], "int8 weights", f"{weights.dtype} weights", MAY_DIFFER)
        else:
            nonzero = sorted({zp for zp in weights.quant.zero_points if zp != 0})
            if nonzero:
                add(op.inputs[1], "symmetric weights (zero point 0)",
                    f"weights with zero point {', '.join(map(str, nonzero[:3]))}", MAY_DIFFER)
            if op.opcode in _PER_CHANNEL:
                axis = _CHANNEL_AXIS[op.opcode]
                channels = weights.shape[axis] if len(weights.shape) > axis else 1
                if channels > 1 and len(weights.quant.scales) != channels:
                    add(op.inputs[1], "per-channel weights (one scale per output channel)",
                        f"per-tensor weights ({len(weights.quant.scales)} scale for {channels} channels)", MAY_DIFFER)
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            bias = model.tensors[op.inputs[2]]
            expected = _BIAS_DTYPE[act_dtype]
            if bias.dtype != expected:
                add(op.inputs[2], f"{expected} bias with {act_dtype} activations", f"{bias.dtype} bias", MAY_DIFFER)
    return CmsisNNReport(len(model.operators), tuple(found))


def _markdown(rules: CmsisNNReport, target: object, artifacts: object) -> list[str]:
    from ...reports.markdown import code_span as _code
    from ...reports.markdown import escape_markdown as _e

    out = ["### CMSIS-NN kernel rules", "", _e(rules.note)]
    if rules.violations:
        out += ["", "| operator | tensor | module | found | CMSIS-NN assumes | consequence |", "|---|---|---|---|---|---|"]
        for v in rules.violations:
            out.append(
                f"| {_e(v.opcode)} #{v.operator_index} | {_code(v.tensor) if v.tensor else ''} | {_code(v.module) if v.module else ''} "
                f"| {_e(v.found)} | {_e(v.rule)} | {_e(v.consequence)} |"
            )
    out.append("")
    return out


def _summary(rules: CmsisNNReport, target: object, report: object, lines: object) -> None:
    if not rules.violations:
        return
    lines.plain(f"  cmsis-nn: {len(rules.violations)} rule violation(s): {rules.note}")
    for v in rules.violations[:10]:
        lines.plain(f"    - {v.describe()}")


CMSIS_NN_REPORT_SECTION = ReportSection("cmsis_nn", CmsisNNReport, _markdown, _summary)
