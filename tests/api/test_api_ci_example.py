"""The example CI workflow's script really exports, publishes and gates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from cli_harness import REPO

SCRIPT = REPO / "examples" / "ci" / "parity_gate.sh"


def _run(tmp_path: Path, baseline: Path | None = None) -> subprocess.CompletedProcess:
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "EDGE_EXPORT": str(bindir / "edge-export"),
        "OUT_DIR": str(tmp_path / "reports"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }
    if baseline is not None:
        env["BASELINE"] = str(baseline)
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)


def test_workflow_calls_the_script():
    wf = yaml.safe_load((REPO / "examples" / "ci" / "parity-gate.yml").read_text())
    steps = wf["jobs"]["export-and-gate"]["steps"]
    runs = " ".join(s.get("run", "") for s in steps)
    assert "examples/ci/parity_gate.sh" in runs and "pip install -c constraints.txt" in runs
    assert any("junit" in s.get("uses", "") for s in steps)


@pytest.mark.slow
def test_gate_passes_against_committed_baseline(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "summary.md").read_text().startswith("# edge-export: ✅ PASSED")
    suite = ET.parse(tmp_path / "reports" / "parity.xml").getroot().find("testsuite")
    assert suite.get("tests") == "1" and suite.get("failures") == "0"


@pytest.mark.slow
def test_gate_fails_on_regression(tmp_path):
    base = json.loads((REPO / "examples" / "ci" / "baseline.report.json").read_text())
    for out in base["validation"]["outputs"]:  # a baseline that was "better" than today's model
        out["metrics"]["max_abs_error"] = 1e-12
        out["metrics"]["sqnr_db"] = 199.0
    doctored = tmp_path / "better.report.json"
    doctored.write_text(json.dumps(base))
    proc = _run(tmp_path, doctored)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = (tmp_path / "summary.md").read_text()
    assert "Regressed against the baseline" in summary
    suite = ET.parse(tmp_path / "reports" / "parity.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) >= 1
