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
from typing import TYPE_CHECKING, Mapping, NamedTuple

from ..operator_rules import EVERY_OPERATOR, OperatorRules

from ..registry import ReportSection

if TYPE_CHECKING:
    from ...flatbuffer import FlatbufferModel, OperatorInfo, TensorInfo

__all__ = [
    "CMSIS_NN_RULES",
    "MAY_DIFFER",
    "REFERENCE_KERNEL",
    "CmsisNNReport",
    "KernelRuleViolation",
    "check_cmsis_nn",
    "cmsis_nn_rule",
]

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


class _Finding(NamedTuple):
    """What one rule found on one operator (``KernelRuleViolation`` without the operator's names)."""

    tensor_index: int | None
    rule: str
    found: str
    consequence: str


# One rule per assumption, each registered for the opcodes it is about and run in this order; every
# rule runs (``OperatorRules.findings``) and returns what it found, () when the operator meets it.
CMSIS_NN_RULES = OperatorRules("CMSIS-NN")
cmsis_nn_rule = CMSIS_NN_RULES.rule


def _activation_dtype(op: OperatorInfo, model: FlatbufferModel) -> str | None:
    """The quantized type of the operator's first input (None when it is float or absent)."""
    activation = model.tensors[op.inputs[0]] if op.inputs and op.inputs[0] >= 0 else None
    return activation.dtype if activation is not None and activation.quant is not None else None


def _quantized_layer_weights(op: OperatorInfo, model: FlatbufferModel) -> TensorInfo | None:
    """The weights of a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED with int8 or int16
    activations (the layers the weight and bias rules are about), else None."""
    if _activation_dtype(op, model) not in _BIAS_DTYPE or len(op.inputs) < 2 or op.inputs[1] < 0:
        return None
    return model.tensors[op.inputs[1]]


@cmsis_nn_rule(*_NO_INT16_KERNEL)
def _has_an_int16_kernel(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> tuple[_Finding, ...]:
    if _activation_dtype(op, model) != "int16":
        return ()
    return (_Finding(None, "an int8 operator (it has no int16 kernel)", "int16 input", REFERENCE_KERNEL),)


@cmsis_nn_rule(EVERY_OPERATOR)
def _int16_activations_are_symmetric(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> tuple[_Finding, ...]:
    found: list[_Finding] = []
    for index in dict.fromkeys(i for i in (*op.inputs, *op.outputs) if i >= 0):  # once each, in order
        t = model.tensors[index]
        if t.is_constant or t.dtype != "int16" or t.quant is None or not any(zp != 0 for zp in t.quant.zero_points):
            continue
        if _first_user(model, index) == op.index:  # a tensor is listed once, at the first operator using it
            found.append(_Finding(index, "int16 activations with zero point 0",
                                  f"int16 activation with zero point {t.quant.zero_points[0]}", MAY_DIFFER))
    return tuple(found)


def _first_user(model: FlatbufferModel, index: int) -> int | None:
    return next((o.index for o in model.operators if index in o.inputs or index in o.outputs), None)


@cmsis_nn_rule(*_WEIGHTED)
def _weights_are_int8(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> tuple[_Finding, ...]:
    weights = _quantized_layer_weights(op, model)
    if weights is None or (weights.dtype == "int8" and weights.quant is not None):
        return ()
    return (_Finding(op.inputs[1], "int8 weights", f"{weights.dtype} weights", MAY_DIFFER),)


@cmsis_nn_rule(*_WEIGHTED)
def _weights_are_symmetric(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> tuple[_Finding, ...]:
    weights = _quantized_layer_weights(op, model)
    if weights is None or weights.dtype != "int8" or weights.quant is None:
        return ()
    nonzero = sorted({zp for zp in weights.quant.zero_points if zp != 0})
    if not nonzero:
        return ()
    return (_Finding(op.inputs[1], "symmetric weights (zero point 0)",
                     f"weights with zero point {', '.join(map(str, nonzero[:3]))}", MAY_DIFFER),)


@cmsis_nn_rule(*_PER_CHANNEL)
def _convolution_weights_are_per_channel(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> tuple[_Finding, ...]:
    weights = _quantized_layer_weights(op, model)
    if weights is None or weights.dtype != "int8" or weights.quant is None:
        return ()
    axis = _CHANNEL_AXIS[op.opcode]
    channels = weights.shape[axis] if len(weights.shape) > axis else 1
    if channels <= 1 or len(weights.quant.scales) == channels:
        return ()
    return (_Finding(op.inputs[1], "per-channel weights (one scale per output channel)",
                     f"per-tensor weights ({len(weights.quant.scales)} scale for {channels} channels)", MAY_DIFFER),)


@cmsis_nn_rule(*_WEIGHTED)
def _bias_matches_activations(op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> tuple[_Finding, ...]:
    if _quantized_layer_weights(op, model) is None or len(op.inputs) <= 2 or op.inputs[2] < 0:
        return ()
    act_dtype = _activation_dtype(op, model)
    expected = _BIAS_DTYPE[act_dtype]  # type: ignore[index]  # _quantized_layer_weights checked it
    bias = model.tensors[op.inputs[2]]
    if bias.dtype == expected:
        return ()
    return (_Finding(op.inputs[2], f"{expected} bias with {act_dtype} activations", f"{bias.dtype} bias", MAY_DIFFER),)


def check_cmsis_nn(model: FlatbufferModel) -> CmsisNNReport:
    """Every tensor or operator of the main subgraph that breaks a rule CMSIS-NN assumes."""
    from ...graph.provenance import flatbuffer_operator_module, module_label

    found: list[KernelRuleViolation] = []
    for op in model.operators:
        findings = CMSIS_NN_RULES.findings(op, model, {})
        module = module_label(flatbuffer_operator_module(model, op)) if findings else None
        for f in findings:
            tensor = model.tensors[f.tensor_index].name if f.tensor_index is not None else None
            found.append(KernelRuleViolation(op.index, op.opcode, f.tensor_index, tensor, module, f.rule, f.found, f.consequence))
    return CmsisNNReport(len(model.operators), tuple(found))


def _markdown(rules: CmsisNNReport, target: object, artifacts: object) -> list[str]:
    from ...output.text_safety import code_span as _code
    from ...output.text_safety import escape_markdown as _e

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
