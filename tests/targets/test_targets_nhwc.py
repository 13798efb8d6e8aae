"""NHWC all the way through (issue 24, item 3): a CNN pooling with ``x.mean((2, 3))`` and one with
``flatten`` after an adaptive average pool, exported from the command line for ``--target micro``
and ``--target ethos-u55-128``: no TRANSPOSE is left (the report says so), parity passes, and Vela
places every operator on the NPU (before the layout passes the mean model kept a TRANSPOSE before
its MEAN, and Vela left that MEAN on the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_harness import read_report
from testing_models import FlattenPoolCNN, MeanPoolCNN

from edge_export.flatbuffer import load_flatbuffer

pytestmark = pytest.mark.slow  # four int8 exports, two through Vela

SHAPE = (1, 3, 16, 16)
TARGETS = ("micro", "ethos-u55-128")


MODELS = {"mean": MeanPoolCNN, "flatten": FlattenPoolCNN}


def _cli(*args) -> int:
    from edge_export.cli import main

    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    return 0


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[tuple[str, str], tuple[int, Path]]:
    folder = tmp_path_factory.mktemp("nhwc")
    done = {}
    for name, cls in MODELS.items():
        torch.manual_seed(0)
        source = folder / f"{name}.pt2"
        torch.export.save(torch.export.export(cls().eval(), (torch.randn(SHAPE),)), source)
        for target in TARGETS:
            out = folder / target / f"{name}.tflite"
            code = _cli(source, "--target", target, "-o", out, "--calibration-samples", "16", "--samples", "4", "--no-emit-c", "--quiet")
            done[(name, target)] = (code, out)
    return done


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(MODELS))
def test_no_transpose_is_left_and_parity_passes(exports, name, target):
    code, out = exports[(name, target)]
    assert code == 0
    report = read_report(out)
    assert report["validation"]["status"] == "passed"
    assert report["flatbuffer"]["transposes"] == {"count": 0, "inner": 0, "sites": []}
    model = load_flatbuffer(out)
    assert "TRANSPOSE" not in model.op_counts, model.op_counts
    # the pooling reduces the NHWC feature map over H and W, straight from the last convolution
    (mean,) = [op for op in model.operators if op.opcode == "MEAN"]
    assert sorted(model.constant(mean.inputs[1]).tolist()) == [1, 2]
    assert model.producer_of(mean.inputs[0]).opcode == "CONV_2D"


@pytest.mark.parametrize("name", list(MODELS))
def test_vela_places_every_operator_on_the_npu(exports, name):
    code, out = exports[(name, "ethos-u55-128")]
    ethos = read_report(out)["target"]["ethos_u"]
    assert code == 0 and ethos["cpu"] == [] and ethos["cpu_operators"] == 0
    assert ethos["npu_operators"] == ethos["operators"] == len(load_flatbuffer(out).operators)
    assert ethos["vela_cpu_operators"] == 0


def test_the_markdown_report_lists_no_transpose(exports):
    _, out = exports[("mean", "micro")]
    markdown = Path(str(out.with_suffix("")) + ".report.md").read_text()
    assert "TRANSPOSE" not in markdown
