"""The sensitivity and mixed-precision sections of the report, and the Model Explorer node data,
on reports built in code (no export runs): Markdown, JSON against the schema, overlay shape."""

from __future__ import annotations

import dataclasses
import json

from cli_harness import validate_report
from report_fixtures import full_report

from edge_export.quantization.mixed_precision import (
    AccuracyTarget,
    MixedPrecisionReport,
    MixedPrecisionStep,
    PromotedLayer,
)
from edge_export.quantization.sensitivity import LayerSensitivity, SensitivityReport
from edge_export.reports.markdown import render_markdown
from edge_export.reports.model_explorer import SQNR_THRESHOLDS, node_data
from edge_export.output.serialize import to_json_value
from edge_export.reports.summary import print_summary

HOSTILE = "blocks.0|[x](y)"


def _sensitivity() -> SensitivityReport:
    layers = (
        LayerSensitivity(1, 2, "CONV_2D", "m/Conv2d_conv2;1", "conv2", "Conv2d", "net.py:12", 19.851),
        LayerSensitivity(2, 1, "CONV_2D", "m/Conv2d_conv1;1", HOSTILE, "Conv2d", None, 20.885),
        LayerSensitivity(3, 6, "FULLY_CONNECTED", "serving_default_output_0_output", None, None, None, 50.356),
    )
    return SensitivityReport("only-quantized", layers, 20.989, 8, 0.3734, overlay="out/cnn.sensitivity.json")


def _mixed() -> MixedPrecisionReport:
    promoted = (
        PromotedLayer(2, "CONV_2D", "m/Conv2d_conv2;1", "conv2", "Conv2d", "net.py:12", "float", 1, 1, 21.027, 22.156, 3480, -0.002),
        PromotedLayer(1, "CONV_2D", "m/Conv2d_conv1;1", HOSTILE, "Conv2d", None, "float", 2, 2, 22.156, 49.454, 360, 0.01),
    )
    steps = (
        MixedPrecisionStep(0, 21.027, 0.996572, 8944, False, 0.009),
        MixedPrecisionStep(1, 22.156, 0.997282, 12424, False, 0.007),
        MixedPrecisionStep(2, 49.454, 0.999995, 12784, True, 0.017),
    )
    return MixedPrecisionReport(
        "auto", "float", AccuracyTarget(30.0), True, "promoted 2 of 5 operators to float in sensitivity order",
        21.027, 0.996572, 49.454, 0.999995, promoted, steps, 8944, 12784, 0.009, 0.017, False, seconds=0.178,
        order="sensitivity, cheapest first within 1 dB (bytes added)", latency_seconds=0.021,
    )


def _report():
    return dataclasses.replace(full_report(), sensitivity=_sensitivity(), mixed_precision=_mixed())


def test_markdown_of_the_sensitivity_and_mixed_precision_sections():
    md = render_markdown(_report())
    start = md.index("## Sensitivity")
    section = md[start : md.index("## Flatbuffer")].splitlines()
    assert section[:10] == [
        "## Sensitivity (3 operators, 8 samples, 0.373 s)",
        "",
        "Ranked by output SQNR with only this operator quantized to int8 (lower: costs more); every operator at int8: 20.99 dB.",
        "",
        "| rank | module | op | SQNR dB |",
        "|---|---|---|---|",
        "| 1 | <code>conv2</code> (Conv2d) at <code>net\\.py\\:12</code> | CONV\\_2D #2 | 19.85 |",
        "| 2 | <code>blocks\\.0\\|\\[x\\]\\(y\\)</code> (Conv2d) | CONV\\_2D #1 | 20.89 |",
        "| 3 | – | FULLY\\_CONNECTED #6 | 50.36 |",
        "",
    ]
    assert "Model Explorer overlay: <code>out/cnn\\.sensitivity\\.json</code> (add it as per-node data)." in section
    mixed = md[md.index("## Mixed precision") :].splitlines()
    assert mixed[0] == "## Mixed precision (auto: operators raised to float)"
    assert mixed[2] == "- target SQNR >= 30 dB: met; promoted 2 of 5 operators to float in sensitivity order"
    assert mixed[3] == (
        "- held-out SQNR 21.03 dB at int8 → 49.45 dB kept; size 8944 → 12784 bytes; host latency (XNNPACK, 1 thread) "
        "0.0090 → 0.0170 ms; fully integer: False"
    )
    assert mixed[5] == "Promotion order: sensitivity, cheapest first within 1 dB \\(bytes added\\). Operators promoted in one step share its size and latency change."
    assert mixed[7] == "| step | module | op | sensitivity rank | to | SQNR before dB | after dB | size Δ bytes | latency Δ ms |"
    assert mixed[9] == "| 1 | <code>conv2</code> (Conv2d) at <code>net\\.py\\:12</code> | CONV\\_2D #2 | 1 | float | 21.03 | 22.16 | 3480 | -0.002 |"
    assert mixed[10] == "| 2 | <code>blocks\\.0\\|\\[x\\]\\(y\\)</code> (Conv2d) | CONV\\_2D #1 | 2 | float | 22.16 | 49.45 | 360 | +0.010 |"
    # no latency measured (--no-latency, a target that does not run on this CPU): a dash, not 0
    quiet = dataclasses.replace(_mixed(), promoted=tuple(dataclasses.replace(p, latency_delta_ms=None) for p in _mixed().promoted))
    assert render_markdown(dataclasses.replace(_report(), mixed_precision=quiet)).splitlines()[md.splitlines().index(mixed[10])].endswith("| 360 | – |")


def test_the_json_of_both_sections_is_valid_against_the_schema():
    data = validate_report(to_json_value(_report()))
    assert [layer["rank"] for layer in data["sensitivity"]["layers"]] == [1, 2, 3]
    assert data["sensitivity"]["seconds"] == 0.373
    assert data["mixed_precision"]["promoted"][1]["sqnr_after_db"] == 49.454
    assert [p["latency_delta_ms"] for p in data["mixed_precision"]["promoted"]] == [-0.002, 0.01]
    assert [s["latency_ms"] for s in data["mixed_precision"]["steps"]] == [0.009, 0.007, 0.017]
    assert data["mixed_precision"]["order"].startswith("sensitivity, cheapest first")
    assert data["mixed_precision"]["latency_seconds"] == 0.021
    assert data["mixed_precision"]["target"] == {"min_sqnr_db": 30.0, "min_cosine": None, "min_top1": None, "margin_db": 0.0}
    keys = list(data)
    assert keys.index("per_layer") < keys.index("sensitivity") < keys.index("mixed_precision") < keys.index("verdict")


def test_model_explorer_node_data_has_results_and_thresholds_only():
    data = node_data({"a;1": 19.8514, "b": float("inf"), "c": float("nan"), "d": 45.0})
    assert data == {"results": {"a;1": {"value": 19.851}, "d": {"value": 45.0}}, "thresholds": [dict(t) for t in SQNR_THRESHOLDS]}
    assert [t["value"] for t in data["thresholds"]] == sorted(t["value"] for t in data["thresholds"])
    json.dumps(data, allow_nan=False)  # strict JSON: Model Explorer's parser takes no Infinity


def test_the_terminal_summary_names_the_most_sensitive_operators_and_the_promotions():
    from rich.console import Console

    out = Console(record=True, width=300, highlight=False, soft_wrap=True, force_terminal=False)
    err = Console(record=True, width=300, highlight=False, soft_wrap=True, force_terminal=False)
    print_summary(_report(), out, err)
    lines = out.export_text().splitlines()
    assert (
        "  sensitivity: 3 operators ranked; most sensitive: conv2 (CONV_2D) 19.9 dB, "
        f"{HOSTILE} (CONV_2D) 20.9 dB, FULLY_CONNECTED #6 50.4 dB"
    ) in lines
    assert "  mixed precision (auto): 2 operator(s) raised to float, SQNR 21.027 -> 49.454 dB, target met" in lines


def _split_mixed() -> MixedPrecisionReport:
    """An int16 search that promoted both convs, then split conv2's weights (listed again)."""
    promoted = (
        PromotedLayer(2, "CONV_2D", "m/Conv2d_conv2;1", "conv2", "Conv2d", None, "int16", 1, 1, 17.2, 18.1, 96),
        PromotedLayer(1, "CONV_2D", "m/Conv2d_conv1;1", "conv1", "Conv2d", None, "int16", 2, 2, 18.1, 18.4, 40),
        PromotedLayer(2, "CONV_2D", "m/Conv2d_conv2;1", "conv2", "Conv2d", None, "int16+split-weights", 1, 3, 18.4, 33.5, 2410),
    )
    steps = (
        MixedPrecisionStep(0, 17.2, 0.99, 8944, False),
        MixedPrecisionStep(1, 18.1, 0.991, 9040, False),
        MixedPrecisionStep(2, 18.4, 0.992, 9080, False),
        MixedPrecisionStep(2, 33.5, 0.9998, 11490, True, split_weights=1),
    )
    return MixedPrecisionReport(
        "int16", "int16", AccuracyTarget(30.0), True, "promoted all 2 operators to int16, then split 1", 17.2, 0.99,
        33.5, 0.9998, promoted, steps, 8944, 11490, 0.009, 0.2, True, seconds=1.5,
    )


def test_split_weights_rows_in_markdown_json_and_summary():
    from rich.console import Console

    report = dataclasses.replace(full_report(), mixed_precision=_split_mixed())
    mixed = render_markdown(report)
    mixed = mixed[mixed.index("## Mixed precision") :].splitlines()
    assert mixed[0] == "## Mixed precision (int16: operators raised to int16)"
    assert mixed[4] == (
        "- int8 weights split in two int8 halves (W = W\\_hi + W\\_lo: two int8-weight operators and an ADD each) for 1 "
        "operator(s), after every operator at int16 still missed the target: rows `int16+split-weights`"
    )
    assert mixed[12] == "| 3 | <code>conv2</code> (Conv2d) | CONV\\_2D #2 | 1 | int16+split-weights | 18.4 | 33.5 | 2410 | – |"
    data = validate_report(to_json_value(report))
    assert [p["precision"] for p in data["mixed_precision"]["promoted"]] == ["int16", "int16", "int16+split-weights"]
    assert [s["split_weights"] for s in data["mixed_precision"]["steps"]] == [0, 0, 0, 1]
    out = Console(record=True, width=300, highlight=False, soft_wrap=True, force_terminal=False)
    print_summary(report, out, Console(record=True, width=300, force_terminal=False))
    assert (
        "  mixed precision (int16): 2 operator(s) raised to int16 (1 with split int8 weights), SQNR 17.2 -> 33.5 dB, target met"
        in out.export_text().splitlines()
    )
