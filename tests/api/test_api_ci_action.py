"""The GitHub Action (action.yml) run from a user's repository outside this checkout.

The workflow's export step (examples/ci/parity-gate.yml, the step with `uses: ./`) and its model are
copied into a temporary repository; the action's steps run there as a runner runs them
(tests/github_action.py: expressions substituted, `run:` steps under bash with GITHUB_OUTPUT,
GITHUB_STEP_SUMMARY and GITHUB_ACTION_PATH pointing at this checkout). The install step really
installs edge-export from the action path: into a new environment (the `python` input) that sees this
environment's packages, so pip finds torch and the rest already there and builds only edge-export,
offline (`--no-index`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from cli_harness import REPO, validate_report
from github_action import ActionRun, StepRun, load_action, run_action, run_one_step, substitute

WORKFLOW = REPO / "examples" / "ci" / "parity-gate.yml"
# Only what cannot work on this machine differs from the workflow's inputs: the interpreter (no
# setup-python here), no torch index and no download (everything is installed already).
RUNNER_INPUTS = {"torch-index-url": "", "pip-args": "--no-index --no-build-isolation"}


def workflow_action_step() -> dict:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["export-and-gate"]["steps"]
    return next(s for s in steps if s.get("uses") == "./")


@pytest.fixture(scope="module")
def runner_python(tmp_path_factory) -> Path:
    """A new virtual environment whose site-packages lists this environment's through a .pth line:
    pip sees torch, litert-torch and the rest installed at the pinned versions, and edge-export,
    once the action installs it there, is imported from this environment's own site-packages (first
    on the path; the .pth files of the listed folder, such as an editable install's finder, are not
    run for a folder added this way)."""
    root = tmp_path_factory.mktemp("runner-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    parents = dict.fromkeys((sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]))
    Path(site, "parent-environment.pth").write_text("\n".join(parents) + "\n")
    return python


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """The workflow's model (examples/quickstart/make_model.py's classifier, seeded as it seeds it, so
    the committed baseline applies) and the same model with its last layer's weights and bias scaled
    by 100: its outputs are 100 times larger, and so are the converter's float errors, which still
    pass parity's thresholds but are a regression against the baseline's max and mean abs error."""
    import torch

    spec = importlib.util.spec_from_file_location("quickstart_model", REPO / "examples" / "quickstart" / "make_model.py")
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    folder = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    model = quickstart.TinyClassifier().eval()
    example = (torch.randn(1, 3, 32, 32),)
    torch.export.save(torch.export.export(model, example), folder / "cnn.pt2")
    with torch.no_grad():
        model.classifier.weight.mul_(100)
        model.classifier.bias.mul_(100)
    torch.export.save(torch.export.export(model, example), folder / "cnn_x100.pt2")
    return {"passing": folder / "cnn.pt2", "regressed": folder / "cnn_x100.pt2"}


def _runner_env() -> dict[str, str]:
    """This process's environment without what would make Python import this checkout instead of what
    the action installed."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def user_repository(tmp_path: Path, runner_python: Path, model: Path | None, **changed: str) -> tuple[Path, dict[str, str]]:
    """A repository holding the workflow's model (``model`` copied to its path; None: no model) and
    its committed baseline, and the workflow step's inputs (and ``changed``) for a run there."""
    step = workflow_action_step()
    repo = tmp_path / "user-repository"
    inputs = {**step["with"], **RUNNER_INPUTS, "python": str(runner_python), **changed}
    if model is not None:
        (repo / inputs["model"]).parent.mkdir(parents=True)
        (repo / inputs["model"]).write_bytes(model.read_bytes())
    (repo / inputs["baseline"]).parent.mkdir(parents=True, exist_ok=True)
    (repo / inputs["baseline"]).write_bytes((REPO / inputs["baseline"]).read_bytes())
    assert not repo.resolve().is_relative_to(REPO)
    return repo, inputs


def run_in_user_repository(tmp_path: Path, runner_python: Path, model: Path | None, **changed: str) -> tuple[ActionRun, Path]:
    """The whole action (its install step included) run in ``user_repository``."""
    repo, inputs = user_repository(tmp_path, runner_python, model, **changed)
    return run_action(REPO, repo, inputs, _runner_env(), tmp_path / "runner-temp"), repo


def run_after_install(tmp_path: Path, installed_python: Path, repo: Path, inputs: dict[str, str]) -> ActionRun:
    """The action run in ``repo`` from the step after its install step, with edge-export where that
    step put it for ``installed_python`` (an earlier run's install, checked in the tests above): the
    install reads none of the inputs these tests change, and each of its runs is seconds of pip
    building edge-export. The action's outputs are its ``outputs:`` values, as run_action evaluates them."""
    install = {"python": str(installed_python)}
    step = run_one_step(REPO, "edge-export", repo, inputs, _runner_env(), tmp_path / "runner-temp", {"install": install})
    context = {"steps": {"install": {"outputs": install}, "edge-export": {"outputs": step.outputs}}}
    declared = load_action(REPO / "action.yml").get("outputs") or {}
    outputs = {name: substitute(str(spec.get("value", "")), context) for name, spec in declared.items()}
    return ActionRun(step.exit_code, [step], outputs, step.summary)


def _check_installed_from_the_action_path(run: ActionRun, runner_python: Path, repo: Path) -> None:
    install = run.step("install")
    assert install.exit_code == 0, install.stdout + install.stderr
    assert install.outputs["python"] == str(runner_python) == run.outputs["python"]
    from edge_export import __version__

    assert f"edge-export {__version__}" in install.stdout  # the install step prints --version
    probe = subprocess.run(
        [runner_python, "-c", "import edge_export, edge_export.constraints as c; print(edge_export.__file__); print(c.constraints_text(), end='')"],
        capture_output=True, text=True, env=_runner_env(), check=True, cwd=repo,  # where the action runs it
    )
    where, shipped = probe.stdout.split("\n", 1)
    assert Path(where).is_relative_to(runner_python.parent.parent)  # the installed copy, not this checkout
    assert shipped == (REPO / "constraints.txt").read_text()  # the pinned set travels with the package


def _report(repo: Path, run: ActionRun) -> dict:
    return validate_report(json.loads((repo / run.outputs["report"]).read_text()))


@pytest.fixture(scope="module")
def passing_run(tmp_path_factory, runner_python, models) -> tuple[ActionRun, Path]:
    return run_in_user_repository(tmp_path_factory.mktemp("passing"), runner_python, models["passing"])


@pytest.fixture(scope="module")
def installed_python(passing_run, runner_python) -> Path:
    """runner_python once the whole action, install step included, has run for passing_run."""
    return runner_python


@pytest.mark.slow
def test_the_workflow_step_passes_from_a_user_repository(passing_run, runner_python):
    run, repo = passing_run
    _check_installed_from_the_action_path(run, runner_python, repo)
    assert run.exit_code == 0, run.steps[-1].stdout + run.steps[-1].stderr
    out_dir = workflow_action_step()["with"]["output-dir"]
    assert run.outputs["verdict"] == "passed" and run.outputs["exit-code"] == "0"
    assert run.outputs["report"] == f"{out_dir}/cnn.report.json"
    assert run.outputs["report-markdown"] == f"{out_dir}/cnn.report.md"
    assert run.outputs["tflite"] == f"{out_dir}/cnn.tflite" and (repo / run.outputs["tflite"]).is_file()
    report = _report(repo, run)
    assert run.outputs["worst-sqnr"] == f"{report['validation']['worst']['sqnr_db']:.2f}"
    assert report["baseline"]["status"] == "ok"
    assert report["pinned_set"]["status"] == "tested"
    assert report["libraries"]["torch"] == metadata.version("torch")
    assert "verdict=passed\n" in run.step("edge-export").output_file
    # the job summary is the Markdown report, verdict first
    assert run.summary == (repo / run.outputs["report-markdown"]).read_text() + "\n"
    assert run.summary.startswith("# edge-export: ✅ PASSED") and "No regression against the baseline" in run.summary
    suite = ET.parse(repo / run.outputs["junit"]).getroot().find("testsuite")
    assert suite.get("failures") == "0" and int(suite.get("tests")) >= 1


@pytest.mark.slow
def test_a_regression_against_the_baseline_fails_the_step_with_exit_1(tmp_path, runner_python, models):
    run, repo = run_in_user_repository(tmp_path, runner_python, models["regressed"])
    _check_installed_from_the_action_path(run, runner_python, repo)
    assert run.exit_code == 1, run.steps[-1].stdout + run.steps[-1].stderr
    assert run.outputs["verdict"] == "failed" and run.outputs["exit-code"] == "1"
    report = _report(repo, run)
    assert report["validation"]["status"] == "passed"  # parity alone passes: the baseline fails it
    regressed = {r["metric"] for r in report["baseline"]["regressions"]}
    assert "max_abs_error" in regressed
    assert run.summary.startswith("# edge-export: ❌ FAILED")
    assert "**Regressed against the baseline**" in run.summary and "max\\_abs\\_error grew" in run.summary
    suite = ET.parse(repo / run.outputs["junit"]).getroot().find("testsuite")
    assert int(suite.get("failures")) >= 1


@pytest.mark.slow
def test_no_report_is_exit_2_with_a_summary_that_says_so(tmp_path, installed_python):
    repo, inputs = user_repository(tmp_path, installed_python, None)  # the model file is missing
    run = run_after_install(tmp_path, installed_python, repo, inputs)
    assert run.exit_code == 2
    assert run.outputs["verdict"] == "error" and run.outputs["exit-code"] == "2"
    assert run.outputs["report"] == "" and run.outputs["worst-sqnr"] == ""
    assert run.summary.startswith("# edge-export: ❌ exit code 2, no report")
    assert "error:" in run.steps[-1].stderr  # the CLI's one paragraph is in the step's log


@pytest.mark.slow
def test_validate_checks_the_exported_file_against_its_reference(passing_run, installed_python, tmp_path):
    exported, repo = passing_run
    step = workflow_action_step()["with"]
    inputs = {**step, **RUNNER_INPUTS, "python": str(installed_python), "command": "validate",
              "model": exported.outputs["tflite"], "reference": step["model"]}
    run = run_after_install(tmp_path, installed_python, repo, inputs)
    assert run.exit_code == 0, run.steps[-1].stdout + run.steps[-1].stderr
    assert run.outputs["verdict"] == "passed" and run.outputs["tflite"] == exported.outputs["tflite"]
    assert run.outputs["report"] == f"{step['output-dir']}/cnn.validate.report.json"
    report = _report(repo, run)
    assert report["export"]["command"] == "validate" and report["baseline"]["status"] == "ok"
    assert run.summary.startswith("# edge-export: ✅ PASSED")


@pytest.mark.slow
def test_export_options_with_validate_are_exit_2_before_anything_runs(tmp_path, installed_python, models):
    repo, inputs = user_repository(tmp_path, installed_python, models["passing"], command="validate", quantize="int8")
    run = run_after_install(tmp_path, installed_python, repo, inputs)
    assert run.exit_code == 2 and run.outputs["verdict"] == "error" and run.outputs["exit-code"] == "2"
    assert "are export options" in run.steps[-1].stdout  # the ::error annotation the runner shows
    assert run.summary.startswith("# edge-export: ❌ exit code 2, no report")
    assert not any((repo / workflow_action_step()["with"]["output-dir"]).iterdir())  # nothing ran, nothing written


# ---- workflow commands: only the action's own ------------------------------------------------------
# The runner reads every line of a step's output that starts with '::' as a workflow command, and
# decodes %25, %0D and %0A in a command's message (@actions/core's escapeData).
INJECTED = "\n::warning::x\n::add-mask::y 100% %0A"


def _edge_export_step(tmp_path: Path, **changed: str) -> StepRun:
    """Only the step that runs edge-export, with the workflow's inputs (and ``changed``), as if the
    install step had installed edge-export for this environment's Python (no pip run)."""
    workspace = tmp_path / "user-repository"
    workspace.mkdir()
    inputs = {**workflow_action_step()["with"], **RUNNER_INPUTS, "python": sys.executable, **changed}
    return run_one_step(REPO, "edge-export", workspace, inputs, _runner_env(), tmp_path / "runner-temp",
                        {"install": {"python": sys.executable}})


def _command_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("::")]


def _decoded(message: str) -> str:
    return message.replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")


def test_a_multi_line_command_input_starts_no_workflow_command_of_its_own(tmp_path):
    step = _edge_export_step(tmp_path, command="export" + INJECTED)
    assert step.exit_code == 2, step.stdout + step.stderr
    (line,) = _command_lines(step.stdout)  # the whole of stdout: no ::warning::, no ::add-mask::
    head = "::error title=edge-export action::"
    assert line.startswith(head)
    assert "%0A::warning::x%0A::add-mask::y 100%25 %250A'" in line  # encoded, '%' first
    assert _decoded(line[len(head):]) == f"Unknown command 'export{INJECTED}': use export or validate."
    assert _command_lines(step.stderr) == []
    assert step.outputs == {"exit-code": "2", "verdict": "error"}


def test_model_text_in_edge_exports_log_is_no_workflow_command(tmp_path):
    """A .tflite path with line breaks: edge-export's error quotes it, and its lines that start with
    '::' come while the runner ignores commands, between a random token's stop and resume."""
    model = "gone" + INJECTED + ".tflite"
    step = _edge_export_step(tmp_path, command="validate", model=model, reference="gone.pt2", baseline="", args="")
    assert step.exit_code == 2, step.stdout + step.stderr
    assert "\n::warning::x\n" in step.stderr  # the path as edge-export printed it (its own lines)
    stop, resume = _command_lines(step.stdout)
    token = stop.removeprefix("::stop-commands::")
    assert len(token) == 32 and int(token, 16) >= 0 and resume == f"::{token}::"
    assert token not in step.stderr
    # GITHUB_OUTPUT: one name=value line per output, whatever line breaks the path had
    names = [line.split("=", 1)[0] for line in step.output_file.splitlines()]
    assert sorted(names) == sorted(["exit-code", "tflite", "report", "report-markdown", "junit", "worst-sqnr", "verdict"])
    assert step.outputs["verdict"] == "error" and step.outputs["tflite"] == " ".join(model.splitlines())
