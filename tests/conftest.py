"""Shared fixtures: small models built in code, and a way to run the real CLI in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for tests/model_zoo.py


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(capfd):
    """Run `edge-export ARGS` in this process (the real CLI entry point) and capture its output."""
    from edge_export.cli import main

    def run(*args: str) -> CliResult:
        capfd.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        out, err = capfd.readouterr()
        return CliResult(code, out, err)

    return run


def run_cli_subprocess(*args: str, cwd: Path | None = None, timeout: float = 300) -> CliResult:
    """Run the installed console script in a fresh process (for import-time and safety checks)."""
    exe = Path(sys.executable).with_name("edge-export")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "edge_export.cli"]
    proc = subprocess.run(
        [*cmd, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ}
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def validate_report(report: dict) -> dict:
    """Every report a test reads is checked against the published JSON schema."""
    import jsonschema

    schema = json.loads((REPO / "edge_export" / "reports" / "report.schema.json").read_text())
    jsonschema.validate(report, schema, format_checker=jsonschema.FormatChecker())
    return report


def read_report(tflite_path: Path) -> dict:
    return validate_report(json.loads(Path(str(tflite_path.with_suffix("")) + ".report.json").read_text()))
