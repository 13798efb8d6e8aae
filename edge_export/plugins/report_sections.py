"""The report sections plugins declare, read by the renderers (reports/) without naming a plugin.

Two kinds: a target's sections under the report's ``target`` (``TargetPlugin.report_sections``,
found through the target registry), and a task's section at the top of the report (``RunSection``:
the language-model task's ``language_model``, registered by ``llm/report.py`` when it is imported,
which is before any report can hold one). So reports/ sit below targets/ and llm/ and import
neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .target_registry import _REGISTRY, registered_targets

__all__ = [
    "ReportSection", "declared_report_sections", "report_sections_of", "RunSection", "register_run_section",
    "run_section",
]


@dataclass(frozen=True)
class ReportSection:
    """A typed section a target adds under the report's ``target`` (``TargetPlugin.report_sections``):
    its key, its class, how it renders, and whether it fails the verdict. Renderers (reports/)
    call these hooks; they name no target."""

    key: str  # the key under "target" in the JSON, and the entry a hook returns it under
    type: type  # the section's typed class (serialized by serialize.to_json_value)
    # Markdown lines for the section: markdown(value, target_section, artifacts) -> list[str]
    markdown: Callable[..., list[str]] | None = None
    # terminal summary: summary(value, target_section, report, lines) writes through a SummaryLines
    summary: Callable[..., None] | None = None
    # JUnit test cases: junit(value) -> [(classname, name, failure or None, details, skipped or None)]
    junit: Callable[[Any], list[tuple]] | None = None
    # What fails the verdict (exit 1) in the section: truthy when it fails (True, or the failures, e.g.
    # the exceeded budgets); read as ``target.failed_<key>``.
    failed: Callable[[Any], Any] | None = None
    # The JSON schema of the value, for sections report.schema.json does not describe (a plugin's);
    # merged under target.properties by reports/schema.py.
    schema: Any = None


def declared_report_sections() -> dict[str, ReportSection]:
    """Every registered target's report sections by key, in the targets' order."""
    found: dict[str, ReportSection] = {}
    for plugin in registered_targets().values():
        for section in plugin.report_sections:
            found.setdefault(section.key, section)
    return found


def report_sections_of(target_name: str) -> tuple[ReportSection, ...]:
    """The sections target ``target_name`` declares, in its order; then every other declared one
    (a report may be read by a process where the target that wrote it is not registered)."""
    declared = declared_report_sections()
    plugin = _REGISTRY.get(target_name) or registered_targets().get(target_name)
    own = tuple(plugin.report_sections) if plugin is not None else ()
    return own + tuple(s for key, s in declared.items() if all(key != o.key for o in own))


@dataclass(frozen=True)
class RunSection:
    """A section a task adds at the top of the report (``RunReport.<key>``), with its renderers.
    Its value says itself whether it passed (``value.passed``), which the verdict reads."""

    key: str  # the RunReport field and JSON key: "language_model"
    type: type
    markdown: Callable[[Any], list[str]]  # Markdown lines, model-supplied text escaped
    summary: Callable[[Any], list[str]]  # terminal summary lines (without their indent)
    junit: Callable[[Any], list[tuple]]  # JUnit test cases: (classname, name, failure or None, details)


_RUN_SECTIONS: dict[str, RunSection] = {}


def register_run_section(section: RunSection) -> RunSection:
    """Declare ``section``; returns it (registering the same key again replaces it: a reload)."""
    _RUN_SECTIONS[section.key] = section
    return section


def run_section(key: str) -> RunSection:
    """The declared section ``key``: a report holds a value of it only when its module was imported."""
    return _RUN_SECTIONS[key]
