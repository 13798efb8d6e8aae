"""The renderers of the typed run report (terminal summary, Markdown, JUnit, baseline comparison),
each on a report built in code (tests/report_fixtures.py): no export runs.

Edge cases each renderer meets: skipped validation, metrics that are not computable or not finite
(the JSON has them as null), a failing per-layer gate, and a target section holding a plugin's own
keys (``TargetSection.extra``, in the JSON only)."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

import numpy as np
from report_fixtures import full_report, report_with_outputs, skipped_report
from rich.console import Console

from edge_export.errors import EXIT_OK, EXIT_PARITY_FAILED, exit_code_for_verdict
from edge_export.reports.baseline import EarlierOutput, compare_with_baseline, earlier_outputs
from edge_export.reports.junit import render_junit
from edge_export.reports.markdown import render_markdown
from edge_export.reports.model import BaselineSection, TargetSection
from edge_export.output.serialize import to_json_value
from edge_export.reports.summary import print_summary
from edge_export.validators.parity import Check, OutputParity


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
        "  rewritten: AdaptiveAvgPool2d -> AvgPool2d",
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


def test_junit_shows_control_characters_of_a_typed_report_as_escapes():
    report = full_report()
    report = dataclasses.replace(report, model=dataclasses.replace(report.model, source="m\x1b\x00.pt2"))
    root = ET.fromstring(render_junit(report))  # XML 1.0 forbids both, even as &#27;: visible text instead
    assert root.find("testsuite").get("name") == "edge-export parity: m\\x1b\\x00.pt2"


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


# ---- shared edge cases ---------------------------------------------------------------------------


def nan_report():
    """full_report() whose logits SQNR is NaN and cosine a numpy float32, and whose logits output
    failed with an error; as the JSON has them: no SQNR, cosine 0.25."""
    report = full_report()
    parity = report.validation
    logits = parity.outputs[0]
    metrics = {**logits.metrics, "sqnr_db": float("nan"), "cosine": np.float32(0.25)}
    checks = (Check("sqnr_db", float("nan"), 20.0, ">=", False),)
    logits = dataclasses.replace(logits, metrics=metrics, checks=checks, error="the flatbuffer output contains NaN")
    return dataclasses.replace(report, validation=dataclasses.replace(parity, outputs=(logits, parity.outputs[1])))


def gated_layers_report():
    """full_report() with a per-layer gate of 40 dB: both layers fail it, the second is the jump."""
    report = full_report()
    layers = tuple(dataclasses.replace(layer, passed=False) for layer in report.per_layer.layers)
    per_layer = dataclasses.replace(report.per_layer, layers=layers, first_jump=layers[1], worst=layers[1], min_sqnr_db=40.0)
    return dataclasses.replace(report, per_layer=per_layer)


def plugin_target_report():
    """skipped_report() for a target defined outside the package, whose hooks returned their own keys."""
    target = TargetSection.from_hooks({"name": "npu", "implied": ("--target npu implies --quantize fp16",), "npu": {"delegate": "opencl"}})
    return dataclasses.replace(skipped_report(), target=target)


# ---- Markdown ------------------------------------------------------------------------------------


def test_markdown_of_a_micro_export_is_exactly_this():
    assert render_markdown(skipped_report()) == (
        "# edge-export: ⚠️ EXPORTED, NOT VALIDATED\n\n"
        "<code>pkg\\.models\\:make</code> (module\\_reference) → <code>tiny\\.tflite</code> · quantize **int8** · "
        "target **micro** · 20.0 KiB · 5 ops · exit code 0\n\n"
        "Parity was not checked: --no-validate was given.\n\n"
        "## Target: micro\n\n"
        "- --target micro implies --io-dtype int8\n\n"
        "**TFLite Micro:** tensor arena 8192 bytes; operators: CONV\\_2D, FULLY\\_CONNECTED.\n"
        "Op resolver lines written to <code>ops\\.cc</code>.\n\n"
        "## Flatbuffer\n\n"
        "- size: 20.0 KiB (20480 bytes), sha256 `abababababababab…`\n"
        "- fully integer: True\n"
        "- input <code>args\\_0</code>: uint8 \\[1, 32, 32, 3\\], scale 0\\.0078125, zero point 128\n"
        "- output <code>logits</code>: uint8 \\[1, 10\\], scale 0\\.125, zero point 0\n"
        "- output <code>features</code>: int8 \\[1, 16\\]\n\n"
        "| operator | count |\n|---|---|\n| CONV\\_2D | 2 |\n| FULLY\\_CONNECTED | 1 |\n| MEAN | 1 |\n| QUANTIZE | 1 |\n\n"
        "## Stages\n\nload 0.25 s\n\n"
        "<sub>edge-export 0\\.9\\.0 · python 3\\.11\\.9 · torch 2\\.6\\.0 · litert-torch 0\\.4\\.0 · ai-edge-litert 1\\.2\\.0 · "
        "numpy 2\\.1\\.0 · report schema 1\\.1</sub>\n"
    )


def test_markdown_shows_metrics_that_are_not_computable_or_not_finite():
    md = render_markdown(nan_report())
    # top-5: not computable (n/c); SQNR NaN: no value (–), as in the JSON; cosine: a numpy float32
    assert "| <code>logits</code> | classification (labels) | 1×10 | 0.0625 | 0.0100 | 0.250000 | – | 1 | n/c | – | – | ❌ the flatbuffer output contains NaN |" in md
    assert "Worst output: <code>logits</code> (classification; SQNR – dB, max abs error 0.0625; failed checks: sqnr\\_db)." in md
    assert "| nan" not in md.lower() and "sqnr nan" not in md.lower()  # no number reads "nan"


def test_markdown_of_a_failing_per_layer_gate():
    md = render_markdown(gated_layers_report())
    assert md.startswith("# edge-export: ❌ FAILED\n")
    assert "The error first jumps at **<code>head</code>** (Linear): SQNR 12 dB. This is the likely culprit." in md
    worst = [line for line in md.splitlines() if line.startswith(("| 1 |", "| 0 |"))]
    assert worst == [  # lowest SQNR first; the conv names the ReLU fused into it
        "| 1 | <code>head</code> | Linear | FULLY\\_CONNECTED | 12 | 0.970000 |",
        "| 0 | <code>features\\.0</code> (+ fused features\\.2) | Conv2d | CONV\\_2D | 38.5 | 0.999950 |",
    ]
    assert "1 flatbuffer tensor(s) could not be matched to a PyTorch module." in md


def test_markdown_of_a_target_section_from_a_plugin():
    report = plugin_target_report()
    md = render_markdown(report)
    assert "## Target: npu\n\n- --target npu implies --quantize fp16\n## Flatbuffer" in md
    assert "opencl" not in md  # a plugin's own keys are in the JSON only
    assert to_json_value(report)["target"]["npu"] == {"delegate": "opencl"}


def test_markdown_of_a_compiled_edgetpu_model_and_of_a_target_without_compiler_run():
    from edge_export.targets.edgetpu.report import CompilerSection, DelegateSection
    from edge_export.targets.edgetpu.compiler import CompilerResult

    report = full_report()
    compiled = dataclasses.replace(
        report,
        target=dataclasses.replace(report.target, compiler=CompilerSection(CompilerResult(True, ""), ()), delegate=DelegateSection("edgetpu", True, "")),
        artifacts=dataclasses.replace(report.artifacts, extra={"edgetpu_tflite": "out/cnn_edgetpu.tflite"}),
    )
    md = render_markdown(compiled)
    assert "Compiled with edgetpu_compiler: <code>out/cnn\\_edgetpu\\.tflite</code>.\n- delegate edgetpu used for parity: True \n" in md
    assert "compiler disagrees" not in md
    md = render_markdown(dataclasses.replace(report, target=dataclasses.replace(report.target, compiler=None, delegate=None)))
    assert "Not compiled: None\n\n" in md and "delegate edgetpu" not in md


def test_markdown_of_the_quantization_attempts_shows_seconds_as_the_json_has_them():
    report = full_report()
    quant = report.quantization
    fast = dataclasses.replace(quant.attempts[0], seconds=0.0004)  # 0.0 in the JSON (milliseconds)
    md = render_markdown(dataclasses.replace(report, quantization=dataclasses.replace(quant, attempts=(fast, quant.attempts[1]))))
    assert "| pt2e | True | True | 31.25 | 0.000 |  |" in md
    assert "| flatbuffer | False | None | – | 0.500 | it failed |" in md
    assert to_json_value(fast)["seconds"] == 0.0


def test_markdown_of_a_baseline_without_regression():
    md = render_markdown(dataclasses.replace(full_report(), baseline=BaselineSection("old.json", ())))
    assert "No regression against the baseline <code>old\\.json</code>." in md
    assert "Regressed" not in md


# ---- JUnit ---------------------------------------------------------------------------------------


def _cases(report) -> dict:
    suite = ET.fromstring(render_junit(report)).find("testsuite")
    return {c.get("name"): c for c in suite.iter("testcase")}


def test_junit_of_metrics_that_are_not_computable_or_not_finite():
    case = _cases(nan_report())["output 0 logits (classification)"]
    assert case.find("failure").get("message") == "the flatbuffer output contains NaN"  # the error, not the checks
    details = case.find("system-out").text.splitlines()
    assert details[0] == "kind: classification (decided by labels)"
    assert "sqnr_db: n/a" in details and "cosine: 0.25" in details
    assert "top5_agreement: not computable: fewer than 10 classes" in details


def test_junit_names_the_failed_checks_of_an_output_without_error():
    parity = full_report().validation
    logits = dataclasses.replace(parity.outputs[0], checks=(Check("sqnr_db", float("nan"), 20.0, ">=", False), Check("max_abs_error", 0.75, 0.5, "<=", False)))
    case = _cases(report_with_outputs(logits))["output 0 logits (classification)"]
    assert case.find("failure").get("message") == "sqnr_db n/a not >= 20; max_abs_error 0.75 not <= 0.5"


def test_junit_of_a_failing_per_layer_gate():
    suite = ET.fromstring(render_junit(gated_layers_report())).find("testsuite")
    layers = [c for c in suite.iter("testcase") if c.get("classname") == "edge_export.parity.layers"]
    assert [(c.get("name"), c.find("failure").get("message")) for c in layers] == [
        ("000 features.0", "SQNR 38.5 dB below the layer threshold"),
        ("001 head", "SQNR 12 dB below the layer threshold; first layer where the error jumps (likely culprit)"),
    ]
    # a layer's details: its scalar fields under their JSON names; shapes and module lists left out
    assert layers[0].find("system-out").text.splitlines() == [
        "position: 0", "module_path: features.0", "module_type: Conv2d", "tflite_tensor: features.0;conv", "tflite_index: 3",
        "opcode: CONV_2D", "dtype: int8", "layout: NHWC->NCHW", "sqnr_db: 38.5", "cosine: 0.99995", "passed: False",
    ]
    assert suite.get("failures") == "3"  # the two layers and the baseline regression; no output fails


def test_junit_of_a_plugin_target_is_that_of_its_run():
    assert render_junit(plugin_target_report()) == render_junit(skipped_report())  # targets have no test cases


def test_junit_names_a_model_level_layer():
    report = full_report()
    root_layer = dataclasses.replace(report.per_layer.layers[0], module_path="")
    per_layer = dataclasses.replace(report.per_layer, layers=(root_layer,), first_jump=None, worst=root_layer)
    assert list(_cases(dataclasses.replace(report, per_layer=per_layer, baseline=None))) == [
        "output 0 logits (classification)", "output 1 features (regression)", "000 layer 0",
    ]


# ---- baseline comparison -------------------------------------------------------------------------


def _output(name: str, index: int = 0, failing: bool = False, error: str | None = None, **metrics) -> OutputParity:
    checks = (Check("sqnr_db", metrics.get("sqnr_db"), 20.0, ">=", not failing),)
    return OutputParity(index, name, (1, 4), metrics, checks, error=error)


def _earlier(*outputs: dict) -> dict:
    return {"schema_version": "1.1", "validation": {"status": "passed", "outputs": list(outputs)}}


def test_baseline_that_skipped_validation_gives_nothing_to_compare():
    assert earlier_outputs({"validation": {"status": "skipped", "reason": "--no-validate was given"}}) is None
    assert compare_with_baseline(full_report(), to_json_value(skipped_report())) == []


def test_baseline_reads_what_older_reports_lack():
    assert EarlierOutput.from_json({"name": "y"}) == EarlierOutput("y", None, None, {})
    current = report_with_outputs(_output("y", sqnr_db=30.0))
    (reg,) = compare_with_baseline(current, _earlier({"name": "y", "metrics": {"sqnr_db": 35.0}}))  # no kind, no passed
    assert (reg.metric, reg.baseline, reg.current) == ("sqnr_db", 35.0, 30.0)


def test_baseline_flags_a_missing_output_and_a_lost_verdict():
    current = report_with_outputs(_output("y", failing=True, sqnr_db=10.0))
    regs = compare_with_baseline(
        current, _earlier({"name": "y", "passed": True, "metrics": {"sqnr_db": 10.0}}, {"name": "z", "passed": True, "metrics": {}})
    )
    assert [(r.output, r.metric) for r in regs] == [("y", "verdict"), ("z", "presence")]
    assert regs[0].message == "output y passed in the baseline and fails now"


def test_baseline_matches_a_renamed_output_by_position():
    current = report_with_outputs(_output("renamed", sqnr_db=30.0, max_abs_error=0.5))
    regs = compare_with_baseline(current, _earlier({"name": "y", "passed": True, "metrics": {"sqnr_db": 30.5, "max_abs_error": 0.1}}))
    assert [(r.output, r.metric, r.message) for r in regs] == [("y", "max_abs_error", "y: max_abs_error grew from 0.1 to 0.5 (limit 0.11)")]


def test_baseline_skips_non_finite_and_numpy_metrics_as_the_json_has_them():
    # NaN is null in the JSON: no value to compare; a numpy float compares as a number
    current = report_with_outputs(_output("y", sqnr_db=float("nan"), cosine=np.float32(0.5)))
    (reg,) = compare_with_baseline(current, _earlier({"name": "y", "passed": True, "metrics": {"sqnr_db": 40.0, "cosine": 0.99}}))
    assert (reg.metric, reg.current) == ("cosine", 0.5) and type(reg.current) is float


def test_baseline_flags_a_metric_that_is_not_computable_any_more():
    lost = dataclasses.replace(_output("y", sqnr_db=30.0, top5_agreement=None), not_computable={"top5_agreement": "fewer than 10 classes"})
    (reg,) = compare_with_baseline(report_with_outputs(lost), _earlier({"name": "y", "passed": True, "metrics": {"sqnr_db": 30.0, "top5_agreement": 0.9}}))
    assert reg.message == "y: top5_agreement was 0.9 in the baseline and cannot be computed now (fewer than 10 classes)"
    # an output that failed with an error shows as a verdict regression only
    broken = dataclasses.replace(lost, error="NaN in the output")
    regs = compare_with_baseline(report_with_outputs(broken), _earlier({"name": "y", "passed": True, "metrics": {"sqnr_db": 30.0, "top5_agreement": 0.9}}))
    assert [r.metric for r in regs] == ["verdict"]


# ---- terminal summary ----------------------------------------------------------------------------


def test_summary_of_metrics_that_are_not_finite():
    out, _ = _summary(nan_report())
    assert "  parity (8 samples): worst output logits (classification): SQNR – dB, max abs error 0.0625; failed: sqnr_db; the flatbuffer output contains NaN" in out.splitlines()


def test_summary_of_a_failing_per_layer_gate_and_a_plugin_target():
    out, _ = _summary(gated_layers_report())
    assert out.startswith("FAILED  ")
    assert "  per-layer: 2 layers compared (75% of modules matched); worst head 12.0 dB; error jumps at head (12.0 dB)" in out.splitlines()
    plugin, _ = _summary(plugin_target_report())
    assert plugin == _summary(skipped_report())[0].replace("  tflite micro: arena 8192 bytes; ops CONV_2D, FULLY_CONNECTED\n", "")


def test_markdown_metadata_section_on_a_hand_built_report():
    from edge_export.reports.model import AssociatedFile, MetadataSection, MetadataTensor

    metadata = MetadataSection(
        name="Digits *v1*", version="1.0", description=None, author="<script>", min_parser_version="1.0.0",
        inputs=(MetadataTensor("pixel_values", "image", (127.5,), (63.75,), "RGB"),),
        outputs=(MetadataTensor("logits", "classification", labels_file="labels.txt", labels_count=10),),
        associated_files=(AssociatedFile("labels.txt", "TENSOR_AXIS_LABELS", 80, "ab" * 32, "data/labels.txt"),),
        metadata_bytes=620, added_bytes=900, written_to=("out/cnn.tflite", "out/cnn_edgetpu.tflite"),
        notes=("a | note",),
    )
    md = render_markdown(dataclasses.replace(full_report(), metadata=metadata))
    section = md.split("## Model metadata", 1)[1].split("## Flatbuffer", 1)[0]
    assert "- name: Digits \\*v1\\*" in section and "- author: &lt;script&gt;" in section and "description" not in section
    assert "620 bytes (parser version 1\\.0\\.0), the \\.tflite grew by 900 bytes" in section
    assert "<code>out/cnn\\.tflite</code>, <code>out/cnn\\_edgetpu\\.tflite</code>" in section
    assert "| input 0 | <code>pixel\\_values</code> | image | 127.5 | 63.75 | RGB | – |" in section
    assert "| output 0 | <code>logits</code> | classification | – | – | – | <code>labels\\.txt</code> (10) |" in section
    assert "- **note:** a \\| note" in section
    assert "## Model metadata" not in render_markdown(full_report())
    assert to_json_value(dataclasses.replace(full_report(), metadata=metadata))["metadata"]["written_to"][1] == "out/cnn_edgetpu.tflite"


def test_summary_metadata_line_is_printed_literally():
    from edge_export.reports.model import MetadataSection, MetadataTensor

    metadata = MetadataSection(
        name="[bold]Digits", version="2", description=None, author=None, min_parser_version="1.0.0",
        inputs=(MetadataTensor("x", "image", (127.5,), (127.5,), "RGB"),),
        outputs=(MetadataTensor("logits", "classification", labels_file="labels.txt", labels_count=10),),
        associated_files=(), metadata_bytes=600, added_bytes=880, notes=("NCHW input",),
    )
    out, _ = _summary(dataclasses.replace(full_report(), metadata=metadata))
    assert "  metadata: [bold]Digits 2; x normalized by mean 127.5; logits labelled by labels.txt (10) (+880 bytes)" in out.splitlines()
    assert "    note: NCHW input" in out.splitlines()
    assert "metadata:" not in _summary(full_report())[0]


def _with_host_latency(quantized_ms: float):
    from edge_export.runtime.latency import HostLatency

    latency = HostLatency("int8", quantized_ms, 1.0, runs=30, warmup=2, host="x86_64 Linux, 2 CPUs")
    return dataclasses.replace(full_report(), host_latency=latency)


def test_renderers_flag_a_quantized_model_slower_than_fp32():
    from cli_harness import validate_report

    report = _with_host_latency(1.4)
    out, err = _summary(report)
    assert "  host latency (LiteRT CPU + XNNPACK, 1 thread): int8 1.4 ms, fp32 1 ms (1.40x; reported, not a gate)" in out.splitlines()
    assert "warning: int8 runs 1.40x slower than fp32 on this host" in err
    md = render_markdown(report)
    section = md[md.index("## Host latency (LiteRT CPU + XNNPACK, 1 thread)"):]
    assert "- int8: 1.4 ms; fp32: 1 ms (medians of 30 interleaved runs after 2 warm-up, on x86\\_64 Linux, 2 CPUs); ratio 1.40x" in section
    from edge_export.output.text_safety import escape_markdown

    assert f"- **Warning:** {escape_markdown(report.host_latency.note)}" in section
    data = validate_report(to_json_value(report))
    assert data["host_latency"]["ratio"] == 1.4 and data["host_latency"]["slower"] is True
    # reported, never a gate
    assert report.exit_code == full_report().exit_code and report.verdict == full_report().verdict


def test_renderers_do_not_warn_when_the_quantized_model_is_faster():
    report = _with_host_latency(0.6)
    out, err = _summary(report)
    assert "(0.60x; reported, not a gate)" in out
    assert "slower than fp32" not in err
    md = render_markdown(report)
    assert "## Host latency" in md and "**Warning:**" not in md
    assert to_json_value(report)["host_latency"]["note"] is None


def _with_transposes(report):
    """The full report's model with one TRANSPOSE inside the graph (module ``stem``) and one at
    its input."""
    from edge_export.conversion.transpose_report import TransposeReport, TransposeSite

    sites = (
        TransposeSite(3, (1, 8, 8, 16), (0, 3, 1, 2), False, "stem", "Sequential"),
        TransposeSite(0, (1, 3, 32, 32), (0, 2, 3, 1), True, None, None),
    )
    return dataclasses.replace(report, flatbuffer=dataclasses.replace(report.flatbuffer, transposes=TransposeReport(2, 1, sites)))


def test_summary_names_the_module_of_each_transpose_left():
    out, _ = _summary(_with_transposes(full_report()))
    line = next(line for line in out.splitlines() if line.startswith("  layout:"))
    assert line == (
        "  layout: 2 TRANSPOSE (1 inside the graph, 1 at the inputs/outputs (NCHW I/O: --channels-last removes them)); "
        "inside the graph: #3 [1, 8, 8, 16] perm 0,3,1,2 in stem (Sequential)"
    )
    # a model without TRANSPOSE inside the graph (or a report that did not look) prints no layout line
    assert not any(line.startswith("  layout:") for line in _summary(full_report())[0].splitlines())
    from edge_export.conversion.transpose_report import TransposeReport

    report = _with_transposes(full_report())
    boundary_only = dataclasses.replace(report.flatbuffer.transposes, count=1, inner=0, sites=report.flatbuffer.transposes.sites[1:])
    assert isinstance(boundary_only, TransposeReport)
    quiet = dataclasses.replace(report, flatbuffer=dataclasses.replace(report.flatbuffer, transposes=boundary_only))
    assert not any(line.startswith("  layout:") for line in _summary(quiet)[0].splitlines())


def test_markdown_lists_the_transposes_left_with_their_modules():
    md = render_markdown(_with_transposes(full_report()))
    assert "TRANSPOSE operators: 2 (1 inside the graph, 1 at the model's inputs or outputs)" in md
    assert "| 3 | \\[1, 8, 8, 16\\] | 0,3,1,2 | inside | <code>stem</code> (Sequential) |" in md
    assert "| 0 | \\[1, 3, 32, 32\\] | 0,2,3,1 | boundary |  |" in md
    assert "TRANSPOSE operators" not in render_markdown(full_report())


def test_transposes_reach_the_json_report():
    from cli_harness import validate_report

    data = validate_report(to_json_value(_with_transposes(full_report())))
    assert data["flatbuffer"]["transposes"]["count"] == 2
    assert data["flatbuffer"]["transposes"]["sites"][0] == {
        "operator_index": 3, "shape": [1, 8, 8, 16], "perm": [0, 3, 1, 2], "boundary": False, "module": "stem", "module_type": "Sequential",
    }
