"""JUnit XML from a report: one test case per output (and per layer with --per-layer), so CI systems
show parity failures natively. It renders the report's verdicts; it never recomputes them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from .serialize import json_form

__all__ = ["render_junit"]

# ElementTree escapes &, <, > and quotes but writes characters XML 1.0 forbids (an ESC in a module
# name) as they are, which makes the whole file unparsable; they can only come from model-supplied
# names, so they are dropped.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _fmt(v) -> str:
    return "n/a" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))


def _case(suite: ET.Element, classname: str, name: str, failure: str | None, details: str, skipped: str | None = None) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
    if skipped is not None:
        ET.SubElement(case, "skipped", message=skipped)
    elif failure is not None:
        el = ET.SubElement(case, "failure", message=failure, type="ParityFailure")
        el.text = details
    out = ET.SubElement(case, "system-out")
    out.text = details


def render_junit(report) -> str:
    """``report``: a RunReport, or its JSON form (a dict, as written to report.json)."""
    report = json_form(report)  # the keys report.schema.json documents
    model = report.get("model", {}).get("source", "model")
    root = ET.Element("testsuites", name="edge-export")
    suite = ET.SubElement(root, "testsuite", name=f"edge-export parity: {model}")
    val = report.get("validation") or {}
    if val.get("status") == "skipped":
        _case(suite, "edge_export.parity", "outputs", None, "", skipped=val.get("reason", "skipped"))
    for o in val.get("outputs", []):
        m = o.get("metrics") or {}
        missing = o.get("not_computable") or {}
        kind = o.get("kind")
        details = "\n".join(
            ([f"kind: {kind} (decided by {o.get('kind_source')})"] if kind else [])
            + [f"{k}: {'not computable: ' + missing[k] if k in missing else _fmt(v)}" for k, v in m.items()]
        )
        failed = [c for c in o.get("checks", []) if c.get("passed") is False]
        failure = None
        if o.get("error"):
            failure = o["error"]
        elif failed:
            failure = "; ".join(f"{c['metric']} {_fmt(c['value'])} not {c['op']} {_fmt(c['threshold'])}" for c in failed)
        name = f"output {o['index']} {o['name']}" + (f" ({kind})" if kind else "")
        _case(suite, "edge_export.parity.outputs", name, failure, details)
    layers = (report.get("per_layer") or {}).get("layers") or []
    culprit = (report.get("per_layer") or {}).get("first_jump") or {}
    for i, layer in enumerate(layers):
        name = layer.get("module_path") or layer.get("name") or f"layer {i}"
        details = "\n".join(f"{k}: {_fmt(v)}" for k, v in layer.items() if not isinstance(v, (list, dict)))
        failure = None
        if layer.get("passed") is False:
            failure = f"SQNR {_fmt(layer.get('sqnr_db'))} dB below the layer threshold"
        if culprit and culprit.get("module_path") == layer.get("module_path") and culprit.get("tflite_tensor") == layer.get("tflite_tensor"):
            failure = (failure + "; " if failure else "") + "first layer where the error jumps (likely culprit)"
        _case(suite, "edge_export.parity.layers", f"{i:03d} {name}", failure, details)
    for reg in (report.get("baseline") or {}).get("regressions", []):
        _case(suite, "edge_export.baseline", f"{reg['output']} {reg['metric']}", reg["message"], reg["message"])
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("errors", "0")
    root.set("tests", suite.get("tests"))
    root.set("failures", suite.get("failures"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _XML_ILLEGAL.sub("", ET.tostring(root, encoding="unicode")) + "\n"
