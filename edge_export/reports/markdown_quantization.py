"""The Markdown report's quantization sections: the mode and backend chosen, operator sensitivity,
mixed precision, and the host latency of the quantized model against its float model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..output.serialize import to_json_value as _plain
from ..output.text_safety import code_span as _code, escape_markdown as _e
from .markdown_cells import fmt as _fmt

if TYPE_CHECKING:
    from ..quantization import QuantizationResult
    from ..quantization.mixed_precision import MixedPrecisionReport
    from ..quantization.sensitivity import SensitivityReport
    from ..runtime.latency import HostLatency

__all__ = ["quant_section", "sensitivity_section", "mixed_precision_section", "host_latency_section"]


_ROUNDING = {"gptq": "for each layer's output (GPTQ, bias corrected)", "nearest": "to the nearest int8 step"}


def quant_section(q: QuantizationResult) -> list[str]:
    out = ["## Quantization", ""]
    rounding = f", weights rounded {_ROUNDING[q.weight_rounding]}" if q.weight_rounding in _ROUNDING else ""
    out.append(f"- mode **{_e(q.mode.value)}**, backend **{_e(q.backend)}** ({_e(q.recipe)}, observer {_e(q.observer)}{rounding}): {_e(q.reason)}")
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
    out.extend(_headroom_lines(q.int16_headroom))
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


def _headroom_lines(headroom: tuple, shown: int = 10) -> list[str]:
    """The int16 tensors given ranges wider than calibrated: a step that much coarser, bought
    for inputs beyond the calibration samples (quantization/int16_headroom.py)."""
    if not headroom:
        return []
    factors = [h.factor for h in headroom]
    lines = [f"- int16 ranges widened beyond calibration (headroom for inputs beyond the samples) on {len(headroom)} tensor(s), "
             f"x{_fmt(min(factors))}-x{_fmt(max(factors))}:"]
    lines.extend(f"  - {_code(h.tensor)} x{_fmt(h.factor)}" for h in sorted(headroom, key=lambda h: -h.factor)[:shown])
    if len(headroom) > shown:
        lines.append(f"  - {len(headroom) - shown} more in the JSON report")
    return lines


def _module_cell(module_path: str | None, module_type: str | None, source: str | None) -> str:
    if module_path is None:
        return "–"
    cell = f"{_code(module_path or '<model>')} ({_e(module_type)})"
    return cell + (f" at {_code(source)}" if source else "")


_SENSITIVITY_METHOD_TEXT = {
    "only-quantized": "output SQNR with only this operator quantized to int8 (lower: costs more)",
    "only-float": "output SQNR with only this operator left in float (higher gain: matters more)",
}


def sensitivity_section(s: SensitivityReport, rows: int = 10) -> list[str]:
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


def mixed_precision_section(m: MixedPrecisionReport) -> list[str]:
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


def host_latency_section(h: HostLatency) -> list[str]:
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
