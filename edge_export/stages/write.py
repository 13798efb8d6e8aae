"""The write stage: every artifact of a run committed together (atomic_files.ArtifactSet), or none."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from ..output.atomic_files import ArtifactSet, check_writable_folder
from ..errors import EXIT_OK
from ..reports.model import RunReport
from .clock import StageClock
from .paths import RunPaths


@dataclass(frozen=True)
class ExportResult:
    tflite_path: Path
    report_json_path: Path
    report_md_path: Path
    run_report: RunReport = field(repr=False)  # the typed report; ``report`` is its JSON form

    @functools.cached_property
    def report(self) -> dict:
        """The report as written to ``report_json_path`` (the published JSON schema)."""
        from ..output.serialize import to_json_value

        return to_json_value(self.run_report)

    @property
    def verdict(self) -> str:
        return self.run_report.verdict

    @property
    def exit_code(self) -> int:
        """What the CLI exits with: 1 when a check failed, else 0 (errors.exit_code_for_verdict)."""
        return self.run_report.exit_code

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def parity(self) -> dict | None:
        return self.report.get("validation")


def write_run(
    report: RunReport, files: Sequence[tuple[Path, bytes]], stages: StageClock, paths: RunPaths, *,
    junit: str | Path | None = None, per_layer_plot: str | Path | None = None,
) -> ExportResult:
    """The atomic write of every artifact: the model files given, then the renderings of the report
    at ``paths``, the caller's own. A report built in a confined child names paths too, but
    nothing it says decides where a file goes: its artifacts section is set to these. ``junit`` and
    ``per_layer_plot``: the paths of --junit and --per-layer-plot, when given."""
    from ..reports.json_report import render_json
    from ..reports.markdown import render_markdown

    json_path, md_path = Path(paths.report_json), Path(paths.report_markdown)
    artifacts = replace(report.artifacts, tflite=str(paths.tflite), report_json=str(json_path), report_markdown=str(md_path), junit=str(junit) if junit else None)
    report = replace(report, artifacts=artifacts)
    result = ExportResult(Path(paths.tflite), json_path, md_path, report)
    layers = report.per_layer
    data = result.report  # the JSON form, computed once: written and returned
    with stages.run("write", "Writing artifacts"):
        with ArtifactSet() as artifacts:
            for path, content in files:
                artifacts.add(path, content)
            artifacts.add(json_path, render_json(data))
            artifacts.add(md_path, render_markdown(report))
            if layers is not None and per_layer_plot:
                artifacts.add(per_layer_plot, plot_bytes(layers, report.sensitivity))
            if junit:
                from ..reports.junit import render_junit

                check_writable_folder(Path(junit))
                artifacts.add(junit, render_junit(report))
            artifacts.commit()
    return result


def plot_bytes(layers: Any, sensitivity: Any = None) -> bytes:
    import tempfile

    from ..validators.layer_plot import plot_layer_sqnr

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layers.png"
        plot_layer_sqnr(layers, path, sensitivity)
        return path.read_bytes()
