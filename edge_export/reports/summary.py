"""The terminal summary of a run: a few lines read from the typed report, printed to a rich Console.

Model-supplied text (tensor, output and module names, paths, error messages) is printed literally:
``[/bold]`` in a name is not markup.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.markup import escape

if TYPE_CHECKING:
    from rich.console import Console

    from .model import RunReport

__all__ = ["print_summary", "SummaryLines"]


def _plain(out: Console, text: str) -> None:
    """Print text that holds model-supplied names or paths literally: ``[/bold]`` in a name is not markup."""
    out.print(text, markup=False)


def _number(value: Any) -> float | None:
    """A metric as the JSON report has it: a non-finite value is no value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


def _db(value: Any) -> str:
    number = _number(value)
    return "not measured (NaN)" if number is None else f"{number:.1f} dB"


def _print_transposes(transposes: Any, out: Console) -> None:
    """The TRANSPOSE operators left inside the graph (a copy of an activation each), named by
    module; boundary ones alone (NCHW I/O, a choice the export states) print nothing."""
    if transposes is None or not transposes.inner:
        return
    inner = [s for s in transposes.sites if not s.boundary]
    where = f"; inside the graph: {', '.join(s.describe() for s in inner[:3])}" + (", …" if transposes.inner > 3 else "") if inner else ""
    edges = f", {transposes.boundary} at the inputs/outputs (NCHW I/O: --channels-last removes them)" if transposes.boundary else ""
    _plain(out, f"  layout: {transposes.count} TRANSPOSE ({transposes.inner} inside the graph{edges}){where}")


class SummaryLines:
    """What a target's summary hook (``ReportSection.summary``) writes through: plain lines to the
    summary, alerts to the error stream. Both print model-supplied text literally."""

    def __init__(self, out: Console, err: Console) -> None:
        self._out, self._err = out, err

    def plain(self, text: str) -> None:
        _plain(self._out, text)

    def alert(self, label: str, text: str) -> None:
        """A failed gate: ``label`` in bold red, then ``text`` (escaped)."""
        self._err.print(f"[bold red]{escape(label)}:[/bold red] {escape(text)}")


def _print_rewrites(rewrites: Any, out: Console) -> None:
    """The module rewrites (every target's FX passes, the Edge TPU's swaps): one line of their
    kinds, then a line for each declined one (an LSTM kept unrolled), with why."""
    made = [r for r in rewrites if not r.declined]
    if made:
        kinds = dict.fromkeys(r.kind for r in made)
        counted = [f"{kind}" + (f" ×{n}" if (n := sum(r.kind == kind for r in made)) > 1 else "") for kind in kinds]
        _plain(out, f"  rewritten: {', '.join(counted[:4])}" + (f", … ({len(kinds)} kinds)" if len(kinds) > 4 else ""))
    declined = [r for r in rewrites if r.declined]
    for r in declined[:3]:
        _plain(out, f"  not rewritten: {r.describe()}: {r.why}")
    if len(declined) > 3:
        _plain(out, f"  not rewritten: {len(declined) - 3} more (see the report)")


def _print_target(report: RunReport, out: Console, err: Console) -> None:
    """The module rewrites, then each of the target's sections as its declaration prints it
    (``ReportSection.summary``)."""
    target = report.target
    if target is None:
        return
    from ..plugins.report_sections import report_sections_of

    _print_rewrites(target.rewrites or (), out)

    lines = SummaryLines(out, err)
    for section in report_sections_of(target.name):
        value = target.sections.get(section.key)
        if value is not None and section.summary is not None:
            section.summary(value, target, report, lines)


def print_summary(report: RunReport, out: Console, err: Console) -> None:
    """The verdict line, then one line per section the run has; warnings go to ``err``."""
    for part in (_print_headline, _print_quantization, _print_target, _print_checks, _print_extras, _print_artifacts):
        part(report, out, err)


def _print_headline(report: RunReport, out: Console, err: Console) -> None:
    """The verdict, the model's size and operators, and the worst output's parity."""
    fb = report.flatbuffer
    val = report.validation
    verdict = report.verdict
    color = {"passed": "green", "failed": "red"}.get(verdict, "yellow")
    out.print(f"[bold {color}]{verdict.upper()}[/bold {color}]  {escape(report.artifacts.tflite)}")
    op_counts = dict(fb.op_counts)
    ops = ", ".join(f"{k}×{v}" for k, v in list(op_counts.items())[:8])
    more = "" if len(op_counts) <= 8 else f", … ({len(op_counts)} kinds)"
    _plain(out, f"  size {fb.size_bytes / 1024:.1f} KiB · {fb.num_operators} ops: {ops}{more}")
    _print_transposes(fb.transposes, out)
    worst = None if val.passed is None else val.worst()
    if report.language_model is not None:
        from ..plugins.report_sections import run_section

        for line in run_section("language_model").summary(report.language_model):
            _plain(out, f"  {line}")
    elif val.passed is None:
        _plain(out, f"  parity: not checked ({val.reason})")
    elif worst is not None:
        sq, mae = _number(worst.sqnr_db), _number(worst.max_abs_error)
        failed = worst.failed_checks
        _plain(
            out,
            f"  parity ({val.samples} samples): worst output {worst.output}"
            + f" ({worst.kind.value})"
            + ": SQNR "
            f"{'–' if sq is None else f'{sq:.1f}'} dB, max abs error {'–' if mae is None else f'{mae:.3g}'}"
            + (f"; failed: {', '.join(failed)}" if failed else "")
            + (f"; {worst.error}" if worst.error else ""),
        )
        if worst.part is not None:
            part_sqnr = _number(worst.part_sqnr_db)
            _plain(out, f"  worst part {worst.part}: SQNR {'–' if part_sqnr is None else f'{part_sqnr:.1f}'} dB (the output's parts are judged one by one)")
        for note in val.notes:
            _plain(out, f"  note: {note}")
    if report.accuracy is not None:  # labelled calibration data: the check users trust most, next to parity
        _plain(out, f"  accuracy {report.accuracy.status}: {report.accuracy.message}")


def _print_quantization(report: RunReport, out: Console, err: Console) -> None:
    """A library off the tested set, then how the model was quantized."""
    warning = report.pinned_set.warning() if report.pinned_set is not None else None
    if warning:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    quant = report.quantization
    if quant is not None:
        integer = "fully integer" if quant.fully_integer else "NOT fully integer"
        io = ", ".join(
            f"{x.kind} {x.name} {x.dtype}" + (f" (scale {x.scale:.6g}, zero point {x.zero_point})" if x.scale else "")
            for x in quant.io
        )
        _plain(out, f"  quantization: {quant.mode.value} via {quant.backend} ({quant.reason}); {integer}; {io}")
        for w in quant.warnings:
            err.print(f"[yellow]warning:[/yellow] {escape(w)}")
        budget = quant.time_budget
        if budget is not None and budget.exhausted:
            err.print(
                f"[yellow]warning:[/yellow] the time budget ({budget.seconds:g} s) was spent; kept the best model "
                f"found before it; not tried: {escape('; '.join(budget.skipped))}"
            )


def _print_checks(report: RunReport, out: Console, err: Console) -> None:
    """Runtimes, per-layer parity, the sensitivity ranking and the mixed-precision search."""
    runtimes = report.runtimes
    if runtimes is not None:
        _plain(out, "  runtimes: " + "; ".join(f"{r.runtime} {r.status}" for r in runtimes.results) + (
            "" if runtimes.agree is None else ("; outputs agree" if runtimes.agree else "; outputs DIFFER")
        ))
        for finding in runtimes.findings():
            _plain(out, f"    finding: {finding}")
    layers = report.per_layer
    if layers is not None:
        jump, worst_layer = layers.first_jump, layers.worst
        worst_sqnr = _number(worst_layer.sqnr_db) if worst_layer is not None else None
        _plain(
            out,
            f"  per-layer: {len(layers.layers)} layers compared ({layers.match_fraction:.0%} of modules matched)"
            + (f"; worst {worst_layer.module_path} {worst_sqnr:.1f} dB" if worst_sqnr is not None else "")
            + (f"; error jumps at {jump.module_path} ({jump.sqnr_db:.1f} dB)" if jump else "; no jump"),
        )
    sensitivity = report.sensitivity
    if sensitivity is not None:
        top = ", ".join(f"{layer.label} {_db(layer.sqnr_db)}" for layer in sensitivity.top(3))
        _plain(out, f"  sensitivity: {len(sensitivity.layers)} operators ranked; most sensitive: {top or 'none'}")
        for note in sensitivity.notes[:1]:
            _plain(out, f"    {note}")
    mixed = report.mixed_precision
    if mixed is not None:
        _plain(
            out,
            f"  mixed precision ({mixed.mode}): {len({p.op_index for p in mixed.promoted})} operator(s) raised to {mixed.precision}"
            f"{_split_note(mixed)}, "
            f"SQNR {mixed.int8_sqnr_db} -> {mixed.sqnr_db} dB, target {'met' if mixed.met else 'NOT met'}",
        )


def _print_extras(report: RunReport, out: Console, err: Console) -> None:
    """Host latency, the baseline and the model metadata."""
    latency = report.host_latency
    if latency is not None:
        _plain(
            out,
            f"  host latency ({latency.runtime}): {latency.quantize} {latency.quantized_ms:.3g} ms, "
            f"fp32 {latency.float_ms:.3g} ms ({latency.ratio:.2f}x; reported, not a gate)",
        )
        if latency.note:
            err.print(f"[yellow]warning:[/yellow] {escape(latency.note)}")
    base = report.baseline
    if base is not None:
        regs = base.regressions
        _plain(out, f"  baseline {base.path}: " + (f"{len(regs)} regression(s)" if regs else "no regression"))
        for r in regs[:10]:
            _plain(out, f"    - {r.message}")
    metadata = report.metadata
    if metadata is not None:
        # Printed literally (_plain): the name and file names are the user's text.
        what = [f"{metadata.name or 'unnamed'}{' ' + metadata.version if metadata.version else ''}"]
        what += [f"{t.name} normalized by mean {', '.join(f'{v:g}' for v in t.normalization_mean or ())}" for t in metadata.inputs if t.kind == "image"]
        what += [f"{t.name} labelled by {t.labels_file} ({t.labels_count})" for t in metadata.outputs if t.labels_file]
        _plain(out, f"  metadata: {'; '.join(what)} (+{metadata.added_bytes} bytes)")
        for note in metadata.notes:
            _plain(out, f"    note: {note}")


def _print_artifacts(report: RunReport, out: Console, err: Console) -> None:
    """Where the reports and other artifacts were written."""
    _plain(out, f"  reports: {report.artifacts.report_json}  {report.artifacts.report_markdown}")
    if report.artifacts.junit:
        _plain(out, f"  junit: {report.artifacts.junit}")
    if report.artifacts.get("test_vectors"):
        _plain(out, f"  test vectors: {report.artifacts.get('test_vectors')}")


def _split_note(mixed) -> str:
    split = sum(1 for p in mixed.promoted if p.precision == "int16+split-weights")
    return f" ({split} with split int8 weights)" if split else ""
