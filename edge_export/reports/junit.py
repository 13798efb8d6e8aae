"""JUnit XML from a report: one test case per output (and per layer with --per-layer), so CI systems
show parity failures natively. It renders the report's verdicts; it never recomputes them.

It reads the typed run report (``reports.model.RunReport``): the ``ParityResult`` (or
``SkippedValidation``), the ``LayerParityReport`` and the baseline's regressions. Numbers are shown
as the JSON report has them (a numpy scalar as a Python number, a non-finite float as n/a); a layer's
details are its scalar fields under their JSON names (``serialize.json_keys``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from .model import SkippedValidation
from ..output.serialize import json_keys, to_json_value
from ..output.text_safety import show_unsafe

if TYPE_CHECKING:
    from ..validators.layers import LayerParity
    from .model import RunReport

__all__ = ["render_junit"]

# ElementTree escapes &, <, > and quotes but writes characters XML 1.0 forbids (an ESC in a module
# name; not even as &#27;) as they are, which makes the whole file unparsable. Those, and the bidi and
# zero-width characters a CI page would show raw, can only come from model-supplied text: the whole
# document goes through text_safety.show_unsafe (only its own newlines and tabs kept), so each is a
# visible escape such as \x1b or \u202e.
_DOCUMENT_WHITESPACE = "\n\t"


def _fmt(v: Any) -> str:
    v = to_json_value(v)  # as the JSON has it: NaN is no value
    return "n/a" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))


def _target_cases(report: RunReport) -> list[tuple]:
    """The test cases of the target's sections (``ReportSection.junit``: a flash budget, the GPU
    float16 check), in the target's order."""
    target = report.target
    if target is None:
        return []
    from ..plugins.report_sections import report_sections_of

    cases = []
    for section in report_sections_of(target.name):
        value = target.sections.get(section.key)
        if value is not None and section.junit is not None:
            cases += section.junit(value)
    return cases


def _case(suite: ET.Element, classname: str, name: str, failure: str | None, details: str, skipped: str | None = None) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
    if skipped is not None:
        ET.SubElement(case, "skipped", message=skipped)
    elif failure is not None:
        el = ET.SubElement(case, "failure", message=failure, type="ParityFailure")
        el.text = details
    out = ET.SubElement(case, "system-out")
    out.text = details


def _layer_details(layer: LayerParity) -> str:
    """``key: value`` for every scalar field of the layer, under its JSON name (lists left out)."""
    lines = []
    for key in json_keys(type(layer)):
        value = to_json_value(getattr(layer, key.attribute))
        if isinstance(value, (list, dict)) or (value is None and key.omit_none):
            continue
        lines.append(f"{key.key}: {_fmt(value)}")
    return "\n".join(lines)


def render_junit(report: RunReport) -> str:
    """The report as JUnit XML: a case per output, per compared layer, per baseline regression and
    per flash/RAM budget given, and the GPU float16 precision check."""
    root = ET.Element("testsuites", name="edge-export")
    suite = ET.SubElement(root, "testsuite", name=f"edge-export parity: {report.model.source}")
    val = report.validation
    if isinstance(val, SkippedValidation) and report.language_model is None:
        _case(suite, "edge_export.parity", "outputs", None, "", skipped=val.reason)
    if report.language_model is not None:
        from ..plugins.report_sections import run_section

        for classname, name, failure, details in run_section("language_model").junit(report.language_model):
            _case(suite, classname, name, failure, details)
    for o in () if isinstance(val, SkippedValidation) else val.outputs:
        kind = o.kind.value
        details = "\n".join(
            [f"kind: {kind} (decided by {o.decision.source.value})"]
            + [f"{k}: {'not computable: ' + o.not_computable[k] if k in o.not_computable else _fmt(v)}" for k, v in o.metrics.items()]
        )
        failed = [("", c) for c in o.checks if c.passed is False]
        failed += [(f"{p.part}: ", c) for p in o.failed_parts for c in p.checks if c.passed is False]
        failure = None
        if o.error:
            failure = o.error
        elif failed:
            failure = "; ".join(f"{where}{c.metric} {_fmt(c.value)} not {c.op} {_fmt(c.threshold)}" for where, c in failed)
        _case(suite, "edge_export.parity.outputs", f"output {o.index} {o.name} ({kind})", failure, details)
    layers = report.per_layer.layers if report.per_layer is not None else ()
    culprit = report.per_layer.first_jump if report.per_layer is not None else None
    for i, layer in enumerate(layers):
        name = layer.module_path or f"layer {i}"
        failure = None
        if layer.passed is False:
            failure = f"SQNR {_fmt(layer.sqnr_db)} dB below the layer threshold"
        if culprit is not None and (culprit.module_path, culprit.tflite_tensor) == (layer.module_path, layer.tflite_tensor):
            failure = (failure + "; " if failure else "") + "first layer where the error jumps (likely culprit)"
        _case(suite, "edge_export.parity.layers", f"{i:03d} {name}", failure, _layer_details(layer))
    if report.accuracy is not None:
        from ..validators.accuracy import junit_case

        _case(suite, *junit_case(report.accuracy))
    for reg in report.baseline.regressions if report.baseline is not None else ():
        _case(suite, "edge_export.baseline", f"{reg.output} {reg.metric}", reg.message, reg.message)
    for classname, name, failure, details, skipped in _target_cases(report):
        _case(suite, classname, name, failure, details, skipped=skipped)
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("errors", "0")
    root.set("tests", suite.get("tests"))
    root.set("failures", suite.get("failures"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + show_unsafe(ET.tostring(root, encoding="unicode"), keep=_DOCUMENT_WHITESPACE) + "\n"
