"""`edge-export validate`, JUnit XML and the --baseline regression gate."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import torch

from cli_harness import read_report, validate_report
from model_zoo import SmallCNN, small_cnn

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def exported(artifacts):
    """small_cnn with example X, exported in fp32 once per session (conftest), copied here."""
    return artifacts.source, artifacts.fp32


def test_validate_against_exported_program(exported, run_cli):
    src, out = exported
    res = run_cli("validate", out, "--reference", src)
    assert res.exit_code == 0, res.stderr
    rep = validate_report(json.loads(out.with_name("cnn.validate.report.json").read_text()))
    assert rep["verdict"] == "passed" and rep["export"]["command"] == "validate"
    assert rep["validation"]["outputs"][0]["metrics"]["sqnr_db"] > 60
    assert out.with_name("cnn.validate.report.md").is_file()


def test_validate_detects_the_wrong_reference(exported, tmp_path, run_cli):
    _, out = exported
    torch.manual_seed(123)
    other = tmp_path / "other.pt2"
    torch.export.save(torch.export.export(SmallCNN().eval(), (X,)), other)
    res = run_cli("validate", out, "--reference", other)
    assert res.exit_code == 1
    rep = validate_report(json.loads(out.with_name("cnn.validate.report.json").read_text()))
    assert rep["verdict"] == "failed"
    assert set(rep["validation"]["worst"]["failed_checks"]) >= {"sqnr_db", "max_abs_error"}


def test_validate_torchscript_and_channels_last_reference(tmp_path, run_cli):
    model = small_cnn()
    ts = tmp_path / "m.ts"
    torch.jit.save(torch.jit.trace(model, X), ts)
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (X,)), pt2)
    nhwc = tmp_path / "nhwc.tflite"
    assert run_cli(pt2, "--channels-last", "-o", nhwc).exit_code == 0
    # the .pt2 carries NCHW example inputs: the NHWC layout of the flatbuffer is detected
    res = run_cli("validate", nhwc, "--reference", pt2)
    assert res.exit_code == 0, res.stderr
    rep = json.loads((tmp_path / "nhwc.validate.report.json").read_text())
    assert rep["export"]["channels_last_inputs"] == [0]
    # TorchScript has no shapes: they come from the flatbuffer, NHWC when told
    res = run_cli("validate", nhwc, "--reference", ts, "--channels-last", "--report", tmp_path / "ts_check")
    assert res.exit_code == 0, res.stderr
    assert json.loads((tmp_path / "ts_check.report.json").read_text())["model"]["kind"] == "torchscript"


def test_validate_rejects_a_non_flatbuffer(tmp_path, exported, run_cli):
    src, _ = exported
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x00" * 64)
    res = run_cli("validate", bad, "--reference", src)
    assert res.exit_code == 2
    assert "not a LiteRT flatbuffer" in res.stderr
    assert not (tmp_path / "bad.validate.report.json").exists()


def test_junit_one_case_per_output(tmp_path, run_cli):
    from model_zoo import TwoOutputs

    src = tmp_path / "two.pt2"
    torch.export.save(torch.export.export(TwoOutputs().eval(), (X,)), src)
    out, xml = tmp_path / "two.tflite", tmp_path / "ci" / "parity.xml"
    (tmp_path / "ci").mkdir()
    res = run_cli(src, "-o", out, "--junit", xml)
    assert res.exit_code == 0, res.stderr
    suite = ET.parse(xml).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 2 and suite.get("failures") == "0"
    # a failing gate shows up as a JUnit failure
    res = run_cli(src, "-o", out, "--junit", xml, "--quantize", "fp16", "--atol", "1e-9")
    assert res.exit_code == 1
    suite = ET.parse(xml).getroot().find("testsuite")
    failures = [c.find("failure") for c in suite.findall("testcase") if c.find("failure") is not None]
    assert len(failures) == 2 and "max_abs_error" in failures[0].get("message")


def test_baseline_regression_fails_with_exit_1(tmp_path, exported, run_cli):
    src, good = exported
    baseline = good.with_name(f"{good.stem}.report.json")
    # same export again: no regression
    again = tmp_path / "again.tflite"
    res = run_cli(src, "-o", again, "--baseline", baseline)
    assert res.exit_code == 0, res.stdout + res.stderr
    assert read_report(again)["baseline"]["status"] == "ok"
    # fp16 is much worse than the fp32 baseline: the gate lists what regressed, even though the
    # fp16 run passes its own thresholds
    worse = tmp_path / "worse.tflite"
    res = run_cli(src, "-o", worse, "--quantize", "fp16", "--baseline", baseline)
    assert res.exit_code == 1
    rep = read_report(worse)
    assert rep["validation"]["status"] == "passed"
    assert rep["verdict"] == "failed" and rep["baseline"]["status"] == "regressed"
    metrics = {r["metric"] for r in rep["baseline"]["regressions"]}
    assert "sqnr_db" in metrics and "max_abs_error" in metrics
    assert "regression" in res.stdout
    assert "Regressed against the baseline" in (tmp_path / "worse.report.md").read_text()


def test_missing_baseline_is_a_usage_error(tmp_path, exported, run_cli):
    src, _ = exported
    res = run_cli(src, "-o", tmp_path / "x.tflite", "--baseline", tmp_path / "nope.json")
    assert res.exit_code == 2 and "No such report" in res.stderr
    assert not (tmp_path / "x.tflite").exists()


def test_baseline_unit_tolerances():
    from report_fixtures import report_with_outputs

    from edge_export.reports.baseline import BaselineTolerance, compare_with_baseline
    from edge_export.validators.parity import OutputParity

    def now(sqnr, err):  # this run: a typed report
        return report_with_outputs(OutputParity(0, "y", (1,), {"sqnr_db": sqnr, "max_abs_error": err}, ()))

    def earlier(sqnr, err):  # the baseline: an earlier report's JSON
        return {"validation": {"status": "passed", "outputs": [{"name": "y", "passed": True, "metrics": {"sqnr_db": sqnr, "max_abs_error": err}}]}}

    assert compare_with_baseline(now(40.5, 0.0105), earlier(41.0, 0.01)) == []  # within 1 dB and 10 %
    regs = compare_with_baseline(now(38.0, 0.02), earlier(41.0, 0.01), BaselineTolerance())
    assert {r.metric for r in regs} == {"sqnr_db", "max_abs_error"}


def test_validate_against_module_reference_and_pickle(tmp_path, run_cli, monkeypatch):
    import textwrap

    (tmp_path / "valmodels.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            def build():
                torch.manual_seed(7)
                return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    model = importlib.import_module("valmodels").build().eval()
    torch.save(model.state_dict(), tmp_path / "w.pt")
    torch.save(model, tmp_path / "full.pt")
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 6),)), pt2)
    tfl = tmp_path / "m.tflite"
    assert run_cli(pt2, "-o", tfl, "--no-validate").exit_code == 0
    # a module reference: shapes come from the flatbuffer
    res = run_cli("validate", tfl, "--reference", "valmodels:build", "--weights", "w.pt", "--report", tmp_path / "ref")
    assert res.exit_code == 0, res.stderr
    assert validate_report(json.loads((tmp_path / "ref.report.json").read_text()))["model"]["kind"] == "module_reference"
    # a pickled module, only with --trust-pickle
    res = run_cli("validate", tfl, "--reference", tmp_path / "full.pt", "--report", tmp_path / "pk")
    assert res.exit_code == 2 and "--trust-pickle" in res.stderr
    res = run_cli("validate", tfl, "--reference", tmp_path / "full.pt", "--trust-pickle", "--report", tmp_path / "pk")
    assert res.exit_code == 0, res.stderr
    assert validate_report(json.loads((tmp_path / "pk.report.json").read_text()))["model"]["kind"] == "pickle"
