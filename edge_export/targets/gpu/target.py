"""The Android GPU target: a float model, and an op-by-op prediction of what the LiteRT GPU delegate runs.

Phones run float models on the GPU delegate. It takes the operators it supports and leaves the rest on
the CPU; every switch between a delegated run and a CPU operator is a partition (a round trip through
host memory), so one unsupported operator in the middle of a network costs far more than its own time.
This module predicts, without a phone:

- each operator's verdict against the delegate's published operator list and its version limits (the
  table below), plus the constraints the delegate's own compatibility code checks (float tensors,
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

The cross-check
---------------
ai-edge-litert ships a private analyzer (``_pywrap_analyzer_wrapper.ModelAnalyzer(path, True, True)``,
what ``tf.lite.experimental.Analyzer`` calls with ``gpu_compatibility=True``). It is called
defensively in the isolation child: when it is missing, raises or crashes, the report says so. Its
verdict (whole model "looks compatible", or per-operator "GPU COMPATIBILITY WARNING" lines) is
compared with the prediction and every difference is listed in ``GpuReport.disagreements``. Measured
on ai-edge-litert 2.3.0 here: the build prints no per-operator warnings and calls even a CUMSUM
model compatible, so on it the cross-check mostly reports that it disagrees with the table.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

from ...errors import UsageError
from ...output.serialize import json_field
from ..base import FinishedRun, FinishedTarget, RewrittenFlatbuffer, TargetCheck, TargetContext, TargetOption, TargetPlugin, register_target
from ..operator_rules import OperatorRules
from ..registry import ReportSection
from .precision import GPU_PRECISION_REPORT_SECTION

if TYPE_CHECKING:
    from ...options import ExportOptions
    from ...flatbuffer import FlatbufferModel, OperatorInfo

__all__ = [
    "GPU_MAX_VERSIONS",
    "GPU_RULES",
    "GpuOp",
    "GpuUnsupportedOp",
    "AnalyzerCrossCheck",
    "GpuReport",
    "GpuTarget",
    "check_gpu",
    "estimate_macs",
    "run_gpu_analyzer",
]

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

_FLOAT = frozenset({"float32", "float16"})
# Integer tensors the delegate accepts: shapes, axes, paddings, indices (constant inputs only).
_INDEX_CONSTANT = frozenset({"int32", "int64"})
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


@dataclass(frozen=True)
class GpuOp:
    index: int
    opcode: str
    version: int
    supported: bool
    reason: str
    partition: int | None  # 0-based delegated partition it falls in; None: runs on the CPU
    macs: int
    module_path: str | None = None
    # left on the CPU: the aten call and the user's line it came from (operator_origins)
    aten: str | None = json_field(default=None, omit_none=True)
    source: str | None = json_field(default=None, omit_none=True)


@dataclass(frozen=True)
class GpuUnsupportedOp:
    """The first operator the delegate leaves on the CPU, and where it came from in PyTorch."""

    index: int
    opcode: str
    reason: str
    module_path: str | None
    module_type: str | None
    source: str | None  # "file.py:LINE" of the call, else of the module, when the PyTorch module was given
    ops_before: int
    aten: str | None = json_field(default=None, omit_none=True)  # "aten.reflection_pad1d", when the graph shows it

    def describe(self) -> str:
        from ...graph.provenance import describe_location

        made = f" (from {self.aten})" if self.aten else ""
        where = describe_location(self.module_path, self.module_type, self.source)
        return f"operator #{self.index} {self.opcode}{made}{where}: {self.reason}"


@dataclass(frozen=True)
class AnalyzerCrossCheck:
    """ai-edge-litert's private GPU compatibility analyzer, run beside the prediction."""

    available: bool
    verdict: str | None  # "compatible", "incompatible", or None when it could not run
    flagged_ops: tuple[int, ...] = ()  # operator indices it warned about
    note: str = ""  # why it could not run, or what it printed instead of a verdict


@dataclass(frozen=True)
class GpuReport:
    ops: tuple[GpuOp, ...]
    first_unsupported: GpuUnsupportedOp | None
    analyzer: AnalyzerCrossCheck | None = None
    disagreements: tuple[str, ...] = ()
    model_problems: tuple[str, ...] = ()

    JSON_KEYS = (
        "num_ops", "num_on_gpu", "share_ops_on_gpu", "total_macs", "macs_on_gpu", "share_macs_on_gpu",
        "num_partitions", "largest_partition_ops", "fully_delegated", "model_problems", "first_unsupported", "unsupported_ops",
        "analyzer", "disagreements", "ops", "summary",
    )

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def num_on_gpu(self) -> int:
        return sum(op.partition is not None for op in self.ops)

    @property
    def share_ops_on_gpu(self) -> float:
        return self.num_on_gpu / self.num_ops if self.ops else 0.0

    @property
    def total_macs(self) -> int:
        return sum(op.macs for op in self.ops)

    @property
    def macs_on_gpu(self) -> int:
        return sum(op.macs for op in self.ops if op.partition is not None)

    @property
    def share_macs_on_gpu(self) -> float:
        return self.macs_on_gpu / self.total_macs if self.total_macs else 0.0

    @property
    def num_partitions(self) -> int:
        return len({op.partition for op in self.ops if op.partition is not None})

    @property
    def largest_partition_ops(self) -> int:
        """Operators of the largest partition: what the delegate runs with its default options."""
        sizes = Counter(op.partition for op in self.ops if op.partition is not None)
        return max(sizes.values(), default=0)

    @property
    def fully_delegated(self) -> bool:
        return not self.model_problems and self.first_unsupported is None and self.num_on_gpu > 0

    def unsupported_ops(self) -> dict[str, int]:
        """Operator -> how many of it stay on the CPU."""
        return dict(Counter(op.opcode for op in self.ops if not op.supported))

    def summary(self) -> str:
        text = (
            f"{self.num_on_gpu} of {self.num_ops} operations predicted on the GPU delegate "
            f"({100 * self.share_ops_on_gpu:.0f}% of operations, {100 * self.share_macs_on_gpu:.0f}% of "
            f"{self.total_macs} MACs), {self.num_partitions} GPU partition(s)"
        )
        if self.num_partitions > 1:
            text += f" (with the delegate's default of one partition, only the largest, {self.largest_partition_ops} operations, runs on the GPU)"
        if self.model_problems:
            text += "; " + "; ".join(self.model_problems)
        elif self.first_unsupported is not None:
            text += "; the first operator left on the CPU is " + self.first_unsupported.describe()
        return text + "."


# ---- compute ------------------------------------------------------------------------------------


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
            if t.dtype not in _FLOAT | _INDEX_CONSTANT and not (op.opcode == "DEQUANTIZE" and t.dtype == "float16"):
                return f"constant '{t.name}' is {t.dtype}; the delegate computes in float"
        elif t.dtype not in _FLOAT:
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


# ---- the analyzer cross-check -------------------------------------------------------------------

_WARNING = re.compile(r"GPU COMPATIBILITY WARNING", re.IGNORECASE)
_OP_LINE = re.compile(r"^\s*Op#(\d+)\s")


def parse_analyzer_output(text: str) -> AnalyzerCrossCheck:
    """The analyzer's text as a verdict: per-operator warnings follow the ``Op#N`` line they concern."""
    flagged, current = [], None
    for line in text.splitlines():
        m = _OP_LINE.match(line)
        if m:
            current = int(m.group(1))
        elif _WARNING.search(line) and current is not None:
            flagged.append(current)
    if flagged or _WARNING.search(text):
        return AnalyzerCrossCheck(True, "incompatible", tuple(dict.fromkeys(flagged)))
    if "looks compatible with GPU delegate" in text:
        return AnalyzerCrossCheck(True, "compatible")
    return AnalyzerCrossCheck(True, None, note="the analyzer printed no GPU verdict")


def _analyze_in_child(data: bytes) -> str:
    from ai_edge_litert import _pywrap_analyzer_wrapper  # private: may move or change

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.tflite"
        path.write_bytes(data)
        return str(_pywrap_analyzer_wrapper.ModelAnalyzer(str(path), True, True))


def run_gpu_analyzer(model: FlatbufferModel) -> AnalyzerCrossCheck:
    """Run the analyzer in the isolation child; any failure is reported, never raised."""
    from ...errors import EdgeExportError
    from ...processes.isolation import run_isolated

    try:
        text = run_isolated(_analyze_in_child, model.data, stage="GPU analyzer cross-check", backend="ai-edge-litert's model analyzer")
    except (ImportError, AttributeError) as exc:
        return AnalyzerCrossCheck(False, None, note=f"the analyzer could not be loaded: {type(exc).__name__}: {exc}")
    except EdgeExportError as exc:  # a crash or error in the child
        return AnalyzerCrossCheck(False, None, note=f"the analyzer failed: {exc.message}")
    except Exception as exc:  # private API: any failure is a note, not a failed export
        return AnalyzerCrossCheck(False, None, note=f"the analyzer failed: {type(exc).__name__}: {exc}")
    return parse_analyzer_output(text)


# ---- the target ---------------------------------------------------------------------------------


def _check_gpu_precision(value: Any) -> str:
    if value not in ("fp16", "fp32"):
        raise UsageError(f"--gpu-precision {value} is not known.", "Use --gpu-precision fp16 (the delegate's default) or fp32.")
    return value


def _markdown(gpu: GpuReport, target: object, artifacts: object) -> list[str]:
    from ...output.text_safety import escape_markdown as _e

    out = ["", f"**GPU delegate (predicted):** {_e(gpu.summary())}", ""]
    for opcode, count in gpu.unsupported_ops().items():
        out.append(f"- left on the CPU: {_e(opcode)} × {_e(count)}")
    analyzer = gpu.analyzer
    if analyzer is not None:
        verdict = analyzer.verdict if analyzer.available else f"not run ({analyzer.note})"
        out.append(f"- ai-edge-litert's GPU analyzer: {_e(verdict)}")
    for d in gpu.disagreements:
        out.append(f"- analyzer disagrees with the prediction: {_e(d)}")
    out.append("")
    return out


def _summary(gpu: GpuReport, target: object, report: object, lines: object) -> None:
    lines.plain(f"  gpu delegate: {gpu.summary()}")
    analyzer = gpu.analyzer
    if analyzer is not None:
        lines.plain(f"  gpu analyzer: {analyzer.verdict if analyzer.available else 'not run: ' + analyzer.note}")
    for d in gpu.disagreements:
        lines.plain(f"    disagreement: {d}")


GPU_REPORT_SECTION = ReportSection("gpu", GpuReport, _markdown, _summary)


class GpuTarget(TargetPlugin):
    name = "gpu"
    check_label = "Predicting the GPU delegate's partitions"
    report_sections = (GPU_REPORT_SECTION, GPU_PRECISION_REPORT_SECTION)
    options: ClassVar[tuple[TargetOption, ...]] = (
        TargetOption(
            "gpu_precision", "--gpu-precision",
            "gpu: the precision the app runs the GPU delegate at: fp16 (the delegate's default; a failed float16 "
            "precision check is exit 1) or fp32 (the app forces float32; the check is reported only).",
            str, "fp16", "PRECISION", _check_gpu_precision,
        ),
    )

    def implied_options(self, options: ExportOptions) -> tuple[ExportOptions, list[str]]:
        # The delegate computes in float16/float32, so the integer modes are refused (issue 10):
        # - dynamic-int8 stores int8 weights read straight by FULLY_CONNECTED/CONV_2D (hybrid
        #   kernels); the delegate's builder reads weights only from float32/float16 constants
        #   (model_builder.cc CreateVectorCopyData: "Unsupported data type for float32 tensor"), so
        #   those layers, the compute, stay on the CPU;
        # - int16x8's int16 activations have no GPU path (gpu_compatibility.cc refuses an int16
        #   DEQUANTIZE);
        # - full int8 is run by newer delegates only by dequantizing to float inside the GPU: none
        #   of int8's speed, and parity would no longer test what the phone computes.
        if options.quantize.is_integer:
            raise UsageError(
                f"--target gpu runs float models (fp32 or fp16 weights), but --quantize {options.quantize.value} "
                "stores integer tensors, which the LiteRT GPU delegate either leaves on the CPU (dynamic-int8's "
                "int8 weights, int16x8) or converts back to float inside the GPU (int8).",
                "Drop --quantize, or use --quantize fp16 (half the size, the delegate's native precision).",
            )
        return options, []

    def rewrite_flatbuffer(self, model: FlatbufferModel) -> RewrittenFlatbuffer:
        # FLATBUFFER PASS: operands of different ranks (a Linear's [T, D] folded into a residual ADD
        # with [1, T, D]) split the delegate's partitions; one rank, the same values
        from ...passes.flatbuffer.pipeline import run_flatbuffer_passes
        from ...passes.flatbuffer.reshape_operands_to_one_rank_pass import reshape_operands_to_one_rank_pass

        result = run_flatbuffer_passes(model, (reshape_operands_to_one_rank_pass,), origin="the GPU model")
        return RewrittenFlatbuffer(result.model)

    def check(self, context: TargetContext) -> TargetCheck:
        analyzer = run_gpu_analyzer(context.model)
        report = check_gpu(context.model, source_module=context.source_module, analyzer=analyzer)
        return TargetCheck({"gpu": report})

    def finish(self, run: FinishedRun) -> FinishedTarget:
        """The float16 precision check (``gpu_precision.py``) on parity's samples: after parity, so
        it compares against the same PyTorch outputs, on the model with its tensor names."""
        from .precision import check_gpu_precision, skipped_gpu_precision

        precision = run.options.gpu_precision
        if run.samples is None:
            return FinishedTarget({"gpu_precision": skipped_gpu_precision("parity did not run (--no-validate)", precision)})
        feeds, references = run.samples
        validation = run.report.validation
        kinds = [o.decision for o in validation.outputs] if hasattr(validation, "outputs") else None
        report = check_gpu_precision(
            run.named_model, feeds, references, output_kinds=kinds,
            channels_last_outputs=run.report.export.channels_last_outputs,
            source_module=run.source_module, precision=precision,
        )
        return FinishedTarget({"gpu_precision": report})


register_target(GpuTarget())
