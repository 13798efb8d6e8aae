"""The language model's RunReport, and every artifact written together (or none)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from ..reports.model import ArtifactsSection, ExportSection, FlatbufferSection, ModelSection, RunReport, SkippedValidation, ToolSection
from .report import LanguageModelSection

__all__ = ["MODEL_KIND", "build_run_report", "write_language_model"]

MODEL_KIND = "hf_directory"  # the report's model.kind for a Hugging Face directory or reference


def _flatbuffer_section(tflite: bytes) -> FlatbufferSection:
    from ..flatbuffer import read_flatbuffer

    fb = read_flatbuffer(tflite, "the exported language model")
    return FlatbufferSection(
        size_bytes=fb.size_bytes, sha256=hashlib.sha256(tflite).hexdigest(), num_operators=fb.num_operators,
        op_counts=dict(fb.op_counts), num_tensors=len(fb.tensors), num_subgraphs=fb.num_subgraphs,
        min_runtime_version=fb.min_runtime_version, inputs=tuple(fb.input_tensors), outputs=tuple(fb.output_tensors),
        fully_integer=fb.is_fully_integer,
    )


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
    from .. import __version__
    from ..constraints import check_pinned_set, library_versions

    versions = {**library_versions(), **_language_model_libraries()}
    return RunReport(
        tool=ToolSection(__version__), libraries=versions, pinned_set=check_pinned_set(versions),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        model=ModelSection(source, MODEL_KIND, class_name), inputs=(),
        export=ExportSection(section.chosen, "cpu", False, (), (), False, None, False),
        artifacts=ArtifactsSection(str(paths["tflite"]), str(paths["json"]), str(paths["md"]), junit, {"litertlm": str(paths["litertlm"])}),
        flatbuffer=_flatbuffer_section(tflite), stages=tuple(stages.times),
        validation=SkippedValidation("a language model: its parity against transformers is the language_model section"),
        language_model=section,
    )


def write_language_model(source: str, class_name: str, paths: dict, tflite: bytes, litertlm: bytes, section: LanguageModelSection, stages, options) -> Any:
    from ..atomic_files import ArtifactSet
    from ..reports.json_report import render_json
    from ..reports.markdown import render_markdown
    from ..reports.serialize import to_json_value
    from .pipeline import LanguageModelResult

    with stages.run("write", "Writing artifacts"):
        report = build_run_report(source, class_name, paths, tflite, section, stages, options.junit)
        with ArtifactSet() as artifacts:
            artifacts.add(paths["tflite"], tflite)
            artifacts.add(paths["litertlm"], litertlm)
            artifacts.add(paths["json"], render_json(to_json_value(report)))
            artifacts.add(paths["md"], render_markdown(report))
            if options.junit:
                from ..reports.junit import render_junit

                artifacts.add(options.junit, render_junit(report))
            artifacts.commit()
    return LanguageModelResult(paths["tflite"], paths["litertlm"], paths["json"], paths["md"], report)
