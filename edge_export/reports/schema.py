"""The report's JSON schema as this process writes it: the published ``report.schema.json`` with the
sections of targets defined outside it (``ReportSection.schema``) under ``target``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

__all__ = ["published_schema", "report_schema"]


def published_schema() -> dict[str, Any]:
    return json.loads((Path(__file__).with_name("report.schema.json")).read_text())


def report_schema() -> dict[str, Any]:
    """The published schema plus every registered target's declared section schemas; a section the
    published schema already describes keeps its published form."""
    from ..plugins.report_sections import declared_report_sections

    schema = copy.deepcopy(published_schema())
    properties = schema["properties"]["target"]["properties"]
    for key, section in declared_report_sections().items():
        if section.schema is not None and key not in properties:
            properties[key] = section.schema
    return schema
