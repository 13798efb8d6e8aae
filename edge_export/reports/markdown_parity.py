"""The Markdown report's parity sections: each output against PyTorch, per layer, and between runtimes
(``--runtime both``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..output.serialize import to_json_value as _plain
from ..output.text_safety import code_span as _code, escape_markdown as _e
from .markdown_cells import fmt as _fmt

if TYPE_CHECKING:
    from ..validators.layers import LayerParityReport
    from ..validators.parity import ParityResult
    from ..validators.runtimes import RuntimeComparison

__all__ = ["outputs_section", "layer_section", "runtimes_section"]


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
    ("decisions at threshold", "threshold_agreement", 4),
)
# Only a table with a classifier or a sigmoid checked on real data has these columns.
_REAL_DATA_COLUMNS = (("expected top-1", "expected_top1_agreement", 4), ("expected detections IoU", "expected_positive_agreement", 4))
# Which thresholds gate which kind of output (config.KIND_THRESHOLDS, restated: reports never import
# the pipeline's modules) and how each reads in the Markdown.
_GATES_BY_KIND = {
    "classification": ("atol", "min_sqnr_db", "min_cosine", "max_rel_l2", "max_error_steps", "min_top1", "min_top5", "min_expected_top1"),
    "embedding": ("min_cosine", "min_neighbour_agreement"),
    "regression": ("atol", "min_sqnr_db", "max_rel_l2", "max_error_steps"),
    "probabilities": (
        "atol", "min_sqnr_db", "max_rel_l2", "max_error_steps", "max_probability_error", "min_decision_agreement",
        "min_expected_positive_agreement",
    ),
}
# A part a sigmoid makes is gated on its decisions besides its output's gates (validators/parity.py).
_SIGMOID_PART_GATES = ("min_decision_agreement", "min_expected_positive_agreement")
_GATE_TEXT = {
    "atol": "max abs error ≤ {}",
    "min_sqnr_db": "SQNR ≥ {} dB",
    "min_cosine": "cosine ≥ {}",
    "max_rel_l2": "rel L2 ≤ {}",
    "max_error_steps": "error ≤ {} output steps",
    "min_top1": "top-1 ≥ {}",
    "min_top5": "top-5 ≥ {} (10+ classes)",
    "min_expected_top1": "expected top-1 ≥ {} (real data)",
    "min_neighbour_agreement": "neighbour agreement ≥ {}",
    "max_probability_error": "probability error ≤ {}",
    "min_decision_agreement": "decision agreement ≥ {}",
    "min_expected_positive_agreement": "expected detections IoU ≥ {} (real data)",
}


def _shape_cell(shape) -> str:
    return _e("×".join(str(d) for d in _plain(shape)))


def _cells(o, columns) -> str:
    """An output's (or part's) metric cells: n/c where it could not be computed."""
    return " | ".join("n/c" if key in o.not_computable else _fmt(o.metrics.get(key), digits) for _, key, digits in columns)


def outputs_section(val: ParityResult) -> list[str]:
    lines = [f"## Outputs ({_e(val.samples)} samples, {_e(val.runtime)})", ""]
    judged = [m for o in val.outputs for m in (o.metrics, *(p.metrics for p in o.parts or ()))]
    extra = [c for c in (*_PROBABILITY_COLUMNS, *_REAL_DATA_COLUMNS) if any(c[1] in m for m in judged)]
    columns = _METRIC_COLUMNS + tuple(extra)
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
    return lines + _sigmoid_gates(val)


def _sigmoid_gates(val: ParityResult) -> list[str]:
    """The gates a sigmoid's decisions are judged by, and the threshold they are taken at."""
    t = val.thresholds
    sigmoid_parts = any(getattr(p, "activation", None) == "sigmoid" for o in val.outputs for p in o.parts or ())
    sigmoid = sigmoid_parts or any(o.decision.activation == "sigmoid" for o in val.outputs)
    if not sigmoid:
        return []
    threshold = _plain(getattr(t, "decision_threshold", None))
    lines = [f"A sigmoid's value is a detection at or above {_fmt(threshold)} (--decision-threshold)."]
    if sigmoid_parts:
        gates = [_GATE_TEXT[k].format(_plain(getattr(t, k))) for k in _SIGMOID_PART_GATES if _plain(getattr(t, k, None)) is not None]
        lines[0] += " Thresholds (parts a sigmoid makes), besides their output's: " + (", ".join(gates) or "none")
    return [lines[0], ""]


def layer_section(layers: LayerParityReport) -> list[str]:
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


def runtimes_section(runtimes: RuntimeComparison) -> list[str]:
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
