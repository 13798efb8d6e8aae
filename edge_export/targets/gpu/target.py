"""The Android GPU target: a float model, and an op-by-op prediction of what the LiteRT GPU delegate runs.

Phones run float models on the GPU delegate. It takes the operators it supports and leaves the rest on
the CPU; every switch between a delegated run and a CPU operator is a partition (a round trip through
host memory), so one unsupported operator in the middle of a network costs far more than its own time.
edge-export predicts, without a phone, which operators the delegate takes and how it partitions them.

The operator table is in ``rules.py``, the prediction in ``checks.py``, the analyzer cross-check
in ``analyzer.py``, the report section in ``report.py`` and the float16 precision check in
``precision.py``; this module is the plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import UsageError
from ..base import FinishedRun, FinishedTarget, RewrittenFlatbuffer, TargetCheck, TargetContext, TargetPlugin, register_target
from .analyzer import run_gpu_analyzer
from .checks import check_gpu
from .options import GpuOptions
from .precision import GPU_PRECISION_REPORT_SECTION
from .report import GPU_REPORT_SECTION

if TYPE_CHECKING:
    from ...options import ExportOptions
    from ...flatbuffer import FlatbufferModel

__all__ = ["GpuTarget"]



class GpuTarget(TargetPlugin):
    name = "gpu"
    check_label = "Predicting the GPU delegate's partitions"
    report_sections = (GPU_REPORT_SECTION, GPU_PRECISION_REPORT_SECTION)
    options_class: ClassVar[type[GpuOptions]] = GpuOptions

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
        if options.quantization.quantize.is_integer:
            raise UsageError(
                f"--target gpu runs float models (fp32 or fp16 weights), but --quantize {options.quantization.quantize.value} "
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

        precision = run.options.target_options.precision
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
