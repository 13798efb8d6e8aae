"""A PNG of SQNR per layer, for a per-layer parity report (matplotlib is an optional extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from .layers import LayerParityReport

__all__ = ["plot_layer_sqnr"]

_SENSITIVITY_BARS = 30  # the most sensitive operators shown; the JSON has them all


def plot_layer_sqnr(report: LayerParityReport, path: str | Path, sensitivity: Any = None) -> Path:
    """Write a bar chart of each compared layer's SQNR, marking the first jump and the worst layer;
    with a ``SensitivityReport``, a second chart below of the ranked operators' sensitivity."""
    try:
        # The object API (no pyplot) needs no display and leaves the process's backend alone.
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise UsageError(
            "Plotting per-layer SQNR needs matplotlib, which is not installed.",
            "Install the plot extra: `pip install edge-export[plot]`.",
        ) from exc
    if not report.layers:
        raise UsageError(
            "The per-layer report has no compared layers, so there is nothing to plot.",
            "Check the report's unmatched modules and tensors.",
        )

    path = Path(path)
    # Module names come from the model: a '$' in one would start matplotlib mathtext (and can fail).
    labels = [f"{r.label} ({r.module_type})".replace("$", r"\$") for r in report.layers]
    values = [r.sqnr_db for r in report.layers]
    colors = ["tab:blue"] * len(values)
    if report.worst is not None:
        colors[report.worst.position] = "tab:orange"
    if report.first_jump is not None:
        colors[report.first_jump.position] = "tab:red"

    ranked = list(sensitivity.layers[:_SENSITIVITY_BARS]) if sensitivity is not None else []
    width = max(6.0, 0.35 * max(len(values), len(ranked)) + 2.0)
    fig = Figure(figsize=(width, 9.5 if ranked else 4.5))
    ax, sens_ax = fig.subplots(2, 1) if ranked else (fig.subplots(), None)
    ax.bar(range(len(values)), values, color=colors)
    floor = report.jump_floor_db
    ax.axhline(floor, color="gray", linestyle="--", linewidth=1, label=f"jump floor {floor:g} dB")
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("SQNR (dB)")
    title = "SQNR per layer"
    if report.first_jump is not None:
        title += f": first jump at {report.first_jump.label}".replace("$", r"\$")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=7)
    if sens_ax is not None:
        sens_ax.bar(range(len(ranked)), [layer.sqnr_db for layer in ranked], color="tab:purple")
        sens_ax.set_xticks(range(len(ranked)))
        sens_ax.set_xticklabels([layer.label.replace("$", r"\$") for layer in ranked], rotation=60, ha="right", fontsize=7)
        sens_ax.set_ylabel("output SQNR (dB)")
        sens_ax.set_title(f"Sensitivity, most sensitive first ({sensitivity.method}: output SQNR with only that operator quantized)"
                          if sensitivity.method == "only-quantized" else f"Sensitivity ({sensitivity.method})")
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=100)
    except OSError as exc:
        raise UsageError(
            f"Could not write the SQNR plot to {path}: {exc.strerror or exc}.",
            "Choose a path in a writable directory.",
        ) from exc
    return path
