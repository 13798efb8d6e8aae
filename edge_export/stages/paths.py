"""Where a run writes and what it reads: every output path is planned and checked against every
input before any work, so no artifact can replace an input and a bad folder fails in seconds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..output.atomic_files import check_writable_folder
from ..config import QuantizeMode
from ..errors import UsageError
from ..options import ExportOptions


def default_output_path(source: str) -> Path:
    """``<model stem>.tflite`` beside the model; for a module reference, in the current folder."""
    p = Path(source)
    if p.exists():
        return p.with_suffix(".tflite")
    name = source.split(":")[-1].split(".")[-1] or "model"
    return Path.cwd() / f"{name}.tflite"


def validate_report_paths(tflite_path: Path, report_prefix: str | Path | None) -> tuple[Path, Path, Path]:
    """``validate``'s (prefix, JSON report, Markdown report): ``<stem>.validate.report.*`` beside the
    flatbuffer, or at ``--report PREFIX``."""
    prefix = Path(report_prefix) if report_prefix else Path(str(tflite_path.with_suffix("")) + ".validate")
    return prefix, Path(f"{prefix}.report.json"), Path(f"{prefix}.report.md")


def report_paths(tflite_path: Path) -> tuple[Path, Path]:
    stem = tflite_path.with_suffix("")
    return Path(f"{stem}.report.json"), Path(f"{stem}.report.md")


def tflite_output_path(source_text: str, output: str | Path | None) -> Path:
    """-o FILE, or -o FOLDER (an existing one: the default file name inside it), or the default."""
    default = default_output_path(source_text)
    if output is None:
        path = default
    elif Path(output).is_dir():
        path = Path(output) / (default.name if source_text != "<in-memory module>" else "model.tflite")
    else:
        path = Path(output)
    return path.with_suffix(".tflite") if path.suffix == "" else path


def overlay_outputs(options: ExportOptions, tflite_path: Path) -> list[tuple[str, Path]]:
    """The Model Explorer node-data files (reports/model_explorer.py) this run may write."""
    from ..reports.model_explorer import overlay_path

    wanted = (("sensitivity", options.quantization.sensitivity and options.quantization.quantize is QuantizeMode.INT8), ("per_layer", options.parity.per_layer))
    return [(f"the Model Explorer {kind.replace('_', '-')} overlay", overlay_path(tflite_path, kind)) for kind, on in wanted if on]


def side_outputs(options: ExportOptions) -> list[tuple[str, Path]]:
    named = (("--junit", options.outputs.junit), ("--per-layer-plot", options.outputs.per_layer_plot))
    return [(label, Path(value)) for label, value in named if value]


def input_paths(model: Any, options: ExportOptions) -> list[tuple[str, Path]]:
    """Every file a run reads, so that no artifact path can replace one."""
    from ..loading.sources import is_module_reference

    inputs = []
    if isinstance(model, (str, Path)) and not is_module_reference(str(model)):
        inputs.append(("the model", Path(model)))
    named = (("--weights", options.inputs.weights), ("--calibration-data", options.quantization.calibration_data), ("--baseline", options.outputs.baseline))
    labels = [(f"--labels {name}" if name else "--labels", Path(path)) for name, path in options.parity.labels or ()]
    return inputs + [(label, Path(value)) for label, value in named if value] + labels


def check_side_outputs(options: ExportOptions, created: list[Path] | None = None) -> None:
    """Fail on unwritable extra outputs or a bad baseline before minutes of work, not after."""
    for extra in (options.outputs.junit, options.outputs.per_layer_plot):
        if extra:
            check_writable_folder(Path(extra), created)
    if options.outputs.per_layer_plot and not options.parity.per_layer:
        raise UsageError("--per-layer-plot needs --per-layer.", "Add --per-layer.")
    if options.outputs.baseline:
        from ..reports.json_report import load_report

        load_report(options.outputs.baseline)
    if options.parity.labels:
        from ..validators.output_kinds import read_labels

        for _, path in options.parity.labels:
            read_labels(path)  # missing or empty: exit 2 now; the class count is checked at parity


@dataclass(frozen=True)
class RunPaths:
    """The files every run writes: the model and its two reports."""

    tflite: Path
    report_json: Path
    report_markdown: Path


@dataclass(frozen=True)
class RunPlan:
    """What a run writes and reads, planned before any work (``run_shell`` checks them apart):
    ``outputs`` every file the run may write, ``artifacts`` those its stages return (the reports and
    side outputs are the parent's own), ``folders`` the folders made before the body runs."""

    paths: RunPaths
    outputs: tuple[tuple[str, Path], ...]
    inputs: tuple[tuple[str, Path], ...]
    artifacts: tuple[tuple[str, Path], ...]
    folders: tuple[Path, ...]


def export_plan(model: Any, options: ExportOptions, target: Any, output: str | Path | None) -> RunPlan:
    """The export's paths: the .tflite, its reports, the test vectors and overlays asked for, the
    target's own files (``TargetPlugin.output_paths``) and --junit/--per-layer-plot."""
    source_text = "<in-memory module>" if not isinstance(model, (str, Path)) else str(model)
    tflite_path = tflite_output_path(source_text, output)
    json_path, md_path = report_paths(tflite_path)
    outputs = [
        ("the .tflite (-o/--output)", tflite_path),
        ("the JSON report (named after -o)", json_path),
        ("the Markdown report (named after -o)", md_path),
    ]
    target_outputs = target.output_paths(options, tflite_path)
    if options.outputs.emit_test_vectors:
        from ..artifacts.testdata import test_vectors_path

        outputs.append(("the test vectors (--emit-test-vectors)", test_vectors_path(tflite_path)))
    outputs += overlay_outputs(options, tflite_path)
    return RunPlan(
        RunPaths(tflite_path, json_path, md_path), tuple(outputs + target_outputs + side_outputs(options)), tuple(input_paths(model, options)),
        tuple(outputs + target_outputs), (tflite_path, *(path for _, path in target_outputs)),
    )


def validate_plan(tflite_path: Path, reference: Any, options: ExportOptions, report_prefix: str | Path | None, names_path: Path | None) -> RunPlan:
    """``validate``'s paths: its two reports (``<stem>.validate.report.*``, or at --report), the
    Model Explorer overlays asked for (named after --report) and --junit/--per-layer-plot; read:
    the flatbuffer, its tensor-name map, the reference and the option files."""
    from ..reports.model_explorer import overlay_path

    prefix, json_path, md_path = validate_report_paths(tflite_path, report_prefix)
    overlays = [(f"the Model Explorer {kind} overlay (named after --report)", overlay_path(Path(f"{prefix}.tflite"), kind))
                for kind, on in (("sensitivity", options.quantization.sensitivity), ("per_layer", options.parity.per_layer)) if on]
    reports = [("the JSON report (--report)", json_path), ("the Markdown report (--report)", md_path)]
    read = [("the flatbuffer to validate", tflite_path)]
    if names_path is not None:
        read.append(("the tensor-name map", names_path))
    return RunPlan(
        RunPaths(tflite_path, json_path, md_path), tuple(reports + overlays + side_outputs(options)),
        tuple(read + input_paths(reference, options)), tuple(overlays), (json_path,),
    )
