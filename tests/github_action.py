"""Run a composite GitHub Action's steps here, as the runner does, for the tests of action.yml.

What the runner does for a composite action and this module does the same way:
- each step's ``if:`` is evaluated; a ``uses:`` step that would run cannot run here and is an error
  (the test must choose inputs that skip it), a skipped one is skipped;
- ``${{ <expression> }}`` in ``run:``, ``env:`` and ``outputs:`` is replaced by its value; the
  expressions supported are the context lookups ``inputs.<name>`` (its value, or the declared
  default), ``github.action_path``, ``runner.os`` and ``steps.<id>.outputs.<name>`` (empty when the
  step set no such output, as on the runner); anything else is an error, so the action stays within
  what this module checks faithfully;
- a ``run:`` step runs as ``bash --noprofile --norc -eo pipefail <file>`` (``shell: bash``) in the
  workspace, with ``GITHUB_ACTION_PATH``, ``GITHUB_WORKSPACE``, ``RUNNER_TEMP`` and its own
  ``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY`` files; its outputs are read from ``GITHUB_OUTPUT``
  (``name=value`` lines); the job summary is the steps' summaries in order;
- the first failing step ends the action with its exit code; the action's outputs are its
  ``outputs:`` values evaluated with the steps' outputs.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_LOOKUP = re.compile(r"[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+")
_CONDITION = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*(==|!=)\s*'([^']*)'\s*$")


class UnsupportedAction(AssertionError):
    """The action uses something this module cannot run faithfully."""


@dataclass
class StepRun:
    name: str
    skipped: bool
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    output_file: str = ""  # GITHUB_OUTPUT as the step left it
    summary: str = ""  # GITHUB_STEP_SUMMARY as the step left it


@dataclass
class ActionRun:
    exit_code: int
    steps: list[StepRun]
    outputs: dict[str, str]
    summary: str

    def step(self, step_id_or_name: str) -> StepRun:
        return next(s for s in self.steps if s.name == step_id_or_name)


def load_action(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _inputs(action: dict, given: Mapping[str, str]) -> dict[str, str]:
    declared = action.get("inputs") or {}
    unknown = set(given) - set(declared)
    if unknown:  # the runner only warns; a test means a declared input
        raise UnsupportedAction(f"inputs not declared by the action: {sorted(unknown)}")
    missing = [n for n, spec in declared.items() if spec.get("required") and n not in given]
    if missing:
        raise UnsupportedAction(f"required inputs not given: {missing}")
    return {n: str(given[n]) if n in given else str(spec.get("default", "")) for n, spec in declared.items()}


def _lookup(expression: str, context: Mapping[str, Any]) -> str:
    if not _LOOKUP.fullmatch(expression):
        raise UnsupportedAction(f"expression not supported here: {expression!r}")
    head, *rest = expression.split(".")
    if head not in context:
        raise UnsupportedAction(f"context not supported here: {head!r} (in {expression!r})")
    value: Any = context[head]
    for i, part in enumerate(rest):
        if head == "inputs" and part not in value:
            raise UnsupportedAction(f"undeclared input {part!r}")
        value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            return ""  # a missing property is null, which a string interpolation writes as ''
    return "" if value is None else str(value)


def substitute(text: str, context: Mapping[str, Any]) -> str:
    return _EXPRESSION.sub(lambda m: _lookup(m.group(1), context), text)


def _condition(expression: str | None, context: Mapping[str, Any]) -> bool:
    if expression is None:
        return True
    inner = _EXPRESSION.fullmatch(str(expression).strip())
    match = _CONDITION.match(inner.group(1) if inner else str(expression))
    if not match:
        raise UnsupportedAction(f"condition not supported here: {expression!r}")
    value = _lookup(match.group(1), context)
    return (value == match.group(3)) == (match.group(2) == "==")


def _read_outputs(path: Path) -> dict[str, str]:
    outputs = {}
    for line in path.read_text().splitlines():
        if "<<" in line.split("=", 1)[0]:
            raise UnsupportedAction(f"multi-line outputs are not supported here: {line!r}")
        if line:
            name, value = line.split("=", 1)
            outputs[name] = value
    return outputs


def _context(action: dict, action_path: Path, workspace: Path, inputs: Mapping[str, str], temp: Path) -> dict[str, Any]:
    return {
        "inputs": _inputs(action, inputs),
        "github": {"action_path": str(action_path), "workspace": str(workspace)},
        "runner": {"os": "Linux", "temp": str(temp)},
        "steps": {},
    }


def _base_env(action_path: Path, workspace: Path, env: Mapping[str, str], temp: Path) -> dict[str, str]:
    return {
        **env,
        "GITHUB_ACTIONS": "true",
        "CI": "true",
        "GITHUB_ACTION_PATH": str(action_path),
        "GITHUB_WORKSPACE": str(workspace),
        "RUNNER_TEMP": str(temp),
        "RUNNER_OS": "Linux",
    }


def run_action(action_path: Path, workspace: Path, inputs: Mapping[str, str], env: Mapping[str, str], temp: Path) -> ActionRun:
    """Run the composite action at ``action_path`` (its action.yml) with ``inputs`` in ``workspace``."""
    action = load_action(action_path / "action.yml")
    if action["runs"]["using"] != "composite":
        raise UnsupportedAction("not a composite action")
    context = _context(action, action_path, workspace, inputs, temp)
    base_env = _base_env(action_path, workspace, env, temp)
    runs: list[StepRun] = []
    exit_code = 0
    for index, step in enumerate(action["runs"]["steps"]):
        name = step.get("id") or step.get("name") or f"step {index}"
        if not _condition(step.get("if"), context):
            runs.append(StepRun(name, skipped=True))
            continue
        if "uses" in step:
            raise UnsupportedAction(f"step {name!r} uses {step['uses']}, which only a runner can run: choose inputs that skip it")
        if step.get("shell") != "bash":
            raise UnsupportedAction(f"step {name!r}: composite run steps here are shell: bash, not {step.get('shell')!r}")
        run = _run_step(name, index, step, context, base_env, workspace, temp)
        runs.append(run)
        if step.get("id"):
            context["steps"][step["id"]] = {"outputs": run.outputs}
        if run.exit_code != 0:
            exit_code = run.exit_code
            break
    outputs = {n: substitute(str(spec.get("value", "")), context) for n, spec in (action.get("outputs") or {}).items()}
    return ActionRun(exit_code, runs, outputs, "".join(r.summary for r in runs))


def run_one_step(action_path: Path, step_id: str, workspace: Path, inputs: Mapping[str, str], env: Mapping[str, str],
                 temp: Path, earlier_outputs: Mapping[str, Mapping[str, str]]) -> StepRun:
    """Run only the ``run:`` step ``step_id`` of the action, as if the steps before it had set
    ``earlier_outputs`` (step id -> outputs): for what a step does with its inputs alone, such as
    refusing them, without the steps that install anything."""
    action = load_action(action_path / "action.yml")
    context = _context(action, action_path, workspace, inputs, temp)
    context["steps"] = {sid: {"outputs": dict(outputs)} for sid, outputs in earlier_outputs.items()}
    index, step = next((i, s) for i, s in enumerate(action["runs"]["steps"]) if s.get("id") == step_id)
    if step.get("shell") != "bash" or "run" not in step:
        raise UnsupportedAction(f"step {step_id!r} is not a shell: bash run step")
    return _run_step(step_id, index, step, context, _base_env(action_path, workspace, env, temp), workspace, temp)


def _run_step(name: str, index: int, step: dict, context: Mapping[str, Any], base_env: Mapping[str, str],
              workspace: Path, temp: Path) -> StepRun:
    folder = temp / f"step-{index}"
    folder.mkdir(parents=True, exist_ok=True)
    script, output_file, summary_file = folder / "script.sh", folder / "output", folder / "summary"
    script.write_text(substitute(step["run"], context))
    output_file.touch()
    summary_file.touch()
    env = {
        **base_env,
        **{k: substitute(str(v), context) for k, v in (step.get("env") or {}).items()},
        "GITHUB_OUTPUT": str(output_file),
        "GITHUB_STEP_SUMMARY": str(summary_file),
    }
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=900,
    )
    return StepRun(
        name, skipped=False, exit_code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
        outputs=_read_outputs(output_file), output_file=output_file.read_text(), summary=summary_file.read_text(),
    )
