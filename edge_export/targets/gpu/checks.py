"""An op-by-op prediction of what the LiteRT GPU delegate runs (``check_gpu``), without a phone.

Phones run float models on the GPU delegate. It takes the operators it supports and leaves the rest on
the CPU; every switch between a delegated run and a CPU operator is a partition (a round trip through
host memory), so one unsupported operator in the middle of a network costs far more than its own time.
Predicted here:

- each operator's verdict against the delegate's published operator list and its version limits (the
  table in ``rules.py``), plus the constraints the delegate's own compatibility code checks (float tensors,
  constant weights, broadcast shapes), registered one rule per operator (``GPU_RULES``);
- the share of operators and of compute (multiply-accumulates estimated from shapes for CONV_2D,
  DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED and BATCH_MATMUL) on the GPU;
- the partitions: contiguous runs of supported operators in execution order, which is how the
  delegate's partitioner groups them (tflite/delegates/utils: GraphPartitionHelper). The delegate's
  default options delegate only the largest one (``max_delegated_partitions = 1`` in
  TfLiteGpuDelegateOptionsV2Default); ``largest_partition_ops`` is what runs on the GPU then, unless
  the app raises that limit;
- the first unsupported operator, blamed on its PyTorch module and source line (``provenance``, and
  ``module_user_source``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .report import AnalyzerCrossCheck, GpuOp, GpuReport, GpuUnsupportedOp
from .rules import FLOAT_DTYPES, GPU_MAX_VERSIONS, GPU_RULES, INDEX_CONSTANT_DTYPES

if TYPE_CHECKING:
    from ...flatbuffer import FlatbufferModel, OperatorInfo

__all__ = ["check_gpu", "estimate_macs"]


def _elements(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 1)
    return n


def estimate_macs(op: OperatorInfo, model: FlatbufferModel) -> int:
    """Multiply-accumulates of the operators that dominate compute, from static shapes (0 otherwise)."""
    try:
        out = model.tensors[op.outputs[0]].shape
        if op.opcode == "CONV_2D":  # weights [cout, kh, kw, cin]
            w = model.tensors[op.inputs[1]].shape
            return _elements(out) * w[1] * w[2] * w[3]
        if op.opcode == "DEPTHWISE_CONV_2D":  # weights [1, kh, kw, cout]
            w = model.tensors[op.inputs[1]].shape
            return _elements(out) * w[1] * w[2]
        if op.opcode == "TRANSPOSE_CONV":  # inputs: output shape, weights [cout, kh, kw, cin], input
            w, src = model.tensors[op.inputs[1]].shape, model.tensors[op.inputs[2]].shape
            return _elements(src) * w[0] * w[1] * w[2]
        if op.opcode == "FULLY_CONNECTED":  # weights [units, in]
            w = model.tensors[op.inputs[1]].shape
            return _elements(out) * w[-1]
        if op.opcode == "BATCH_MATMUL":
            a = model.tensors[op.inputs[0]].shape
            adj_x = bool(getattr(op.options, "adjX", False))
            return _elements(out) * (a[-2] if adj_x else a[-1])
    except (IndexError, TypeError):
        return 0
    return 0


# ---- the prediction -----------------------------------------------------------------------------


def _op_versions(model: FlatbufferModel) -> list[int]:
    """Each main-subgraph operator's opcode version (the model object keeps only the opcode name)."""
    try:
        mutable = model.mutable()
        opcodes = mutable.operatorCodes
        return [int(opcodes[op.opcodeIndex].version or 1) for op in mutable.subgraphs[0].operators]
    except Exception:  # a model object built without bytes (unit tests): version 1
        return [1] * len(model.operators)


def _own_verdict(op: OperatorInfo, version: int, model: FlatbufferModel) -> str | None:
    if op.opcode not in GPU_MAX_VERSIONS:
        return f"{op.opcode} is not on the GPU delegate's supported operator list"
    limit = GPU_MAX_VERSIONS[op.opcode]
    if limit is not None and version > limit:
        return f"{op.opcode} version {version}; the delegate takes versions up to {limit}"
    for i in (*op.inputs, *op.outputs):
        if i < 0:
            continue
        t = model.tensors[i]
        if t.is_constant:
            # float weights, float16 weights (dequantized in the delegate), index constants
            if t.dtype not in FLOAT_DTYPES | INDEX_CONSTANT_DTYPES and not (op.opcode == "DEQUANTIZE" and t.dtype == "float16"):
                return f"constant '{t.name}' is {t.dtype}; the delegate computes in float"
        elif t.dtype not in FLOAT_DTYPES:
            return f"tensor '{t.name}' is {t.dtype}; the delegate computes only on float16/float32 tensors"
    return GPU_RULES.first_violation(op, model, {})


def _model_problems(model: FlatbufferModel) -> list[str]:
    problems = []
    if not model.operators:
        problems.append("the model has no operators")
    for t in (*model.input_tensors, *model.output_tensors):
        if t.has_dynamic_dims:
            problems.append(
                f"model input/output '{t.name}' has a dynamic dimension {list(t.shape_signature)}; "
                "the delegate plans its memory for static shapes"
            )
    return problems


def check_gpu(model: FlatbufferModel, *, source_module: Any = None, analyzer: AnalyzerCrossCheck | None = None) -> GpuReport:
    """Predict which operators of ``model``'s main subgraph the GPU delegate runs, and how it
    partitions; each operator left on the CPU is named with its aten call and line (``source_module``)."""
    from ...conversion.operator_origins import operator_origins_at

    versions = _op_versions(model)
    verdicts = [_own_verdict(op, version, model) for op, version in zip(model.operators, versions)]
    origins = operator_origins_at(model, [op.index for op, r in zip(model.operators, verdicts) if r is not None], source_module)
    ops: list[GpuOp] = []
    first: GpuUnsupportedOp | None = None
    partition, in_run = -1, False
    for op, version, reason in zip(model.operators, versions, verdicts):
        origin = origins.get(op.index)
        if reason is None:
            if not in_run:
                partition, in_run = partition + 1, True
            ops.append(GpuOp(op.index, op.opcode, version, True, "", partition, estimate_macs(op, model), _module_path(model, op)))
            continue
        in_run = False
        if first is None:
            first = GpuUnsupportedOp(op.index, op.opcode, reason, origin.module_path, origin.module_type, origin.source, op.index, origin.aten)
        ops.append(GpuOp(op.index, op.opcode, version, False, reason, None, estimate_macs(op, model), origin.module_path, origin.aten, origin.source))
    report = GpuReport(tuple(ops), first, analyzer, model_problems=tuple(_model_problems(model)))
    if analyzer is not None:
        report = GpuReport(report.ops, first, analyzer, tuple(_disagreements(report, analyzer)), report.model_problems)
    return report


def _module_path(model: FlatbufferModel, op: OperatorInfo) -> str | None:
    from ...graph.provenance import flatbuffer_operator_module

    found = flatbuffer_operator_module(model, op)
    return found.path if found else None


def _disagreements(report: GpuReport, analyzer: AnalyzerCrossCheck) -> list[str]:
    if not analyzer.available or analyzer.verdict is None:
        return []
    unsupported = [op for op in report.ops if not op.supported]
    found = []
    if analyzer.verdict == "compatible" and unsupported:
        names = ", ".join(f"#{op.index} {op.opcode}" for op in unsupported[:5])
        found.append(
            f"the analyzer calls the model GPU-compatible, the prediction leaves {len(unsupported)} "
            f"operator(s) on the CPU ({names}); a newer delegate may take them: check on the device"
        )
    flagged = set(analyzer.flagged_ops)
    for op in report.ops:
        if op.supported and op.index in flagged:
            found.append(f"the analyzer warns about operator #{op.index} {op.opcode}, which the prediction puts on the GPU")
        if not op.supported and analyzer.verdict == "incompatible" and flagged and op.index not in flagged:
            found.append(f"the prediction leaves operator #{op.index} {op.opcode} on the CPU, the analyzer does not warn about it")
    return found

