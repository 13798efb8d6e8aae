"""--target gpu: the GPU delegate prediction on real converted models, blame on the right module, the
analyzer cross-check in the report, and integer modes refused."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import edge_export
from cli_harness import read_report
from edge_export.flatbuffer import read_flatbuffer
from edge_export.targets.gpu.analyzer import parse_analyzer_output
from edge_export.targets.gpu.checks import check_gpu, estimate_macs
from edge_export.targets.gpu.report import AnalyzerCrossCheck
from edge_export.targets.gpu.rules import GPU_MAX_VERSIONS, GPU_RULES
from testing_models import InvertedResidual


# Module-level classes: litert-torch names tensors after the module path, and provenance reads no
# module out of a class defined inside a function (its name has <locals>).
class MobileNetV2Style(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6())
        self.blocks = nn.Sequential(InvertedResidual(8, 8, 1, 1), InvertedResidual(8, 16, 2, 6), InvertedResidual(16, 16, 1, 6))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


class SmallTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(32, 32)
        self.encoder = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.encoder(torch.relu(self.embed(x))).mean(dim=1))


class RunningTotal(nn.Module):
    """CUMSUM: not on the GPU delegate's published operator list."""

    def forward(self, x):
        return torch.cumsum(x, dim=1)


class WithCumsum(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.total = RunningTotal()
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        return self.out(self.total(self.fc(x)))


def _convert(module, example):
    import litert_torch

    from edge_export.processes.library_output import quiet_libraries

    torch.manual_seed(0)
    with quiet_libraries():
        return read_flatbuffer(litert_torch.convert(module.eval(), example).model_content())


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    built = {
        "mobilenet": (MobileNetV2Style().eval(), (torch.randn(1, 3, 32, 32),)),
        "transformer": (SmallTransformer().eval(), (torch.randn(1, 16, 32),)),
        "cumsum": (WithCumsum().eval(), (torch.randn(1, 8),)),
    }
    return {name: (module, _convert(module, example)) for name, (module, example) in built.items()}


def test_mobilenet_v2_style_runs_whole_on_the_gpu(models):
    module, model = models["mobilenet"]
    report = check_gpu(model, source_module=module)
    assert report.first_unsupported is None and report.fully_delegated, report.summary()
    assert report.num_partitions == 1 and report.share_ops_on_gpu == 1.0
    # compute: every conv and the head counted, all on the GPU
    assert report.total_macs > 100_000 and report.share_macs_on_gpu == 1.0
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"} <= {op.opcode for op in report.ops}


def test_transformer_is_partitioned_at_a_residual_add_blamed_on_the_encoder(models):
    module, model = models["transformer"]
    report = check_gpu(model, source_module=module)
    first = report.first_unsupported
    assert first is not None, report.summary()
    # The self-attention residual adds [1, 16, 32] to a [16, 32] attention output: a broadcast the
    # delegate's ADD does not take (CheckAddMulBroadcastCompatibility).
    assert first.opcode == "ADD" and "broadcast" in first.reason
    assert first.module_path == "encoder" and first.module_type == "TransformerEncoderLayer"
    assert 0.8 < report.share_ops_on_gpu < 1.0 and report.num_partitions >= 2
    # the attention's matmuls and the linears are still on the GPU: most compute is
    assert report.share_macs_on_gpu > 0.9
    assert "encoder" in report.summary()


def test_an_unsupported_op_is_blamed_on_its_module_and_source_line(models):
    module, model = models["cumsum"]
    report = check_gpu(model, source_module=module)
    first = report.first_unsupported
    assert first is not None and first.opcode == "CUMSUM"
    assert first.module_path == "total" and first.module_type == "RunningTotal"
    # the aten call and the line that made it (operator_origins), in the report's row too
    lines, start = inspect.getsourcelines(RunningTotal)
    call = f"{inspect.getsourcefile(RunningTotal)}:{start + next(i for i, t in enumerate(lines) if 'torch.cumsum' in t)}"
    assert first.aten == "aten.cumsum" and first.source == call
    assert "CUMSUM (from aten.cumsum) in module 'total' (RunningTotal), at " + call in report.summary()
    assert (report.ops[1].aten, report.ops[1].source) == ("aten.cumsum", call) and report.ops[0].aten is None
    from edge_export.output.text_safety import escape_markdown
    from edge_export.targets.gpu.report import GPU_REPORT_SECTION

    markdown = "\n".join(GPU_REPORT_SECTION.markdown(report, None, None))
    assert escape_markdown("CUMSUM (from aten.cumsum) in module 'total'") in markdown and "aten.cumsum" not in markdown
    # FC, then CUMSUM on the CPU, then FC: two GPU partitions (a CPU round trip between them)
    assert [op.partition for op in report.ops] == [0, None, 1]
    assert report.unsupported_ops() == {"CUMSUM": 1}
    assert report.largest_partition_ops == 1 and "only the largest" in report.summary()


def test_macs_follow_the_shapes(models):
    _, model = models["cumsum"]
    fcs = [op for op in model.operators if op.opcode == "FULLY_CONNECTED"]
    assert [estimate_macs(op, model) for op in fcs] == [8 * 8, 8 * 4]


def test_rules_are_for_listed_operators():
    assert GPU_RULES.opcodes <= set(GPU_MAX_VERSIONS)
    assert {"ADD", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "SOFTMAX", "MEAN", "HARD_SWISH"} <= set(GPU_MAX_VERSIONS)
    assert "CUMSUM" not in GPU_MAX_VERSIONS and "GELU" in GPU_MAX_VERSIONS  # GELU: gpu_compatibility.cc, ML Drift


def test_analyzer_text_is_read_and_disagreements_are_reported(models):
    text = "Subgraph#0 main(T#0) -> [T#5]\n  Op#0 FULLY_CONNECTED(T#0) -> [T#4]\n  Op#1 CUMSUM(T#4) -> [T#5]\nGPU COMPATIBILITY WARNING: Not supported op CUMSUM\n"
    assert parse_analyzer_output(text) == AnalyzerCrossCheck(True, "incompatible", (1,))
    assert parse_analyzer_output("Your model looks compatible with GPU delegate").verdict == "compatible"
    _, model = models["cumsum"]
    # an analyzer that calls the model compatible disagrees with a prediction that leaves CUMSUM out
    report = check_gpu(model, analyzer=AnalyzerCrossCheck(True, "compatible"))
    assert len(report.disagreements) == 1 and "#2 CUMSUM" not in report.disagreements[0] and "CUMSUM" in report.disagreements[0]
    # one that flags the same operator agrees
    assert check_gpu(model, analyzer=AnalyzerCrossCheck(True, "incompatible", (1,))).disagreements == ()
    # one that could not run adds a note, no disagreement
    assert check_gpu(model, analyzer=AnalyzerCrossCheck(False, None, note="missing")).disagreements == ()


def test_export_target_gpu_writes_the_prediction_and_the_analyzer_cross_check(tmp_path, models):
    module, _ = models["cumsum"]
    out = tmp_path / "cumsum.tflite"
    result = edge_export.export(module, example_inputs=(torch.randn(1, 8),), output=out, target="gpu", samples=2)
    assert result.exit_code == 0
    gpu = read_report(out)["target"]["gpu"]  # validated against the schema
    assert gpu["first_unsupported"]["module_path"] == "total" and gpu["num_partitions"] == 2
    analyzer = gpu["analyzer"]
    # The installed ai-edge-litert's analyzer runs here and calls the model compatible (its build
    # prints no per-operator GPU warnings), which the report lists as a disagreement.
    assert analyzer["available"] is True, analyzer
    if analyzer["verdict"] == "compatible":
        assert any("CUMSUM" in d for d in gpu["disagreements"])
    markdown = out.with_suffix(".report.md").read_text()
    assert "GPU delegate (predicted)" in markdown and "ai-edge-litert's GPU analyzer" in markdown


@pytest.mark.parametrize("mode", ["int8", "int16x8", "dynamic-int8"])
def test_target_gpu_with_an_integer_mode_is_exit_2(tmp_path, run_cli, mode):
    result = run_cli("model_zoo:small_cnn", "--input-shape", "1,3,16,16", "--target", "gpu", "--quantize", mode, "-o", tmp_path / "m.tflite")
    assert result.exit_code == 2, result.stderr
    assert "--target gpu runs float models" in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())


def test_fp16_weights_stay_on_the_gpu(tmp_path, models):
    module, _ = models["mobilenet"]
    out = tmp_path / "mnv2_fp16.tflite"
    result = edge_export.export(module, example_inputs=(torch.randn(1, 3, 32, 32),), output=out, target="gpu", quantize="fp16", validate=False)
    assert result.exit_code == 0
    gpu = read_report(out)["target"]["gpu"]
    # the float16 weights reach the convolutions through DEQUANTIZE ops, which the delegate folds
    assert "DEQUANTIZE" in {op["opcode"] for op in gpu["ops"]}
    assert gpu["fully_delegated"] and gpu["num_partitions"] == 1


def test_an_analyzer_that_crashes_is_reported_not_raised(models, monkeypatch):
    from edge_export.processes.isolation import CRASH_HOOK_ENV
    from edge_export.targets.gpu.analyzer import run_gpu_analyzer

    _, model = models["cumsum"]
    monkeypatch.setenv(CRASH_HOOK_ENV, "GPU analyzer cross-check")
    analyzer = run_gpu_analyzer(model)
    assert analyzer.available is False and analyzer.verdict is None and "failed" in analyzer.note
    report = check_gpu(model, analyzer=analyzer)
    assert report.disagreements == () and report.analyzer.note  # said, not hidden
