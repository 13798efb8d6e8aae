"""`--emit-test-vectors` and `validate --test-vectors`: the parity inputs as the .tflite takes them,
PyTorch's outputs and the thresholds, and a re-check of a model against them without PyTorch."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from cli_harness import validate_report
from model_zoo import small_cnn

import edge_export
from edge_export.errors import UsageError

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


@dataclass(frozen=True)
class Exported:
    source: Path
    fp32: Path
    int8: Path  # int8 I/O, NHWC (--channels-last)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Exported:
    folder = tmp_path_factory.mktemp("vectors")
    source = folder / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), source)
    built = Exported(source, folder / "cnn.tflite", folder / "cnn_int8.tflite")
    # fp32 through the CLI (its flags reach the API), int8 through the API
    from edge_export.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["export", str(source), "-o", str(built.fp32), "--emit-test-vectors", "--test-vectors-count", "4", "--quiet"])
    assert exited.value.code == 0
    result = edge_export.export(
        source, output=built.int8, emit_test_vectors=True, quantize="int8", quant_backend="flatbuffer", io_dtype="int8", channels_last=True
    )
    assert result.exit_code == 0
    return built


def vectors_of(tflite: Path) -> Path:
    return tflite.with_name(tflite.stem + ".testdata.npz")


def report_of(tflite: Path, kind: str = "report") -> dict:
    return validate_report(json.loads(tflite.with_name(f"{tflite.stem}.{kind}.json").read_text()))


def test_fp32_vectors_hold_the_example_input_and_pytorchs_output(exported):
    report = report_of(exported.fp32)
    assert report["artifacts"]["test_vectors"] == str(vectors_of(exported.fp32))
    with np.load(vectors_of(exported.fp32), allow_pickle=False) as npz:
        assert str(npz["format"]) == "edge-export-test-vectors" and int(npz["format_version"]) == 1
        assert str(npz["signature_key"]) == "serving_default"
        assert list(npz["input_names"]) == ["x"] and list(npz["output_names"]) == ["output_0"]
        assert list(npz["input_layouts"]) == ["NCHW"] and list(npz["output_layouts"]) == ["other"]
        assert npz["input_0"].shape == (4, 1, 3, 16, 16) and npz["input_0"].dtype == np.float32
        assert npz["expected_0"].shape == (4, 1, 10) and npz["expected_0"].dtype == np.float32
        # parity's first sample is the example input; its expected output is PyTorch's
        np.testing.assert_array_equal(npz["input_0"][0], X.numpy())
        with torch.no_grad():
            np.testing.assert_allclose(npz["expected_0"][0], small_cnn()(X).numpy(), rtol=0, atol=1e-6)
        assert list(npz["output_kinds"]) == ["regression"] and list(npz["output_kind_sources"]) == ["default"]
        # the regression output's gates, as the report used them; the others not gated (NaN)
        gates = dict(zip(npz["threshold_names"], npz["output_thresholds"][0]))
    used = report["validation"]["thresholds"]
    assert gates["atol"] == used["atol"] == 1e-4 and gates["min_sqnr_db"] == used["min_sqnr_db"] == 60.0
    assert np.isnan(gates["min_cosine"]) and np.isnan(gates["min_top1"])


def test_int8_vectors_are_quantized_and_channels_last_as_the_model_takes_them(exported):
    from edge_export.flatbuffer import load_flatbuffer
    from edge_export.runtime.interpreter import quantize_array

    model_input = load_flatbuffer(exported.int8).input_tensors[0]
    scale, zero_point = float(model_input.quant.scales[0]), int(model_input.quant.zero_points[0])
    with np.load(vectors_of(exported.int8), allow_pickle=False) as npz:
        assert npz["input_0"].dtype == np.int8 and npz["input_0"].shape == (4, 1, 16, 16, 3)
        assert list(npz["input_layouts"]) == ["NHWC"] and list(npz["input_dtypes"]) == ["int8"]
        assert npz["input_scales"][0] == scale and npz["input_zero_points"][0] == zero_point
        assert list(npz["output_dtypes"]) == ["int8"] and npz["output_scales"][0] > 0
        nhwc = X.numpy().transpose(0, 2, 3, 1)
        np.testing.assert_array_equal(npz["input_0"][0], quantize_array(nhwc, scale, zero_point, np.int8))
        assert npz["expected_0"].dtype == np.float32  # PyTorch's float output, not quantized


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_validate_with_test_vectors_passes_on_the_exported_model(exported, precision):
    tflite = getattr(exported, precision)
    result = edge_export.validate(tflite, test_vectors=vectors_of(tflite))
    assert result.exit_code == 0
    report = report_of(tflite, "validate.report")
    assert report["verdict"] == "passed" and report["validation"]["samples"] == 4
    assert report["export"]["test_vectors"] == str(vectors_of(tflite))
    assert report["model"] == {"source": str(vectors_of(tflite)), "kind": "test_vectors", "class": "torch.export.ExportedProgram"}
    assert not any("sha256" in note for note in report["validation"]["notes"])
    if precision == "int8":
        assert report["inputs"][0]["layout"] == "NHWC" and report["app"]["inputs"][0]["dtype"] == "int8"


def reverse_weights(tflite: Path, out: Path) -> None:
    """The same model with the weights of its convolutions and fully connected layer in reverse
    order: same signature, same I/O quantization, different computation."""
    from ai_edge_litert import schema_py_generated as schema

    from edge_export.flatbuffer import load_flatbuffer
    from edge_export.passes.flatbuffer import run_flatbuffer_passes

    def reverse(model) -> bool:
        graph = model.subgraphs[0]
        layers = (schema.BuiltinOperator.CONV_2D, schema.BuiltinOperator.FULLY_CONNECTED)
        for op in graph.operators:
            if model.operatorCodes[op.opcodeIndex].builtinCode not in layers:
                continue
            weights = graph.tensors[op.inputs[1]]
            dtype = {schema.TensorType.FLOAT32: np.float32, schema.TensorType.INT8: np.int8}[weights.type]
            buffer = model.buffers[weights.buffer]
            values = np.frombuffer(np.asarray(buffer.data, dtype=np.uint8).tobytes(), dtype=dtype)
            buffer.data = np.frombuffer(np.ascontiguousarray(values[::-1]).tobytes(), dtype=np.uint8)
        return True

    out.write_bytes(run_flatbuffer_passes(load_flatbuffer(tflite), [reverse]).model.data)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_validate_with_test_vectors_fails_on_perturbed_weights(exported, precision, tmp_path, run_cli):
    tflite = getattr(exported, precision)
    perturbed = tmp_path / f"perturbed_{precision}.tflite"
    reverse_weights(tflite, perturbed)
    res = run_cli("validate", perturbed, "--test-vectors", vectors_of(tflite))
    assert res.exit_code == 1, res.stderr
    report = report_of(perturbed, "validate.report")
    assert report["verdict"] == "failed" and report["validation"]["outputs"][0]["passed"] is False
    assert "sqnr_db" in report["validation"]["worst"]["failed_checks"]
    assert any("sha256 differs" in note for note in report["validation"]["notes"])


def test_validate_with_test_vectors_through_both_runtimes(exported, tmp_path):
    result = edge_export.validate(
        exported.int8, test_vectors=vectors_of(exported.int8), runtime="both", report_prefix=tmp_path / "both"
    )
    assert result.exit_code == 0
    report = validate_report(json.loads((tmp_path / "both.report.json").read_text()))
    assert len(report["runtimes"]["results"]) == 2 and report["runtimes"]["agree"] is True


def test_threshold_options_tighten_the_stored_thresholds(exported, tmp_path):
    result = edge_export.validate(exported.fp32, test_vectors=vectors_of(exported.fp32), atol=1e-12, report_prefix=tmp_path / "tight")
    checks = {c["metric"]: c for c in result.report["validation"]["outputs"][0]["checks"]}
    assert checks["max_abs_error"]["threshold"] == 1e-12 and checks["sqnr_db"]["threshold"] == 60.0


# ---- refused: exit 2, nothing written -----------------------------------------------------------


def _rewrite_vectors(source: Path, target: Path, drop: str = "", **replace) -> Path:
    with np.load(source, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files if k != drop}
    arrays.update(replace)
    np.savez(target, **arrays)
    return target


def _huge_header_member(source: Path, target: Path) -> Path:
    """A copy whose input_0 declares a 4 TB array in a few bytes."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (1 << 20, 1 << 20)}
    member = __import__("io").BytesIO()
    np.lib.format.write_array_header_1_0(member, header)
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item.filename, member.getvalue() + b"\0" * 16 if item.filename == "input_0.npy" else zin.read(item))
    return target


BAD_FILES = {
    "text": (lambda src, t: (t.write_text("hello"), t)[1], "is not a usable test-vector file"),
    "other npz": (lambda src, t: (np.savez(t, x=np.zeros(3)), t)[1], "not one `--emit-test-vectors` wrote"),
    "missing key": (lambda src, t: _rewrite_vectors(src, t, drop="output_kinds"), "lacks the key(s) output_kinds"),
    "missing array": (lambda src, t: _rewrite_vectors(src, t, drop="expected_0"), "lacks the array(s) expected_0"),
    "pickled objects": (lambda src, t: _rewrite_vectors(src, t, model_class=np.array([object()], dtype=object)), "holds Python objects"),
    "huge header": (_huge_header_member, "declares"),
    "wrong names": (lambda src, t: _rewrite_vectors(src, t, input_names=np.array(["pixels"])), "have inputs pixels, but"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_test_vector_files_are_refused(exported, case, tmp_path, run_cli):
    make, message = BAD_FILES[case]
    bad = make(vectors_of(exported.fp32), tmp_path / "bad.npz")
    res = run_cli("validate", exported.fp32, "--test-vectors", bad, "--report", tmp_path / "out")
    assert res.exit_code == 2, res.stderr
    assert message in " ".join(res.stderr.split()) and "Traceback" not in res.stderr
    assert not list(tmp_path.glob("out.*"))


def test_vectors_of_another_model_are_refused(exported, tmp_path, run_cli):
    res = run_cli("validate", exported.int8, "--test-vectors", vectors_of(exported.fp32), "--report", tmp_path / "out")
    assert res.exit_code == 2
    assert "hold input x as float32 [1, 3, 16, 16], but" in " ".join(res.stderr.split())
    assert not list(tmp_path.glob("out.*"))


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--reference", "REF"], "--reference"),
        (["--per-layer"], "--per-layer"),
        (["--samples", "2"], "--samples"),
        (["--output-kind", "classification"], "--output-kind"),
    ],
)
def test_options_that_need_pytorch_contradict_test_vectors(exported, extra, named, tmp_path, run_cli):
    extra = [str(exported.source) if e == "REF" else e for e in extra]
    res = run_cli("validate", exported.fp32, "--test-vectors", vectors_of(exported.fp32), *extra, "--report", tmp_path / "out")
    assert res.exit_code == 2
    assert f"--test-vectors and {named} contradict each other" in " ".join(res.stderr.split())
    assert not list(tmp_path.glob("out.*"))


def test_validate_needs_a_reference_or_test_vectors(exported, tmp_path, run_cli):
    res = run_cli("validate", exported.fp32, "--report", tmp_path / "out")
    assert res.exit_code == 2 and "--reference" in res.stderr and "--test-vectors" in res.stderr


def test_emit_test_vectors_needs_the_parity_check(exported, tmp_path):
    with pytest.raises(UsageError, match="--emit-test-vectors needs the parity check"):
        edge_export.export(exported.source, output=tmp_path / "m.tflite", emit_test_vectors=True, validate=False)
    with pytest.raises(UsageError, match="--test-vectors-count 0 must be at least 1"):
        edge_export.export(exported.source, output=tmp_path / "m.tflite", emit_test_vectors=True, test_vectors_count=0)
    assert not list(tmp_path.iterdir())


def test_test_vectors_never_replace_an_input(exported, tmp_path):
    """-o chosen so that <stem>.testdata.npz is the calibration file: refused before any work."""
    calibration = tmp_path / "m.testdata.npz"
    np.savez(calibration, x=np.zeros((2, 1, 3, 16, 16), dtype=np.float32))
    before = calibration.read_bytes()
    with pytest.raises(UsageError, match=r"\(the test vectors \(--emit-test-vectors\)\) is the input .* \(--calibration-data\)"):
        edge_export.export(
            exported.source, output=tmp_path / "m.tflite", emit_test_vectors=True, quantize="int8", calibration_data=str(calibration)
        )
    assert calibration.read_bytes() == before and not (tmp_path / "m.tflite").exists()


def test_vectors_round_trip_and_keep_at_most_count_samples(exported, tmp_path):
    """build -> serialize -> load gives back the same arrays, names and thresholds; count caps the
    samples kept, and asking for more than parity checked keeps what there is."""
    from edge_export.flatbuffer import load_flatbuffer
    from edge_export.artifacts.testdata import build_reference_vectors, load_reference_vectors, serialize_vectors

    fb = load_flatbuffer(exported.fp32)
    parity = edge_export.validate(exported.fp32, test_vectors=vectors_of(exported.fp32), report_prefix=tmp_path / "r").run_report.validation
    rng = np.random.default_rng(3)
    feeds = [[rng.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(3)]
    references = [[rng.standard_normal((1, 10)).astype(np.float32)] for _ in range(3)]
    for count, kept in ((2, 2), (10, 3)):
        built = build_reference_vectors(
            fb, feeds, references, parity, channels_last_inputs=(), channels_last_outputs=(), count=count, model_class="M", tool_version="t"
        )
        path = tmp_path / f"v{count}.npz"
        path.write_bytes(serialize_vectors(built))
        loaded = load_reference_vectors(path)
        assert loaded.count == kept
        np.testing.assert_array_equal(loaded.inputs[0], np.stack([f[0] for f in feeds[:kept]]))
        np.testing.assert_array_equal(loaded.expected[0], np.stack([r[0] for r in references[:kept]]))
        assert loaded.input_tensors == built.input_tensors and loaded.output_tensors == built.output_tensors
        assert loaded.thresholds == built.thresholds and loaded.kinds == built.kinds
        assert (loaded.signature_key, loaded.model_class, loaded.model_sha256) == ("serving_default", "M", built.model_sha256)
