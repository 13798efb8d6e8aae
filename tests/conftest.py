"""Shared fixtures: run the real CLI in-process. Helpers live in cli_harness.py and model_zoo.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli_harness, model_zoo
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # testing_models, shared with benchmarks/

from cli_harness import CliResult  # noqa: E402


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
