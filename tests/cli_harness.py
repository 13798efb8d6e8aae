"""Helpers shared by the CLI tests (a plain module, so `from conftest import` never clashes between
the test folders' own conftest.py files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


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
