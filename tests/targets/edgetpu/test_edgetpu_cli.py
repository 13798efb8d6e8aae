"""`edge-export MODEL --target edgetpu` end to end on MobileNetV2- and ResNet-style classifiers given
as an ExportedProgram archive, a pickled nn.Module and a `package.module:attr` reference.

Every source must come out fully integer, predicted 100% on the Edge TPU in one segment, with uint8
I/O and passing parity; the compiler is absent here (the report says so), and a fake
`edgetpu_compiler` script stands in for it at the process boundary once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cli_harness import read_report
from edgetpu_cli_models import FACTORIES
from edgetpu_helpers import FAKE_COMPILER_PROLOGUE, write_fake_compiler

HERE = Path(__file__).resolve().parent
SHAPE = (1, 3, 32, 32)
# Few samples keep the six exports fast; the mapping does not depend on how many. One backend, not
# auto's two (auto's choice for the Edge TPU is tested in tests/quantization): these test the sources.
FAST = ("--calibration-samples", "8", "--samples", "4", "--quant-backend", "flatbuffer")


def _source(kind: str, arch: str, tmp_path: Path) -> list[str]:
    """The CLI arguments naming the model in the given form."""
    if kind == "module_ref":
        return [f"edgetpu_cli_models:{FACTORIES[arch].__name__}", "--input-shape", ",".join(map(str, SHAPE))]
    model = FACTORIES[arch]()
    if kind == "pt2":
        path = tmp_path / f"{arch}.pt2"
        torch.export.save(torch.export.export(model, (torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)),)), path)
        return [str(path)]
    path = tmp_path / f"{arch}.pt"
    torch.save(model, path)
    return [str(path), "--trust-pickle", "--input-shape", ",".join(map(str, SHAPE))]


def _assert_maps_fully(report: dict) -> None:
    tpu = report["target"]["edgetpu"]
    assert tpu["summary"].endswith("(100%), 1 TPU segment(s).")
    assert report["quantization"]["fully_integer"] is True
    io = report["quantization"]["io"]
    assert {x["dtype"] for x in io} == {"uint8"}
    for x in io:
        assert x["scale"] > 0 and 0 <= x["zero_point"] <= 255
    assert report["validation"]["status"] == "passed" and report["verdict"] == "passed"


@pytest.fixture
def importable_models(monkeypatch):
    # The CLI imports `edgetpu_cli_models` (references, pickles) from sys.path, as a user's would be.
    monkeypatch.syspath_prepend(str(HERE))


# Each source kind with each architecture maps fully (measured); the test runs four of the six
# combinations to stay fast, so that every source and every architecture is covered.
@pytest.mark.slow
@pytest.mark.parametrize(("kind", "arch"), [("pt2", "resnet"), ("pickle", "resnet"), ("module_ref", "mobilenet_v2")])
def test_standard_classifiers_map_fully_from_every_source(run_cli, tmp_path, importable_models, kind, arch, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no edgetpu_compiler there: the missing-compiler path
    out = tmp_path / "out" / f"{arch}.tflite"
    result = run_cli(*_source(kind, arch, tmp_path), "--target", "edgetpu", "-o", out, *FAST)
    assert result.exit_code == 0, result.stdout + result.stderr
    report = read_report(out)
    _assert_maps_fully(report)
    compiler = report["target"]["compiler"]
    assert compiler["compiled"] is False and "edgetpu_compiler" in compiler["reason"]
    assert "not compiled" in result.stdout
    assert not out.with_name(f"{arch}_edgetpu.tflite").exists()


_FAKE_COMPILER_BODY = FAKE_COMPILER_PROLOGUE + """\
echo "Edge TPU Compiler version 16.0.384591198"
echo "Model compiled successfully in 12 ms."
echo "Number of Edge TPU subgraphs: 1"
"""


@pytest.mark.slow
def test_mobilenet_v2_pt2_with_a_fake_compiler_writes_the_compiled_model_beside_it(run_cli, tmp_path, importable_models):
    (tmp_path / "bin").mkdir()
    compiler = write_fake_compiler(tmp_path / "bin", _FAKE_COMPILER_BODY)
    out = tmp_path / "out" / "tiny.tflite"
    result = run_cli(
        *_source("pt2", "mobilenet_v2", tmp_path), "--target", "edgetpu", "-o", out,
        "--edgetpu-compiler", compiler, *FAST,
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    compiled = out.with_name("tiny_edgetpu.tflite")
    # The fake compiler copies its input: the compiled file holds exactly the exported model.
    assert compiled.is_file() and compiled.read_bytes() == out.read_bytes()
    report = read_report(out)
    _assert_maps_fully(report)
    assert report["target"]["compiler"]["compiled"] is True
    assert report["target"]["compiler"]["exit_code"] == 0
    assert report["target"]["compiler"]["output"]["num_subgraphs"] == 1
