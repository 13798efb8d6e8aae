"""--max-flash / --max-ram on --target micro: sizes parsed up front, margins reported, an exceeded
budget is exit 1 with the artifacts kept and the largest consumers named."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_harness import validate_report

from edge_export.errors import UsageError
from edge_export.targets.micro.budgets import (
    check_budgets,
    largest_activations,
    largest_constants,
    parse_size,
)


@dataclass(frozen=True)
class MicroExport:
    source: Path  # the .pt2 the model came from
    tflite: Path
    report: dict
    run_report: object


@pytest.fixture(scope="module")
def micro_export(tmp_path_factory) -> MicroExport:
    """The small CNN exported once with --target micro and generous budgets (parity on 2 samples)."""
    import torch
    from model_zoo import small_cnn

    import edge_export

    folder = tmp_path_factory.mktemp("micro")
    source = folder / "cnn.pt2"
    example = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.export.save(torch.export.export(small_cnn(), (example,)), source)
    result = edge_export.export(source, output=folder / "cnn_micro.tflite", target="micro", samples=2, max_flash="1MiB", max_ram="256KiB",
        quant_backend="flatbuffer",  # what auto keeps for this model, without also running PT2E: budgets are the point
    )
    return MicroExport(source, result.tflite_path, validate_report(result.report), result.run_report)


@pytest.mark.parametrize(
    ("text", "size"),
    [("256KiB", 262144), ("1MiB", 1048576), ("300000", 300000), ("1.5MB", 1500000), ("256K", 262144), ("64 kB", 64000), (4096, 4096)],
)
def test_sizes_parse(text, size):
    assert parse_size(text, "--max-flash") == size


@pytest.mark.parametrize("text", ["lots", "256XB", "-5", "0", "1e6", "", "KiB"])
def test_bad_sizes_are_usage_errors(text):
    with pytest.raises(UsageError, match=r"--max-ram .* (is not a size|must be at least one byte)"):
        parse_size(text, "--max-ram")


def test_within_budget_passes_with_margins(micro_export):
    budgets = micro_export.report["target"]["budgets"]
    flash, ram = budgets["flash"], budgets["ram"]
    assert micro_export.report["verdict"] == "passed" and budgets["exceeded"] == []
    assert flash["used_bytes"] == micro_export.tflite.stat().st_size
    assert flash["margin_bytes"] == 1048576 - flash["used_bytes"] > 0
    assert ram["used_bytes"] == micro_export.report["target"]["micro"]["arena_bytes"] > 0
    assert ram["margin_bytes"] == 262144 - ram["used_bytes"] > 0
    # The largest weight (the second conv, 16x3x3x8 int8) leads the flash consumers, with its module.
    assert flash["largest"][0]["bytes"] == 16 * 3 * 3 * 8 and flash["largest"][0]["module"] == "features.3"
    markdown = Path(micro_export.report["artifacts"]["report_markdown"]).read_text()
    assert "### Flash and RAM budgets" in markdown and str(flash["margin_bytes"]) in markdown


def test_check_budgets_names_the_largest_consumers(micro_export):
    """The target-neutral check (an Ethos-U target passes Vela's figures the same way)."""
    from edge_export.flatbuffer import load_flatbuffer

    model = load_flatbuffer(micro_export.tflite)
    constants, activations = largest_constants(model), largest_activations(model)
    assert [c.bytes for c in constants] == sorted((c.bytes for c in constants), reverse=True)
    assert all(model.tensors[c.tensor_index].is_constant for c in constants)
    # The padded feature map (1x18x18x8 int8) is the largest activation, between PAD and the conv.
    top = activations[0]
    assert top.bytes == 18 * 18 * 8 and top.operators[0].startswith("PAD") and "CONV_2D" in top.operators[1]
    section = check_budgets(flash_bytes=5000, ram_bytes=3000, max_flash=4096, max_ram=4000, flash_consumers=constants, ram_consumers=activations)
    assert section.exceeded == ("flash",) and section.flash.margin_bytes == -904 and section.ram.margin_bytes == 1000
    assert "over the flash budget of 4096 bytes" in section.flash.message() and f"{constants[0].bytes} bytes" in section.flash.message()


def test_over_budget_is_exit_1_naming_the_consumers(micro_export, run_cli, tmp_path):
    out = tmp_path / "small.tflite"
    junit = tmp_path / "junit.xml"
    result = run_cli(micro_export.source, "--target", "micro", "--no-validate", "--max-flash", "2KiB", "--max-ram", "1000", "-o", out, "--junit", junit,
                     "--quant-backend", "flatbuffer")
    assert result.exit_code == 1, result.stderr
    assert out.exists()  # the artifacts are kept, like a parity failure
    report = validate_report(json.loads(out.with_suffix(".report.json").read_text()))
    assert report["verdict"] == "failed" and report["target"]["budgets"]["exceeded"] == ["flash", "ram"]
    assert "budget exceeded" in result.stderr and "over the flash budget of 2048 bytes" in result.stderr
    assert "module features.3" in result.stderr  # the largest weight's module
    assert "largest activation tensors" in result.stderr and "not an exact breakdown" in result.stderr
    assert "EXCEEDED" in result.stdout
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase") if c.get("classname") == "edge_export.budgets"}
    assert set(cases) == {"flash", "ram"} and all(c.find("failure") is not None for c in cases.values())


def test_an_exceeded_budget_fails_the_verdict_even_without_parity():
    from edge_export.reports.model import SkippedValidation, TargetSection, verdict_of

    over = TargetSection("micro", (), budgets=check_budgets(flash_bytes=10, ram_bytes=None, max_flash=5, max_ram=64))
    within = TargetSection("micro", (), budgets=check_budgets(flash_bytes=4, ram_bytes=None, max_flash=5, max_ram=64))
    assert over.failed_budgets == ("flash",) and over.budgets.ram is None  # no RAM figure: not checked
    assert verdict_of(SkippedValidation("--no-validate"), None, None, over) == "failed"
    assert verdict_of(SkippedValidation("--no-validate"), None, None, within) == "exported-unvalidated"


@pytest.mark.parametrize("args", [["--max-flash", "lots"], ["--max-ram", "12QB"]])
def test_bad_size_is_exit_2_before_loading(args, run_cli, tmp_path):
    # The model does not exist: the size is refused before anything is loaded.
    result = run_cli(tmp_path / "missing.pt2", "--target", "micro", *args, "-o", tmp_path / "m.tflite")
    assert result.exit_code == 2 and "is not a size" in result.stderr and "missing.pt2" not in result.stderr
    assert "Traceback" not in result.stderr and not list(tmp_path.iterdir())


def test_budgets_with_cpu_target_are_exit_2(run_cli, tmp_path):
    result = run_cli(tmp_path / "missing.pt2", "--max-flash", "256KiB", "-o", tmp_path / "m.tflite")
    assert result.exit_code == 2 and "--max-flash applies to --target micro or --target ethos-u55-128 (any ethos-u target) only" in " ".join(result.stderr.split())
    assert not list(tmp_path.iterdir())


def test_budgets_are_accepted_by_a_target_derived_from_micro():
    """The Ethos-U targets build on micro and inherit the budget options."""
    from edge_export.api import ExportOptions, resolve_target_options
    from edge_export.targets.base import register_target, unregister_target
    from edge_export.targets.micro.target import MicroTarget

    class DerivedMicroTarget(MicroTarget):
        name = "derived-micro-budgets"

    register_target(DerivedMicroTarget())
    try:
        options, _ = resolve_target_options(ExportOptions.from_keywords(target="derived-micro-budgets", max_flash="1.5MB", max_ram="64K"))
        assert (options.target_options.max_flash, options.target_options.max_ram) == (1_500_000, 65536)
    finally:
        unregister_target("derived-micro-budgets")


def test_a_fused_convs_weights_are_named_after_the_conv_not_its_relu(tmp_path):
    """Regression: a Conv-BN-ReLU block's fused CONV_2D names both the conv and the ReLU; the
    largest-constants list named the ReLU (features.2), which holds no weights to shrink."""
    import torch
    from torch import nn

    import edge_export
    from edge_export.flatbuffer import load_flatbuffer

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
    ).eval()
    result = edge_export.export(
        model, example_inputs=(torch.randn(1, 3, 8, 8),), output=tmp_path / "fused.tflite",
        quantize="int8", quant_backend="flatbuffer", validate=False, calibration_samples=8,
    )
    consumers = largest_constants(load_flatbuffer(result.tflite_path))
    weights = [c for c in consumers if len(c.shape) == 4]
    assert [c.module for c in weights] == ["3", "0"], consumers  # the convs, largest first
