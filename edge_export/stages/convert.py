"""The convert stage: the prepared module to a verified flatbuffer, in float, fp16 or a quantized
mode (with the sensitivity ranking and mixed-precision search when asked for), its signature named
after the model."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from ..config import InputSpec, IODtype
from ..options import ExportOptions
from .clock import StageClock
from .prepare import PreparedRun
from .samples import calibration_in_layout, heldout_in_layout, labelled_calibration_sets, selection_samples
from .target_options import mixed_precision_plan, times_host_latency

if TYPE_CHECKING:
    from ..quantization import CalibrationSet, QuantizationResult
    from ..quantization.calibration_labels import HeldOutLabels
    from ..quantization.mixed_precision import MixedPrecisionReport
    from ..quantization.sensitivity import SensitivityReport
    from ..flatbuffer import FlatbufferModel

__all__ = ["ConvertedRun", "convert_stage", "name_signature"]


@dataclass(frozen=True)
class ConvertedRun:
    prepared: PreparedRun
    model: FlatbufferModel  # verified, aligned, its signature named after the model
    quantization: QuantizationResult | None = None  # integer modes
    float_bytes: bytes | None = None  # the float flatbuffer, when a quantized export converted one
    calibration: CalibrationSet | None = None  # integer modes
    heldout: list[tuple] | None = None  # real held-out samples for parity (None: seeded random ones)
    sensitivity: SensitivityReport | None = None
    mixed_precision: MixedPrecisionReport | None = None
    heldout_labels: HeldOutLabels | None = None  # the held-out samples' labels (labelled calibration data)


def convert_stage(prepared: PreparedRun, options: ExportOptions, target: Any, clock: StageClock) -> ConvertedRun:
    if options.quantization.quantize.is_integer:
        converted = _quantize(prepared, options, target, clock)
    else:
        converted = ConvertedRun(prepared, _convert(prepared, options, clock))
    with clock.run("inspect", "Reading the flatbuffer"):
        loaded = prepared.loaded
        fb = name_signature(converted.model, loaded.specs, loaded.returned_keys, options)
        quantization = converted.quantization
        if quantization is not None:  # its I/O table names what the written file names
            from ..quantization import describe_io

            quantization = replace(quantization, model=fb, io=describe_io(fb))
    return replace(converted, model=fb, quantization=quantization)


def _convert(prepared: PreparedRun, options: ExportOptions, clock: StageClock) -> FlatbufferModel:
    """Float or fp16: one conversion, read and verified here (the converter's bytes are the edge)."""
    from ..conversion.litert import convert_module, fp16_quant_config
    from ..quantize_modes import mode_spec
    from ..flatbuffer import read_flatbuffer
    from ..flatbuffer.pack import align_buffers

    with clock.run("convert", "Tracing and converting with litert-torch"):
        quant_config = fp16_quant_config() if mode_spec(options.quantization.quantize).fp16_weights else None
        model_bytes = convert_module(prepared.module, prepared.example, strict=options.inputs.strict, quant_config=quant_config, verbose=options.outputs.verbose)
    # The converter ignores the schema's 16-byte alignment of buffer data; every check below runs
    # on, and every file is written from, the aligned model (later rewrites re-pack it aligned).
    return read_flatbuffer(align_buffers(model_bytes), origin="the converted model")


def _quantize(prepared: PreparedRun, options: ExportOptions, target: Any, clock: StageClock) -> ConvertedRun:
    from ..quantization.budget import BACKENDS_SHARE, TimeBudget
    from ..quantization.mixed_precision import DEFAULT_SEARCH

    calibration, heldout, labels = labelled_calibration_sets(options, prepared.loaded.specs, prepared.loaded.example)
    search_mode, promote_to = mixed_precision_plan(options, target)
    asked = search_mode not in (None, DEFAULT_SEARCH)  # the default search runs only if int8 misses
    # auto's PT2E, forked now: with a core idle it calibrates while the float model converts
    with _pt2e_beside(prepared, options, calibration) or contextlib.nullcontext() as beside:
        if asked or options.quantization.sensitivity:  # per-operator recipes start from the float model
            float_bytes = _float_for_recipes(prepared, options, clock)
        else:  # converted once here: the flatbuffer backend, the latency stage and the Edge TPU's explanation share it
            float_bytes = float_model_for_flatbuffer_backend(prepared.module, prepared.example, options, clock)
        # one budget for the whole quantization stage: backends, sensitivity, mixed precision
        budget = TimeBudget(options.quantization.time_budget, on_progress=clock.on_progress)
        # a ranking or a search follows: the backends get a share, so that it always starts
        with budget.share(BACKENDS_SHARE, "auto's backends") if asked or options.quantization.sensitivity else contextlib.nullcontext():
            result = _run_quantizer(prepared, options, target, calibration, float_bytes, budget, clock,
                                    wants_integer=asked and promote_to == "int16", pt2e_beside=beside)
    decisions = reads_decisions(result, labels)
    if search_mode == DEFAULT_SEARCH and keeps_search_margin(result, options, decisions):
        search_mode = None  # the plain int8 model passes its gate: it is kept as it is
    if search_mode and float_bytes is None:  # only PT2E ran: the promotions need the float model
        float_bytes = _float_for_recipes(prepared, options, clock)
    sensitivity = mixed = None
    if search_mode or options.quantization.sensitivity:
        # the steps name the ranking and the promotions; a short stage label leaves room for their
        # "elapsed, about N s left" on a 120-column terminal
        label = "Searching for mixed precision" if search_mode else "Ranking operators by sensitivity"
        with clock.run("mixed_precision" if search_mode else "sensitivity", label):
            result, sensitivity, mixed = _sensitivity_and_search(
                prepared, options, target, result, float_bytes, calibration, heldout, (search_mode, promote_to), budget, decisions
            )
        if not options.quantization.sensitivity and mixed is None:
            sensitivity = None  # measured for a search that was not needed: not asked for
    result = replace(result, time_budget=budget.section())
    return ConvertedRun(prepared, result.model, result, float_bytes, calibration, heldout, sensitivity, mixed, labels)


def _float_for_recipes(prepared: PreparedRun, options: ExportOptions, clock: StageClock) -> bytes:
    from ..conversion.litert import convert_module

    with clock.run("convert", "Tracing and converting with litert-torch (float, for per-operator recipes)"):
        return convert_module(prepared.module, prepared.example, strict=options.inputs.strict, verbose=options.outputs.verbose)


def reads_decisions(result: Any, labels: Any) -> bool:
    """Whether the task is read as decisions that flip well above the SQNR gate, besides a declared
    classifier: labels inside the calibration data (the user classifies), or an output joined from a
    sigmoid's run (a detector's class scores: YOLO11n searched to 25 dB kept 0.899 of its detections
    on held-out photos, to 30 dB 0.966)."""
    from ..validators.probabilities import holds_sigmoid_parts

    return labels is not None or (result.model is not None and holds_sigmoid_parts(result.model))


def keeps_search_margin(result: Any, options: ExportOptions, decisions: bool = False) -> bool:
    """Whether the int8 model quantization kept meets the default search's target (the export's
    gates plus its margin, ``search_target``) on the calibration inputs, measured while choosing
    it; unmeasured counts as met: the default search is for a model known to fall short, not a
    second check of every export. The margin, not the gate itself, because those inputs are the
    quantizer's own: EfficientNet-Lite0's int8 model read 21.2 dB on them and passed its 8 parity
    samples, then 19.8 dB on 96 held-out photos with top-1 agreeing on 0.906 of them."""
    from ..quantization.mixed_precision import DEFAULT_SEARCH

    target = search_target(options, DEFAULT_SEARCH, decisions)
    low_sqnr = result.sqnr_db is not None and target.min_sqnr_db is not None and result.sqnr_db < target.min_sqnr_db
    low_cosine = result.cosine is not None and target.min_cosine is not None and result.cosine < target.min_cosine
    return not (low_sqnr or low_cosine)


def _pt2e_beside(prepared: PreparedRun, options: ExportOptions, calibration: Any) -> Any:
    """quantization.pt2e_beside's child for this export, or None (not auto int8, no fork)."""
    from ..quantization.pt2e import DEFAULT_PT2E_OBSERVER
    from ..quantization.pt2e_beside import start_pt2e_beside
    from ..quantization import PARITY_SAMPLES
    from ..quantization.ranges import observers_for

    observer = observers_for(options.quantization.range_algorithm).get("pt2e_observer", DEFAULT_PT2E_OBSERVER)
    return start_pt2e_beside(
        prepared.module, prepared.example, options.quantization.quantize, calibration_in_layout(calibration, prepared.plan.inputs),
        backend=options.quantization.quant_backend, parity_samples=PARITY_SAMPLES, observer=observer, strict=options.inputs.strict,
        verbose=options.outputs.verbose,
    )


def _run_quantizer(prepared: PreparedRun, options: ExportOptions, target: Any, calibration: Any, float_bytes: bytes | None, budget: Any, clock: StageClock,
                   wants_integer: bool = False, pt2e_beside: Any = None) -> Any:
    from ..quantization import ParityTarget, QuantizationRequest, quantize_model
    from ..quantization.ranges import observers_for

    with clock.run("quantize", f"Quantizing ({options.quantization.quantize.value}, {len(calibration)} calibration samples)"):
        gates = options.thresholds()
        request = QuantizationRequest(
            options.quantization.quantize,
            calibration=calibration_in_layout(calibration, prepared.plan.inputs),
            backend=options.quantization.quant_backend,
            **observers_for(options.quantization.range_algorithm),
            io_dtype=options.layout.io_dtype or IODtype.FLOAT32,
            # --mixed-precision int16 searches to keep the model fully integer: start from a fully integer one
            require_full_integer=target.requires_full_integer or wants_integer,
            strict=options.inputs.strict,
            verbose=options.outputs.verbose,
            # auto keeps the first fully integer result that meets the export's own gates
            target=ParityTarget(gates.min_sqnr_db, gates.min_cosine),
            part_scales=options.quantization.part_scales,
            weight_rounding=options.quantization.weight_rounding,
        )
        return quantize_model(prepared.module, prepared.example, request, float_model_bytes=float_bytes, budget=budget, pt2e_beside=pt2e_beside)


def _sensitivity_and_search(prepared: PreparedRun, options: ExportOptions, target: Any, result: Any, float_bytes: bytes | None,
                            calibration: Any, heldout: list[tuple] | None, plan: tuple[str | None, str], budget: Any,
                            decisions: bool = False) -> tuple:
    from ..quantization.mixed_precision import run_sensitivity_and_mixed_precision

    loaded = prepared.loaded
    samples = selection_samples(loaded.specs, options, loaded.example, calibration, heldout)  # not the verdict's
    search_mode, promote_to = plan
    return run_sensitivity_and_mixed_precision(
        result,
        float_bytes=float_bytes,
        export_module=prepared.module,
        calibration=calibration_in_layout(calibration, prepared.plan.inputs),
        heldout=heldout_in_layout(samples, prepared.plan.inputs),
        want_sensitivity=options.quantization.sensitivity,
        search_mode=search_mode,
        precision=promote_to,
        target=search_target(options, search_mode, decisions, calibrated_inputs=heldout is not None),
        io_dtype=options.layout.io_dtype or IODtype.FLOAT32,
        source_module=loaded.module,
        verbose=options.outputs.verbose,
        measure_latency=times_host_latency(options, target),  # each promotion's latency: cpu, not --no-latency
        budget=budget,
        # auto on cpu: int16 activations (fully integer) before float, where the target runs both
        int16_first=search_mode == "auto" and "int16" in target.mixed_precision_promotions,
        weight_rounding=options.quantization.weight_rounding,
        part_scales=options.quantization.part_scales,
        int16_opcodes=target.int16_opcodes,
        rounding=getattr(result, "rounding", None),  # the backend's: the search does not round again
    )


def search_target(options: ExportOptions, search_mode: str | None, decisions: bool = False,
                  calibrated_inputs: bool = False) -> Any:
    """The accuracy the search aims at, on inputs parity's verdict does not read: the user's --min-*
    targets with SELECTION_MARGIN_DB on the SQNR, or for the default search the export's own gates
    with a wider margin, wider still for a declared classifier or other ``decisions``
    (reads_decisions), which flip well above the gate. ``calibrated_inputs``: the search reads
    calibration samples (real data), on which a model reads better than on data it was not
    calibrated on: CALIBRATED_INPUTS_MARGIN_DB more."""
    from ..quantization.mixed_precision import (
        CALIBRATED_INPUTS_MARGIN_DB, CLASSIFICATION_SEARCH_MARGIN_DB, DEFAULT_SEARCH, DEFAULT_SEARCH_MARGIN_DB,
        SELECTION_MARGIN_DB, AccuracyTarget,
    )

    gates = options.thresholds()
    extra = CALIBRATED_INPUTS_MARGIN_DB if calibrated_inputs else 0.0
    if search_mode == DEFAULT_SEARCH and gates.min_sqnr_db is not None:
        margin = (CLASSIFICATION_SEARCH_MARGIN_DB if decisions or declares_classifier(options) else DEFAULT_SEARCH_MARGIN_DB) + extra
        return AccuracyTarget(gates.min_sqnr_db + margin, gates.min_cosine, margin_db=margin)
    if gates.min_sqnr_db is None:
        return AccuracyTarget(None, options.parity.min_cosine, options.parity.min_top1)
    margin = SELECTION_MARGIN_DB + extra
    return AccuracyTarget(gates.min_sqnr_db + margin, options.parity.min_cosine, options.parity.min_top1, margin_db=margin)


def declares_classifier(options: ExportOptions) -> bool:
    """Whether the user said an output is a classifier: --output-kind [NAME=]classification or
    --labels (a name alone does not count: the search runs before the outputs are named)."""
    from ..config import OutputKind

    return bool(options.parity.labels) or any(kind is OutputKind.CLASSIFICATION for _, kind in options.parity.output_kinds)


def float_model_for_flatbuffer_backend(module: Any, example: tuple, options: ExportOptions, clock: StageClock) -> bytes | None:
    """The float flatbuffer the flatbuffer backend quantizes, converted here rather than inside
    quantize_model so that the latency stage can time it and a failed Edge TPU parity can rank
    operators on it: no conversion more than before. None when only PT2E runs (it converts no float
    model; timing would cost one). A conversion that fails raises (quantize_model's precondition)."""
    from ..conversion.litert import convert_module
    from ..quantization import backends_for

    if "flatbuffer" not in backends_for(options.quantization.quantize, options.quantization.quant_backend):
        return None
    with clock.run("convert", "Tracing and converting with litert-torch (float: the flatbuffer backend's input)"):
        # A failure is the export's (exit 3, now): PT2E lowers through the same converter, so no
        # backend could do better, and calibrating first would only delay the same error (issue 21).
        return convert_module(module, example, strict=options.inputs.strict, verbose=options.outputs.verbose)


def name_signature(fb: FlatbufferModel, specs: Sequence[InputSpec], returned_keys: Sequence[str | None], options: ExportOptions) -> FlatbufferModel:
    """The converter's signature (``args_0``..., ``output_0``...) renamed after the model."""
    import functools

    from ..artifacts.io_names import resolve_names
    from ..passes.flatbuffer import rename_signature_pass, run_flatbuffer_passes

    inputs = resolve_names((), [s.name for s in specs], fb.input_names)
    outputs = resolve_names(options.inputs.output_names, returned_keys, fb.output_names)
    rename = functools.partial(
        rename_signature_pass, input_names=inputs, output_names=outputs, signature_key=options.inputs.signature_key
    )
    return run_flatbuffer_passes(fb, [rename], origin="the model with named inputs and outputs").model
