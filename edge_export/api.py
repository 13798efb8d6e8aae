"""The Python API: ``export()`` and ``validate()``; the CLI is a thin shell over them.

``export`` is the chain of stages (``edge_export/stages/``), each a function of the previous
stage's typed result; nothing reaches back:

    paths -> load -> prepare -> convert (or quantize) -> host latency -> target checks
          -> parity -> finish (strip names, metadata) -> report -> target finish -> write

The stages up to the artifacts' bytes run in ``_run_export``, confined in a child process for an
untrusted archive (sandbox.py); the parent writes the artifact set, all of it or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import UsageError
from .options import ExportOptions
from .reports.model import REPORT_SCHEMA_VERSION, RunReport
from .stages.clock import StageClock
from .stages.paths import RunPaths, check_side_outputs, default_output_path, export_plan
from .stages.precision import infer_precision
from .stages.run_shell import run_shell
from .stages.target_options import resolve_target_options
from .stages.write import ExportResult, write_run

if TYPE_CHECKING:
    from .runtime.latency import HostLatency
    from .stages.check import CheckedRun
    from .stages.convert import ConvertedRun
    from .stages.finish import FinishedModel
    from .stages.parity import ParityRun
    from .targets.base import TargetPlugin

__all__ = ["ExportOptions", "ExportResult", "export", "validate", "infer_precision", "default_output_path", "REPORT_SCHEMA_VERSION"]


def export(
    model: Any,
    *,
    example_inputs: tuple | None = None,
    output: str | Path | None = None,
    options: ExportOptions | None = None,
    on_stage: Callable[[str], None] | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
    **option_values: Any,
) -> ExportResult:
    """Export ``model`` (a path, a ``package.module:attr`` reference or an nn.Module) to LiteRT.

    Options are given as an ``ExportOptions`` or as keyword arguments of the same names
    (``quantize="fp16"``, ``channels_last=True``, ...). Returns an ``ExportResult``; raises an
    ``EdgeExportError`` subclass when nothing could be exported. ``on_stage(label)`` is called as
    each stage starts, ``on_progress(label, step, total)`` before each step of a long one
    (quantization's backends, calibration, sensitivity, mixed precision).
    """
    options, implied = resolve_target_options(_options(options, option_values))
    from .targets.base import get_target

    target = get_target(options.target)
    clock = StageClock(on_stage, on_progress)
    plan = export_plan(model, options, target, output)
    with run_shell(plan.outputs, plan.inputs) as shell:
        shell.make_folders(plan.paths.tflite)
        check_side_outputs(options, shell.created)
        shell.make_folders(*plan.folders[1:])
        return shell.run(
            model, options.inputs.trust_pickle, _shows_libraries(options), clock,
            _run_export, (model, example_inputs, options, target, clock, plan.paths, implied),
            commit=lambda report, files: write_run(report, files, clock, plan.paths, **options.outputs.written_beside()), may_write=plan.artifacts,
        )


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
    from .stages.validate import ValidateRequest, check_request, flatbuffer_stage, plan_validation, precision_stage, validate_against_reference

    options = options if options is not None else ExportOptions.from_keywords(**option_values)
    request = ValidateRequest(Path(tflite), reference, example_inputs, tensor_names, explicit_quantize="quantize" in option_values)
    check_request(request, test_vectors, options)
    if test_vectors is not None:
        from .stages.test_vectors import validate_with_test_vectors

        return validate_with_test_vectors(request, Path(test_vectors), report_prefix, options, on_stage)
    plan, names = plan_validation(request, options, report_prefix)
    with run_shell(plan.outputs, plan.inputs) as shell:
        checked = flatbuffer_stage(request, names, options)
        options = precision_stage(checked, request, options)
        shell.make_folders(*plan.folders)
        check_side_outputs(options, shell.created)
        clock = StageClock(on_stage)
        return shell.run(
            reference, options.inputs.trust_pickle, _shows_libraries(options), clock,
            validate_against_reference, (checked, request, options, plan.paths, clock),
            commit=lambda report, files: write_run(report, files, clock, plan.paths, **options.outputs.written_beside()), may_write=plan.artifacts,
        )


def _options(options: ExportOptions | None, option_values: dict[str, Any]) -> ExportOptions:
    if options is None:
        return ExportOptions.from_keywords(**option_values)
    if option_values:
        raise UsageError("Pass either options=ExportOptions(...) or keyword options, not both.")
    return options


def _shows_libraries(options: ExportOptions) -> bool:
    """The libraries' own output reaches the terminal with --verbose, or when the caller keeps its streams."""
    return options.outputs.verbose or not options.outputs.quiet_libraries


@dataclass(frozen=True)
class ExportStages:
    """Every stage's result of one export, for the report's assembly."""

    converted: ConvertedRun
    host_latency: HostLatency | None  # None: not timed (not a quantized cpu export, or --no-latency)
    checked: CheckedRun
    validated: ParityRun
    finished: FinishedModel


def _run_export(
    model: Any, example_inputs: tuple | None, options: ExportOptions, target: TargetPlugin, clock: StageClock, paths: RunPaths, implied: list[str],
) -> tuple[RunReport, list[tuple[Path, bytes]]]:
    """Every stage up to the artifacts' bytes and the typed report; ``export`` writes them."""
    from .stages.assemble import export_report, finish_with_target
    from .stages.check import check_stage, host_latency_stage
    from .stages.convert import convert_stage
    from .stages.finish import finish_stage
    from .stages.load import load_stage
    from .stages.parity import parity_stage
    from .stages.prepare import prepare_stage

    loaded = load_stage(model, options.inputs, options.parity.seed, example_inputs, clock)
    prepared = prepare_stage(loaded, options, target, implied)
    converted = convert_stage(prepared, options, target, clock)
    host_latency = host_latency_stage(converted, options, target, clock)
    checked = check_stage(converted, options, target, paths.tflite, clock)
    validated = parity_stage(checked, options, target, clock)
    finished = finish_stage(checked, validated, options, paths.tflite, clock)
    run = ExportStages(converted, host_latency, checked, validated, finished)
    report = export_report(run, options, target, paths, clock)
    return finish_with_target(report, run, options, target, paths.tflite)
