"""The report schema is itself valid and rejects reports that break it."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from cli_harness import REPO, validate_report


def _schema():
    return json.loads((REPO / "edge_export" / "reports" / "report.schema.json").read_text())


def test_schema_is_valid_and_versioned():
    schema = _schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    from edge_export.api import REPORT_SCHEMA_VERSION

    assert REPORT_SCHEMA_VERSION.startswith("1.")
    assert f"report-{REPORT_SCHEMA_VERSION}" in schema["$id"]
    assert (REPO / "docs" / "REPORT_SCHEMA.md").read_text().count(REPORT_SCHEMA_VERSION) >= 1


def test_committed_example_report_validates_and_broken_ones_do_not():
    report = json.loads((REPO / "examples" / "ci" / "baseline.report.json").read_text())
    validate_report(report)
    for mutate in (
        lambda r: r.pop("verdict"),
        lambda r: r["validation"]["outputs"][0]["metrics"].__setitem__("cosine", 2.0),
        lambda r: r["export"].__setitem__("quantize", "int3"),
        lambda r: r["flatbuffer"].__setitem__("sha256", "xyz"),
    ):
        broken = copy.deepcopy(report)
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate_report(broken)
