"""The export report's host latency: a quantized cpu export timed against its float model, flagged
when slower (issue 12). Timings are not asserted, only that the section is consistent."""

from __future__ import annotations

import json

import pytest
from cli_harness import validate_report


def _report(tflite) -> dict:
    return validate_report(json.loads(tflite.with_name(f"{tflite.stem}.report.json").read_text()))


def _check_consistent(latency: dict, mode: str) -> None:
    assert latency["quantize"] == mode
    assert latency["quantized_ms"] > 0 and latency["float_ms"] > 0
    assert latency["ratio"] == pytest.approx(latency["quantized_ms"] / latency["float_ms"], abs=2e-3)
    assert latency["slower"] is (latency["quantized_ms"] / latency["float_ms"] > 1 + latency["margin"])
    assert (latency["note"] is not None) is latency["slower"]
    assert 5 <= latency["runs"] <= 100 and latency["runtime"] == "LiteRT CPU + XNNPACK, 1 thread"


def test_an_int8_cpu_export_reports_host_latency_from_its_one_float_conversion(built_artifacts):
    report = _report(built_artifacts.int8)
    _check_consistent(report["host_latency"], "int8")
    stages = [s["name"] for s in report["stages"]]
    assert stages.count("convert") == 1 and "latency" in stages  # the float model the backend quantized, timed too
    assert report["verdict"] == "passed" and report["exit_code"] == 0
    markdown = built_artifacts.int8.with_name("cnn_int8.report.md").read_text()
    assert "## Host latency (LiteRT CPU + XNNPACK, 1 thread)" in markdown


def test_float_and_edgetpu_exports_have_no_host_latency(built_artifacts):
    assert "host_latency" not in _report(built_artifacts.fp32)
    assert "host_latency" not in _report(built_artifacts.edgetpu)  # a host CPU time says nothing about the TPU


def test_only_the_cpu_target_times_on_the_host():
    from edge_export.targets.base import registered_targets

    assert [name for name, plugin in registered_targets().items() if plugin.times_on_host_cpu] == ["cpu"]


def test_dynamic_int8_reports_it_and_no_latency_turns_it_off(built_artifacts, tmp_path, run_cli):
    import edge_export

    out = tmp_path / "dyn.tflite"
    assert edge_export.export(built_artifacts.source, output=out, quantize="dynamic-int8").exit_code == 0
    _check_consistent(_report(out)["host_latency"], "dynamic-int8")

    off = tmp_path / "dyn_off.tflite"
    result = run_cli(built_artifacts.source, "-o", off, "--quantize", "dynamic-int8", "--no-latency", "--no-validate")
    assert result.exit_code == 0, result.stderr
    report = _report(off)
    assert "host_latency" not in report and "latency" not in [s["name"] for s in report["stages"]]
    assert "host latency" not in result.stdout
