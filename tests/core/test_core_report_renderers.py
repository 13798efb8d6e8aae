"""The renderers of the typed run report (terminal summary, Markdown, JUnit, baseline comparison),
each on a report built in code (tests/report_fixtures.py): no export runs."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

from report_fixtures import full_report, skipped_report
from rich.console import Console

from edge_export.errors import EXIT_OK, EXIT_PARITY_FAILED, exit_code_for_verdict
from edge_export.reports.baseline import compare_with_baseline
from edge_export.reports.junit import render_junit
from edge_export.reports.markdown import render_markdown
from edge_export.reports.serialize import to_json_value
from edge_export.reports.summary import print_summary


def _summary(report) -> tuple[str, str]:
    out = Console(record=True, width=300, highlight=False, soft_wrap=True, force_terminal=False)
    err = Console(record=True, width=300, highlight=False, soft_wrap=True, force_terminal=False)
    print_summary(report, out, err)
    return out.export_text(), err.export_text()


def test_summary_of_a_full_report():
    out, err = _summary(full_report())
    assert out.splitlines() == [
        "FAILED  out/cnn.tflite",
        "  size 20.0 KiB · 5 ops: CONV_2D×2, FULLY_CONNECTED×1, MEAN×1, QUANTIZE×1",
        "  parity (8 samples): worst output logits (classification): SQNR 31.2 dB, max abs error 0.0625",
        "  note: a note",
        "  quantization: int8 via pt2e (measured: pt2e had the higher SQNR); NOT fully integer; "
        "input args_0 uint8 (scale 0.0078125, zero point 128), output logits float32",
        "  edge tpu: 1 of 2 operations predicted on the Edge TPU (50%), 1 TPU segment(s); the graph is cut at "
        "operator #1 MEAN in module 'pool' (AdaptiveAvgPool2d), at model.py:12: MEAN over 3 axes.",
        "  edgetpu_compiler: not compiled: edgetpu_compiler was not found on PATH",
        "    disagreement: the compiler put MEAN on the CPU",
        "  per-layer: 2 layers compared (75% of modules matched); worst head 12.0 dB; error jumps at head (12.0 dB)",
        "  baseline old.report.json: 1 regression(s)",
        "    - logits: sqnr_db fell from 40 to 31.25 (tolerance 1)",
        "  reports: out/cnn.report.json  out/cnn.report.md",
        "  junit: out/junit.xml",
    ]
    assert err == "warning: calibrated on synthetic inputs\n"


def test_summary_of_an_unvalidated_micro_export():
    out, err = _summary(skipped_report())
    assert out.splitlines() == [
        "EXPORTED-UNVALIDATED  tiny.tflite",
        "  size 20.0 KiB · 5 ops: CONV_2D×2, FULLY_CONNECTED×1, MEAN×1, QUANTIZE×1",
        "  parity: not checked (--no-validate was given)",
        "  tflite micro: arena 8192 bytes; ops CONV_2D, FULLY_CONNECTED",
        "  reports: tiny.report.json  tiny.report.md",
    ]
    assert err == ""


def test_summary_prints_markup_in_model_names_literally():
    report = full_report()
    parity = report.validation
    named = dataclasses.replace(parity.outputs[0], name="[/bold]logits[red]")
    report = dataclasses.replace(
        report,
        validation=dataclasses.replace(parity, outputs=(named, parity.outputs[1])),
        artifacts=dataclasses.replace(report.artifacts, tflite="m[/]/x.tflite"),
        quantization=dataclasses.replace(report.quantization, warnings=("[/] in a warning",)),
    )
    out, err = _summary(report)
    assert out.startswith("FAILED  m[/]/x.tflite\n")
    assert "worst output [/bold]logits[red] (classification)" in out
    assert err == "warning: [/] in a warning\n"


def test_markdown_of_a_full_report():
    md = render_markdown(full_report())
    lines = md.splitlines()
    assert lines[0] == "# edge-export: ❌ FAILED"
    assert "· quantize **int8** · target **edgetpu** · 20.0 KiB · 5 ops · exit code 1" in lines[2]
    for heading in ("## Outputs (8 samples", "## Layers (2 compared, 75% of modules matched)", "## Quantization",
                    "## Target: edgetpu", "## Flatbuffer", "## Stages"):
        assert any(line.startswith(heading) for line in lines), heading
    assert "| <code>logits</code> | classification (labels) | 1×10 | 0.0625 |" in md
    assert "**Regressed against the baseline** <code>old\\.report\\.json</code>:" in md
    assert "  - float tensor <code>norm;out</code> (float32) from module <code>features\\.1</code>" in md
    assert "The error first jumps at **<code>head</code>** (Linear): SQNR 12 dB." in md
    assert "- output <code>features</code>: int8 \\[1, 16\\]" in md  # per-channel: no single scale
    assert md == render_markdown(to_json_value(full_report()))  # the typed report and its JSON render alike


def test_markdown_of_an_unvalidated_report():
    md = render_markdown(skipped_report())
    assert md.startswith("# edge-export: ⚠️ EXPORTED, NOT VALIDATED\n")
    assert "Parity was not checked: --no-validate was given." in md
    assert "**TFLite Micro:** tensor arena 8192 bytes; operators: CONV\\_2D, FULLY\\_CONNECTED." in md
    assert "## Outputs" not in md and "## Quantization" not in md


def test_markdown_escapes_names_in_a_typed_report():
    report = full_report()
    parity = report.validation
    named = dataclasses.replace(parity.outputs[0], name="x\n# edge-export: ✅ PASSED <img src=x>|")
    md = render_markdown(dataclasses.replace(report, validation=dataclasses.replace(parity, outputs=(named, parity.outputs[1]))))
    assert [line for line in md.splitlines() if line.startswith("#") and "PASSED" in line] == []
    assert "<img" not in md and "&lt;img src=x&gt;\\|" in md


def test_junit_of_a_full_report():
    root = ET.fromstring(render_junit(full_report()))
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "2", "0")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["output 0 logits (classification)", "output 1 features (regression)", "000 features.0", "001 head", "logits sqnr_db"]
    assert cases["001 head"].find("failure").get("message") == (
        "SQNR 12 dB below the layer threshold; first layer where the error jumps (likely culprit)"
    )
    assert "top5_agreement: not computable: fewer than 10 classes" in cases["output 0 logits (classification)"].find("system-out").text


def test_junit_of_an_unvalidated_report_is_one_skipped_case():
    suite = ET.fromstring(render_junit(skipped_report())).find("testsuite")
    (case,) = suite.iter("testcase")
    assert case.find("skipped").get("message") == "--no-validate was given"
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("1", "0", "1")


def test_junit_drops_control_characters_from_a_typed_report():
    report = full_report()
    report = dataclasses.replace(report, model=dataclasses.replace(report.model, source="m\x1b\x00.pt2"))
    root = ET.fromstring(render_junit(report))
    assert root.find("testsuite").get("name") == "edge-export parity: m.pt2"


def test_baseline_reads_the_typed_report():
    current = full_report()
    assert compare_with_baseline(current, to_json_value(current)) == []  # against itself: nothing worse
    better = to_json_value(current)
    better["validation"]["outputs"][0]["metrics"]["sqnr_db"] = 45.0
    (regression,) = compare_with_baseline(current, better)
    assert (regression.output, regression.metric, regression.baseline, regression.current) == ("logits", "sqnr_db", 45.0, 31.25)
    assert compare_with_baseline(skipped_report(), better)[0].metric == "validation"


def test_one_mapping_from_verdict_to_exit_code():
    assert [exit_code_for_verdict(v) for v in ("passed", "exported-unvalidated", "failed")] == [EXIT_OK, EXIT_OK, EXIT_PARITY_FAILED]
    assert full_report().exit_code == 1 and to_json_value(full_report())["exit_code"] == 1
