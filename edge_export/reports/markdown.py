"""The Markdown report, fit for a CI job summary: verdict first, then outputs, then details."""

from __future__ import annotations

import re

from .serialize import json_form

__all__ = ["render_markdown", "escape_markdown"]

_ICON = {"passed": "✅ PASSED", "failed": "❌ FAILED", "exported-unvalidated": "⚠️ EXPORTED, NOT VALIDATED"}


# Everything a model or file supplies (tensor, output, module and op names, paths, error texts) goes
# through escape_markdown: the report is published as a CI step summary, where a crafted name could
# otherwise add a heading, an image, a link, raw HTML or table cells. Such text is never put in a
# backtick code span (a backtick in it would end the span); <code> keeps the look.
# Backslash-escaped: emphasis, code, links and images, table cells, strikethrough, math, headings,
# and the ':' and '.' that GFM's bare-URL autolinks start from.
_MD_PUNCTUATION = re.compile(r"([\\`*_\[\]()#!|~$:.])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_markdown(value) -> str:
    """``value`` as literal text in Markdown and HTML: no markup of any kind survives."""
    text = _CONTROL.sub(" ", str(value))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCTUATION.sub(r"\\\1", text)


def _code(value) -> str:
    """A model-supplied name shown as code, escaped."""
    return f"<code>{escape_markdown(value)}</code>"


_e = escape_markdown


def _fmt(value, digits: int = 4) -> str:
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


def render_markdown(report) -> str:
    """``report``: a RunReport, or its JSON form (a dict, as written to report.json)."""
    report = json_form(report)  # the keys report.schema.json documents
    lines: list[str] = []
    verdict = report.get("verdict", "exported-unvalidated")
    model = report.get("model", {})
    exp = report.get("export", {})
    fb = report.get("flatbuffer", {})
    val = report.get("validation", {})
    lines.append(f"# edge-export: {_ICON.get(verdict, _e(verdict))}")
    lines.append("")
    lines.append(
        f"{_code(model.get('source'))} ({_e(model.get('kind'))}) → {_code(report.get('artifacts', {}).get('tflite'))} · "
        f"quantize **{_e(exp.get('quantize'))}** · target **{_e(exp.get('target'))}** · "
        f"{_size(fb.get('size_bytes', 0))} · {fb.get('num_operators')} ops · exit code {report.get('exit_code')}"
    )
    lines.append("")
    worst = val.get("worst") if isinstance(val, dict) else None
    if val.get("status") == "skipped":
        lines.append(f"Parity was not checked: {_e(val.get('reason'))}.")
    elif worst:
        failed = _e(", ".join(worst.get("failed_checks") or []) or "none")
        lines.append(
            f"Worst output: {_code(worst.get('output'))} ({_e(worst['kind']) + '; ' if worst.get('kind') else ''}"
            f"SQNR {_fmt(worst.get('sqnr_db'))} dB, max abs error "
            f"{_fmt(worst.get('max_abs_error'))}; failed checks: {failed})."
        )
    lines.append("")
    base = report.get("baseline")
    if base:
        regs = base.get("regressions") or []
        if regs:
            lines.append(f"**Regressed against the baseline** {_code(base.get('path'))}:")
            lines.append("")
            lines.extend(f"- {_e(r['message'])}" for r in regs)
        else:
            lines.append(f"No regression against the baseline {_code(base.get('path'))}.")
        lines.append("")
    if val.get("outputs"):
        lines.extend(_outputs_section(val))
    layers = report.get("per_layer")
    if layers:
        lines.extend(_layer_section(layers))
    if report.get("quantization"):
        lines.extend(_quant_section(report["quantization"]))
    if report.get("target"):
        lines.extend(_target_section(report["target"], report.get("artifacts", {})))
    lines.append("## Flatbuffer")
    lines.append("")
    lines.append(f"- size: {_size(fb.get('size_bytes', 0))} ({fb.get('size_bytes')} bytes), sha256 `{(fb.get('sha256') or '')[:16]}…`")
    lines.append(f"- fully integer: {fb.get('fully_integer')}")
    for kind in ("inputs", "outputs"):
        for t in fb.get(kind, []):
            q = t.get("quantization")
            qs = f", scale {q.get('scale')}, zero point {q.get('zero_point')}" if q and not q.get("per_channel") else ""
            lines.append(f"- {kind[:-1]} {_code(t['name'])}: {_e(t['dtype'])} {_e(list(t['shape']))}{_e(qs)}")
    lines.append("")
    lines.append("| operator | count |")
    lines.append("|---|---|")
    for op, n in (fb.get("op_counts") or {}).items():
        lines.append(f"| {_e(op)} | {_e(n)} |")
    lines.append("")
    stages = report.get("stages") or []
    if stages:
        lines.append("## Stages")
        lines.append("")
        lines.append(" · ".join(f"{_e(s['name'])} {s['seconds']:.2f} s" for s in stages))
        lines.append("")
    tool = report.get("tool", {})
    libs = report.get("libraries", {})
    lines.append(
        f"<sub>edge-export {_e(tool.get('version'))} · "
        + " · ".join(f"{_e(k)} {_e(v)}" for k, v in libs.items() if v)
        + f" · report schema {_e(report.get('schema_version'))}</sub>"
    )
    return "\n".join(lines) + "\n"


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
# Which thresholds gate which kind of output (config.KIND_THRESHOLDS, restated: reports never import
# the pipeline's modules) and how each reads in the Markdown.
_GATES_BY_KIND = {
    "classification": ("atol", "min_sqnr_db", "min_cosine", "max_rel_l2", "max_error_steps", "min_top1", "min_top5"),
    "embedding": ("min_cosine", "min_neighbour_agreement"),
    "regression": ("atol", "min_sqnr_db", "max_rel_l2", "max_error_steps"),
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
}


def _outputs_section(val: dict) -> list[str]:
    lines = [f"## Outputs ({_e(val.get('samples'))} samples, {_e(val.get('runtime'))})", ""]
    head = ["output", "kind", "shape", *(c[0] for c in _METRIC_COLUMNS), "verdict"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for o in val["outputs"]:
        m = o.get("metrics") or {}
        missing = o.get("not_computable") or {}
        failed = [c["metric"] for c in o.get("checks", []) if c.get("passed") is False]
        status = "✅" if o.get("passed") else "❌ " + _e(o.get("error") or ", ".join(failed))
        kind = o.get("kind")
        kind_cell = f"{_e(kind)} ({_e(o.get('kind_source'))})" if kind else "–"
        cells = [
            "n/c" if key in missing else _fmt(m.get(key), digits) for _, key, digits in _METRIC_COLUMNS
        ]
        lines.append(
            f"| {_code(o['name'])} | {kind_cell} | {_e('×'.join(str(d) for d in o['shape']))} | " + " | ".join(cells) + f" | {status} |"
        )
    lines.append("")
    # n/c cells: why is in the notes (checks that could not be computed) or in the verdict (NaN/Inf)
    for note in val.get("notes") or []:
        lines.append(f"- {_e(note)}")
    if val.get("notes"):
        lines.append("")
    t = val.get("thresholds", {})
    kinds = list(dict.fromkeys(o.get("kind") for o in val["outputs"] if o.get("kind") in _GATES_BY_KIND))
    for kind in kinds or ["regression"]:
        gates = [_GATE_TEXT[k].format(t[k]) for k in _GATES_BY_KIND[kind] if t.get(k) is not None]
        if kind == "embedding":
            gates = [g.replace("cosine", "worst-sample cosine", 1) if g.startswith("cosine") else g for g in gates]
        lines.append(f"Thresholds ({kind}): " + (", ".join(gates) or "none"))
        lines.append("")
    return lines


def _layer_section(layers: dict) -> list[str]:
    rows = [r for r in layers.get("layers", []) if r.get("sqnr_db") is not None]
    out = [f"## Layers ({len(layers.get('layers', []))} compared, {layers.get('match_fraction', 0):.0%} of modules matched)", ""]
    jump = layers.get("first_jump")
    if jump:
        out.append(
            f"The error first jumps at **{_code(jump.get('module_path'))}** ({_e(jump.get('module_type'))}): "
            f"SQNR {_fmt(jump.get('sqnr_db'))} dB. This is the likely culprit."
        )
    else:
        out.append("No layer shows a jump in error.")
    out.append("")
    worst = sorted(rows, key=lambda r: r["sqnr_db"])[:5]
    if worst:
        out.append("Worst layers:")
        out.append("")
        out.append("| # | module | type | op | SQNR dB | cosine |")
        out.append("|---|---|---|---|---|---|")
        for r in worst:
            fused = f" (+ fused {_e(', '.join(r['fused_modules']))})" if r.get("fused_modules") else ""
            out.append(
                f"| {_e(r.get('position'))} | {_code(r.get('module_path'))}{fused} | {_e(r.get('module_type'))} | {_e(r.get('opcode'))} | "
                f"{_fmt(r.get('sqnr_db'))} | {_fmt(r.get('cosine'), 6)} |"
            )
        out.append("")
    unmatched = layers.get("tensors_unmatched") or 0
    out.append(f"{unmatched} flatbuffer tensor(s) could not be matched to a PyTorch module.")
    out.append("")
    return out


def _quant_section(q: dict) -> list[str]:
    out = ["## Quantization", ""]
    out.append(f"- mode **{_e(q['mode'])}**, backend **{_e(q['backend'])}** ({_e(q.get('recipe'))}, observer {_e(q.get('observer'))}): {_e(q['reason'])}")
    cal = q.get("calibration") or {}
    real = "real data" if cal.get("real_data") else "**synthetic inputs (not real data)**"
    out.append(f"- calibrated on {_e(cal.get('samples'))} samples of {real} from {_code(cal.get('source'))}")
    out.append(f"- fully integer: **{q['fully_integer']}**")
    check = q.get("integer_check") or {}
    for t in (check.get("float_tensors") or [])[:20]:
        out.append(f"  - float tensor {_code(t.get('name'))} ({_e(t.get('dtype'))}) from module {_code(t.get('module'))}")
    for op in (check.get("inner_quantize_ops") or [])[:20]:
        out.append(f"  - {_e(op.get('opcode'))} #{_e(op.get('index'))} inside the graph, from module {_code(op.get('module'))}")
    for w in q.get("warnings") or []:
        out.append(f"- ⚠️ {_e(w)}")
    out.append("")
    out.append("| tensor | dtype | scale | zero point |")
    out.append("|---|---|---|---|")
    for x in q.get("io") or []:
        out.append(f"| {_e(x['kind'])} {_code(x['name'])} | {_e(x['dtype'])} | {_fmt(x.get('scale'), 6)} | {_e(x.get('zero_point', '–'))} |")
    out.append("")
    attempts = q.get("attempts") or []
    if attempts:
        out.append("| backend tried | ok | fully integer | SQNR dB (calibration inputs) | seconds | error |")
        out.append("|---|---|---|---|---|---|")
        for a in attempts:
            out.append(
                f"| {_e(a['backend'])} | {_e(a['ok'])} | {_e(a.get('fully_integer'))} | {_fmt(a.get('sqnr_db'))} | "
                f"{_fmt(a.get('seconds'), 3)} | {_e(a.get('error') or '')} |"
            )
        out.append("")
    return out


def _target_section(t: dict, artifacts: dict) -> list[str]:
    out = [f"## Target: {_e(t.get('name'))}", ""]
    for note in t.get("implied") or []:
        out.append(f"- {_e(note)}")
    for r in t.get("rewrites") or []:
        out.append(f"- rewrite {_code(r['module_path'])}: {_e(r['kind'])} ({_e(r['why'])})")
    tpu = t.get("edgetpu")
    if tpu:
        out.append("")
        out.append(f"**Edge TPU mapping (predicted):** {_e(tpu.get('summary'))}")
        out.append("")
        out.append("| Operator | Count | Status |")
        out.append("|---|---|---|")
        for row in tpu.get("table") or []:
            out.append(f"| {_e(row['operator'])} | {_e(row['count'])} | {_e(row['status'])} |")
        out.append("")
        comp = t.get("compiler") or {}
        if comp.get("compiled"):
            out.append(f"Compiled with edgetpu_compiler: {_code(artifacts.get('edgetpu_tflite'))}.")
        else:
            out.append(f"Not compiled: {_e(comp.get('reason'))}")
        for d in comp.get("disagreements") or []:
            out.append(f"- compiler disagrees with the prediction: {_e(d)}")
        delegate = t.get("delegate")
        if delegate:
            out.append(f"- delegate edgetpu used for parity: {_e(delegate['used'])} {_e(delegate.get('reason') or '')}")
        out.append("")
    micro = t.get("micro")
    if micro:
        out.append("")
        out.append(f"**TFLite Micro:** tensor arena {_e(micro.get('arena_bytes'))} bytes; operators: {_e(', '.join(micro.get('ops') or []))}.")
        if micro.get("op_resolver"):
            out.append(f"Op resolver lines written to {_code(micro['op_resolver'])}.")
        out.append("")
    return out
