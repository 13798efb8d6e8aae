"""What a target module declares itself with, beside it: the registry and the declarations live at
the bottom of the layers (``edge_export/plugins/``), so that options and reports read them without
importing ``targets/``; target modules keep importing them from here."""

from __future__ import annotations

from ..plugins.report_sections import ReportSection, declared_report_sections, report_sections_of
from ..plugins.target_registry import (
    TARGET_NAME_PATTERN,
    TargetOptions,
    target_options_classes,
    get_target,
    register_target,
    registered_targets,
    target_name,
    unregister_target,
)

__all__ = [
    "TARGET_NAME_PATTERN", "TargetOptions", "target_options_classes", "get_target", "register_target",
    "registered_targets", "target_name", "unregister_target", "ReportSection", "declared_report_sections", "report_sections_of",
]
