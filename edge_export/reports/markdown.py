"""The Markdown report, fit for a CI job summary: verdict first, then outputs, then details.

It reads the typed run report (``reports.model.RunReport``) and the stage results it holds
(``ParityResult``, ``LayerParityReport``, ``QuantizationResult``, ``EdgeTPUReport``, ``MicroSection``...);
it never recomputes a verdict. Numbers are shown as the JSON report has them (``_plain``: a numpy
scalar as a Python number, a non-finite float as no value), so the Markdown and the JSON agree.
A target section's plugin keys (``TargetSection.extra``) are in the JSON only.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .model import SkippedValidation
from ..output.serialize import to_json_value as _plain
from ..output.text_safety import code_span, escape_markdown, kotlin_string

if TYPE_CHECKING:
    from ..constraints import PinnedSetCheck
    from ..runtime.latency import HostLatency
    from ..quantization import QuantizationResult
    from ..quantization.mixed_precision import MixedPrecisionReport
    from ..quantization.sensitivity import SensitivityReport
    from ..validators.layers import LayerParityReport
    from ..validators.parity import ParityResult
    from ..validators.runtimes import RuntimeComparison
    from .model import AppSection, ArtifactsSection, FlatbufferSection, MetadataSection, RunReport, TargetSection

__all__ = ["render_markdown"]

_ICON = {"passed": "✅ PASSED", "failed": "❌ FAILED", "exported-unvalidated": "⚠️ EXPORTED, NOT VALIDATED"}


_code = code_span


_e = escape_markdown


def _fmt(value: Any, digits: int = 4) -> str:
    value = _plain(value)  # as the JSON has it: NaN is no value
    if value is None:
        return "–"
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}" if abs(value) >= 1 else f"{value:.{digits}f}"
    return _e(value)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render_markdown(report: RunReport) -> str:
    """The report as Markdown: the verdict, the outputs, then one section per stage result the run has."""
    lines = _headline(report)
    val = report.validation
    if not isinstance(val, SkippedValidation) and val.outputs:
        lines.extend(_outputs_section(val))
    if report.language_model is not None:
        from ..plugins.report_sections import run_section

        lines.extend(run_section("language_model").markdown(report.language_model))
    if report.accuracy is not None:
        from ..validators.accuracy import markdown_lines as accuracy_lines

        lines.extend(accuracy_lines(report.accuracy, _e))
    sections = (
        (report.runtimes, _runtimes_section), (report.per_layer, _layer_section), (report.quantization, _quant_section),
        (report.sensitivity, _sensitivity_section), (report.mixed_precision, _mixed_precision_section),
        (report.host_latency, _host_latency_section),
    )
    for value, render in sections:
        if value is not None:
            lines.extend(render(value))
    if report.target is not None:
        lines.extend(_target_section(report.target, report.artifacts))
    if report.metadata is not None:
        lines.extend(_metadata_section(report.metadata))
    if report.app is not None:
        lines.extend(_app_section(report.app, report.artifacts.tflite))
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


_METRIC_COLUMNS = (
    ("max abs err", "max_abs_error", 4),
    ("rel L2", "relative_l2_error", 4),
    ("cosine", "cosine", 6),
    ("SQNR dB", "sqnr_db", 4),
    ("top-1", "top1_agreement", 4),
    ("top-5", "top5_agreement", 4),
    ("worst-sample cosine", "worst_sample_cosine", 6),
    ("neighbours", "neighbour_agreement", 4),
)
# Only a table with a probabilities output has these columns (ordinary reports keep theirs).
_PROBABILITY_COLUMNS = (
    ("probability err", "probability_error", 4),
    ("decisions", "decision_agreement", 4),
    ("decisions at 0.5", "threshold_agreement", 4),
)
# Which thresholds gate which kind of output (config.KIND_THRESHOLDS, restated: reports never import
# the pipeline's modules) and how each reads in the Markdown.
_GATES_BY_KIND = {
    "classification": ("atol", "min_sqnr_db", "min_cosine", "max_rel_l2", "max_error_steps", "min_top1", "min_top5"),
    "embedding": ("min_cosine", "min_neighbour_agreement"),
    "regression": ("atol", "min_sqnr_db", "max_rel_l2", "max_error_steps"),
    "probabilities": ("atol", "min_sqnr_db", "max_rel_l2", "max_error_steps", "max_probability_error", "min_decision_agreement"),
}
_GATE_TEXT = {
    "atol": "max abs error ≤ {}",
    "min_sqnr_db": "SQNR ≥ {} dB",
    "min_cosine": "cosine ≥ {}",
    "max_rel_l2": "rel L2 ≤ {}",
    "max_error_steps": "error ≤ {} output steps",
    "min_top1": "top-1 ≥ {}",
    "min_top5": "top-5 ≥ {} (10+ classes)",
    "min_neighbour_agreement": "neighbour agreement ≥ {}",
    "max_probability_error": "probability error ≤ {}",
    "min_decision_agreement": "decision agreement ≥ {}",
}


def _shape_cell(shape) -> str:
    return _e("×".join(str(d) for d in _plain(shape)))


def _cells(o, columns) -> str:
    """An output's (or part's) metric cells: n/c where it could not be computed."""
    return " | ".join("n/c" if key in o.not_computable else _fmt(o.metrics.get(key), digits) for _, key, digits in columns)


def _outputs_section(val: ParityResult) -> list[str]:
    lines = [f"## Outputs ({_e(val.samples)} samples, {_e(val.runtime)})", ""]
    columns = _METRIC_COLUMNS + (_PROBABILITY_COLUMNS if any("decision_agreement" in o.metrics for o in val.outputs) else ())
    head = ["output", "kind", "shape", *(c[0] for c in columns), "verdict"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for o in val.outputs:
        failed = [c.metric for c in o.checks if c.passed is False]
        failed += [f"{c.metric} of {p.part}" for p in o.failed_parts for c in p.checks if c.passed is False]
        status = "✅" if o.passed else "❌ " + _e(o.error or ", ".join(failed))
        kind_cell = f"{_e(o.kind.value)} ({_e(o.decision.source.value)})"
        lines.append(f"| {_code(o.name)} | {kind_cell} | {_shape_cell(o.shape)} | " + _cells(o, columns) + f" | {status} |")
        for p in o.parts or ():
            shape = [p.stop - p.start if i == p.axis else d for i, d in enumerate(_plain(o.shape))]
            part_status = "✅" if p.passed else "❌ " + _e(", ".join(c.metric for c in p.checks if c.passed is False))
            lines.append(
                f"| ↳ part {_code(p.part)} | max abs {_fmt(p.reference_max_abs)} | {_shape_cell(shape)} | "
                + _cells(p, columns) + f" | {part_status} |"
            )
    lines.append("")
    # n/c cells: why is in the notes (checks that could not be computed) or in the verdict (NaN/Inf)
    for note in val.notes:
        lines.append(f"- {_e(note)}")
    if val.notes:
        lines.append("")
    t = val.thresholds
    kinds = list(dict.fromkeys(o.kind.value for o in val.outputs if o.kind.value in _GATES_BY_KIND))
    for kind in kinds or ["regression"]:
        gates = [_GATE_TEXT[k].format(_plain(getattr(t, k))) for k in _GATES_BY_KIND[kind] if _plain(getattr(t, k)) is not None]
        relative = _plain(getattr(t, "atol_relative", None))
        if relative is not None and gates and gates[0].startswith("max abs error"):  # config.scaled_atol
            gates[0] += f" (or {relative:g} of the output's largest value, if larger)"
        if kind == "embedding":
            gates = [g.replace("cosine", "worst-sample cosine", 1) if g.startswith("cosine") else g for g in gates]
        lines.append(f"Thresholds ({kind}): " + (", ".join(gates) or "none"))
        lines.append("")
    return lines


def _layer_section(layers: LayerParityReport) -> list[str]:
    # a layer whose SQNR is not a number has none (as in the JSON): it is not among the worst
    rows = [r for r in layers.layers if _plain(r.sqnr_db) is not None]
    out = [f"## Layers ({len(layers.layers)} compared, {layers.match_fraction:.0%} of modules matched)", ""]
    jump = layers.first_jump
    if jump is not None:
        out.append(
            f"The error first jumps at **{_code(jump.module_path)}** ({_e(jump.module_type)}): "
            f"SQNR {_fmt(jump.sqnr_db)} dB. This is the likely culprit."
        )
    else:
        out.append("No layer shows a jump in error.")
    out.append("")
    worst = sorted(rows, key=lambda r: _plain(r.sqnr_db))[:5]
    if worst:
        out.append("Worst layers:")
        out.append("")
        out.append("| # | module | type | op | SQNR dB | cosine |")
        out.append("|---|---|---|---|---|---|")
        for r in worst:
            fused = f" (+ fused {_e(', '.join(r.fused_modules))})" if r.fused_modules else ""
            out.append(
                f"| {_e(r.position)} | {_code(r.module_path)}{fused} | {_e(r.module_type)} | {_e(r.opcode)} | "
                f"{_fmt(r.sqnr_db)} | {_fmt(r.cosine, 6)} |"
            )
        out.append("")
    out.append(f"{layers.tensors_unmatched or 0} flatbuffer tensor(s) could not be matched to a PyTorch module.")
    out.append("")
    return out


def _quant_section(q: QuantizationResult) -> list[str]:
    out = ["## Quantization", ""]
    out.append(f"- mode **{_e(q.mode.value)}**, backend **{_e(q.backend)}** ({_e(q.recipe)}, observer {_e(q.observer)}): {_e(q.reason)}")
    cal = q.calibration
    real = "real data" if cal.real_data else "**synthetic inputs (not real data)**"
    out.append(f"- calibrated on {_e(cal.samples)} samples of {real} from {_code(cal.source)}")
    out.append(f"- fully integer: **{q.fully_integer}**")
    for t in q.integer_check.float_tensors[:20]:
        out.append(f"  - float tensor {_code(t.name)} ({_e(t.dtype)}) from module {_code(t.module)}")
    for op in q.integer_check.inner_quantize_ops[:20]:
        out.append(f"  - {_e(op.opcode)} #{_e(op.index)} inside the graph, from module {_code(op.module)}")
    for op in q.integer_check.float_operators[:20]:
        out.append(f"  - {_e(op.opcode)} #{_e(op.index)} computes in float, from module {_code(op.module)}")
    for w in q.warnings:
        out.append(f"- ⚠️ {_e(w)}")
    budget = q.time_budget
    if budget is not None:
        spent = "**spent**: the best model found before it is the one kept" if budget.exhausted else "not spent"
        out.append(f"- time budget {_fmt(budget.seconds)} s, used {_fmt(round(budget.used_seconds, 1))} s: {spent}")
        out.extend(f"  - not tried: {_e(what)}" for what in budget.skipped)
    out.append("")
    out.append("| tensor | dtype | scale | zero point |")
    out.append("|---|---|---|---|")
    for x in q.io:
        out.append(f"| {_e(x.kind)} {_code(x.name)} | {_e(x.dtype)} | {_fmt(x.scale, 6)} | {_e(_plain(x.zero_point))} |")
    out.append("")
    if q.attempts:
        out.append("| backend tried | ok | fully integer | SQNR dB (calibration inputs) | seconds | error |")
        out.append("|---|---|---|---|---|---|")
        for a in q.attempts:
            out.append(
                f"| {_e(a.backend)} | {_e(a.ok)} | {_e(a.fully_integer)} | {_fmt(a.sqnr_db)} | "
                # seconds as the JSON has them: rounded to the millisecond (BackendAttempt's json_field)
                f"{_fmt(round(a.seconds, 3), 3)} | {_e(a.error or '')} |"
            )
        out.append("")
    return out


def _module_cell(module_path: str | None, module_type: str | None, source: str | None) -> str:
    if module_path is None:
        return "–"
    cell = f"{_code(module_path or '<model>')} ({_e(module_type)})"
    return cell + (f" at {_code(source)}" if source else "")


_SENSITIVITY_METHOD_TEXT = {
    "only-quantized": "output SQNR with only this operator quantized to int8 (lower: costs more)",
    "only-float": "output SQNR with only this operator left in float (higher gain: matters more)",
}


def _sensitivity_section(s: SensitivityReport, rows: int = 10) -> list[str]:
    out = [f"## Sensitivity ({len(s.layers)} operators, {_e(s.samples)} samples, {_fmt(round(s.seconds, 3), 3)} s)", ""]
    method = _SENSITIVITY_METHOD_TEXT.get(s.method) or _e(s.method)
    out.append(f"Ranked by {method}; every operator at int8: {_fmt(s.int8_sqnr_db)} dB.")
    out.append("")
    if s.layers:
        out.append("| rank | module | op | SQNR dB |" + (" gain dB |" if s.method == "only-float" else ""))
        out.append("|---|---|---|---|" + ("---|" if s.method == "only-float" else ""))
        for layer in s.layers[:rows]:
            gain = f" {_fmt(layer.gain_db)} |" if s.method == "only-float" else ""
            out.append(
                f"| {_e(layer.rank)} | {_module_cell(layer.module_path, layer.module_type, layer.source)} | "
                f"{_e(layer.opcode)} #{_e(layer.op_index)} | {_fmt(layer.sqnr_db)} |{gain}"
            )
        if len(s.layers) > rows:
            out.append("")
            out.append(f"{len(s.layers) - rows} more in the JSON report.")
        out.append("")
    if s.overlay:
        out.append(f"Model Explorer overlay: {_code(s.overlay)} (add it as per-node data).")
        out.append("")
    for note in s.notes:
        out.append(f"- {_e(note)}")
    if s.notes:
        out.append("")
    return out


def _mixed_precision_section(m: MixedPrecisionReport) -> list[str]:
    verdict = "met" if m.met else "**not met**"
    out = [f"## Mixed precision ({_e(m.mode)}: operators raised to {_e(m.precision)})", ""]
    out.append(f"- target {m.target.describe()}: {verdict}; {_e(m.reason)}")  # numbers only: nothing to escape
    out.append(
        f"- held-out SQNR {_fmt(m.int8_sqnr_db)} dB at int8 → {_fmt(m.sqnr_db)} dB kept; size "
        f"{_e(_plain(m.int8_size_bytes))} → {_e(_plain(m.size_bytes))} bytes; host latency (XNNPACK, 1 thread) "
        f"{_fmt(m.int8_latency_ms)} → {_fmt(m.latency_ms)} ms; fully integer: {_e(m.fully_integer)}"
    )
    split = [p for p in m.promoted if p.precision == "int16+split-weights"]
    if split:
        out.append(
            f"- int8 weights split in two int8 halves (W = W\\_hi + W\\_lo: two int8-weight operators and an ADD each) for "
            f"{len(split)} operator(s), after every operator at int16 still missed the target: rows `int16+split-weights`"
        )
    out.append("")
    if m.promoted:
        out.append(f"Promotion order: {_e(m.order)}. Operators promoted in one step share its size and latency change.")
        out.append("")
        out.append("| step | module | op | sensitivity rank | to | SQNR before dB | after dB | size Δ bytes | latency Δ ms |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for p in m.promoted:
            latency = "–" if p.latency_delta_ms is None else f"{p.latency_delta_ms:+.3f}"
            out.append(
                f"| {_e(p.step)} | {_module_cell(p.module_path, p.module_type, p.source)} | {_e(p.opcode)} #{_e(p.op_index)} | "
                f"{_e(p.sensitivity_rank)} | {_e(p.precision)} | {_fmt(p.sqnr_before_db)} | {_fmt(p.sqnr_after_db)} | "
                f"{_e(_plain(p.size_delta_bytes))} | {latency} |"  # a number formatted here: nothing to escape
            )
        out.append("")
    return out


def _host_latency_section(h: HostLatency) -> list[str]:
    out = [f"## Host latency ({_e(h.runtime)})", ""]
    out.append(
        f"- {_e(h.quantize)}: {_fmt(h.quantized_ms)} ms; fp32: {_fmt(h.float_ms)} ms (medians of {h.runs} interleaved runs "
        f"after {h.warmup} warm-up, on {_e(h.host)}); ratio {h.ratio:.2f}x"
    )
    if h.note:
        out.append(f"- **Warning:** {_e(h.note)}")
    out.append("- Reported, not a gate: a host CPU says how two variants compare here, not how fast a phone runs them.")
    out.append("")
    return out


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


def _runtimes_section(runtimes: RuntimeComparison) -> list[str]:
    out = ["## Runtimes", ""]
    for result in runtimes.results:
        worst = result.worst()
        sqnr = f", worst SQNR {_fmt(worst.sqnr_db)} dB" if worst is not None else ""
        out.append(f"- {_e(result.runtime)}: parity {_e(result.status)}{_e(sqnr)}")
    for d in runtimes.differences:
        same = "bit-identical" if d.identical else f"max difference {_fmt(d.max_abs_difference)} (tolerance {_fmt(d.tolerance)})"
        out.append(f"- output {_code(d.output)} between the runtimes: {_e(same)}")
    for finding in runtimes.findings():
        out.append(f"- **finding:** {_e(finding)}")
    out.append("")
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


# ---- "Use it in an app": the signature as an app calls it, and a Kotlin example ---------------

# TensorBuffer's typed writers and readers (LiteRT 2.x Kotlin API) per tensor dtype.
_KOTLIN_IO = {
    "float32": ("writeFloat", "FloatArray", "readFloat"),
    "int8": ("writeInt8", "ByteArray", "readInt8"),
    "uint8": ("writeInt8", "ByteArray", "readInt8"),  # the same bytes; Kotlin has no unsigned arrays here
    "int32": ("writeInt", "IntArray", "readInt"),
    "bool": ("writeBoolean", "BooleanArray", "readBoolean"),
}


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


def _elements(shape) -> int:
    n = 1
    for d in _plain(shape):
        n *= max(int(d), 1)
    return n


def _signed(n: int) -> str:
    """`` + 3``, `` - 128`` or nothing (0): a zero point added in a formula."""
    return f" - {-int(n)}" if int(n) < 0 else (f" + {int(n)}" if int(n) else "")


def _kotlin_example(app: AppSection, model_file: str) -> list[str]:
    signature = app.signature_key
    out = [
        "```kotlin",
        "// LiteRT 2.x (Maven com.google.ai.edge.litert:litert), CompiledModel API; the .tflite in assets/",
        "import com.google.ai.edge.litert.Accelerator",
        "import com.google.ai.edge.litert.CompiledModel",
        "",
        f"val model = CompiledModel.create(context.assets, {kotlin_string(model_file)}, CompiledModel.Options(Accelerator.CPU))",
    ]
    if signature is not None:
        # By name: the signature's own lists are in name order, not forward()'s.
        out.append(f"val signature = {kotlin_string(signature)}")
        out.append("val inputs = mapOf(")
        out += [f"    {kotlin_string(t.name)} to model.createInputBuffer({kotlin_string(t.name)}, signature)," for t in app.inputs]
        out.append(")")
        out.append("val outputs = mapOf(")
        out += [f"    {kotlin_string(t.name)} to model.createOutputBuffer({kotlin_string(t.name)}, signature)," for t in app.outputs]
        out.append(")")
    else:
        out.append("val inputs = model.createInputBuffers()  // no signature: by position")
        out.append("val outputs = model.createOutputBuffers()")

    def buffer(kind: str, i: int, t) -> str:
        return f"{kind}.getValue({kotlin_string(t.name)})" if signature is not None else f"{kind}[{i}]"

    for i, t in enumerate(app.inputs):
        write, array, _ = _KOTLIN_IO.get(t.dtype, ("writeFloat", "FloatArray", "readFloat"))
        quant = f", q = round(x / {_plain(t.scale)}){_signed(t.zero_point)}" if t.scale is not None else ""
        out.append(f"// input {i}: {t.dtype} {list(_plain(t.shape))} {t.layout}{quant}")
        out.append(f"{buffer('inputs', i, t)}.{write}({array}({_elements(t.shape)}))  // your data")
    out.append("model.run(inputs, outputs, signature)" if signature is not None else "model.run(inputs, outputs)")
    for k, t in enumerate(app.outputs):
        _, _, read = _KOTLIN_IO.get(t.dtype, ("writeFloat", "FloatArray", "readFloat"))
        q = f"(q{_signed(-t.zero_point)})" if t.scale is not None and t.zero_point else "q"
        quant = f", x = {q} * {_plain(t.scale)}" if t.scale is not None else ""
        out.append(f"// output {k}: {t.dtype} {list(_plain(t.shape))} {t.layout}{quant}")
        out.append(f"val output{k} = {buffer('outputs', k, t)}.{read}()")
    out.append("```")
    # Names are literals of printable ASCII already; a dtype or layout read from a file is kept to
    # the same characters, so nothing can end the code block.
    return [re.sub(r"[^ -~]", "?", line) for line in out]


def _app_section(app: AppSection, tflite: str) -> list[str]:
    from pathlib import PurePath

    out = ["## Use it in an app", ""]
    if app.signature_key is not None:
        out.append(
            f"Signature {_code(app.signature_key)}: look inputs and outputs up by these names (LiteRT 2.x "
            "<code>CompiledModel</code>, or the Interpreter's signature runner)."
        )
    else:
        out.append("The model has no signature: apps address its inputs and outputs by position.")
    out.append("")
    out.append("| | name | dtype | shape | layout | scale | zero point |")
    out.append("|---|---|---|---|---|---|---|")
    for side, tensors in (("input", app.inputs), ("output", app.outputs)):
        for t in tensors:
            out.append(
                f"| {side} | {_code(t.name)} | {_e(t.dtype)} | {_e('×'.join(str(d) for d in _plain(t.shape)))} | "
                # the scale in full (as the JSON has it): an app quantizes with it
                f"{_e(t.layout)} | {_e(_plain(t.scale)) if t.scale is not None else '–'} | "
                f"{_e(_plain(t.zero_point)) if t.zero_point is not None else '–'} |"
            )
    out.append("")
    if any(t.scale is not None for t in (*app.inputs, *app.outputs)):
        out.append("Quantized tensors: feed <code>q = round(x / scale) + zero_point</code>, read <code>x = (q - zero_point) * scale</code>.")
        out.append("")
    out += _kotlin_example(app, PurePath(tflite).name)
    out.append("")
    return out
