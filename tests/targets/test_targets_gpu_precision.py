"""--target gpu's float16 precision check: a model that overflows float16 passes float32 parity and
fails the check naming its layer (exit 1, with the Kotlin option to force float32); an ordinary CNN
passes both; the app's --gpu-precision fp32 keeps the finding without failing the run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import edge_export
from cli_harness import read_report
from edge_export.flatbuffer import read_flatbuffer
from edge_export.targets.gpu.precision import FLOAT16_MAX, check_gpu_precision
from testing_models import float16_overflow_cnn, small_cnn

pytestmark = pytest.mark.slow

EXAMPLE = (torch.randn(1, 3, 16, 16),)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Each model exported once with --target gpu (parity, prediction and the float16 check)."""
    folder = tmp_path_factory.mktemp("gpu_precision")
    done = {}
    for name, build in (("overflow", float16_overflow_cnn), ("cnn", small_cnn)):
        path = folder / f"{name}.tflite"
        done[name] = (edge_export.export(build(), example_inputs=EXAMPLE, output=path, target="gpu", samples=4), path)
    return done


def test_the_overflowing_model_passes_float32_parity_and_fails_the_float16_check(exports):
    result, path = exports["overflow"]
    assert result.run_report.validation.passed is True  # float32 parity: exact
    check = result.run_report.target.gpu_precision
    assert check.passed is False and check.failed
    assert result.verdict == "failed" and result.exit_code == 1
    # the overflow is named at the amplifying layer, where float32 goes beyond float16's range
    assert check.overflow is not None and check.overflow.module_path == "amplify"
    assert check.overflow.opcode == "CONV_2D" and check.overflow.max_abs_float32 > FLOAT16_MAX
    assert check.first_jump is not None and check.first_jump.module_path == "amplify"
    assert check.overflow.module_type == "Conv2d"  # a library class: no user source line to name
    report = read_report(path)["target"]["gpu_precision"]  # validated against the schema
    assert report["status"] == "failed" and "amplify" in report["findings"][0]
    assert "Precision.FP32" in report["recommendation"]


def test_the_report_shows_the_kotlin_option_to_force_float32(exports):
    _, path = exports["overflow"]
    markdown = path.with_suffix(".report.md").read_text()
    assert "GPU precision (float16" in markdown and "```kotlin" in markdown
    assert "CompiledModel.GpuOptions(precision = CompiledModel.GpuOptions.Precision.FP32)" in markdown
    assert "setPrecisionLossAllowed(false)" in markdown
    from edge_export.reports.junit import render_junit

    junit = render_junit(exports["overflow"][0].run_report)
    assert 'name="float16 precision"' in junit and "overflows to Inf" in junit


def test_an_ordinary_cnn_passes_both(exports):
    result, path = exports["cnn"]
    assert result.exit_code == 0 and result.run_report.validation.passed is True
    check = result.run_report.target.gpu_precision
    assert check.passed is True and check.overflow is None and check.nan is None and not check.collapsed_outputs
    assert check.recommendation() is None
    worst = check.parity.worst()
    # float16 storage costs accuracy, measurably, but stays far above the threshold
    assert check.parity.thresholds.min_sqnr_db < worst.sqnr_db < result.run_report.validation.worst().sqnr_db
    assert read_report(path)["target"]["gpu_precision"]["status"] == "passed"


def test_an_app_that_forces_float32_gets_the_finding_without_a_failed_run(tmp_path, run_cli):
    out = tmp_path / "overflow.tflite"
    result = run_cli("testing_models:float16_overflow_cnn", "--input-shape", "1,3,16,16", "--target", "gpu", "--gpu-precision", "fp32", "--samples", "2", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "gpu precision: GPU float16 precision check failed" in result.stdout and "reported only" in result.stdout
    report = read_report(out)["target"]["gpu_precision"]
    assert report["status"] == "failed" and report["gates_verdict"] is False and report["precision"] == "fp32"


def test_the_cli_fails_the_run_and_says_why(tmp_path, run_cli):
    out = tmp_path / "overflow.tflite"
    result = run_cli("testing_models:float16_overflow_cnn", "--input-shape", "1,3,16,16", "--target", "gpu", "--samples", "2", "-o", out)
    assert result.exit_code == 1, result.stderr
    assert result.stdout.startswith("FAILED") or "FAILED" in result.stdout.splitlines()[0]
    assert "gpu float16 check failed" in result.stderr and "Traceback" not in result.stderr
    assert out.exists()  # a failed check writes the model, like a failed parity


def test_without_parity_the_check_is_skipped_and_says_so(tmp_path):
    out = tmp_path / "overflow.tflite"
    result = edge_export.export(float16_overflow_cnn(), example_inputs=EXAMPLE, output=out, target="gpu", validate=False)
    check = result.run_report.target.gpu_precision
    assert check.passed is None and "--no-validate" in check.skipped and result.exit_code == 0


@pytest.mark.parametrize("argv", [["--gpu-precision", "fp32"], ["--target", "gpu", "--gpu-precision", "fp8"]])
def test_the_option_is_gpu_only_and_checked(tmp_path, run_cli, argv):
    result = run_cli("testing_models:small_cnn", "--input-shape", "1,3,16,16", *argv, "-o", tmp_path / "m.tflite")
    assert result.exit_code == 2 and "--gpu-precision" in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())


def test_nan_and_collapse_to_zero_are_found_on_a_converted_model():
    """x - x.amax() after an overflow: Inf - Inf is NaN in float16; a tiny output underflows to 0."""
    import litert_torch

    from edge_export.processes.library_output import quiet_libraries

    class Underflow(torch.nn.Module):
        def forward(self, x):
            big = x * 1e5
            return big - big.amax(-1, keepdim=True), x * 1e-9

    x = torch.rand(1, 8) + 1.0
    with quiet_libraries():
        model = read_flatbuffer(litert_torch.convert(Underflow().eval(), (x,)).model_content())
    with torch.no_grad():
        references = [[t.numpy() for t in Underflow()(x)]]
    check = check_gpu_precision(model, [[x.numpy()]], references)
    assert check.passed is False
    assert check.overflow is not None and check.nan is not None
    assert check.nan.operator >= check.overflow.operator  # NaN follows the Inf it comes from
    assert check.collapsed_outputs == (model.output_names[1],)
    assert np.isfinite(references[0][1]).all() and references[0][1].any()
