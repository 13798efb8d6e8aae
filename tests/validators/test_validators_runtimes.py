"""Parity through CompiledModel as well as the Interpreter (--runtime)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import edge_export
from cli_harness import read_report
from edge_export.errors import UsageError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.runtime.interpreter import CompiledModelRunner, TFLiteRunner
from edge_export.targets.base import Runner
from edge_export.validators.runtimes import RuntimeComparison, compare_runtimes
from model_zoo import small_cnn

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def test_both_runtimes_agree_on_a_small_cnn_and_the_report_shows_both(tmp_path):
    out = tmp_path / "cnn.tflite"
    result = edge_export.export(small_cnn(), example_inputs=(X,), output=out, runtime="both", samples=4)
    assert result.exit_code == 0
    report = read_report(out)  # validated against the schema
    runtimes = report["runtimes"]
    assert runtimes["requested"] == "both" and runtimes["agree"] is True and runtimes["findings"] == []
    names = [r["runtime"] for r in runtimes["results"]]
    assert names == ["ai-edge-litert interpreter (CPU, XNNPACK)", "ai-edge-litert CompiledModel (CPU accelerator, XNNPACK)"]
    assert all(r["status"] == "passed" for r in runtimes["results"])
    (difference,) = runtimes["differences"]
    assert difference["output"] == "output_0" and difference["agrees"] is True
    # the top-level validation stays the interpreter's, as without --runtime
    assert report["validation"]["runtime"] == names[0]


def test_compiled_model_runner_is_a_runner_and_matches_the_interpreter(tmp_path):
    out = tmp_path / "cnn.tflite"
    edge_export.export(small_cnn(), example_inputs=(X,), output=out, validate=False)
    model = read_flatbuffer(out.read_bytes())
    compiled = CompiledModelRunner(model)
    assert isinstance(compiled, Runner)
    interpreter = TFLiteRunner(model)
    assert [t.name for t in compiled.inputs] == [t.name for t in interpreter.inputs] == ["x"]
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(compiled.run([x])[0], interpreter.run([x])[0], rtol=1e-5, atol=1e-6)


def test_a_difference_between_runtimes_is_a_finding_and_fails_the_verdict(tmp_path):
    a = [[np.array([1.0, 2.0], dtype=np.float32)]]
    b = [[np.array([1.0, 2.5], dtype=np.float32)]]
    (difference,) = compare_runtimes(["logits"], a, b, [None])
    assert difference.max_abs_difference == 0.5 and not difference.agrees and not difference.identical
    # integer outputs: one quantization step is tolerated
    (within_a_step,) = compare_runtimes(["q"], [[np.array([0.1])]], [[np.array([0.2])]], [0.1])
    assert within_a_step.agrees

    from dataclasses import replace

    from report_fixtures import full_report

    report = replace(full_report(), per_layer=None, baseline=None)  # parity passed, no gate
    assert report.verdict == "passed"
    comparison = RuntimeComparison("both", (report.validation, report.validation), (difference,))
    assert comparison.agree is False and "logits" in comparison.findings()[0]
    assert replace(report, runtimes=comparison).verdict == "failed"
    assert replace(report, runtimes=RuntimeComparison("both", (report.validation, report.validation), ())).verdict == "passed"


def test_an_unknown_runtime_is_a_usage_error(run_cli, tmp_path):
    with pytest.raises(UsageError, match="--runtime gpu is not known"):
        edge_export.ExportOptions.from_keywords(runtime="gpu")
    result = run_cli("model_zoo:small_cnn", "--input-shape", "1,3,16,16", "--runtime", "npu", "-o", tmp_path / "m.tflite")
    assert result.exit_code == 2 and "--runtime npu is not known" in result.stderr


def test_markdown_shows_each_runtime_and_the_findings():
    from dataclasses import replace

    from edge_export.reports.markdown import render_markdown
    from report_fixtures import full_report

    report = replace(full_report(), per_layer=None, baseline=None)
    (difference,) = compare_runtimes(["logits"], [[np.array([1.0])]], [[np.array([1.5])]], [None])
    text = render_markdown(replace(report, runtimes=RuntimeComparison("both", (report.validation, report.validation), (difference,))))
    assert "## Runtimes" in text and "**finding:** output 'logits' differs" in text.replace("\\", "")
