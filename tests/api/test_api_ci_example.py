"""The CI examples read as they run: the workflow calls the action with inputs it declares, the action
uses only what it declares (and never pastes an input into a script), and the GitLab job installs
with the pinned set and publishes the JUnit file its command writes. Running the action is
tests/api/test_api_ci_action.py."""

from __future__ import annotations

import re
import shlex

import yaml

from cli_harness import REPO
from github_action import UnsupportedAction, _condition, load_action, substitute

ACTION = load_action(REPO / "action.yml")
WORKFLOW_TEXT = (REPO / "examples" / "ci" / "parity-gate.yml").read_text()
WORKFLOW = yaml.safe_load(WORKFLOW_TEXT)
GITLAB = yaml.safe_load((REPO / "examples" / "ci" / "gitlab-ci.yml").read_text())
_EXPRESSIONS = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _steps() -> list[dict]:
    return ACTION["runs"]["steps"]


def _expressions(value) -> list[str]:
    """Every ``${{ }}`` expression in a parsed YAML value (its strings, keys included)."""
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in _expressions(k) + _expressions(v)]
    if isinstance(value, list):
        return [e for v in value for e in _expressions(v)]
    return _EXPRESSIONS.findall(value) if isinstance(value, str) else []


def test_workflow_calls_the_action_with_declared_inputs():
    steps = WORKFLOW["jobs"]["export-and-gate"]["steps"]
    gate = next(s for s in steps if s.get("uses") == "./")
    declared = ACTION["inputs"]
    assert set(gate["with"]) <= set(declared)
    assert all(name in gate["with"] for name, spec in declared.items() if spec.get("required"))
    # users are told the address to put instead of ./
    assert "OWNER/edge-export@v0" in WORKFLOW_TEXT
    # later steps read outputs the action declares
    used = {m.split(".")[-1] for s in steps for m in _expressions(s) if m.startswith(f"steps.{gate['id']}.outputs.")}
    used |= set(re.findall(rf"steps\.{gate['id']}\.outputs\.([\w-]+)", " ".join(str(s.get("if", "")) for s in steps)))
    assert used and used <= set(ACTION["outputs"])
    assert any("junit" in s.get("uses", "") for s in steps)
    assert not any("pip install -e" in s.get("run", "") for s in steps)  # nothing that works only in this tree


def test_action_uses_what_it_declares_and_nothing_undeclared():
    used_inputs, ids = set(), set()
    for step in _steps():
        for expression in _expressions(step):
            kind, *rest = expression.split(".")
            if kind == "inputs":
                used_inputs.add(rest[0])
            elif kind == "steps":
                assert rest[0] in ids, f"{expression}: no earlier step has id {rest[0]}"
        if step.get("if"):
            used_inputs |= set(re.findall(r"inputs\.([\w-]+)", step["if"]))
        if "id" in step:
            ids.add(step["id"])
    assert used_inputs == set(ACTION["inputs"])  # every input reaches a step, no step reads an unknown one
    for spec in ACTION["outputs"].values():
        (expression,) = _expressions(spec["value"])
        assert expression.split(".")[1] in ids


def test_scripts_read_inputs_from_the_environment_only():
    """`${{ inputs.x }}` pasted into a script would run a crafted model path as shell code."""
    for step in _steps():
        if "run" in step:
            assert step["shell"] == "bash"
            assert not _expressions(step["run"]), step.get("name")


def test_setup_and_cache_run_unless_an_interpreter_is_given():
    def running(python: str) -> list[str]:
        inputs = {n: str(spec.get("default", "")) for n, spec in ACTION["inputs"].items()}
        context = {"inputs": {**inputs, "python": python}, "steps": {}, "github": {}, "runner": {}}
        return [s.get("uses", s.get("id")) for s in _steps() if _condition(s.get("if"), context)]

    default = running("")
    assert default[0].startswith("actions/setup-python@") and any(u.startswith("actions/cache@") for u in default)
    assert running("/opt/env/bin/python") == ["install", "edge-export"]


def test_install_and_cache_key_come_from_the_pinned_set_beside_the_action():
    install = next(s for s in _steps() if s.get("id") == "install")["run"]
    assert '-c "$GITHUB_ACTION_PATH/constraints.txt"' in install and 'package="$GITHUB_ACTION_PATH"' in install
    cache = next(s for s in _steps() if s.get("uses", "").startswith("actions/cache@"))
    assert "steps.pins.outputs.hash" in cache["with"]["key"]
    assert "constraints.txt" in next(s for s in _steps() if s.get("id") == "pins")["run"]


def test_substitution_refuses_what_it_cannot_evaluate():
    context = {"inputs": {"model": "m.pt2"}, "steps": {}, "github": {"action_path": "/a"}}
    assert substitute("${{ inputs.model }} ${{ github.action_path }} ${{ steps.x.outputs.y }}", context) == "m.pt2 /a "
    for text in ("${{ inputs.other }}", "${{ format('{0}', inputs.model) }}", "${{ env.HOME }}"):
        try:
            substitute(text, context)
        except UnsupportedAction:
            continue
        raise AssertionError(f"{text} was substituted")


def test_gitlab_job_installs_the_pinned_set_and_publishes_its_junit_file():
    (job,) = (v for k, v in GITLAB.items() if isinstance(v, dict) and "script" in v)
    script = job["script"]
    no_deps = next(i for i, line in enumerate(script) if "pip install --no-deps" in line)
    pins = next(i for i, line in enumerate(script) if "python -m edge_export.constraints >" in line)
    pinned_file = script[pins].split(">", 1)[1].strip()
    constrained = next(i for i, line in enumerate(script) if f"-c {pinned_file}" in line)
    assert no_deps < pins < constrained
    command = shlex.split(next(line for line in script if line.startswith("edge-export ") and "--junit" in line))
    assert command[command.index("--junit") + 1] == job["artifacts"]["reports"]["junit"]
    assert job["artifacts"]["when"] == "always"  # a failed gate (exit 1) still publishes its reports
