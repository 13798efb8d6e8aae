"""Run reports built in code, section by section, for the renderer and schema tests (no export runs).

``full_report()`` has every optional section (int8 quantization, an Edge TPU target, per-layer
parity, a baseline with a regression) so that each renderer and every schema property is reached;
``skipped_report()`` is an fp32 run with --no-validate and a TFLite Micro target;
``report_with_outputs(...)`` is that run with a parity result of the given outputs (baseline tests).
"""

from __future__ import annotations

import dataclasses

from edge_export.config import IODtype, OutputKind, QuantizeMode, Thresholds
from edge_export.flatbuffer import FlatbufferModel, QuantParams, TensorInfo
from edge_export.quantization import QuantizationResult
from edge_export.quantization.calibration import CalibrationSummary
from edge_export.quantization.io_types import IOQuantInfo
from edge_export.quantization.selection import BackendAttempt, FloatTensorEntry, IntegerCheck, QuantOpEntry
from edge_export.reports.baseline import Regression
from edge_export.reports.model import (
    AppSection,
    AppTensor,
    ArtifactsSection,
    BaselineSection,
    ExportSection,
    FlatbufferSection,
    InputSection,
    ModelSection,
    RunReport,
    SkippedValidation,
    StageTiming,
    TargetSection,
    ToolSection,
)
from edge_export.targets.edgetpu.mapping import EdgeTPUReport, OpMapping, OpStatus, TableRow, UnmappedOp
from edge_export.targets.edgetpu.compiler import CompilerOutput, CompilerResult
from edge_export.targets.edgetpu.rewrites import AppliedRewrite
from edge_export.targets.edgetpu.report import CompilerSection, DelegateSection
from edge_export.targets.micro.report import MicroReport, MicroSection
from edge_export.validators.layers import LayerParity, LayerParityReport, UnmatchedModule, UnmatchedReason
from edge_export.validators.output_kinds import KindDecision, KindSource, LabelsFile
from edge_export.validators.parity import Check, OutputParity, ParityResult

LIBRARIES = {"python": "3.11.9", "torch": "2.6.0", "litert-torch": "0.4.0", "ai-edge-litert": "1.2.0", "ai-edge-quantizer": None, "numpy": "2.1.0"}


def _metrics(sqnr: float, max_abs: float) -> dict:
    return {
        "max_abs_error": max_abs, "mean_abs_error": max_abs / 4, "relative_l2_error": 0.01, "cosine": 0.9999,
        "sqnr_db": sqnr, "worst_sample_sqnr_db": sqnr - 1, "max_abs_error_steps": None, "top1_agreement": 1.0,
        "top5_agreement": None, "worst_sample_cosine": None, "neighbour_agreement": None,
    }


def parity(*, failing: bool = False) -> ParityResult:
    thresholds = Thresholds(atol=0.5, min_sqnr_db=20.0, min_top1=0.9)
    logits = OutputParity(
        index=0,
        name="logits",
        shape=(1, 10),
        metrics=_metrics(12.5 if failing else 31.25, 0.0625),
        checks=(
            Check("max_abs_error", 0.0625, 0.5, "<=", True),
            Check("sqnr_db", 12.5 if failing else 31.25, 20.0, ">=", not failing),
        ),
        decision=KindDecision(OutputKind.CLASSIFICATION, KindSource.LABELS, LabelsFile("labels.txt", 10)),
        not_computable={"top5_agreement": "fewer than 10 classes"},
    )
    features = OutputParity(
        index=1, name="features", shape=(1, 16), metrics=_metrics(40.0, 0.001),
        checks=(Check("max_abs_error", 0.001, 0.5, "<=", True),),
    )
    return ParityResult(8, thresholds, (logits, features), "ai-edge-litert interpreter (CPU, XNNPACK)", ("a note",))


def _tensor(index: int, name: str, shape: tuple, dtype: str, quant: QuantParams | None) -> TensorInfo:
    return TensorInfo(index, name, shape, shape, dtype, False, quant)


def flatbuffer() -> FlatbufferSection:
    return FlatbufferSection(
        size_bytes=20480,
        sha256="ab" * 32,
        num_operators=5,
        op_counts={"CONV_2D": 2, "FULLY_CONNECTED": 1, "MEAN": 1, "QUANTIZE": 1},
        num_tensors=17,
        num_subgraphs=1,
        min_runtime_version="2.3.0",
        inputs=(_tensor(0, "args_0", (1, 32, 32, 3), "uint8", QuantParams((0.0078125,), (128,))),),
        outputs=(
            _tensor(15, "logits", (1, 10), "uint8", QuantParams((0.125,), (0,))),
            _tensor(16, "features", (1, 16), "int8", QuantParams((0.5, 0.25), (0, 0), 1)),
        ),
        fully_integer=True,
    )


def quantization() -> QuantizationResult:
    return QuantizationResult(
        # A model built by hand: the report reads only its size.
        model=FlatbufferModel(20480, 1, (), (), (), (), (), None, None),
        mode=QuantizeMode.INT8,
        backend="pt2e",
        recipe="pt2e static int8",
        observer="histogram",
        attempts=(
            BackendAttempt("pt2e", True, None, True, 31.25, 0.9999, 1.23456, "pt2e static int8", "histogram", 20480),
            BackendAttempt("flatbuffer", False, "it failed", seconds=0.5),
        ),
        reason="measured: pt2e had the higher SQNR",
        fully_integer=False,
        integer_check=IntegerCheck(
            False,
            (FloatTensorEntry(7, "norm;out", "float32", (1, 8), "features.1", "DEQUANTIZE"),),
            (QuantOpEntry(3, "DEQUANTIZE", "norm;in", "features.1"),),
        ),
        io=(
            IOQuantInfo("input", "args_0", (1, 32, 32, 3), "uint8", 0.0078125, 128),
            IOQuantInfo("output", "logits", (1, 10), "float32", None, None),
        ),
        io_dtype=IODtype.UINT8,
        calibration=CalibrationSummary("synthetic", 16, False, ((1, 3, 32, 32),)),
        sqnr_db=31.25,
        cosine=0.9999,
        warnings=("calibrated on synthetic inputs",),
    )


def edgetpu_target() -> TargetSection:
    ops = (
        OpMapping(0, "CONV_2D", OpStatus.MAPPED, "", True, True, ("a",), ("b",), "features.0"),
        OpMapping(1, "MEAN", OpStatus.NOT_SUPPORTED, "MEAN over 3 axes", False, False, module_path="pool"),
    )
    unmapped = UnmappedOp(1, "MEAN", OpStatus.NOT_SUPPORTED, "MEAN over 3 axes", ("b",), ("c",), "pool", "AdaptiveAvgPool2d", "model.py:12", 1)
    mapping = EdgeTPUReport(ops, (), unmapped, (TableRow("CONV_2D", 1, OpStatus.MAPPED.value), TableRow("MEAN", 1, OpStatus.NOT_SUPPORTED.value)))
    compiler = CompilerResult(False, "edgetpu_compiler was not found on PATH", output=CompilerOutput(table=(TableRow("CONV_2D", 1, "Mapped to Edge TPU"),)))
    return TargetSection(
        name="edgetpu",
        implied=("--target edgetpu implies --quantize int8 (full integer)",),
        rewrites=(AppliedRewrite("pool", "AdaptiveAvgPool2d -> AvgPool2d", "the compiler maps AVERAGE_POOL_2D"),),
        reordered_operators=False,
        edgetpu=mapping,
        compiler=CompilerSection(compiler, ("the compiler put MEAN on the CPU",)),
        delegate=DelegateSection("edgetpu", False, "libedgetpu is not installed"),
    )


def per_layer() -> LayerParityReport:
    conv = LayerParity(0, "features.0", "Conv2d", "features.0;conv", 3, "CONV_2D", (1, 32, 32, 8), "int8", (1, 8, 32, 32), "NHWC->NCHW", 38.5, 0.99995, (), ("features.2",), True)
    head = LayerParity(1, "head", "Linear", "head;fc", 14, "FULLY_CONNECTED", (1, 10), "int8", (1, 10), "same", 12.0, 0.97, ("",), (), False)
    return LayerParityReport(
        layers=(conv, head),
        first_jump=head,
        worst=head,
        unmatched_modules=(UnmatchedModule("features.2", "ReLU", UnmatchedReason.FUSED, "features.0;conv"),),
        modules_total=4,
        tensors_total=6,
        tensors_matched=2,
        tensors_internal=1,
        unmatched_tensors=("pool;mean",),
        tensors_unmatched=1,
        samples=8,
        min_sqnr_db=20.0,
        notes=("per-layer note",),
    )


def app_section() -> AppSection:
    """The signature as an app calls it: a uint8 NHWC image in, uint8 logits and int8 features out."""
    return AppSection(
        signature_key="serving_default",
        inputs=(AppTensor("pixel_values", "uint8", (1, 32, 32, 3), "NHWC", 0.0078125, 128),),
        outputs=(
            AppTensor("logits", "uint8", (1, 10), "other", 0.125, 0),
            AppTensor("features", "float32", (1, 16), "other", None, None),
        ),
    )


def full_report() -> RunReport:
    """int8 for the Edge TPU with --per-layer, --junit and --baseline: the parity passes, the
    per-layer gate and the baseline fail."""
    return RunReport(
        tool=ToolSection("0.9.0"),
        libraries=LIBRARIES,
        created_at="2026-01-02T03:04:05Z",
        model=ModelSection("models/cnn.pt2", "exported_program", "SmallCNN"),
        inputs=(InputSection(None, (1, 3, 32, 32), "float32", "NHWC"),),
        export=ExportSection("int8", "edgetpu", True, (0,), (), False, "uint8", False),
        artifacts=ArtifactsSection("out/cnn.tflite", "out/cnn.report.json", "out/cnn.report.md", "out/junit.xml", {"edgetpu_log": "out/cnn_edgetpu.log"}),
        flatbuffer=flatbuffer(),
        stages=(StageTiming("load", 0.5), StageTiming("quantize", 3.25)),
        validation=parity(),
        quantization=quantization(),
        target=edgetpu_target(),
        per_layer=per_layer(),
        baseline=BaselineSection(
            "old.report.json",
            (Regression("logits", "sqnr_db", 40.0, 31.25, "logits: sqnr_db fell from 40 to 31.25 (tolerance 1)"),),
        ),
        app=app_section(),
    )


def skipped_report() -> RunReport:
    """fp32 for TFLite Micro with --no-validate: exported, not validated."""
    micro = MicroReport(("CONV_2D", "FULLY_CONNECTED"), (), ("int8",), ("int8",), True, (), 9000, 8192)
    return RunReport(
        tool=ToolSection("0.9.0"),
        libraries=LIBRARIES,
        created_at="2026-01-02T03:04:05Z",
        model=ModelSection("pkg.models:make", "module_reference", "TinyNet"),
        inputs=(InputSection("x", (1, 8), "float32", None),),
        export=ExportSection("int8", "micro", False, (), (), False, "int8", True, size_bytes_with_names=4096),
        artifacts=ArtifactsSection("tiny.tflite", "tiny.report.json", "tiny.report.md", None, {"op_resolver": "ops.cc"}),
        flatbuffer=flatbuffer(),
        stages=(StageTiming("load", 0.25),),
        validation=SkippedValidation("--no-validate was given"),
        target=TargetSection("micro", ("--target micro implies --io-dtype int8",), micro=MicroSection(micro, "ops.cc")),
    )


def report_with_outputs(*outputs: OutputParity) -> RunReport:
    """``skipped_report()`` validated: a parity result of ``outputs`` (for the baseline comparison)."""
    validation = ParityResult(4, Thresholds(min_sqnr_db=20.0), tuple(outputs), "ai-edge-litert interpreter (CPU, XNNPACK)")
    return dataclasses.replace(skipped_report(), validation=validation)
