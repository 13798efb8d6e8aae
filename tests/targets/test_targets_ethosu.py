"""--target ethos-u55-128 (and the other Vela configurations): micro's rules plus Arm's Vela compiler
run for real (ethos-u-vela, installed through [dev]): where the operators land, Vela's figures, the
compiled model as an artifact, budgets on it, the C bundle embedding it, and the errors."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from cli_harness import _cli_command, validate_report

from edge_export.errors import UsageError
from edge_export.flatbuffer import load_flatbuffer
from edge_export.targets.micro.ethosu import (
    ETHOS_U_CONFIGS,
    VELA_INSTALL,
    CpuOperator,
    EthosUReport,
    VelaSummary,
)


def test_the_configurations_are_the_ones_vela_accepts():
    from ethosu.vela.architecture_features import Accelerator

    assert list(ETHOS_U_CONFIGS) == Accelerator.member_list()


def test_an_unknown_configuration_lists_the_known_ones():
    from edge_export.targets.base import get_target

    with pytest.raises(UsageError) as caught:
        get_target("ethos-u55-512")
    message = f"{caught.value} {caught.value.hint}"
    assert "not a known ethos-u configuration" in message
    assert all(config in message for config in ETHOS_U_CONFIGS) and "edgetpu" not in message


def test_budget_options_name_the_family_once():
    from edge_export.api import ExportOptions, resolve_target_options

    with pytest.raises(UsageError, match=r"--max-flash applies to --target micro or --target ethos-u55-128 \(any ethos-u target\) only"):
        resolve_target_options(ExportOptions.from_keywords(target="cpu", max_flash="1MiB"))


@pytest.fixture(scope="module")
def gated_export(tmp_path_factory):
    """The CNN with a division (testing_models.gated_ratio_cnn) for ethos-u55-128, with a flash
    budget the compiled model cannot meet (exit 1, artifacts kept)."""
    import edge_export
    from testing_models import gated_ratio_cnn

    folder = tmp_path_factory.mktemp("ethosu")
    example = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    result = edge_export.export(
        gated_ratio_cnn(), example_inputs=(example,), output=folder / "gated.tflite", target="ethos-u55-128",
        samples=2, max_flash="1KiB", max_ram="1MiB", emit_op_resolver=folder / "ops.h",
    )
    return result, validate_report(result.report)


def test_the_division_stays_on_the_cpu_blamed_on_its_module(gated_export):
    result, report = gated_export
    ethos = report["target"]["ethos_u"]
    int8 = load_flatbuffer(result.tflite_path)
    assert ethos["accelerator"] == "ethos-u55-128" and ethos["operators"] == len(int8.operators)
    assert [(op["opcode"], op["module"]) for op in ethos["cpu"]] == [("DIV", "ratio")]
    assert int8.operators[ethos["cpu"][0]["operator_index"]].opcode == "DIV"
    assert ethos["cpu_operators"] == 1 and ethos["npu_operators"] == len(int8.operators) - 1
    assert ethos["vela_cpu_operators"] == 1  # Vela's own count agrees
    assert "host interpreter" in ethos["parity_note"]


def test_the_compiled_model_and_vela_figures(gated_export):
    result, report = gated_export
    ethos = report["target"]["ethos_u"]
    vela_file = Path(report["artifacts"]["vela_tflite"])
    assert vela_file == result.tflite_path.with_name("gated_vela.tflite") == Path(ethos["vela_model"])
    compiled = load_flatbuffer(vela_file)
    # The NPU part is folded into ethos-u operators; the division is still a TFLite operator.
    assert compiled.op_counts.get("CUSTOM:ethos-u") == ethos["npu_subgraphs"] >= 1 and compiled.op_counts.get("DIV") == 1
    # Compiled from the model as written: the PyTorch names were stripped (Vela adds its own).
    assert not any("torch.nn" in t.name or "RatioGate" in t.name for t in compiled.tensors)
    summary = ethos["summary"]
    assert summary["accelerator"] == "Ethos_U55_128"
    assert summary["sram_bytes"] > 0 and summary["flash_bytes"] > 0 and summary["cycles"] > 0 and summary["macs"] > 0
    assert summary["inferences_per_second"] == pytest.approx(summary["clock_hz"] / summary["cycles"], rel=0.01)


def test_budgets_count_the_compiled_model(gated_export):
    result, report = gated_export
    budgets = report["target"]["budgets"]
    vela_bytes = Path(report["artifacts"]["vela_tflite"]).stat().st_size
    assert budgets["flash"]["used_bytes"] == vela_bytes > 1024 and budgets["exceeded"] == ["flash"]
    # RAM: Vela's SRAM plus the int8 arena, since the division runs on the CPU.
    arena = report["target"]["micro"]["arena_bytes"]
    assert budgets["ram"]["used_bytes"] == report["target"]["ethos_u"]["summary"]["sram_bytes"] + arena
    assert report["verdict"] == "failed" and result.run_report.exit_code == 1
    assert result.tflite_path.exists() and Path(report["artifacts"]["vela_tflite"]).exists()  # kept


def test_the_bundle_embeds_the_compiled_model(gated_export):
    _, report = gated_export
    bundle = report["target"]["micro"]["c_bundle"]
    folder = Path(bundle["folder"])
    source = (folder / f"{bundle['name']}_model_data.cc").read_text()
    array = bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", source.split("{", 1)[1]))
    assert array == Path(report["artifacts"]["vela_tflite"]).read_bytes()
    # Its arena constant holds Vela's SRAM plus the CPU division's tensors (the RAM budget's figure).
    from edge_export.targets.micro.bundle import arena_with_margin

    assert bundle["arena_size"] == arena_with_margin(report["target"]["budgets"]["ram"]["used_bytes"]) > bundle["arena_measured_bytes"]
    resolver = (folder / f"{bundle['name']}_op_resolver.h").read_text()
    assert "AddEthosU()" in resolver and "AddDiv()" in resolver and "AddConv2D()" not in resolver
    # --emit-op-resolver too registers the compiled model's operators
    ops = Path(report["artifacts"]["op_resolver"]).read_text()
    assert "AddEthosU()" in ops and "AddDiv()" in ops and "AddConv2D()" not in ops


def test_markdown_and_summary_show_the_split(gated_export):
    _, report = gated_export
    markdown = Path(report["artifacts"]["report_markdown"]).read_text()
    assert "### Ethos-U (ethos-u55-128" in markdown and "| DIV #3 | <code>ratio</code> |" in markdown


def test_markdown_section_on_a_hand_built_report():
    from report_fixtures import full_report

    from edge_export.reports.markdown import render_markdown
    from edge_export.reports.model import TargetSection

    summary = VelaSummary("Ethos_U55_128", "Ethos_U55_High_End_Embedded", "Shared_Sram", 500_000_000, 8192, 1856, 0, 10926, 45762.4, 109136)
    ethos = EthosUReport(
        "ethos-u55-128", "5.2.0", "out/m_vela.tflite", 5184, 8,
        (CpuOperator(3, "DIV", "m/Gate_ratio|x;2", "ratio|x"),), 2, 10, 1, summary,
    )
    report = replace(full_report(), target=TargetSection("ethos-u55-128", (), ethos_u=ethos))
    markdown = render_markdown(report)
    assert "### Ethos-U (ethos-u55-128, Vela 5\\.2\\.0)" in markdown
    assert "7 of 8 operators on the NPU (2 ethos-u operator(s)), 1 on the CPU" in markdown
    assert "| 8192 bytes | 1856 bytes | 0 bytes | 10926 | 45762 | 109136 | Ethos\\_U55\\_High\\_End\\_Embedded | Shared\\_Sram |" in markdown
    assert "| DIV #3 | <code>ratio\\|x</code> |" in markdown  # a model's text is escaped (a | would split the row)
    assert "cannot run on the host" in markdown


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["mobilenet_v2_like", "resnet_like"])
def test_benchmark_cnns_run_entirely_on_the_npu(model_name, tmp_path):
    import edge_export
    import testing_models

    model = testing_models.random_batchnorm_stats(getattr(testing_models, model_name)())
    example = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    result = edge_export.export(model, example_inputs=(example,), output=tmp_path / "m.tflite", target="ethos-u55-128", samples=2, no_emit_c=True)
    ethos = validate_report(result.report)["target"]["ethos_u"]
    assert ethos["cpu"] == [] and ethos["npu_operators"] == ethos["operators"] > 10 and ethos["npu_subgraphs"] == 1
    assert ethos["summary"]["sram_bytes"] > 0 and ethos["summary"]["flash_bytes"] > 0
    assert result.report["target"]["budgets"]["flash"]["used_bytes"] == (tmp_path / "m_vela.tflite").stat().st_size


def test_missing_vela_is_exit_2_with_the_install_command(tmp_path):
    """Vela hidden in a fresh process by a package of the same name that fails to import."""
    shim = tmp_path / "shim" / "ethosu"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    out = tmp_path / "out"
    env_path = os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [*_cli_command(), "testing_models:gated_ratio_cnn", "--input-shape", "1,3,16,16", "--target", "ethos-u55-128", "-o", str(out / "m.tflite")],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": env_path},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 2, proc.stderr
    assert VELA_INSTALL in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_micro_rules_apply_before_any_work():
    """Full integer int8 with int8 NHWC I/O and names stripped, as for micro; float modes refused."""
    from edge_export.api import ExportOptions, resolve_target_options

    options, notes = resolve_target_options(ExportOptions.from_keywords(target="ethos-u85-256"))
    assert options.quantization.quantize.value == "int8" and options.layout.io_dtype.value == "int8"
    assert options.layout.channels_last and options.outputs.strip_names
    assert notes[0] == "--target ethos-u85-256 implies --quantize int8 (full integer)"
    with pytest.raises(UsageError, match="runs only fully integer int8 models"):
        resolve_target_options(ExportOptions.from_keywords(target="ethos-u55-128", quantize="fp16"))
    with pytest.raises(UsageError, match="needs int8 model inputs and outputs"):
        resolve_target_options(ExportOptions.from_keywords(target="ethos-u55-128", io_dtype="uint8"))


def test_vela_failures_are_exit_3_with_its_message(tmp_path):
    """Vela itself, on bytes it cannot compile: its refusal is an export failure quoting it, and a
    crash of the process (a truncated flatbuffer segfaults it) is a native crash, both exit 3."""
    from edge_export.errors import ConversionError
    from edge_export.processes.isolation import NativeCrashError
    from edge_export.targets.micro.ethosu import run_vela

    with pytest.raises(ConversionError, match="Vela could not compile the model for ethos-u55-128 .*Compilation failed") as refused:
        run_vela(b"not a model at all", "ethos-u55-128")
    assert refused.value.exit_code == 3
    import edge_export
    from testing_models import small_cnn

    example = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    int8 = edge_export.export(small_cnn(), example_inputs=(example,), output=tmp_path / "cnn.tflite", target="micro",
                              validate=False, no_emit_c=True).tflite_path.read_bytes()
    with pytest.raises(NativeCrashError, match="Vela crashed") as crashed:
        run_vela(int8[: len(int8) // 2], "ethos-u55-128")
    assert crashed.value.exit_code == 3 and crashed.value.stage == "Vela compilation"
