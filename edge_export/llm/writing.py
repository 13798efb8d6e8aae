"""The language model's RunReport, and every artifact written together (or none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..reports.model import ArtifactsSection, ExportSection, ModelSection, RunReport, SkippedValidation
from ..stages.assemble import flatbuffer_section, tool_header
from .report import LanguageModelSection
from .result import LanguageModelResult

__all__ = ["MODEL_KIND", "build_run_report", "write_language_model"]

MODEL_KIND = "hf_directory"  # the report's model.kind for a Hugging Face directory or reference


def _language_model_libraries() -> dict[str, str | None]:
    """The libraries that decide a language model's result besides the pinned four."""
    from importlib import metadata

    found: dict[str, str | None] = {}
    for dist in ("transformers", "litert-lm-builder", "litert-lm-api"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def build_run_report(source: str, class_name: str, paths: dict, tflite: bytes, section: LanguageModelSection, stages, junit: str | None) -> RunReport:
    from ..flatbuffer import read_flatbuffer

    header = tool_header()
    header["libraries"] = {**header["libraries"], **_language_model_libraries()}
    return RunReport(
        **header,
        model=ModelSection(source, MODEL_KIND, class_name), inputs=(),
        export=ExportSection(section.chosen, "cpu", False, (), (), False, None, False),
        artifacts=ArtifactsSection(str(paths["tflite"]), str(paths["json"]), str(paths["md"]), junit, {"litertlm": str(paths["litertlm"])}),
        flatbuffer=flatbuffer_section(read_flatbuffer(tflite, "the exported language model")), stages=tuple(stages.times),
        validation=SkippedValidation("a language model: its parity against transformers is the language_model section"),
        language_model=section,
    )


def write_language_model(source: str, class_name: str, paths: dict, tflite: bytes, litertlm: bytes, section: LanguageModelSection, stages, options) -> Any:
    """Every artifact committed together (stages/write.py: the reports rendered from the typed report)."""
    from ..stages.paths import RunPaths
    from ..stages.write import write_run

    # the .litertlm holds the same flatbuffer: a second copy beside it only when asked (--write-tflite);
    # without it the report's model artifact (artifacts.tflite) is the .litertlm
    model_path = Path(paths["tflite"] if options.write_tflite else paths["litertlm"])
    files = [(paths["tflite"], tflite)] if options.write_tflite else []
    report = build_run_report(source, class_name, {**paths, "tflite": model_path}, tflite, section, stages, options.junit)
    run_paths = RunPaths(model_path, Path(paths["json"]), Path(paths["md"]))
    written = write_run(report, [*files, (paths["litertlm"], litertlm)], stages, run_paths, junit=options.junit)
    return LanguageModelResult(written.tflite_path, written.report_json_path, written.report_md_path, report, litertlm_path=paths["litertlm"])
