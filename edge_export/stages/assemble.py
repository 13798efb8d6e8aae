"""Report assembly: the typed RunReport's shared parts (what ran on what, the flatbuffer, the app's
view of the signature, the baseline), built from the stages' results."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any, Sequence

from ..version import __version__
from ..config import InputSpec
from ..options import ExportOptions
from ..reports.model import BaselineSection, FlatbufferSection, InputSection, ModelSection, RunReport, SkippedValidation, ToolSection

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel


def library_fields() -> dict:
    """The RunReport's ``libraries`` (the versions in use) and ``pinned_set`` (them against the tested set)."""
    from ..constraints import check_pinned_set, library_versions

    versions = library_versions()
    return {"libraries": versions, "pinned_set": check_pinned_set(versions)}


def tool_header() -> dict:
    """The RunReport fields every report starts with: the tool, the libraries and the time."""
    return {"tool": ToolSection(__version__), **library_fields(), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def run_header(loaded: Any, specs: list[InputSpec], plan: Any) -> dict:
    """The RunReport fields that say what ran on what: tool, libraries, time, model and inputs."""
    return {
        **tool_header(),
        "model": ModelSection(loaded.source, loaded.kind.value, loaded.class_name),
        "inputs": tuple(
            InputSection(s.name, tuple(s.shape), s.dtype, "NHWC" if i in plan.inputs else None) for i, s in enumerate(specs)
        ),
    }


def flatbuffer_section(fb: FlatbufferModel, named: FlatbufferModel | None = None) -> FlatbufferSection:
    from ..conversion.transpose_report import find_transposes

    return FlatbufferSection(
        size_bytes=fb.size_bytes,
        sha256=hashlib.sha256(fb.data).hexdigest(),
        num_operators=fb.num_operators,
        op_counts=dict(fb.op_counts),
        num_tensors=len(fb.tensors),
        num_subgraphs=fb.num_subgraphs,
        min_runtime_version=fb.min_runtime_version,
        inputs=tuple(fb.input_tensors),
        outputs=tuple(fb.output_tensors),
        fully_integer=fb.is_fully_integer,
        transposes=find_transposes(fb, named),
    )


def app_section(fb: FlatbufferModel, channels_last_inputs: Sequence[int], channels_last_outputs: Sequence[int]) -> Any:
    """What an app calls: the signature key and each input and output by its signature name."""
    from ..reports.model import AppSection, AppTensor
    from ..artifacts.testdata import signature_tensors

    def rows(tensors: Sequence[Any]) -> tuple[AppTensor, ...]:
        return tuple(AppTensor(t.name, t.dtype, t.shape, t.layout, t.scale, t.zero_point) for t in tensors)

    inputs, outputs = signature_tensors(fb, channels_last_inputs, channels_last_outputs)
    key = fb.signatures[0]["key"] if fb.signatures else None
    return AppSection(signature_key=key or None, inputs=rows(inputs), outputs=rows(outputs))


def validation_section(parity: Any) -> Any:
    return parity if parity is not None else SkippedValidation("--no-validate was given")


def with_baseline(report: RunReport, baseline: str | None) -> RunReport:
    """The report with its baseline section (--baseline): the regressions against an earlier report."""
    if not baseline:
        return report
    from dataclasses import replace

    from ..reports.baseline import compare_with_baseline
    from ..reports.json_report import load_report

    regressions = compare_with_baseline(report, load_report(baseline))
    return replace(report, baseline=BaselineSection(str(baseline), tuple(regressions)))


def export_report(run: Any, options: ExportOptions, target: Any, paths: Any, clock: Any) -> RunReport:
    """The export's RunReport from the stages' results (``run``: an ``ExportStages``), before the
    target's ``finish``."""
    from ..config import IODtype
    from ..reports.model import ArtifactsSection, ExportSection, TargetSection

    converted, checked, validated, finished = run.converted, run.checked, run.validated, run.finished
    prepared = converted.prepared
    plan = prepared.plan
    export_section = ExportSection(
        quantize=options.quantization.quantize.value,
        target=target.name,
        channels_last=options.layout.channels_last,
        channels_last_inputs=tuple(plan.inputs),
        channels_last_outputs=tuple(plan.outputs),
        strict=options.inputs.strict,
        io_dtype=(options.layout.io_dtype or IODtype.FLOAT32).value if options.quantization.quantize.is_integer else None,
        strip_names=options.outputs.strip_names,
        size_bytes_with_names=finished.named_model.size_bytes if options.outputs.strip_names else None,
    )
    extra = {a.key: str(a.path) for a in (*checked.checked.artifacts, *finished.artifacts)}
    report = RunReport(
        **run_header(prepared.loaded.loaded, prepared.loaded.specs, plan),
        export=export_section,
        quantization=converted.quantization,
        target=TargetSection.from_hooks(checked.target_entries) if target.writes_target_section(checked.target_entries) else None,
        artifacts=ArtifactsSection(str(paths.tflite), str(paths.report_json), str(paths.report_markdown), str(options.outputs.junit) if options.outputs.junit else None, extra),
        flatbuffer=flatbuffer_section(finished.model, named=finished.named_model),
        stages=tuple(clock.times),
        validation=validation_section(validated.parity),
        runtimes=validated.runtimes,
        per_layer=validated.layers,
        metadata=finished.metadata,
        app=app_section(finished.model, plan.inputs, plan.outputs),
        sensitivity=finished.sensitivity,
        mixed_precision=converted.mixed_precision,
        host_latency=run.host_latency,
        accuracy=validated.accuracy,
    )
    return with_baseline(report, options.outputs.baseline)


def finish_with_target(report: RunReport, run: Any, options: ExportOptions, target: Any, tflite_path: Any) -> tuple[RunReport, list]:
    """The target's last word, on the file as written (e.g. budgets on its final size, the micro
    target's tensor-name map and C bundle); then every file the run writes besides its reports."""
    from dataclasses import replace

    from ..targets.base import FinishedRun

    checked, finished = run.checked, run.finished
    source = checked.converted.prepared.base_module
    hook_input = FinishedRun(finished.model, finished.named_model, report, checked.checked, options, tflite_path,
                             samples=run.validated.samples, source_module=source)
    done = target.finish(hook_input)
    if done.report:
        report = hook_input.report_with(done.report)
    if done.artifacts:
        listed = {**report.artifacts.extra, **{a.key: str(a.path) for a in done.artifacts}}
        report = replace(report, artifacts=replace(report.artifacts, extra=listed))
    artifacts = (*checked.checked.artifacts, *finished.artifacts, *done.artifacts)
    return report, [(tflite_path, finished.model.data)] + [(a.path, a.data) for a in artifacts]
