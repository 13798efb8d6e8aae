"""Where a run writes and what it reads: every output path is planned and checked against every
input before any work, so no artifact can replace an input and a bad folder fails in seconds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..output.atomic_files import check_outputs_apart, check_writable_folder
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


def export_paths(model: Any, options: ExportOptions, target: Any, output: str | Path | None) -> tuple[RunPaths, list[tuple[str, Path]], list[tuple[str, Path]]]:
    """The export's paths, checked apart from every input: (the run's paths, every artifact the run
    may write as (label, path), the target's own among them)."""
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
    check_outputs_apart(outputs + target_outputs + side_outputs(options), input_paths(model, options))
    return RunPaths(tflite_path, json_path, md_path), outputs + target_outputs, target_outputs
