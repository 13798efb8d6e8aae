"""``validate``: an existing flatbuffer checked against its PyTorch model (any source ``export``
takes), with the thresholds of the precision read from its tensors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..output.atomic_files import check_artifact_paths, check_outputs_apart, check_writable_folder, remove_created_folders
from ..config import InputSpec, QuantizeMode
from ..errors import InputSpecError, UsageError
from ..options import ExportOptions
from ..reports.model import ArtifactsSection, RunReport, ValidateSection
from .assemble import app_section, flatbuffer_section, run_header, validation_section, with_baseline
from .clock import StageClock
from .load import load_with_inputs
from .finish import overlay_artifacts
from .parity import check_parity, validate_sensitivity
from .precision import infer_precision
from .paths import RunPaths, check_side_outputs, input_paths, side_outputs, validate_report_paths
from .write import ExportResult, write_run

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel


def validate(
    tflite: str | Path,
    reference: Any = None,
    *,
    test_vectors: str | Path | None = None,
    example_inputs: tuple | None = None,
    report_prefix: str | Path | None = None,
    options: ExportOptions | None = None,
    on_stage: Callable[[str], None] | None = None,
    tensor_names: str | Path | None = None,
    **option_values: Any,
) -> ExportResult:
    """Check an existing flatbuffer against a PyTorch model (any source kind ``export`` accepts).

    Writes ``<stem>.validate.report.json`` / ``.md`` beside the flatbuffer (or at ``report_prefix``).
    Thresholds default to the flatbuffer's precision, read from its tensors. A flatbuffer whose
    inner tensor names were stripped gets them back, in memory, from ``tensor_names`` (default: the
    ``<stem>.tensors.json`` beside it, when there is one).

    With ``test_vectors`` (a ``<stem>.testdata.npz`` from ``--emit-test-vectors``) instead of a
    reference, the model runs on the stored inputs and is judged against the stored PyTorch outputs
    with the stored thresholds and output kinds: no PyTorch needed.
    """
    explicit_quantize = "quantize" in option_values
    if options is None:
        options = ExportOptions(**option_values)
    if test_vectors is not None and options.calibration_data:
        raise UsageError(
            "validate --test-vectors checks the stored samples only; --calibration-data (labelled data for the accuracy "
            "check) needs the PyTorch model to compare with.",
            "Use --reference MODEL with --calibration-data, or drop --calibration-data.",
        )
    if test_vectors is not None:
        from .test_vectors import validate_with_test_vectors

        return validate_with_test_vectors(
            Path(tflite), Path(test_vectors), reference, example_inputs, report_prefix, options, on_stage, tensor_names, explicit_quantize
        )
    if reference is None:
        raise UsageError(
            "validate needs what to check the model against: --reference (the PyTorch model) or --test-vectors "
            "(a <stem>.testdata.npz written by --emit-test-vectors).",
            "Add --reference MODEL or --test-vectors FILE.",
        )
    tflite_path = Path(tflite)
    prefix, json_path, md_path = validate_report_paths(tflite_path, report_prefix)
    from ..artifacts.tensor_names import tensor_names_path

    names_path = Path(tensor_names) if tensor_names else tensor_names_path(tflite_path)
    from ..reports.model_explorer import overlay_path

    overlays = [(f"the Model Explorer {kind} overlay (named after --report)", overlay_path(Path(f"{prefix}.tflite"), kind))
                for kind, on in (("sensitivity", options.sensitivity), ("per_layer", options.per_layer)) if on]
    check_outputs_apart(
        [("the JSON report (--report)", json_path), ("the Markdown report (--report)", md_path), *overlays, *side_outputs(options)],
        [("the flatbuffer to validate", tflite_path), ("the tensor-name map", names_path), *input_paths(reference, options)],
    )
    created: list[Path] = []
    try:
        return validate_flatbuffer(
            tflite_path, reference, example_inputs, options, explicit_quantize, json_path, md_path, created, on_stage,
            names_path if tensor_names or names_path.exists() else None, bool(tensor_names),
        )
    except BaseException:
        remove_created_folders(created)
        raise


def validate_flatbuffer(
    tflite_path: Path,
    reference: Any,
    example_inputs: tuple | None,
    options: ExportOptions,
    explicit_quantize: bool,
    json_path: Path,
    md_path: Path,
    created: list[Path],
    on_stage: Callable[[str], None] | None,
    names_path: Path | None = None,
    names_given: bool = False,
) -> ExportResult:
    from ..flatbuffer import load_flatbuffer

    fb = load_flatbuffer(tflite_path)  # rejects a bad file before any runtime sees it
    file_fb = fb  # what the report describes; parity may run on it with its names restored
    # A map found beside a file that kept its names is stale (an earlier export's) and not needed;
    # one the user named is always checked.
    if names_path is not None and (names_given or not fb.has_inner_tensor_names):
        from ..artifacts.tensor_names import load_tensor_name_map, restore_tensor_names

        name_map = load_tensor_name_map(names_path)
        name_map.check_belongs_to(fb, names_path, tflite_path)
        fb = restore_tensor_names(fb, name_map, names_path)
    if options.per_layer and not fb.has_inner_tensor_names:
        raise UsageError(
            f"{tflite_path} has no tensor names besides its inputs and outputs (it was written with "
            "--strip-names), and per-layer parity finds each layer's tensor by the PyTorch module "
            "path in its name.",
            "Pass the <stem>.tensors.json written with it (--tensor-names FILE; --target micro writes "
            "one beside the model), or run --per-layer on an export made without --strip-names: "
            "stripping changes no computation, so its per-layer numbers hold for the stripped file too.",
        )
    if not explicit_quantize:
        from dataclasses import replace

        options = replace(options, quantize=infer_precision(fb))
    if options.sensitivity and options.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--sensitivity ranks operators by what int8 quantization costs them; {tflite_path} is {options.quantize.value}.",
            "Validate an int8 model, or drop --sensitivity.",
        )
    check_writable_folder(json_path, created)
    check_side_outputs(options, created)
    stages = StageClock(on_stage)
    from ..processes.library_output import quiet_libraries

    with quiet_libraries(options.verbose or not options.quiet_libraries):
        from ..reports.model_explorer import overlay_path
        from ..loading.sources import needs_confinement
        from ..processes.sandbox import run_for_model

        report, files = run_for_model(
            needs_confinement(reference, options.trust_pickle), stages, validate_against_reference,
            fb, file_fb, tflite_path, reference, example_inputs, options, json_path, md_path, stages,
        )
        overlay_stem = Path(str(json_path)[: -len(".report.json")] + ".tflite")
        check_artifact_paths(files, [(kind, overlay_path(overlay_stem, kind)) for kind in ("sensitivity", "per_layer")])
        return write_run(report, files, options, stages, RunPaths(tflite_path, json_path, md_path))


def validate_against_reference(
    fb: FlatbufferModel, file_fb: FlatbufferModel, tflite_path: Path, reference: Any, example_inputs: tuple | None,
    options: ExportOptions, json_path: Path, md_path: Path, stages: StageClock,
) -> tuple[RunReport, list[tuple[Path, bytes]]]:
    """Load the reference, check parity and build the report; ``validate`` writes it."""
    from ..targets.base import get_target

    from ..graph.channels_last import ChannelsLastPlan

    from ..loading.sources import ModelKind, detect_kind, is_module_reference

    if not options.input_shapes and example_inputs is None:
        stored_shapes = (
            isinstance(reference, (str, Path))
            and not is_module_reference(str(reference))
            and detect_kind(Path(reference)) is ModelKind.EXPORTED_PROGRAM
        )
        if not stored_shapes:
            # The flatbuffer knows its input shapes; with --channels-last they are NHWC.
            from dataclasses import replace

            shapes = []
            for t in fb.input_tensors:
                s = tuple(t.shape)
                shapes.append((s[0], s[3], s[1], s[2]) if options.channels_last and len(s) == 4 else s)
            dtypes = tuple("float32" if (t.quant or t.is_float) else t.dtype for t in fb.input_tensors)
            options = replace(options, input_shapes=tuple(shapes), input_dtypes=dtypes)
    with stages.run("load", "Loading the reference model"):
        loaded, specs, example, ref_out, _ = load_with_inputs(reference, options, example_inputs)
        module = loaded.module
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
    plan = ChannelsLastPlan(nhwc_in, nhwc_out)
    parity, layers, runtimes, _, accuracy = check_parity(module, example, specs, options, fb, plan, stages, **labelled_heldout(options, specs, example))
    sensitivity = None
    if options.sensitivity:
        with stages.run("sensitivity", "Ranking operators by sensitivity (the reference converted to float)"):
            sensitivity = validate_sensitivity(module, example, specs, options, plan)
    overlay_stem = Path(str(json_path)[: -len(".report.json")] + ".tflite")  # <prefix>.<kind>.json
    overlays = overlay_artifacts(sensitivity, layers, fb, overlay_stem)
    if sensitivity is not None:
        from dataclasses import replace

        sensitivity = replace(sensitivity, overlay=str(overlays[0].path))
    export_section = ValidateSection(
        quantize=options.quantize.value,
        target=get_target(options.target).name,
        channels_last=plan.active,
        channels_last_inputs=tuple(plan.inputs),
        channels_last_outputs=tuple(plan.outputs),
        strict=options.strict,
    )
    report = RunReport(
        **run_header(loaded, specs, plan),
        export=export_section,
        artifacts=ArtifactsSection(str(tflite_path), str(json_path), str(md_path), str(options.junit) if options.junit else None),
        flatbuffer=flatbuffer_section(file_fb),
        stages=tuple(stages.times),
        validation=validation_section(parity),
        runtimes=runtimes,
        per_layer=layers,
        app=app_section(file_fb, plan.inputs, plan.outputs),
        sensitivity=sensitivity, accuracy=accuracy,
    )
    if overlays:
        from dataclasses import replace

        report = replace(report, artifacts=replace(report.artifacts, extra={a.key: str(a.path) for a in overlays}))
    report = with_baseline(report, options.baseline)
    return report, [(a.path, a.data) for a in overlays]


def labelled_heldout(options: ExportOptions, specs: list[InputSpec], example: tuple) -> dict[str, Any]:
    """validate --calibration-data: check_parity's ``samples`` (the held-out part of labelled data)
    and ``labels``, split as export splits it (the same part, when both read the same files)."""
    if not options.calibration_data:
        return {}
    from .samples import labelled_calibration_sets

    _, heldout, labels = labelled_calibration_sets(options, specs, example)
    if labels is None:
        raise UsageError(
            f"validate --calibration-data takes labelled data, for the accuracy check; {options.calibration_data} has no labels.",
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
