"""``validate``'s stages: an existing flatbuffer checked against its PyTorch model (any source
``export`` takes), with the thresholds of the precision read from its tensors. ``api.validate``
chains them:

    request checks -> plan (paths) -> read the flatbuffer (names restored) -> its precision
        -> [confined when untrusted] load the reference, parity, report -> write
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..config import InputSpec, QuantizeMode
from ..errors import InputSpecError, UsageError
from ..options import ExportOptions
from ..reports.model import ArtifactsSection, RunReport, ValidateSection
from .assemble import app_section, flatbuffer_section, run_header, validation_section, with_baseline
from .clock import StageClock
from .finish import overlay_artifacts
from .load import load_with_inputs
from .parity import check_parity, validate_sensitivity
from .paths import RunPaths, RunPlan, validate_plan
from .precision import infer_precision

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel


@dataclass(frozen=True)
class ValidateRequest:
    """What ``validate`` was asked to check, as given."""

    tflite: Path
    reference: Any  # the PyTorch model: a path, a package.module:attr reference or an nn.Module
    example_inputs: tuple | None = None
    tensor_names: str | Path | None = None  # the tensor-name map of a stripped flatbuffer, when named
    explicit_quantize: bool = False  # quantize= given: the thresholds of that precision, not the file's


@dataclass(frozen=True)
class CheckedFlatbuffer:
    """The flatbuffer read and verified: ``model`` is what parity runs (its inner tensor names
    restored from the map when the file was stripped), ``file_model`` what the report describes."""

    model: FlatbufferModel
    file_model: FlatbufferModel


def check_request(request: ValidateRequest, test_vectors: str | Path | None, options: ExportOptions) -> None:
    """What to check against: a reference, or test vectors (not with --calibration-data)."""
    if test_vectors is not None and options.quantization.calibration_data:
        raise UsageError(
            "validate --test-vectors checks the stored samples only; --calibration-data (labelled data for the accuracy "
            "check) needs the PyTorch model to compare with.",
            "Use --reference MODEL with --calibration-data, or drop --calibration-data.",
        )
    if test_vectors is None and request.reference is None:
        raise UsageError(
            "validate needs what to check the model against: --reference (the PyTorch model) or --test-vectors "
            "(a <stem>.testdata.npz written by --emit-test-vectors).",
            "Add --reference MODEL or --test-vectors FILE.",
        )


def plan_validation(request: ValidateRequest, options: ExportOptions, report_prefix: str | Path | None) -> tuple[RunPlan, Path | None]:
    """The run's paths, and the tensor-name map to read (the one named, or the one found beside the
    flatbuffer; None: neither)."""
    from ..artifacts.tensor_names import tensor_names_path

    names_path = Path(request.tensor_names) if request.tensor_names else tensor_names_path(request.tflite)
    plan = validate_plan(request.tflite, request.reference, options, report_prefix, names_path)
    return plan, names_path if request.tensor_names or names_path.exists() else None


def flatbuffer_stage(request: ValidateRequest, names_path: Path | None, options: ExportOptions) -> CheckedFlatbuffer:
    """Read and verify the flatbuffer (a bad file is refused before any runtime sees it), with its
    tensor names restored from the map; --per-layer needs them."""
    from ..flatbuffer import load_flatbuffer

    fb = load_flatbuffer(request.tflite)
    file_fb = fb
    # A map found beside a file that kept its names is stale (an earlier export's) and not needed;
    # one the user named is always checked.
    if names_path is not None and (request.tensor_names or not fb.has_inner_tensor_names):
        from ..artifacts.tensor_names import load_tensor_name_map, restore_tensor_names

        name_map = load_tensor_name_map(names_path)
        name_map.check_belongs_to(fb, names_path, request.tflite)
        fb = restore_tensor_names(fb, name_map, names_path)
    if options.parity.per_layer and not fb.has_inner_tensor_names:
        raise UsageError(
            f"{request.tflite} has no tensor names besides its inputs and outputs (it was written with "
            "--strip-names), and per-layer parity finds each layer's tensor by the PyTorch module "
            "path in its name.",
            "Pass the <stem>.tensors.json written with it (--tensor-names FILE; --target micro writes "
            "one beside the model), or run --per-layer on an export made without --strip-names: "
            "stripping changes no computation, so its per-layer numbers hold for the stripped file too.",
        )
    return CheckedFlatbuffer(fb, file_fb)


def precision_stage(checked: CheckedFlatbuffer, request: ValidateRequest, options: ExportOptions) -> ExportOptions:
    """The precision the thresholds follow: read from the flatbuffer's tensors unless given."""
    if not request.explicit_quantize:
        options = options.with_values(quantize=infer_precision(checked.model))
    if options.quantization.sensitivity and options.quantization.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--sensitivity ranks operators by what int8 quantization costs them; {request.tflite} is {options.quantization.quantize.value}.",
            "Validate an int8 model, or drop --sensitivity.",
        )
    return options


def validate_against_reference(
    checked: CheckedFlatbuffer, request: ValidateRequest, options: ExportOptions, paths: RunPaths, stages: StageClock,
) -> tuple[RunReport, list[tuple[Path, bytes]]]:
    """Load the reference, check parity and build the report; ``validate`` writes it."""
    options = _with_flatbuffer_shapes(checked.model, request, options)
    with stages.run("load", "Loading the reference model"):
        loaded, specs, example, ref_out, _ = load_with_inputs(request.reference, options.inputs, options.parity.seed, request.example_inputs)
    plan = _layout_plan(checked.model, specs, ref_out)
    parity, layers, runtimes, _, accuracy = check_parity(
        loaded.module, example, specs, options, checked.model, plan, stages, **labelled_heldout(options, specs, example)
    )
    sensitivity = None
    if options.quantization.sensitivity:
        with stages.run("sensitivity", "Ranking operators by sensitivity (the reference converted to float)"):
            sensitivity = validate_sensitivity(loaded.module, example, specs, options, plan)
    overlay_stem = Path(str(paths.report_json)[: -len(".report.json")] + ".tflite")  # <prefix>.<kind>.json
    overlays = overlay_artifacts(sensitivity, layers, checked.model, overlay_stem)
    if sensitivity is not None:
        sensitivity = replace(sensitivity, overlay=str(overlays[0].path))
    report = RunReport(
        **run_header(loaded, specs, plan),
        export=_validate_section(options, plan),
        artifacts=ArtifactsSection(str(paths.tflite), str(paths.report_json), str(paths.report_markdown), str(options.outputs.junit) if options.outputs.junit else None),
        flatbuffer=flatbuffer_section(checked.file_model),
        stages=tuple(stages.times),
        validation=validation_section(parity),
        runtimes=runtimes,
        per_layer=layers,
        app=app_section(checked.file_model, plan.inputs, plan.outputs),
        sensitivity=sensitivity, accuracy=accuracy,
    )
    if overlays:
        report = replace(report, artifacts=replace(report.artifacts, extra={a.key: str(a.path) for a in overlays}))
    return with_baseline(report, options.outputs.baseline), [(a.path, a.data) for a in overlays]


def _with_flatbuffer_shapes(fb: FlatbufferModel, request: ValidateRequest, options: ExportOptions) -> ExportOptions:
    """Without --input-shape or example inputs, the flatbuffer's own input shapes (NHWC ones back to
    NCHW with --channels-last), unless the reference is a .pt2 that stores its own."""
    from ..loading.sources import ModelKind, detect_kind, is_module_reference

    reference = request.reference
    if options.inputs.input_shapes or request.example_inputs is not None:
        return options
    if isinstance(reference, (str, Path)) and not is_module_reference(str(reference)) and detect_kind(Path(reference)) is ModelKind.EXPORTED_PROGRAM:
        return options
    shapes = []
    for t in fb.input_tensors:
        s = tuple(t.shape)
        shapes.append((s[0], s[3], s[1], s[2]) if options.layout.channels_last and len(s) == 4 else s)
    dtypes = tuple("float32" if (t.quant or t.is_float) else t.dtype for t in fb.input_tensors)
    return options.with_values(input_shapes=tuple(shapes), input_dtypes=dtypes)


def _layout_plan(fb: FlatbufferModel, specs: list[InputSpec], ref_out: Sequence[Any]) -> Any:
    """Which inputs and outputs the flatbuffer holds in NHWC, read from its shapes against PyTorch's."""
    from ..graph.channels_last import ChannelsLastPlan

    if len(specs) != len(fb.inputs):
        raise InputSpecError(
            f"The flatbuffer has {len(fb.inputs)} inputs but the reference model was given {len(specs)}.",
            "Pass one --input-shape per input of the model the flatbuffer was exported from.",
        )
    nhwc_in = channels_last_from_flatbuffer(fb, specs)
    check_input_shapes(fb, specs, nhwc_in)
    nhwc_out = tuple(
        i
        for i, (r, t) in enumerate(zip(ref_out, fb.output_tensors))
        if r.dim() == 4 and tuple(t.shape) != tuple(r.shape) and tuple(t.shape) == (r.shape[0], r.shape[2], r.shape[3], r.shape[1])
    )
    return ChannelsLastPlan(nhwc_in, nhwc_out)


def _validate_section(options: ExportOptions, plan: Any) -> ValidateSection:
    from ..targets.base import get_target

    return ValidateSection(
        quantize=options.quantization.quantize.value,
        target=get_target(options.target).name,
        channels_last=plan.active,
        channels_last_inputs=tuple(plan.inputs),
        channels_last_outputs=tuple(plan.outputs),
        strict=options.inputs.strict,
    )


def labelled_heldout(options: ExportOptions, specs: list[InputSpec], example: tuple) -> dict[str, Any]:
    """validate --calibration-data: check_parity's ``samples`` (the held-out part of labelled data)
    and ``labels``, split as export splits it (the same part, when both read the same files)."""
    if not options.quantization.calibration_data:
        return {}
    from .samples import labelled_calibration_sets

    _, heldout, labels = labelled_calibration_sets(options, specs, example)
    if labels is None:
        raise UsageError(
            f"validate --calibration-data takes labelled data, for the accuracy check; {options.quantization.calibration_data} has no labels.",
            "Give an image folder with one sub-folder per class, or an .npz with a 'labels' array (README, "
            "\"Accuracy on your labelled data\"), or drop --calibration-data.",
        )
    return {"samples": heldout, "labels": labels}


def channels_last_from_flatbuffer(fb: Any, specs: list[InputSpec]) -> tuple[int, ...]:
    """Inputs whose flatbuffer shape is the NHWC form of the PyTorch NCHW shape."""
    found = []
    for i, (spec, t) in enumerate(zip(specs, fb.input_tensors)):
        s = spec.shape
        if len(s) == 4 and tuple(t.shape) != s and tuple(t.shape) == (s[0], s[2], s[3], s[1]):
            found.append(i)
    return tuple(found)


def check_input_shapes(fb: Any, specs: list[InputSpec], nhwc_in: Sequence[int]) -> None:
    """Input shapes that the flatbuffer cannot take are the user's to fix (exit 2), not a runtime
    failure (exit 3). A dynamic dimension (-1 in the signature) takes any size."""
    for i, (spec, tensor) in enumerate(zip(specs, fb.input_tensors)):
        s = spec.shape
        expected = (s[0], s[2], s[3], s[1]) if i in nhwc_in else s
        signature = tuple(tensor.shape_signature) or tuple(tensor.shape)
        if len(signature) != len(expected) or any(d >= 0 and d != e for d, e in zip(signature, expected)):
            raise InputSpecError(
                f"Input {i} ({tensor.name}) of the flatbuffer has shape "
                f"{','.join(map(str, tensor.shape))}, but the reference model is given {spec.shape_text}.",
                "Pass --input-shape with the shape the flatbuffer was exported with (or drop it: "
                "the flatbuffer's own input shapes are used).",
            )
