"""--strip-names: a smaller file that computes exactly the same, and a clear refusal of per-layer
parity on it."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from cli_harness import read_report
from model_zoo import small_cnn

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def cnn_pt2(tmp_path_factory):
    src = tmp_path_factory.mktemp("strip") / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    return src


@pytest.fixture(scope="module")
def cli_export(cnn_pt2, tmp_path_factory):
    """`edge-export cnn.pt2 --quantize MODE --per-layer [--strip-names]`, run once per module through
    the caller's run_cli (the first test to ask runs it, in any order): the fp32 stripped file serves
    both the size test and the validate test. Returns (path, CliResult); a test that writes beside
    the file works on a copy."""
    done = {}

    def export(run_cli, mode: str, strip: bool):
        if (mode, strip) not in done:
            path = tmp_path_factory.mktemp(f"strip_{mode}") / ("stripped.tflite" if strip else "named.tflite")
            args = ("--quantize", mode, "--quant-backend", "flatbuffer") if mode == "int8" else ("--quantize", mode)
            done[mode, strip] = path, run_cli(cnn_pt2, *args, "--per-layer", *(("--strip-names",) if strip else ()), "-o", path)
        return done[mode, strip]

    return export


def _outputs(path, n=3):
    from edge_export.runtime.interpreter import TFLiteRunner

    runner = TFLiteRunner(path.read_bytes())
    rng = np.random.default_rng(5)
    return [runner.run([rng.standard_normal((1, 3, 16, 16)).astype(np.float32)])[0] for _ in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["none", "int8"])
def test_stripped_file_is_smaller_and_computes_the_same(run_cli, cli_export, mode):
    from edge_export.flatbuffer import read_flatbuffer

    named, named_res = cli_export(run_cli, mode, strip=False)
    assert named_res.exit_code == 0
    stripped, res = cli_export(run_cli, mode, strip=True)
    assert res.exit_code == 0, res.stderr

    fb_named, fb_stripped = read_flatbuffer(named.read_bytes()), read_flatbuffer(stripped.read_bytes())
    inner = [t for t in fb_stripped.tensors if t.index not in (*fb_stripped.inputs, *fb_stripped.outputs)]
    assert inner and all(t.name == "" for t in inner)
    # The inputs and outputs keep their names, and nothing but the names changed.
    assert [t.name for t in fb_stripped.input_tensors] == [t.name for t in fb_named.input_tensors]
    assert [t.name for t in fb_stripped.output_tensors] == [t.name for t in fb_named.output_tensors]
    assert fb_stripped.op_counts == fb_named.op_counts
    assert [(t.shape, t.dtype, t.quant) for t in fb_stripped.tensors] == [(t.shape, t.dtype, t.quant) for t in fb_named.tensors]
    assert stripped.stat().st_size < 0.9 * named.stat().st_size
    for a, b in zip(_outputs(named), _outputs(stripped)):
        np.testing.assert_array_equal(a, b)

    rep = read_report(stripped)
    assert rep["export"]["strip_names"] is True
    assert rep["export"]["size_bytes_with_names"] == named.stat().st_size
    assert rep["flatbuffer"]["size_bytes"] == stripped.stat().st_size
    # Checks ran on the named model, so per-layer rows still name their modules.
    assert rep["per_layer"]["layers"] and all(row["module_path"] for row in rep["per_layer"]["layers"])
    assert read_report(named)["export"]["strip_names"] is False


def test_per_layer_validate_on_a_stripped_file_is_refused_clearly(tmp_path, run_cli, cnn_pt2, cli_export):
    shared, exported = cli_export(run_cli, "none", strip=True)  # the size test's fp32 stripped file
    assert exported.exit_code == 0
    for sibling in shared.parent.glob("stripped.*"):  # validate writes its report beside the model
        shutil.copy2(sibling, tmp_path / sibling.name)
    stripped = tmp_path / "stripped.tflite"
    res = run_cli("validate", stripped, "--reference", cnn_pt2, "--per-layer")
    assert res.exit_code == 2
    assert "--strip-names" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "stripped.validate.report.json").exists()
    # Output-level parity does not need the names.
    res = run_cli("validate", stripped, "--reference", cnn_pt2)
    assert res.exit_code == 0, res.stderr
