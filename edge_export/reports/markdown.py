"""The Markdown report, fit for a CI job summary: verdict first, then outputs, then details.

It reads the typed run report (``reports.model.RunReport``) and the stage results it holds
(``ParityResult``, ``LayerParityReport``, ``QuantizationResult``, ``EdgeTPUReport``, ``MicroSection``...);
it never recomputes a verdict. Numbers are shown as the JSON report has them (``_plain``: a numpy
scalar as a Python number, a non-finite float as no value), so the Markdown and the JSON agree.
A target section's plugin keys (``TargetSection.extra``) are in the JSON only. The parity,
quantization and app sections are in ``markdown_parity.py``, ``markdown_quantization.py`` and
``markdown_app.py``; a target's sections render through their declarations (``ReportSection``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .markdown_app import app_section
from .markdown_cells import fmt as _fmt, human_size as _size
from .markdown_parity import layer_section, outputs_section, runtimes_section
from .markdown_quantization import host_latency_section, mixed_precision_section, quant_section, sensitivity_section
from .model import SkippedValidation
from ..output.serialize import to_json_value as _plain
from ..output.text_safety import code_span, escape_markdown

if TYPE_CHECKING:
    from ..constraints import PinnedSetCheck
    from .model import ArtifactsSection, FlatbufferSection, MetadataSection, RunReport, TargetSection

__all__ = ["render_markdown"]

_ICON = {"passed": "✅ PASSED", "failed": "❌ FAILED", "exported-unvalidated": "⚠️ EXPORTED, NOT VALIDATED"}


_code = code_span


_e = escape_markdown


def render_markdown(report: RunReport) -> str:
    """The report as Markdown: the verdict, the outputs, then one section per stage result the run has."""
    lines = _headline(report)
    val = report.validation
    if not isinstance(val, SkippedValidation) and val.outputs:
        lines.extend(outputs_section(val))
    if report.language_model is not None:
        from ..plugins.report_sections import run_section

        lines.extend(run_section("language_model").markdown(report.language_model))
    if report.accuracy is not None:
        from ..validators.accuracy import markdown_lines as accuracy_lines

        lines.extend(accuracy_lines(report.accuracy, _e))
    sections = (
        (report.runtimes, runtimes_section), (report.per_layer, layer_section), (report.quantization, quant_section),
        (report.sensitivity, sensitivity_section), (report.mixed_precision, mixed_precision_section),
        (report.host_latency, host_latency_section),
    )
    for value, render in sections:
        if value is not None:
            lines.extend(render(value))
    if report.target is not None:
        lines.extend(_target_section(report.target, report.artifacts))
    if report.metadata is not None:
        lines.extend(_metadata_section(report.metadata))
    if report.app is not None:
        lines.extend(app_section(report.app, report.artifacts.tflite))
    lines.extend(_flatbuffer_lines(report.flatbuffer))
    if report.stages:
        lines += ["## Stages", "", " · ".join(f"{_e(s.name)} {s.seconds:.2f} s" for s in report.stages), ""]
    lines.append(
        f"<sub>edge-export {_e(report.tool.version)} · "
        + " · ".join(f"{_e(k)} {_e(v)}" for k, v in report.libraries.items() if v)
        + f" · report schema {_e(report.schema_version)}</sub>"
    )
    return "\n".join(lines) + "\n"


def _headline(report: RunReport) -> list[str]:
    """The verdict, what was exported how, the worst output and the baseline's outcome."""
    model, exp, fb, val = report.model, report.export, report.flatbuffer, report.validation
    lines = [
        f"# edge-export: {_ICON.get(report.verdict, _e(report.verdict))}", "",
        f"{_code(model.source)} ({_e(model.kind)}) → {_code(report.artifacts.tflite)} · "
        f"quantize **{_e(exp.quantize)}** · target **{_e(exp.target)}** · "
        f"{_size(fb.size_bytes)} · {fb.num_operators} ops · exit code {report.exit_code}", "",
    ]
    lines.extend(_pinned_set_lines(report.pinned_set))
    if isinstance(val, SkippedValidation):
        if report.language_model is None:
            lines.append(f"Parity was not checked: {_e(val.reason)}.")
    else:
        worst = val.worst()
        if worst is not None:
            failed = _e(", ".join(worst.failed_checks) or "none")
            lines.append(
                f"Worst output: {_code(worst.output)} ({_e(worst.kind.value)}; "
                f"SQNR {_fmt(worst.sqnr_db)} dB, max abs error "
                f"{_fmt(worst.max_abs_error)}; failed checks: {failed})."
                + (f" Worst part: {_code(worst.part)} (SQNR {_fmt(worst.part_sqnr_db)} dB)." if worst.part else "")
            )
    lines.append("")
    base = report.baseline
    if base is not None:
        if base.regressions:
            lines += [f"**Regressed against the baseline** {_code(base.path)}:", ""]
            lines.extend(f"- {_e(r.message)}" for r in base.regressions)
        else:
            lines.append(f"No regression against the baseline {_code(base.path)}.")
        lines.append("")
    return lines


def _flatbuffer_lines(fb: FlatbufferSection) -> list[str]:
    lines = ["## Flatbuffer", "", f"- size: {_size(fb.size_bytes)} ({fb.size_bytes} bytes), sha256 `{(fb.sha256 or '')[:16]}…`", f"- fully integer: {fb.fully_integer}"]
    for kind, tensors in (("input", fb.inputs), ("output", fb.outputs)):
        for t in tensors:
            q = t.quant
            qs = f", scale {_plain(q.scales[0])}, zero point {_plain(q.zero_points[0])}" if q is not None and not q.per_channel else ""
            lines.append(f"- {kind} {_code(t.name)}: {_e(t.dtype)} {_e(_plain(t.shape))}{_e(qs)}")
    lines += ["", "| operator | count |", "|---|---|"]
    for op, n in fb.op_counts.items():
        lines.append(f"| {_e(op)} | {_e(_plain(n))} |")
    lines.append("")
    lines.extend(_transposes_section(fb.transposes))
    return lines


def _pinned_set_lines(pinned: PinnedSetCheck | None) -> list[str]:
    """A warning when a library that decides the result is not the version edge-export was tested with."""
    if pinned is None or not pinned.mismatches:
        return []
    found = ", ".join(f"{_e(m.name)} {_e(m.installed or 'not installed')} (tested: {_e(m.pinned)})" for m in pinned.mismatches)
    return [
        f"⚠️ **Not the tested library set**: {found}. Results may differ from the tested ones; "
        "`pip install edge-export -c <(edge-export constraints)` installs the tested set.",
        "",
    ]


def _target_section(t: TargetSection, artifacts: ArtifactsSection) -> list[str]:
    """What the target implied and rewrote, then each of its sections as its declaration renders it
    (``ReportSection.markdown``); sections without a renderer are in the JSON only."""
    from ..plugins.report_sections import report_sections_of

    out = [f"## Target: {_e(t.name)}", ""]
    for note in t.implied:
        out.append(f"- {_e(note)}")
    for r in t.rewrites or ():
        line = f" ({_e(r.module_type)})" if r.module_type else ""
        line += f", at {_code(r.source)}" if r.source else ""
        out.append(f"- {'not rewritten' if r.declined else 'rewrite'} {_code(r.module_path)}{line}: {_e(r.kind)} ({_e(r.why)})")
    for section in report_sections_of(t.name):
        value = t.sections.get(section.key)
        if value is not None and section.markdown is not None:
            out += section.markdown(value, t, artifacts)
    return out


def _metadata_section(metadata: MetadataSection) -> list[str]:
    """The TFLite model metadata the run attached: every text in it came from the user or the model."""
    def values(v: tuple[float, ...] | None) -> str:
        return ", ".join(_fmt(x) for x in v) if v else "–"

    out = ["## Model metadata", ""]
    info = [(label, value) for label, value in (
        ("name", metadata.name), ("version", metadata.version), ("author", metadata.author), ("description", metadata.description),
    ) if value]
    out += [f"- {label}: {_e(value)}" for label, value in info]
    added = f", the .tflite grew by {metadata.added_bytes} bytes" if metadata.added_bytes is not None else ""
    out.append(f"- metadata flatbuffer: {metadata.metadata_bytes} bytes (parser version {_e(metadata.min_parser_version)}){_e(added)}")
    if metadata.written_to:
        out.append(f"- written into: {', '.join(_code(p) for p in metadata.written_to)}")
    for f in metadata.associated_files:
        source = f" from {_code(f.source)}" if f.source else ""
        out.append(f"- associated file {_code(f.name)} ({_e(f.type)}, {f.size_bytes} bytes{source}), sha256 `{f.sha256[:16]}…`")
    out += ["", "| tensor | name | kind | normalization mean | normalization std | colour space | labels |", "|---|---|---|---|---|---|---|"]
    for side, rows in (("input", metadata.inputs), ("output", metadata.outputs)):
        for i, t in enumerate(rows):
            labels = f"{_code(t.labels_file)} ({_e(t.labels_count)})" if t.labels_file else "–"
            out.append(
                f"| {side} {i} | {_code(t.name)} | {_e(t.kind)} | {values(t.normalization_mean)} | {values(t.normalization_std)} "
                f"| {_e(t.color_space or '–')} | {labels} |"
            )
    out.append("")
    out += [f"- **note:** {_e(n)}" for n in metadata.notes]
    if metadata.notes:
        out.append("")
    return out


def _transposes_section(transposes) -> list[str]:
    """The TRANSPOSE operators left (flatbuffer.transposes), each with its module."""
    if transposes is None or not transposes.count:
        return []
    out = [
        f"TRANSPOSE operators: {transposes.count} ({transposes.inner} inside the graph, "
        f"{transposes.boundary} at the model's inputs or outputs). Each copies an activation; "
        "one at an input or output goes with --channels-last.",
        "",
        "| operator | shape | perm | where | module |",
        "|---|---|---|---|---|",
    ]
    for site in transposes.sites:
        module = "" if site.module is None else _code(site.module or "<root>") + (f" ({_e(site.module_type)})" if site.module_type else "")
        perm = "" if site.perm is None else _e(",".join(map(str, site.perm)))
        out.append(f"| {site.operator_index} | {_e(_plain(list(site.shape)))} | {perm} | {'boundary' if site.boundary else 'inside'} | {module} |")
    if len(transposes.sites) < transposes.count:
        out.append(f"| … | {transposes.count - len(transposes.sites)} more | | | |")
    out.append("")
    return out
