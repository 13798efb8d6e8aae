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

from .output.atomic_files import check_artifact_paths, check_writable_folder, remove_created_folders
from .errors import UsageError
from .options import ExportOptions
from .reports.model import REPORT_SCHEMA_VERSION, RunReport
from .stages.clock import StageClock
from .stages.paths import RunPaths, check_side_outputs, default_output_path, export_paths, overlay_outputs
from .stages.target_options import resolve_target_options
from .stages.precision import infer_precision
from .stages.validate import validate
from .stages.write import ExportResult, write_run

if TYPE_CHECKING:
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
    if options is None:
        options = ExportOptions.from_keywords(**option_values)
    elif option_values:
        raise UsageError("Pass either options=ExportOptions(...) or keyword options, not both.")
    options, implied = resolve_target_options(options)
    from .targets.base import get_target

    target = get_target(options.target)
    clock = StageClock(on_stage, on_progress)
    paths, expected, target_outputs = export_paths(model, options, target, output)
    created: list[Path] = []
    try:
        check_writable_folder(paths.tflite, created)
        check_side_outputs(options, created)
        for _, path in target_outputs:
            check_writable_folder(path, created)
        from .processes.library_output import quiet_libraries
        from .loading.sources import needs_confinement
        from .processes.sandbox import run_for_model

        with quiet_libraries(options.outputs.verbose or not options.outputs.quiet_libraries):
            report, files = run_for_model(
                needs_confinement(model, options.inputs.trust_pickle), clock, _run_export, model, example_inputs, options, target, clock, paths, implied,
            )
            check_artifact_paths(files, expected + overlay_outputs(options, paths.tflite))
            return write_run(report, files, options, clock, paths)
    except BaseException:
        remove_created_folders(created)
        raise


@dataclass(frozen=True)
class ExportStages:
    """Every stage's result of one export, for the report's assembly."""

    converted: Any
    host_latency: Any
    checked: Any
    validated: Any
    finished: Any


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

    loaded = load_stage(model, options, example_inputs, clock)
    prepared = prepare_stage(loaded, options, target, implied)
    converted = convert_stage(prepared, options, target, clock)
    host_latency = host_latency_stage(converted, options, target, clock)
    checked = check_stage(converted, options, target, paths.tflite, clock)
    validated = parity_stage(checked, options, target, clock)
    finished = finish_stage(checked, validated, options, paths.tflite, clock)
    run = ExportStages(converted, host_latency, checked, validated, finished)
    report = export_report(run, options, target, paths, clock)
    return finish_with_target(report, run, options, target, paths.tflite)
