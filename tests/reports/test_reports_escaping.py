"""Names from a model or a .tflite reach the Markdown report (published as a CI step summary), the
JUnit XML and the console. None of them may add markup (issue 13, item 4)."""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from report_fixtures import full_report

from edge_export.reports.junit import render_junit
from edge_export.output.text_safety import escape_markdown
from edge_export.reports.markdown import render_markdown
from edge_export.reports.model import RunReport
from edge_export.output.text_safety import for_c_comment, for_terminal, unsafe_to_show

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


def hostile_report(names: tuple[str, ...] = tuple(HOSTILE)) -> RunReport:
    """A failing int8 Edge TPU + micro run (tests/report_fixtures.py) whose every model- or file-supplied
    text is one of ``names`` (HOSTILE; at least 8): outputs, layers, tensors, operators, modules,
    paths, messages."""
    from edge_export.config import Thresholds
    from edge_export.flatbuffer import TensorInfo
    from edge_export.quantization.calibration import CalibrationSummary
    from edge_export.quantization.io_types import IOQuantInfo
    from edge_export.quantization.selection import BackendAttempt, FloatTensorEntry, IntegerCheck, QuantOpEntry
    from edge_export.reports.baseline import Regression
    from edge_export.reports.model import BaselineSection, ModelSection
    from edge_export.targets.edgetpu.report import CompilerSection, DelegateSection
    from edge_export.targets.micro.report import MicroSection
    from edge_export.reports.model import AppSection, AppTensor
    from edge_export.targets.edgetpu.mapping import TableRow
    from edge_export.targets.edgetpu.compiler import CompilerResult
    from edge_export.targets.edgetpu.rewrites import AppliedRewrite
    from edge_export.targets.micro.report import MicroReport
    from edge_export.conversion.transpose_report import TransposeReport, TransposeSite
    from edge_export.validators.layers import LayerParity
    from edge_export.validators.parity import Check, OutputParity, ParityResult

    report = full_report()
    outputs = tuple(
        OutputParity(i, name, (1, 10), {"max_abs_error": 0.5, "sqnr_db": 10.0}, (Check("sqnr_db", 10.0, 30.0, ">=", False),), error=f"crashed on {name}")
        for i, name in enumerate(names)
    )
    layers = tuple(
        LayerParity(i, name, name, name, i, name, (1, 10), "int8", (1, 10), name, 5.0 + i, 0.9, (name,), (name,), False)
        for i, name in enumerate(names)
    )
    tpu = report.target.edgetpu
    tpu = dataclasses.replace(
        tpu,
        first_unmapped=dataclasses.replace(tpu.first_unmapped, module_path=names[0], module_type=names[4], source=names[1], reason=names[2]),
        table=tuple(TableRow(name, 1, name) for name in names),
    )
    micro = MicroReport(names, names, ("int8",), ("int8",), False, names, 100, 64)
    return dataclasses.replace(
        report,
        model=ModelSection(names[0], "pt2", names[1]),
        artifacts=dataclasses.replace(report.artifacts, tflite=names[1], extra={"edgetpu_tflite": names[2]}),
        flatbuffer=dataclasses.replace(
            report.flatbuffer,
            sha256="0" * 64,
            inputs=tuple(TensorInfo(i, name, (1,), (1,), "float32", False, None) for i, name in enumerate(names)),
            outputs=(),
            op_counts={f"CUSTOM:{name}": 1 for name in names},
            transposes=TransposeReport(len(names), len(names), tuple(TransposeSite(i, (1, 2, 2, 3), (0, 3, 1, 2), False, name, name) for i, name in enumerate(names))),
        ),
        validation=ParityResult(2, Thresholds(min_sqnr_db=30.0), outputs, names[6], notes=names),
        per_layer=dataclasses.replace(report.per_layer, layers=layers, first_jump=layers[3], worst=layers[0], min_sqnr_db=30.0),
        quantization=dataclasses.replace(
            report.quantization,
            recipe=names[7],
            reason=names[4],
            warnings=names,
            calibration=CalibrationSummary(names[5], 1, False, ()),
            integer_check=IntegerCheck(
                False,
                tuple(FloatTensorEntry(i, name, "float32", (1,), name, name) for i, name in enumerate(names)),
                tuple(QuantOpEntry(i, name, name, name) for i, name in enumerate(names)),
            ),
            io=tuple(IOQuantInfo("input", name, (1,), "int8", 0.1, 0) for name in names),
            attempts=tuple(BackendAttempt("pt2e", False, name) for name in names),
        ),
        target=dataclasses.replace(
            report.target,
            implied=names,
            rewrites=tuple(AppliedRewrite(name, name, name) for name in names),
            edgetpu=tpu,
            compiler=CompilerSection(CompilerResult(False, names[6]), names),
            delegate=DelegateSection("edgetpu", False, names[7]),
            micro=MicroSection(micro, names[3]),
        ),
        baseline=BaselineSection(names[3], tuple(Regression(name, "sqnr_db", None, None, name) for name in names)),
        app=AppSection(names[0], tuple(AppTensor(name, "int8", (1,), "other", 0.5, 0) for name in names), ()),
    )


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_shows_hostile_names_as_text():
    rendered = render_markdown(hostile_report())
    # The app section's Kotlin example is a fenced code block (nothing in it is markup): its names
    # are Kotlin literals of printable ASCII with no backtick or '<'; the rest is checked as prose.
    before, rest = rendered.split("```kotlin\n", 1)
    block, after = rest.split("\n```\n", 1)
    assert all(line.isascii() and line.isprintable() and "`" not in line and "<" not in line for line in block.splitlines())
    md = before + after
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
    report = dataclasses.replace(report, model=dataclasses.replace(report.model, source="model\x1b\x00\x0b.pt2"))
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


# Characters that show nothing or reorder what follows (issue 36): each appears in a sink only as a
# visible escape. The Markdown source doubles the backslash, which renders as one.
INVISIBLE = {
    "\u202e": "\\u202e",  # right-to-left override: "gpj.exe" would read "exe.jpg"
    "\u2066": "\\u2066",  # left-to-right isolate
    "\u2069": "\\u2069",  # pop directional isolate
    "\u200b": "\\u200b",  # zero-width space
    "\ufeff": "\\ufeff",  # byte-order mark
    "\u2028": "\\u2028",  # line separator
    "\x07": "\\x07",  # bell, a C0 control XML 1.0 forbids even as &#7;
    "\x0b": "\\x0b",  # vertical tab
    "\x85": "\\x85",  # next line, a C1 control
    "\U000f0001": "\\U000f0001",  # private use
}
INVISIBLE_NAMES = tuple(f"out{char}gpj.exe%0A::warning::x" for char in INVISIBLE) + ("%0D%0A::add-mask::y",)
ORDINARY = ("conv_é", "日本語の層", "وزن", "Ελληνικά", "ok ✅ ⚠️")


def raw_unsafe(text: str) -> list[str]:
    """The characters of ``text`` unsafe to show, but a document's own line breaks and tabs."""
    return [hex(ord(c)) for c in text if unsafe_to_show(c) and c not in "\n\t"]


def test_invisible_characters_reach_markdown_only_escaped():
    md = render_markdown(hostile_report(INVISIBLE_NAMES))
    assert raw_unsafe(md) == []
    for char, shown in INVISIBLE.items():
        # a name in <code> (the worst output, the outputs table) and in prose
        assert f"<code>out\\{shown}gpj\\.exe%0A\\:\\:warning\\:\\:x</code>" in md, repr(char)
    assert "%0D%0A\\:\\:add-mask\\:\\:y" in md  # %-encoded text stays text, decoded nowhere
    assert not any(line.lstrip().startswith("::") for line in md.splitlines())


def test_invisible_characters_reach_junit_only_escaped():
    xml = render_junit(hostile_report(INVISIBLE_NAMES))
    assert raw_unsafe(xml) == []
    root = ET.fromstring(xml)  # still XML 1.0
    names = [case.get("name") for case in root.iter("testcase")]
    for char, shown in INVISIBLE.items():
        assert any(f"out{shown}gpj.exe%0A::warning::x" in name for name in names), repr(char)
    messages = [f.get("message") for f in root.iter("failure")]
    assert any("%0D%0A::add-mask::y" in m for m in messages)


def test_invisible_characters_reach_the_terminal_and_c_comments_only_escaped():
    for char, shown in INVISIBLE.items():
        text = f"out{char}gpj.exe"
        assert for_terminal(text) == f"out{shown}gpj.exe"
        comment = for_c_comment(text)
        assert comment == f"out<U+{ord(char):04X}>gpj.exe" and comment.isascii() and comment.isprintable()
    assert for_terminal("a\nb\tc") == "a\nb\tc" and for_terminal("a\nb", keep_newlines=False) == "a\\nb"
    assert for_terminal("\ud800") == "\\ud800"  # a lone surrogate, which no encoder would write


def test_ordinary_names_stay_readable_in_every_sink():
    for name in ORDINARY:
        assert for_terminal(name) == name
        assert escape_markdown(name) == name.replace("_", "\\_")
    report = dataclasses.replace(full_report(), model=dataclasses.replace(full_report().model, source=" ".join(ORDINARY)))
    suite = ET.fromstring(render_junit(report)).find("testsuite")
    assert suite.get("name") == "edge-export parity: " + " ".join(ORDINARY)
    assert "<code>conv\\_é 日本語の層 وزن Ελληνικά ok ✅ ⚠️</code>" in render_markdown(report)
