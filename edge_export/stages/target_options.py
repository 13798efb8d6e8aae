"""The options as the target settles them: what it implies, what it refuses, and the quantization
plan that follows (mixed precision, host latency)."""

from __future__ import annotations

from typing import Any

from ..config import IODtype, QuantizeMode
from ..errors import UsageError
from ..options import ExportOptions


def resolve_target_options(options: ExportOptions) -> tuple[ExportOptions, list[str]]:
    """Apply what the target implies, refusing contradictions (and other targets' options) instead
    of rewriting them silently."""
    from ..targets.base import get_target, refuse_foreign_options

    target = get_target(options.target)
    refuse_foreign_options(target, options)
    options, implied = target.implied_options(target.settled_options(options))
    check_mixed_precision_options(options, target)
    if options.layout.io_dtype not in (None, IODtype.FLOAT32) and options.quantization.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--io-dtype {options.layout.io_dtype.value} applies to --quantize int8 only.",
            "Drop --io-dtype, or use --quantize int8.",
        )
    if options.quantization.range_algorithm is not None:
        from ..quantization.ranges import check_range_algorithm

        check_range_algorithm(options.quantization.range_algorithm, options.quantization.quantize)
    if options.quantization.calibration_data and not options.quantization.quantize.needs_calibration:
        raise UsageError(
            f"--calibration-data applies to --quantize int8 and int16x8, not {options.quantization.quantize.value}.",
            "Drop --calibration-data, or choose a calibrated mode.",
        )
    return options, implied


def check_mixed_precision_options(options: ExportOptions, target: Any) -> None:
    """--sensitivity and --mixed-precision measure and change int8 quantization; a target without
    int16 or float kernels (the Edge TPU) has nothing to promote an operator to."""
    if options.quantization.sensitivity and options.quantization.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--sensitivity ranks operators by what int8 quantization costs them, not {options.quantization.quantize.value}.",
            "Add --quantize int8.",
        )
    mode = options.quantization.mixed_precision
    if mode in (None, "off"):
        return
    promotions = target.mixed_precision_promotions
    if not promotions:
        raise UsageError(
            f"--mixed-precision {mode} cannot be used with --target {target.name}: it runs int8 operators "
            "only, so no layer can be raised to int16 or float.",
            "Drop --mixed-precision. --sensitivity names the layers that limit accuracy; real "
            "--calibration-data or a rewrite of those layers is what helps there.",
        )
    if options.quantization.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--mixed-precision {mode} raises operators of an int8 model, but --quantize is {options.quantization.quantize.value}.",
            "Add --quantize int8 (with --min-sqnr, --min-cosine or --min-top1 as the target).",
        )
    if mode == "int16" and "int16" not in promotions:
        raise UsageError(
            f"--mixed-precision int16 needs int16x8 kernels, which --target {target.name} does not have.",
            "Use --mixed-precision auto.",
        )


def mixed_precision_plan(options: ExportOptions, target: Any) -> tuple[str | None, str]:
    """(the --mixed-precision mode that searches, or None; the precision it promotes to)."""
    promotions = target.mixed_precision_promotions
    mode = options.quantization.mixed_precision
    if options.quantization.quantize is not QuantizeMode.INT8 or not promotions:
        return None, ""
    if mode is None:  # the target's default: on when the user asked for an accuracy
        asked = any(v is not None for v in (options.parity.min_sqnr, options.parity.min_cosine, options.parity.min_top1))
        if target.mixed_precision_by_default and not asked and "int16" in promotions:
            from ..quantization.mixed_precision.report import DEFAULT_SEARCH

            # a plain --quantize int8 that misses its own gate raises operators to int16 only:
            # the model stays fully integer, as int8 promises (DEFAULT_SEARCH, quantization/mixed_precision)
            return DEFAULT_SEARCH, "int16"
        mode = "auto" if target.mixed_precision_by_default and asked else "off"
    if mode == "off":
        return None, ""
    if mode == "int16" or target.requires_full_integer or "float" not in promotions:
        return mode, "int16"
    return mode, "float"


def times_host_latency(options: ExportOptions, target: Any) -> bool:
    """Integer quantized exports for a target that runs on this CPU get the host latency section.
    fp16 does not: on a CPU it computes in float32 (the converter's DEQUANTIZE of the fp16 weights
    is folded when the model loads), so it runs fp32's kernels, and timing it would cost a second
    conversion."""
    return options.parity.host_latency and options.quantization.quantize.is_integer and target.times_on_host_cpu
