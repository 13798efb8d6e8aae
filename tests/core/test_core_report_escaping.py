"""Names from a model or a .tflite reach the Markdown report (published as a CI step summary), the
JUnit XML and the console. None of them may add markup (issue 13, item 4)."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from edge_export.reports.junit import render_junit
from edge_export.reports.markdown import escape_markdown, render_markdown

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from tools_models import cnn_models  # noqa: F401  (a pytest fixture)

FAKE_HEADING = "x\n# edge-export: ✅ PASSED"
HOSTILE = [
    FAKE_HEADING,
    '<img src="https://evil.example/x.png">',
    "[click me](https://evil.example)",
    "<details><summary>hidden</summary>",
    "conv|a|b",
    "`code` **bold** _it_ ~~s~~ $x$",
    "esc\x1b[31m red",
    "[/bold] [/]",
]


def hostile_report() -> dict:
    outputs = [
        {
            "index": i,
            "name": name,
            "shape": [1, 10],
            "passed": False,
            "error": f"crashed on {name}",
            "metrics": {"max_abs_error": 0.5, "sqnr_db": 10.0},
            "checks": [{"metric": "sqnr_db", "value": 10.0, "op": ">=", "threshold": 30.0, "passed": False}],
        }
        for i, name in enumerate(HOSTILE)
    ]
    layers = [
        {"position": i, "module_path": name, "module_type": name, "opcode": name, "sqnr_db": 5.0 + i,
         "cosine": 0.9, "fused_modules": [name], "passed": False, "tflite_tensor": name}
        for i, name in enumerate(HOSTILE)
    ]
    return {
        "verdict": "failed",
        "exit_code": 1,
        "model": {"source": HOSTILE[0], "kind": "pt2"},
        "artifacts": {"tflite": HOSTILE[1]},
        "export": {"quantize": "none", "target": "cpu"},
        "flatbuffer": {
            "size_bytes": 1000,
            "num_operators": 3,
            "sha256": "0" * 64,
            "fully_integer": False,
            "inputs": [{"name": n, "dtype": "float32", "shape": [1]} for n in HOSTILE],
            "outputs": [],
            "op_counts": {f"CUSTOM:{n}": 1 for n in HOSTILE},
        },
        "validation": {
            "samples": 2,
            "runtime": "xnnpack",
            "outputs": outputs,
            "thresholds": {"min_sqnr": 30.0},
            "worst": {"output": HOSTILE[2], "sqnr_db": 10.0, "failed_checks": ["sqnr_db"]},
        },
        "per_layer": {"layers": layers, "match_fraction": 0.5, "first_jump": layers[3], "tensors_unmatched": 0},
        "quantization": {
            "mode": "int8", "backend": "pt2e", "reason": HOSTILE[4], "fully_integer": False,
            "warnings": HOSTILE, "calibration": {"samples": 1, "source": HOSTILE[5]},
            "integer_check": {"float_tensors": [{"name": n, "dtype": "float32", "module_path": n} for n in HOSTILE]},
            "io": [{"kind": "input", "name": n, "dtype": "int8", "scale": 0.1, "zero_point": 0} for n in HOSTILE],
            "attempts": [{"backend": "pt2e", "ok": False, "error": n} for n in HOSTILE],
        },
        "baseline": {"path": HOSTILE[3], "regressions": [{"output": n, "metric": "sqnr_db", "message": n} for n in HOSTILE]},
    }


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_shows_hostile_names_as_text():
    md = render_markdown(hostile_report())
    lines = md.splitlines()
    assert [line for line in lines if line.startswith("#") and "PASSED" in line] == []
    assert lines[0] == "# edge-export: ❌ FAILED"
    # No raw HTML from a name: only the renderer's own <code> and <sub> tags remain.
    assert set(re.findall(r"<\s*/?\s*([a-zA-Z]+)", md)) <= {"code", "sub"}
    assert "](" not in md.replace("\\](", "").replace("\\]\\(", "")
    assert "\x1b" not in md
    assert "`" not in md.replace("\\`", "").replace(f"`{'0' * 16}…`", "")  # only the sha256 is code
    # Every table row keeps its header's number of cells, whatever '|' a name holds.
    header_cells = None
    for line in lines:
        if line.startswith("|"):
            cells = unescaped_pipes(line)
            if header_cells is None:
                header_cells = cells
            assert cells == header_cells, line
        else:
            header_cells = None


def test_escape_markdown_keeps_the_text_readable():
    assert escape_markdown("conv|a") == "conv\\|a"
    assert escape_markdown("<b>&") == "&lt;b&gt;&amp;"
    assert escape_markdown("a\nb") == "a b"


def test_junit_from_hostile_names_parses():
    report = hostile_report()
    report["model"]["source"] = "model\x1b\x00\x0b.pt2"
    xml = render_junit(report)
    root = ET.fromstring(xml)
    names = [c.get("name") for c in root.iter("testcase")]
    assert any("<img" in n for n in names)  # escaped by XML, not dropped
    assert any("[31m" in n and "\x1b" not in n for n in names)  # control characters dropped


def rename_tensors(model_bytes: bytes, names: dict[int, bytes]) -> bytes:
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    sg = model.subgraphs[0]
    for index, name in names.items():
        sg.tensors[index].name = name
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def test_inspect_prints_markup_names_and_paths_literally(cnn_models, tmp_path, run_cli, monkeypatch):
    from edge_export.flatbuffer import read_flatbuffer

    model = read_flatbuffer(cnn_models.int8)
    data = rename_tensors(cnn_models.int8, {model.outputs[0]: b"[/]out[/bold]", model.inputs[0]: b"[bold red]in"})
    monkeypatch.chdir(tmp_path)  # short paths: the console would cut a long one
    Path("m[").mkdir()
    path = Path("m[", "bold].tflite")  # the path holds "[/bold]"
    path.write_bytes(data)
    res = run_cli("inspect", path)
    assert res.exit_code == 0, res.stderr
    assert "[/]out[/bold]" in res.stdout and "[bold red]in" in res.stdout
    assert "m[/bold].tflite" in res.stdout
    missing = run_cli("inspect", Path("gone[", "].tflite"))
    assert missing.exit_code == 2 and "Traceback" not in missing.stderr
    assert "gone[/].tflite" in missing.stderr


def test_hostile_output_names_reach_report_md_escaped(cnn_models, tmp_path, run_cli):
    """End to end: `validate` of a .tflite whose output is named like a heading writes no heading."""
    import torch

    from edge_export.flatbuffer import read_flatbuffer

    model = read_flatbuffer(cnn_models.fp32)
    data = rename_tensors(cnn_models.fp32, {model.outputs[0]: FAKE_HEADING.encode() + b" <img src=x> |"})
    tflite = tmp_path / "m.tflite"
    tflite.write_bytes(data)
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(cnn_models.module, (torch.from_numpy(cnn_models.example),)), pt2)
    res = run_cli("validate", tflite, "--reference", pt2, "--samples", "2")
    assert res.exit_code == 0, res.stderr
    md = (tmp_path / "m.validate.report.md").read_text()
    assert md.startswith("# edge-export: ✅ PASSED")
    assert sum(line.startswith("#") and "PASSED" in line for line in md.splitlines()) == 1
    assert "<img" not in md and "&lt;img src=x&gt;" in md
