"""PT2E beside the float conversion and the flatbuffer backend (pt2e_beside.py): the same attempts,
choices and reasons as PT2E run at its turn, its child killed as soon as it is not needed (target
met, cannot win, budget spent, the float model failing), its errors and crashes a failed backend,
no child process left behind, and no fork in a process whose converter threads make one unsafe.

A fork beside is only made in a process that has converted no model (a pytest worker has converted
many), so each scenario runs in a fresh process (beside_scenarios.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from quantization_models import CNN_SPEC

from edge_export.config import QuantBackend, QuantizeMode
from edge_export.processes.isolation import CRASH_HOOK_ENV
from edge_export.quantization.budget import SLOW_STEP_ENV
from edge_export.quantization.pt2e_beside import BESIDE_ENV, _core_idle, _fork_is_safe, start_pt2e_beside

EXAMPLE = (torch.zeros(CNN_SPEC.shape),)
SCENARIOS = Path(__file__).with_name("beside_scenarios.py")


@pytest.fixture(scope="module")
def float_file(cnn_float_bytes, tmp_path_factory) -> Path:
    """The session's float QuantCNN for the scenarios: each would otherwise convert the same model."""
    path = tmp_path_factory.mktemp("beside") / "cnn.tflite"
    path.write_bytes(cnn_float_bytes)
    return path


def _scenario(name: str, float_file: Path | None = None, **env: str) -> dict:
    environment = {**os.environ, BESIDE_ENV: "yes", "BESIDE_COMPARE": "1", **env}
    command = [sys.executable, str(SCENARIOS), name, *([str(float_file)] if float_file else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _same_as_at_turn(run: dict) -> None:
    at_turn = run["at_turn"]
    assert [a[:2] + a[3:4] for a in run["attempts"]] == [a[:2] + a[3:4] for a in at_turn["attempts"]], run["reason"]
    assert run["backend"] == at_turn["backend"] and run["reaped"]
    for ours, theirs in zip(run["attempts"], at_turn["attempts"]):
        # PT2E calibrates on one thread in the child: its ranges may differ in the last float bits
        assert ours[2] == pytest.approx(theirs[2], abs=0.05)


@pytest.mark.slow
def test_both_measured_gives_the_same_attempts_and_choice(float_file):
    run = _scenario("both", float_file)
    assert [a[0] for a in run["attempts"]] == ["flatbuffer", "pt2e"]
    _same_as_at_turn(run)


@pytest.mark.slow
def test_a_target_met_by_the_flatbuffer_backend_kills_pt2e(float_file):
    run = _scenario("target-met", float_file)
    assert [a[0] for a in run["attempts"]] == ["flatbuffer"] and "pt2e was not tried" in run["reason"]
    _same_as_at_turn(run)


@pytest.mark.slow
def test_an_early_look_that_cannot_win_stops_pt2e_part_way(float_file):
    run = _scenario("early-look", float_file)
    assert "after 16 of 48 calibration samples" in run["reason"] and run["reason"] == run["at_turn"]["reason"]
    _same_as_at_turn(run)


@pytest.mark.slow
def test_a_spent_budget_kills_pt2e_mid_calibration_and_says_so(float_file):
    # 40 samples of at least 0.3 s: 12 s against 6 s. No run at PT2E's turn (BESIDE_COMPARE): nothing here
    # reads it, and its 40 slow samples took 12 s more.
    run = _scenario("budget", float_file, BESIDE_COMPARE="", **{SLOW_STEP_ENV: "0.3"})
    assert run["seconds"] < 6.0 + 2.0 and run["reaped"]
    assert [a[0] for a in run["attempts"]] == ["flatbuffer"]
    assert len(run["skipped"]) == 1 and run["skipped"][0].startswith("the rest of PT2E's calibration (")
    assert "of 40 samples run, not lowered)" in run["skipped"][0] and "not tried within the time budget" in run["reason"]


@pytest.mark.slow
def test_a_pt2e_error_or_crash_in_the_child_is_a_failed_attempt(float_file):
    failed = _scenario("error", float_file, BESIDE_COMPARE="")
    assert [a[:2] for a in failed["attempts"]] == [["flatbuffer", True], ["pt2e", False]] and failed["reaped"]
    assert "test failure" in failed["attempts"][1][4] and failed["backend"] == "flatbuffer"
    crashed = _scenario("crash", float_file, BESIDE_COMPARE="", **{CRASH_HOOK_ENV: "int8 quantization (PT2E)"})
    assert [a[:2] for a in crashed["attempts"]] == [["flatbuffer", True], ["pt2e", False]] and crashed["reaped"]
    assert "SIGABRT" in crashed["attempts"][1][4]


@pytest.mark.slow
def test_a_float_model_that_fails_its_check_kills_pt2e_and_fails_as_before():
    run = _scenario("fail-fast", BESIDE_COMPARE="")
    assert run["exit_code"] == 3 and run["started"] == [True] and run["reaped"] and run["written"] == []


def test_a_process_that_converted_a_model_does_not_fork(cnn, cnn_float_bytes, cnn_calibration, monkeypatch):
    """cnn_float_bytes converted in this process: its converter threads make a fork unsafe."""
    monkeypatch.setenv(BESIDE_ENV, "yes")
    assert not _fork_is_safe()
    assert start_pt2e_beside(cnn, EXAMPLE, QuantizeMode.INT8, cnn_calibration, backend=QuantBackend.AUTO,
                             parity_samples=16, observer="histogram") is None


def test_only_auto_int8_with_both_backends_starts_a_child(cnn, cnn_calibration, monkeypatch):
    import edge_export.quantization.pt2e_beside as beside

    asked = []
    monkeypatch.setattr(beside, "_core_idle", lambda: asked.append(1) or False)

    def start(mode, backend):
        return start_pt2e_beside(cnn, EXAMPLE, mode, cnn_calibration, backend=backend, parity_samples=16, observer="histogram")

    assert start(QuantizeMode.INT8, QuantBackend.PT2E) is None
    assert start(QuantizeMode.INT8, QuantBackend.FLATBUFFER) is None
    assert start(QuantizeMode.INT16X8, QuantBackend.AUTO) is None  # PT2E has no int16x8
    assert start(QuantizeMode.DYNAMIC_INT8, QuantBackend.AUTO) is None  # PT2E only if the first fails
    assert asked == []  # none of those asks whether a core is idle
    assert start(QuantizeMode.INT8, QuantBackend.AUTO) is None and asked == [1]


def test_auto_runs_beside_only_with_a_core_idle_in_a_forkable_process(monkeypatch):
    import edge_export.quantization.pt2e_beside as beside

    monkeypatch.setattr(beside, "_fork_is_safe", lambda: True)
    monkeypatch.setenv(BESIDE_ENV, "auto")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert _core_idle()
    monkeypatch.setattr(os, "getloadavg", lambda: (1.7, 1.0, 1.0))
    assert not _core_idle()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert not _core_idle()  # one core: nothing to run beside
    monkeypatch.setenv(BESIDE_ENV, "yes")
    assert _core_idle()
    monkeypatch.setenv(BESIDE_ENV, "no")
    assert not _core_idle()
    monkeypatch.setenv(BESIDE_ENV, "yes")
    monkeypatch.setattr(beside, "_fork_is_safe", lambda: False)
    assert not _core_idle()  # never where a fork could deadlock
