"""PT2E beside the float conversion and the flatbuffer backend (pt2e_beside.py): the same attempts,
choices and reasons as PT2E run at its turn, its child killed as soon as it is not needed (target
met, cannot win, budget spent, the float model failing), its errors and crashes a failed backend,
no child process left behind, and no fork in a process whose converter threads make one unsafe.

A fork beside is only made in a process that has converted no model (a pytest worker has converted
many), so each scenario runs in a process of its own (beside_scenarios.py's main) that has converted
nothing: forked, as the product forks its own children, from one Python process started for this
module that has only imported what a fresh scenario process imports before it forks PT2E
(beside_scenarios.py's modules, litert-torch and torchao's PT2E), and runs nothing else. A fresh
interpreter per scenario spent half of each scenario's seconds on those imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
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


# The scenarios' parent: imports what `python beside_scenarios.py NAME` imports before PT2E's fork, then
# for each request (a JSON line: name, float file, environment, stdout and stderr files) forks a child
# that sets the environment, runs beside_scenarios.main as its __main__ does (its JSON line on stdout)
# and exits; the parent answers with the child's exit status (a negative signal number, as
# subprocess's returncode), or kills it after its time limit. It converts nothing and starts no torch op.
_PARENT = r"""
import json, os, signal, sys, time, traceback
sys.path[0] = sys.argv[1]
import beside_scenarios
from edge_export.processes.library_output import quiet_libraries
with quiet_libraries(False):  # as start_pt2e_beside imports them, before its fork
    import litert_torch, torchao.quantization.pt2e.quantize_pt2e
protocol = os.fdopen(os.dup(1), "w", buffering=1)
for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(target, fd)
                os.close(target)
            for key, value in request["env"].items():
                os.environ[key] = value
            print(json.dumps(beside_scenarios.main(*request["args"])), flush=True)
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(status)
    deadline = time.monotonic() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None
            break
        time.sleep(0.02)
    print(json.dumps("timeout" if status is None else os.waitstatus_to_exitcode(status)), file=protocol)
"""


@pytest.fixture(scope="module")
def scenario_parent(tmp_path_factory):
    folder = tmp_path_factory.mktemp("beside-parent")
    environment = {**os.environ, BESIDE_ENV: "yes", "BESIDE_COMPARE": "1"}
    with open(folder / "parent.err", "w") as err:
        parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(SCENARIOS.parent)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=err, text=True, env=environment)
    yield parent, folder
    parent.stdin.close()
    try:
        parent.wait(timeout=60)
    except subprocess.TimeoutExpired:
        parent.kill()
        parent.wait()
    parent.stdout.close()


@pytest.fixture
def scenario(scenario_parent):
    """Run one scenario in a child of the scenarios' parent: its JSON result (its environment: BESIDE_ENV
    "yes", BESIDE_COMPARE "1" and ``env``)."""
    parent, folder = scenario_parent

    def run(name: str, float_file: Path | None = None, **env: str) -> dict:
        handle, out = tempfile.mkstemp(prefix=f"{name}-", suffix=".out", dir=folder)
        os.close(handle)
        out = Path(out)
        err = out.with_suffix(".err")
        request = {"args": [name, *([str(float_file)] if float_file else [])], "env": {BESIDE_ENV: "yes", "BESIDE_COMPARE": "1", **env},
                   "stdout": str(out), "stderr": str(err), "timeout": 300}
        parent.stdin.write(json.dumps(request) + "\n")
        parent.stdin.flush()
        answer = parent.stdout.readline()
        assert answer, "the scenarios' parent ended: " + (folder / "parent.err").read_text()[-3000:]
        returncode = json.loads(answer)
        assert returncode == 0, f"{returncode}: " + err.read_text()[-3000:]
        return json.loads(out.read_text().strip().splitlines()[-1])

    return run


def _same_as_at_turn(run: dict) -> None:
    at_turn = run["at_turn"]
    assert [a[:2] + a[3:4] for a in run["attempts"]] == [a[:2] + a[3:4] for a in at_turn["attempts"]], run["reason"]
    assert run["backend"] == at_turn["backend"] and run["reaped"]
    for ours, theirs in zip(run["attempts"], at_turn["attempts"]):
        # PT2E calibrates on one thread in the child: its ranges may differ in the last float bits
        assert ours[2] == pytest.approx(theirs[2], abs=0.05)


@pytest.mark.slow
def test_both_measured_gives_the_same_attempts_and_choice(scenario, float_file):
    run = scenario("both", float_file)
    assert [a[0] for a in run["attempts"]] == ["flatbuffer", "pt2e"]
    _same_as_at_turn(run)


@pytest.mark.slow
def test_a_target_met_by_the_flatbuffer_backend_kills_pt2e(scenario, float_file):
    run = scenario("target-met", float_file)
    assert [a[0] for a in run["attempts"]] == ["flatbuffer"] and "pt2e was not tried" in run["reason"]
    _same_as_at_turn(run)


@pytest.mark.slow
def test_an_early_look_that_cannot_win_stops_pt2e_part_way(scenario, float_file):
    run = scenario("early-look", float_file)
    assert "after 16 of 48 calibration samples" in run["reason"] and run["reason"] == run["at_turn"]["reason"]
    _same_as_at_turn(run)


@pytest.mark.slow
def test_a_spent_budget_kills_pt2e_mid_calibration_and_says_so(scenario, float_file):
    # 40 samples of at least 0.3 s: 12 s against 6 s. No run at PT2E's turn (BESIDE_COMPARE): nothing here
    # reads it, and its 40 slow samples took 12 s more.
    run = scenario("budget", float_file, BESIDE_COMPARE="", **{SLOW_STEP_ENV: "0.3"})
    assert run["seconds"] < 6.0 + 2.0 and run["reaped"]
    assert [a[0] for a in run["attempts"]] == ["flatbuffer"]
    assert len(run["skipped"]) == 1 and run["skipped"][0].startswith("the rest of PT2E's calibration (")
    assert "of 40 samples run, not lowered)" in run["skipped"][0] and "not tried within the time budget" in run["reason"]


@pytest.mark.slow
def test_a_pt2e_error_or_crash_in_the_child_is_a_failed_attempt(scenario, float_file):
    failed = scenario("error", float_file, BESIDE_COMPARE="")
    assert [a[:2] for a in failed["attempts"]] == [["flatbuffer", True], ["pt2e", False]] and failed["reaped"]
    assert "test failure" in failed["attempts"][1][4] and failed["backend"] == "flatbuffer"
    crashed = scenario("crash", float_file, BESIDE_COMPARE="", **{CRASH_HOOK_ENV: "int8 quantization (PT2E)"})
    assert [a[:2] for a in crashed["attempts"]] == [["flatbuffer", True], ["pt2e", False]] and crashed["reaped"]
    assert "SIGABRT" in crashed["attempts"][1][4]


@pytest.mark.slow
def test_a_float_model_that_fails_its_check_kills_pt2e_and_fails_as_before(scenario):
    run = scenario("fail-fast", BESIDE_COMPARE="")
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
