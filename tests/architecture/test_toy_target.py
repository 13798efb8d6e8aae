"""A target is one module: this file registers a toy target with one option and one typed report
section, and nothing outside it changes. The option is a flag of `edge-export export`, refused with
another target; the section is in the JSON (valid against the schema), the Markdown and the
terminal summary, and can fail the verdict (issue 22)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

import pytest
from cli_harness import validate_report

from edge_export.option_fields import option
from edge_export.targets.base import ReportSection, TargetCheck, TargetPlugin, register_target, unregister_target
from edge_export.targets.registry import TargetOptions


@dataclass(frozen=True)
class ToyReport:
    """What the toy target found: the level it checked at, and the operators it counted."""

    level: int
    operators: int

    @property
    def too_many(self) -> bool:
        return self.operators > self.level


def _markdown(toy: ToyReport, target, artifacts) -> list[str]:
    return [f"**Toy check:** level {toy.level}, {toy.operators} operators.", ""]


def _summary(toy: ToyReport, target, report, lines) -> None:
    lines.plain(f"  toy: level {toy.level}, {toy.operators} operators")
    if toy.too_many:
        lines.alert("toy check failed", f"{toy.operators} operators above level {toy.level}")


TOY_SECTION = ReportSection(
    "toy", ToyReport, _markdown, _summary, failed=lambda toy: toy.too_many,
    schema={"type": "object", "required": ["level", "operators"], "additionalProperties": False,
            "properties": {"level": {"type": "integer", "minimum": 1}, "operators": {"type": "integer"}}},
)


@dataclass(frozen=True)
class ToyOptions(TargetOptions):
    """The toy target's one option: None when not given, ``level`` then its default."""

    toy_level: int | None = option(
        None, "--toy-level", help="toy: the most operators the toy device runs.", panel="Target: toy", cli_type=Optional[int], metavar="N")

    def __post_init__(self) -> None:
        from edge_export.errors import UsageError

        if self.toy_level is not None and int(self.toy_level) < 1:
            raise UsageError(f"--toy-level {self.toy_level} must be at least 1.")

    @property
    def level(self) -> int:
        return 100 if self.toy_level is None else int(self.toy_level)


class ToyTarget(TargetPlugin):
    name = "toy"
    check_label = "Counting operators for the toy target"
    options_class = ToyOptions
    report_sections = (TOY_SECTION,)

    def check(self, context) -> TargetCheck:
        return TargetCheck(report={"toy": ToyReport(context.options.target_options.level, context.model.num_operators)})


@pytest.fixture
def toy_target():
    register_target(ToyTarget())
    yield
    unregister_target("toy")


def test_the_toy_option_is_a_flag_of_export(toy_target, run_cli):
    result = run_cli("export", "--help")
    assert result.exit_code == 0 and "--toy-level" in result.stdout and "Target: toy" in result.stdout
    assert "the most operators the toy device runs" in " ".join(result.stdout.replace("│", " ").split())


def test_the_toy_option_with_another_target_is_exit_2(toy_target, run_cli, tmp_path):
    result = run_cli("model_zoo:small_cnn", "--input-shape", "1,3,16,16", "--toy-level", "3", "-o", tmp_path / "m.tflite")
    assert result.exit_code == 2 and "--toy-level applies to --target toy only" in result.stderr
    assert not list(tmp_path.iterdir())
    bad = run_cli("model_zoo:small_cnn", "--input-shape", "1,3,16,16", "--target", "toy", "--toy-level", "0", "-o", tmp_path / "m.tflite")
    assert bad.exit_code == 2 and "--toy-level 0 must be at least 1" in bad.stderr


def test_compiler_timeout_with_cpu_is_exit_2(run_cli, tmp_path):
    result = run_cli("model_zoo:small_cnn", "--input-shape", "1,3,16,16", "--compiler-timeout", "5", "-o", tmp_path / "m.tflite")
    assert result.exit_code == 2 and "--compiler-timeout applies to --target edgetpu only" in result.stderr


@pytest.mark.parametrize("level, verdict, code", [(100, "passed", 0), (1, "failed", 1)])
def test_the_toy_section_is_in_every_rendering_and_gates_the_verdict(toy_target, run_cli, tmp_path, level, verdict, code):
    out = tmp_path / "m.tflite"
    result = run_cli("model_zoo:small_cnn", "--input-shape", "1,3,16,16", "--target", "toy", "--toy-level", str(level), "-o", out)
    assert result.exit_code == code, result.stderr
    report = validate_report(json.loads(out.with_suffix(".report.json").read_text()))
    toy = report["target"]["toy"]
    assert toy["level"] == level and toy["operators"] == report["flatbuffer"]["num_operators"] > 0
    assert report["verdict"] == verdict and report["exit_code"] == code
    markdown = out.with_suffix(".report.md").read_text()
    assert "## Target: toy" in markdown and f"**Toy check:** level {level}, {toy['operators']} operators." in markdown
    assert f"toy: level {level}, {toy['operators']} operators" in result.stdout
    assert ("toy check failed" in result.stderr) == (verdict == "failed")


def test_the_schema_refuses_a_malformed_toy_section(toy_target):
    import jsonschema

    from edge_export.reports.schema import report_schema

    section = report_schema()["properties"]["target"]["properties"]["toy"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"level": 0, "operators": 3}, section)
