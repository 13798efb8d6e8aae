"""The Markdown report's "Use it in an app" section: the signature, each input and output as an app
feeds or reads it, and a Kotlin example of LiteRT 2.x's CompiledModel API with those names. Names
read from a .tflite are arbitrary text: they must not break out of the table or the code block."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from cli_harness import validate_report
from report_fixtures import app_section, full_report

from edge_export.output.text_safety import kotlin_string
from edge_export.reports.markdown import render_markdown
from edge_export.reports.model import AppSection, AppTensor


def _kotlin_block(md: str) -> list[str]:
    """The lines between the section's ```kotlin fence and the first fence after it."""
    lines = md.splitlines()
    start = lines.index("```kotlin")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("```"))
    return lines[start + 1 : end]


def _kotlin_literals(code: str) -> list[str]:
    """Kotlin string literals in ``code``, decoded (\\" \\\\ \\$ and \\uXXXX; surrogate pairs joined)."""
    decoded = []
    for body in re.findall(r'"((?:[^"\\]|\\.)*)"', code):
        units = re.sub(r"\\u([0-9A-F]{4})", lambda m: chr(int(m.group(1), 16)), body)
        units = re.sub(r"\\(.)", r"\1", units)
        decoded.append(units.encode("utf-16", "surrogatepass").decode("utf-16"))
    return decoded


def test_app_section_lists_the_signature_and_each_tensor():
    md = render_markdown(full_report())
    section = md.split("## Use it in an app", 1)[1].split("\n## ", 1)[0]
    assert "Signature <code>serving\\_default</code>" in section
    assert "| input | <code>pixel\\_values</code> | uint8 | 1×32×32×3 | NHWC | 0\\.0078125 | 128 |" in section
    assert "| output | <code>logits</code> | uint8 | 1×10 | other | 0\\.125 | 0 |" in section
    assert "| output | <code>features</code> | float32 | 1×16 | other | – | – |" in section
    assert "feed <code>q = round(x / scale) + zero_point</code>" in section


def test_kotlin_example_runs_the_signature_by_name_with_typed_buffers():
    code = _kotlin_block(render_markdown(full_report()))
    text = "\n".join(code)
    assert 'val model = CompiledModel.create(context.assets, "cnn.tflite", CompiledModel.Options(Accelerator.CPU))' in code
    assert 'val signature = "serving_default"' in code
    assert '    "pixel_values" to model.createInputBuffer("pixel_values", signature),' in code
    assert '    "logits" to model.createOutputBuffer("logits", signature),' in code
    # uint8 input: bytes through writeInt8, one per element of 1x32x32x3, with its quantization
    assert 'inputs.getValue("pixel_values").writeInt8(ByteArray(3072))  // your data' in code
    assert "// input 0: uint8 [1, 32, 32, 3] NHWC, q = round(x / 0.0078125) + 128" in code
    negative = dataclasses.replace(app_section(), outputs=(AppTensor("logits", "int8", (1, 10), "other", 0.5, -128),))
    assert "// output 0: int8 [1, 10] other, x = (q + 128) * 0.5" in _kotlin_block(render_markdown(dataclasses.replace(full_report(), app=negative)))
    assert "model.run(inputs, outputs, signature)" in code
    assert 'val output0 = outputs.getValue("logits").readInt8()' in code
    assert 'val output1 = outputs.getValue("features").readFloat()' in code
    assert "// output 0: uint8 [1, 10] other, x = q * 0.125" in code
    assert text.index("writeInt8") < text.index("model.run") < text.index("readInt8")


def test_without_a_signature_the_example_goes_by_position():
    app = dataclasses.replace(app_section(), signature_key=None)
    md = render_markdown(dataclasses.replace(full_report(), app=app))
    code = _kotlin_block(md)
    assert "val inputs = model.createInputBuffers()  // no signature: by position" in code
    assert "inputs[0].writeInt8(ByteArray(3072))  // your data" in code
    assert "model.run(inputs, outputs)" in code and "val output1 = outputs[1].readFloat()" in code
    assert "The model has no signature" in md


def test_kotlin_string_escapes_everything_but_printable_ascii():
    assert kotlin_string("logits") == '"logits"'
    assert kotlin_string('a"b\\c$d') == '"a\\"b\\\\c\\$d"'
    assert kotlin_string("x\ny") == '"x\\u000Ay"'
    assert kotlin_string("é😀") == '"\\u00E9\\uD83D\\uDE00"'
    assert kotlin_string("`<b>&") == '"\\u0060\\u003Cb\\u003E\\u0026"'


HOSTILE = (
    'out"); Runtime.getRuntime().exec("rm -rf /"); ("',
    "```\n# Injected heading\n<img src=x>",
    "${System.exit(1)}",
    "name`with`backticks | cell",
    "\u2028line\u2029sep😀",
)


def test_hostile_names_stay_inside_their_literals_and_the_code_block():
    tensors = tuple(AppTensor(name, "float32", (1, 4), "other", None, None) for name in HOSTILE)
    app = AppSection(signature_key='sig"\n```', inputs=tensors[:2], outputs=tensors[2:])
    md = render_markdown(dataclasses.replace(full_report(), app=app))
    code = _kotlin_block(md)
    # the block ends where the renderer ends it: just before the blank line and the next section
    after = md.split("```kotlin\n", 1)[1].split("\n```\n", 1)[1]
    assert after.startswith("\n## Flatbuffer")
    assert all(line.isascii() and line.isprintable() for line in code)
    literals = _kotlin_literals("\n".join(code))
    for name in (*HOSTILE, 'sig"\n```'):
        assert name in literals
    # no line of the block starts a fence or holds HTML; outside it nothing becomes markup either
    assert not any("`" in line or "<" in line for line in code)
    assert not any(line.startswith("# Injected") for line in md.splitlines())
    assert "<img" not in md
    outside = md
    section = outside.split("## Use it in an app", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith(("| input |", "| output |"))]
    assert len(table) == 5 and all(line.count(" | ") == 7 - 1 for line in table)


# ---- end to end: an export's section, and validate on a file whose signature names are hostile ----


@pytest.fixture(scope="module")
def exported_cnn(tmp_path_factory):
    import torch

    import edge_export
    from model_zoo import small_cnn

    folder = tmp_path_factory.mktemp("app")
    source = folder / "cnn.pt2"
    example = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.export.save(torch.export.export(small_cnn(), (example,)), source)
    result = edge_export.export(source, output=folder / "cnn.tflite", samples=2)
    assert result.exit_code == 0
    return source, folder / "cnn.tflite"


def test_exported_report_has_the_app_section_of_its_signature(exported_cnn):
    _, tflite = exported_cnn
    report = validate_report(json.loads(tflite.with_name("cnn.report.json").read_text()))
    assert report["app"] == {
        "signature_key": "serving_default",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [1, 3, 16, 16], "layout": "NCHW", "scale": None, "zero_point": None}],
        "outputs": [{"name": "output_0", "dtype": "float32", "shape": [1, 10], "layout": "other", "scale": None, "zero_point": None}],
    }
    code = _kotlin_block(tflite.with_name("cnn.report.md").read_text())
    assert 'inputs.getValue("x").writeFloat(FloatArray(768))  // your data' in code


def test_validate_of_a_file_with_hostile_signature_names_keeps_the_code_block(exported_cnn, tmp_path, run_cli):
    from edge_export.flatbuffer import load_flatbuffer
    from edge_export.passes.flatbuffer import run_flatbuffer_passes

    source, tflite = exported_cnn
    names = {"input": "x\n```\n# Injected", "output": 'y"); exec("$z'}

    def rename(model) -> bool:
        signature = model.signatureDefs[0]
        signature.inputs[0].name = names["input"].encode()
        signature.outputs[0].name = names["output"].encode()
        return True

    hostile = tmp_path / "hostile.tflite"
    hostile.write_bytes(run_flatbuffer_passes(load_flatbuffer(tflite), [rename]).model.data)
    res = run_cli("validate", hostile, "--reference", source, "--samples", "2")
    assert res.exit_code == 0, res.stderr
    md = (tmp_path / "hostile.validate.report.md").read_text()
    code = _kotlin_block(md)
    assert code[-1].startswith("val output0 = ")  # the block ends after the renderer's last line
    assert not any(line.startswith("# Injected") for line in md.splitlines())
    literals = _kotlin_literals("\n".join(code))
    assert names["input"] in literals and names["output"] in literals


def test_terminal_summary_names_the_test_vectors():
    from rich.console import Console

    from edge_export.reports.summary import print_summary

    report = full_report()
    with_vectors = dataclasses.replace(
        report, artifacts=dataclasses.replace(report.artifacts, extra={**report.artifacts.extra, "test_vectors": "out/cnn.testdata.npz"})
    )
    for shown, expected in ((report, False), (with_vectors, True)):
        out = Console(record=True, width=300, highlight=False, soft_wrap=True, force_terminal=False)
        print_summary(shown, out, Console(record=True, width=300, force_terminal=False))
        lines = out.export_text().splitlines()
        assert ("  test vectors: out/cnn.testdata.npz" in lines) is expected
