"""TFLite model metadata (issue 10, item 2): ``--labels``, ``--mean``/``--std``, ``--model-name``,
``--model-version``, ``--description``, ``--author``.

The metadata is written with MediaPipe's metadata builders and edge-export's own pass and zip; it
is read back here with readers that share none of that code: MediaPipe's generated schema classes
plus ``zipfile`` on the raw bytes, and MediaPipe Tasks' C++ ImageClassifier, which runs the model
with the normalization and labels it finds in the file.
"""

from __future__ import annotations

import hashlib
import os
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_harness import run_cli_subprocess, validate_report
from model_zoo import small_cnn

import edge_export
from edge_export.errors import UsageError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.flatbuffer import misaligned_buffers
from edge_export.runtime.interpreter import TFLiteRunner

# Byte-for-byte: a unicode label, a label with markup, Windows line ends and a final newline.
LABELS = "zero\r\none ☃\r\n[bold]two[/bold]\r\n" + "".join(f"class {i}\r\n" for i in range(3, 10))
MODEL_NAME = "Digits [red]CNN[/red] <b>"  # rich markup and HTML: shown literally by inspect and the Markdown


def _metadata_fb():
    from mediapipe.tasks.metadata import metadata_schema_py_generated as metadata_fb

    return metadata_fb


def _raw_metadata(data: bytes):
    """The ModelMetadata object read straight from the file with MediaPipe's generated classes."""
    from ai_edge_litert import schema_py_generated as schema

    root = schema.Model.GetRootAs(data, 0)
    entries = [root.Metadata(i) for i in range(root.MetadataLength())]
    named = [e for e in entries if e.Name() == b"TFLITE_METADATA"]
    assert len(named) == 1
    raw = root.Buffers(named[0].Buffer()).DataAsNumpy().tobytes()
    assert raw[4:8] == b"M001"
    metadata_fb = _metadata_fb()
    return metadata_fb.ModelMetadataT.InitFromObj(metadata_fb.ModelMetadata.GetRootAs(raw, 0))


@pytest.fixture(scope="module")
def cnn_source(tmp_path_factory) -> Path:
    """The small CNN as a .pt2, saved once for every test here (no test writes beside it)."""
    folder = tmp_path_factory.mktemp("metadata_source")
    source = folder / "cnn.pt2"
    example = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.export.save(torch.export.export(small_cnn(), (example,)), source)
    return source


@pytest.fixture(scope="module")
def exported(tmp_path_factory, cnn_source):
    """The small CNN (10 classes) exported NHWC with and without metadata."""
    folder = tmp_path_factory.mktemp("metadata")  # the exports' own folder: cnn_source is only read
    labels = folder / "digits.txt"
    labels.write_bytes(LABELS.encode("utf-8"))
    with_metadata = edge_export.export(
        cnn_source, output=folder / "with.tflite", channels_last=True, labels=str(labels), mean=(0.5,), std=(0.25,),
        model_name=MODEL_NAME, model_version="1.2.0", description="A test classifier.", author="edge-export tests",
    )
    plain = edge_export.export(cnn_source, output=folder / "plain.tflite", channels_last=True, validate=False)
    return with_metadata, plain, labels


def test_classifier_metadata_is_decoded_by_an_independent_reader(exported):
    result, _, labels = exported
    assert result.exit_code == 0  # parity passed on the model the metadata went into
    data = result.tflite_path.read_bytes()
    metadata_fb = _metadata_fb()
    meta = _raw_metadata(data)
    assert (meta.name.decode(), meta.version, meta.description, meta.author, meta.minParserVersion) == (
        MODEL_NAME, b"1.2.0", b"A test classifier.", b"edge-export tests", b"1.0.0",
    )
    (subgraph,) = meta.subgraphMetadata
    (image,) = subgraph.inputTensorMetadata
    assert image.name == b"x"
    assert image.content.contentPropertiesType == metadata_fb.ContentProperties.ImageProperties
    assert image.content.contentProperties.colorSpace == metadata_fb.ColorSpaceType.RGB
    (unit,) = image.processUnits
    assert unit.optionsType == metadata_fb.ProcessUnitOptions.NormalizationOptions
    # --mean 0.5 --std 0.25 on the 0..1 scale are 127.5 and 63.75 on the 0..255 scale apps feed.
    assert list(unit.options.mean) == [127.5] and list(unit.options.std) == [63.75]
    (scores,) = subgraph.outputTensorMetadata
    (labels_entry,) = scores.associatedFiles
    assert labels_entry.type == metadata_fb.AssociatedFileType.TENSOR_AXIS_LABELS
    assert labels_entry.name == b"digits.txt"
    # The labels file comes back out of the .tflite byte for byte, from a plain zip reader.
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == ["digits.txt"]
        assert archive.getinfo("digits.txt").compress_type == zipfile.ZIP_STORED
        assert archive.read("digits.txt") == labels.read_bytes()


def test_mediapipe_tasks_classifies_with_the_labels_and_normalization_in_the_file(exported):
    """MediaPipe Tasks' ImageClassifier (C++) reads the normalization and the labels from the file:
    its scores are the model's outputs on (pixels - 127.5) / 63.75, named by the labels file."""
    import mediapipe as mp
    from mediapipe.tasks.python.core import base_options
    from mediapipe.tasks.python.vision import image_classifier

    result, _, labels = exported
    data = result.tflite_path.read_bytes()
    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    options = image_classifier.ImageClassifierOptions(base_options=base_options.BaseOptions(model_asset_buffer=data), max_results=10)
    classifier = image_classifier.ImageClassifier.create_from_options(options)
    try:
        found = classifier.classify(mp.Image(image_format=mp.ImageFormat.SRGB, data=pixels))
    finally:
        classifier.close()
    expected = TFLiteRunner(read_flatbuffer(data)).run([((pixels.astype(np.float32) - 127.5) / 63.75)[None]])[0][0]
    names = [line for line in labels.read_text(encoding="utf-8").splitlines()]
    categories = found.classifications[0].categories
    assert len(categories) == 10
    for category in categories:
        assert category.category_name == names[category.index]
        assert category.score == pytest.approx(float(expected[category.index]), abs=1e-5)


def test_metadata_changes_no_computation_and_keeps_buffers_aligned(exported):
    result, plain, _ = exported
    with_md = read_flatbuffer(result.tflite_path.read_bytes())
    without = read_flatbuffer(plain.tflite_path.read_bytes())
    assert misaligned_buffers(with_md.data) == []
    assert with_md.op_counts == without.op_counts and with_md.input_names == without.input_names
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal((1, 16, 16, 3)).astype(np.float32) for _ in range(4)]
    a, b = TFLiteRunner(with_md), TFLiteRunner(without)
    for feed in feeds:
        for x, y in zip(a.run([feed]), b.run([feed])):
            assert np.array_equal(x, y)  # bit-identical


def test_report_records_what_was_attached(exported):
    result, plain, labels = exported
    report = validate_report(result.report)
    section = report["metadata"]
    assert section["name"] == MODEL_NAME and section["version"] == "1.2.0"
    assert section["inputs"][0]["normalization_mean"] == [127.5] and section["inputs"][0]["color_space"] == "RGB"
    assert section["outputs"][0] == {
        "name": "output_0", "kind": "classification", "normalization_mean": None, "normalization_std": None,
        "color_space": None, "labels_file": "digits.txt", "labels_count": 10,
    }
    (attached,) = section["associated_files"]
    assert attached["sha256"] == hashlib.sha256(labels.read_bytes()).hexdigest()
    assert attached["size_bytes"] == labels.stat().st_size
    assert section["written_to"] == [str(result.tflite_path)]
    grown = result.tflite_path.stat().st_size - plain.tflite_path.stat().st_size
    assert section["added_bytes"] == grown > section["metadata_bytes"] + attached["size_bytes"]
    assert "metadata" not in plain.report
    assert any(s["name"] == "metadata" for s in report["stages"])
    markdown = result.report_md_path.read_text()
    assert "## Model metadata" in markdown and "\\[red\\]CNN\\[/red\\] &lt;b&gt;" in markdown and "<b>" not in markdown


def test_inspect_shows_the_metadata_escaped(exported, run_cli):
    from edge_export.inspection import inspect_flatbuffer

    result, plain, _ = exported
    found = inspect_flatbuffer(result.tflite_path).metadata
    assert found.name == MODEL_NAME and found.author == "edge-export tests"
    assert found.inputs[0].normalization_std == (63.75,)
    assert (found.outputs[0].labels_file, found.outputs[0].labels_count) == ("digits.txt", 10)
    assert inspect_flatbuffer(plain.tflite_path).metadata is None
    cli = run_cli("inspect", str(result.tflite_path))  # in-process: what it prints, not the process, is checked
    assert cli.exit_code == 0, cli.stderr
    assert MODEL_NAME in cli.stdout  # markup printed literally, not interpreted
    assert "digits.txt" in cli.stdout and "127.5" in cli.stdout


def test_per_channel_normalization_is_written_with_a_note_for_mediapipe(exported):
    """Per-channel mean/std are valid metadata (the support library reads them); MediaPipe Tasks
    refuses them, and the report says so. Measured: create_from_options raises."""
    from mediapipe.tasks.python.core import base_options
    from mediapipe.tasks.python.vision import image_classifier

    from edge_export.api import ExportOptions
    from edge_export.artifacts.model_metadata import ImageInput, attach_metadata, build_model_metadata

    _, plain, _ = exported
    model = read_flatbuffer(plain.tflite_path.read_bytes())
    options = ExportOptions.from_keywords(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    built = build_model_metadata(model, options, [], ImageInput(0, 3))
    assert built.section.inputs[0].normalization_mean == (123.675, 116.28, 103.53)
    assert built.section.inputs[0].normalization_std == (58.395, 57.12, 57.375)
    assert any("MediaPipe Tasks refuses" in n for n in built.section.notes)
    data = attach_metadata(model, built).data
    unit = _raw_metadata(data).subgraphMetadata[0].inputTensorMetadata[0].processUnits[0]
    assert list(unit.options.mean) == pytest.approx([123.675, 116.28, 103.53])
    opts = image_classifier.ImageClassifierOptions(base_options=base_options.BaseOptions(model_asset_buffer=data))
    with pytest.raises(Exception, match="Per-channel image normalization is not available"):
        image_classifier.ImageClassifier.create_from_options(opts)


def test_edgetpu_reattach_restores_metadata_the_compiler_dropped(exported):
    """The Edge TPU compiler writes a new flatbuffer without the metadata buffer or the zip: the
    re-attach puts both back, and the model computes exactly as before."""
    from ai_edge_litert.tools import flatbuffer_utils

    from edge_export.artifacts.model_metadata import model_has_metadata, read_model_metadata, read_model_metadata_bundle
    from edge_export.targets.edgetpu.compiler import reattach_metadata

    result, _, labels = exported
    data = result.tflite_path.read_bytes()
    # What the compiler hands back: the model re-serialized without metadata (and no zip).
    model_t = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    kept = [m for m in model_t.metadata if m.name != b"TFLITE_METADATA"]
    model_t.metadata = kept
    dropped = bytes(flatbuffer_utils.convert_object_to_bytearray(model_t))
    assert not model_has_metadata(dropped) and not zipfile.is_zipfile(io.BytesIO(dropped))
    restored = reattach_metadata(dropped, read_model_metadata_bundle(read_flatbuffer(data)))
    assert misaligned_buffers(restored) == []
    assert _raw_metadata(restored).name.decode() == MODEL_NAME
    with zipfile.ZipFile(io.BytesIO(restored)) as archive:
        assert archive.read("digits.txt") == labels.read_bytes()
    again = read_model_metadata(read_flatbuffer(restored))
    assert again.outputs[0].labels_count == 10 and again.inputs[0].normalization_mean == (127.5,)
    feed = np.random.default_rng(2).standard_normal((1, 16, 16, 3)).astype(np.float32)
    assert np.array_equal(TFLiteRunner(restored).run([feed])[0], TFLiteRunner(data).run([feed])[0])


# ---- bad input: exit 2, nothing written ----------------------------------------------------------


def _refused(tmp_path: Path, source, match: str, **options) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UsageError, match=match) as caught:
        edge_export.export(source, output=out / "model.tflite", **options)
    assert caught.value.exit_code == 2
    assert list(out.iterdir()) == []


def test_empty_labels_file_is_refused(tmp_path, cnn_source):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    _refused(tmp_path, cnn_source, "holds no labels", labels=str(empty))


def test_labels_count_must_match_the_classes(tmp_path, cnn_source):
    nine = tmp_path / "nine.txt"
    nine.write_text("".join(f"c{i}\n" for i in range(9)))
    _refused(tmp_path, cnn_source, "has 9 labels, but the output 'output_0' has 10 classes", labels=str(nine), validate=False)


def test_mean_with_the_wrong_channel_count_is_refused(tmp_path, cnn_source):
    _refused(tmp_path, cnn_source, "--mean has 2 values, but the image input 'x'.*has 3 channels", mean=(0.5, 0.5))


def test_mean_on_a_model_without_an_image_input_is_refused(tmp_path):
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 3).eval()
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UsageError, match="no 4-D \\(image\\) input") as caught:
        edge_export.export(linear, example_inputs=(torch.randn(1, 4),), output=out / "m.tflite", std=(0.5,))
    assert caught.value.exit_code == 2 and list(out.iterdir()) == []


def test_empty_model_name_is_refused():
    from edge_export.api import ExportOptions

    with pytest.raises(UsageError, match="--model-name is empty"):
        ExportOptions.from_keywords(model_name="  ")


def test_micro_refuses_the_describing_options(tmp_path, cnn_source):
    _refused(tmp_path, cnn_source, "TFLite Micro ignores metadata", target="micro", author="someone")


def test_missing_mediapipe_names_the_install_command(monkeypatch):
    import sys

    from edge_export.artifacts.model_metadata import INSTALL_COMMAND, _metadata_modules

    monkeypatch.setitem(sys.modules, "mediapipe.tasks.metadata", None)  # as when the extra is absent
    with pytest.raises(UsageError, match="not installed") as caught:
        _metadata_modules()
    assert INSTALL_COMMAND in caught.value.hint and caught.value.exit_code == 2


def test_cli_bad_metadata_option_is_one_paragraph_exit_2(tmp_path, cnn_source):
    out = tmp_path / "out"
    out.mkdir()
    # Refused before the model loads (the channel counts of --mean/--std are checked after it: above).
    cli = run_cli_subprocess(str(cnn_source), "-o", str(out / "m.tflite"), "--author", " ", "--no-validate")
    assert cli.exit_code == 2, cli.stderr
    assert "--author is empty" in cli.stderr and "Traceback" not in cli.stderr
    assert list(out.iterdir()) == []


@pytest.mark.slow  # two int8 exports: about 20 s here under load
def test_edgetpu_export_reattaches_metadata_to_the_compiled_model(tmp_path, cnn_source, monkeypatch):
    """With a compiler (a stand-in at the process boundary: it copies the model it is given, which
    carries no metadata yet) the compiled model gets the metadata back; without one, the .tflite
    alone carries it and the report says the model was not compiled."""
    from cli_harness import FAKE_COMPILER_PROLOGUE, write_fake_compiler

    from edge_export.artifacts.model_metadata import model_has_metadata

    labels = tmp_path / "labels.txt"
    labels.write_bytes(LABELS.encode("utf-8"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_fake_compiler(bin_dir, FAKE_COMPILER_PROLOGUE + 'echo "Model compiled successfully in 1 ms."\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = edge_export.export(
        cnn_source, output=tmp_path / "tpu.tflite", target="edgetpu", quant_backend="flatbuffer", labels=str(labels),
        mean=(0.5,), std=(0.25,), model_name="tpu", validate=False,
    )
    compiled = tmp_path / "tpu_edgetpu.tflite"
    assert result.run_report.target.compiler.result.compiled
    assert result.report["metadata"]["written_to"] == [str(result.tflite_path), str(compiled)]
    for path in (result.tflite_path, compiled):
        data = path.read_bytes()
        assert model_has_metadata(data) and misaligned_buffers(data) == []
        assert _raw_metadata(data).name == b"tpu"
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            assert archive.read("labels.txt") == labels.read_bytes()
    # uint8 I/O (the Edge TPU's): the input metadata records the uint8 range, not float bounds.
    image = _raw_metadata(compiled.read_bytes()).subgraphMetadata[0].inputTensorMetadata[0]
    assert (list(image.stats.min), list(image.stats.max)) == ([0.0], [255.0])

    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    absent = edge_export.export(
        cnn_source, output=tmp_path / "no_compiler.tflite", target="edgetpu", quant_backend="flatbuffer",
        labels=str(labels), validate=False,
    )
    assert not absent.run_report.target.compiler.result.compiled
    assert "not on PATH" in absent.run_report.target.compiler.result.reason
    assert absent.report["metadata"]["written_to"] == [str(absent.tflite_path)]
    assert not (tmp_path / "no_compiler_edgetpu.tflite").exists()


def test_no_metadata_keeps_labels_for_parity_only(tmp_path, cnn_source):
    from edge_export.artifacts.model_metadata import model_has_metadata

    labels = tmp_path / "labels.txt"
    labels.write_bytes(LABELS.encode("utf-8"))
    result = edge_export.export(cnn_source, output=tmp_path / "m.tflite", labels=str(labels), samples=2, write_metadata=False)
    assert result.exit_code == 0
    assert not model_has_metadata(result.tflite_path.read_bytes()) and "metadata" not in result.report
    assert result.report["validation"]["outputs"][0]["kind_source"] == "labels"
    _refused(tmp_path, cnn_source, "--model-name and --no-metadata contradict", model_name="x", write_metadata=False)
