"""The models of issue 24's "Done when", exported by the CLI: a top-k head on cpu
and gpu, an EfficientNet-style covering pool, a Hugging Face ViT on gpu (one partition), the
refusal (exit 2) and allocation failure (exit 3) that name the module, and int8 exports of a -inf
causal mask before a softmax and of a GRU."""

from __future__ import annotations

import pytest
from cli_harness import read_report, run_cli_subprocess

MODELS = '''
import torch

class TopkHead(torch.nn.Module):
    """The post-processing of a classifier or detector: scores, their top k, a sorted shortlist."""
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 32)

    def forward(self, x):
        scores = self.fc(x)
        return torch.topk(scores, 5).values, torch.sort(scores, descending=True).values[:, :3]

class EfficientNetHead(torch.nn.Module):
    """Hugging Face EfficientNet's pooling: nn.AvgPool2d(hidden_dim, ceil_mode=True) on a 7x7 map."""
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 64, 3, padding=1)
        self.pooler = torch.nn.AvgPool2d(2560, ceil_mode=True)

    def forward(self, x):
        return self.pooler(self.conv(x)).flatten(1)

class Accumulate(torch.nn.Module):
    def forward(self, x):
        return torch.zeros(2, 8).scatter_add(1, torch.tensor([[0, 2, 1, 3]]).expand(2, 4), x[:, :4])

class ScatterHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.accumulate = Accumulate()

    def forward(self, x):
        return self.accumulate(self.fc(x))

class HugePad(torch.nn.Module):
    """A padding that makes a tensor larger than LiteRT can allocate (2.3 GiB)."""
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 128, 1)
        self.pad = torch.nn.ZeroPad2d(1100)

    def forward(self, x):
        return self.pad(self.conv(x)).mean((2, 3))

class CausalSoftmax(torch.nn.Module):
    """An additive causal mask of zeros and -inf (torch.tril(ones).log()), then a softmax."""
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return (self.fc(x) + torch.tril(torch.ones(8, 8)).log()).softmax(-1)

class Gru(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(8, 16, batch_first=True)

    def forward(self, x):
        return self.gru(x)

def vit():
    from testing_models import hf_vit_encoder

    # 2 layers on 64x64 (17 tokens): the class token's expand is the same BROADCAST_TO as at 224
    return hf_vit_encoder(layers=2, image_size=64)
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("device_graph")
    (folder / "device_graph_models.py").write_text(MODELS)
    return folder


@pytest.fixture
def models(folder, run_cli, monkeypatch):
    """The CLI run in this process from the models' folder (the worker has torch and litert-torch
    imported already: a fresh process would spend most of each test importing them again). One
    export is still run in a fresh process (the allocation failure, whose native failure must not
    touch the test process), and every refusal below is the CLI's own, exit code and message."""
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    return folder, run_cli


def _export(models, name, shape, *options, fresh_process=False):
    folder, run_cli = models
    out = folder / f"{name}_{'_'.join(o.strip('-') for o in options) or 'cpu'}.tflite"
    args = (f"device_graph_models:{name}", "--input-shape", shape, *options, "-o", out)
    res = run_cli_subprocess(*args, cwd=folder) if fresh_process else run_cli(*args)
    return res, out


def _no_traceback(res):
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_topk_and_sort_export_run_and_pass_parity(models, target):
    res, out = _export(models, "TopkHead", "2,16", "--target", target)
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    assert report["verdict"] == "passed" and report["validation"]["status"] == "passed"
    ops = report["flatbuffer"]["op_counts"]
    assert ops.get("TOPK_V2") == 2 and not [op for op in ops if op.startswith("STABLEHLO")]
    if target != "cpu":  # the cpu target writes no target section
        kinds = [r["kind"] for r in report["target"]["rewrites"]]
        assert kinds == ["torch.topk as TOPK_V2", "torch.sort as TOPK_V2"]


@pytest.mark.slow
def test_an_efficientnet_covering_pool_exports_as_a_mean_and_passes(models):
    res, out = _export(models, "EfficientNetHead", "1,3,7,7")
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    assert report["verdict"] == "passed" and report["validation"]["status"] == "passed"
    assert "MEAN" in report["flatbuffer"]["op_counts"] and "PAD" not in report["flatbuffer"]["op_counts"]


@pytest.mark.slow
def test_scatter_add_is_refused_before_conversion_naming_module_and_line(models):
    res, out = _export(models, "ScatterHead", "2,8")
    assert res.exit_code == 2
    text = " ".join(res.stderr.split())
    assert "scatter_add in module 'accumulate' (Accumulate), at" in text and "device_graph_models.py:" in text
    assert "one_hot" in text and "Converting" not in res.stderr  # refused before the conversion stage
    _no_traceback(res)
    assert not out.exists()


@pytest.mark.slow
def test_a_model_litert_cannot_allocate_is_exit_3_naming_the_module(models):
    res, out = _export(models, "HugePad", "1,3,7,7", "--no-validate", fresh_process=True)
    assert res.exit_code == 3
    text = " ".join(res.stderr.split())
    assert "cannot allocate" in text and "module 'pad' (ZeroPad2d)" in text and "[1, 2207, 2207, 128]" in text
    assert "truncated" not in text and "corrupted" not in text
    _no_traceback(res)
    assert not out.exists()


@pytest.mark.slow
def test_a_hugging_face_vit_is_one_gpu_partition(models):
    res, out = _export(models, "vit", "1,3,64,64", "--target", "gpu")
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    gpu = report["target"]["gpu"]
    assert gpu["num_partitions"] == 1 and gpu["fully_delegated"] is True
    assert "BROADCAST_TO" not in report["flatbuffer"]["op_counts"] and "SELECT_V2" not in report["flatbuffer"]["op_counts"]
    assert report["verdict"] == "passed" and report["validation"]["status"] == "passed"


@pytest.mark.slow
@pytest.mark.parametrize("name, shape", [("CausalSoftmax", "2,8,8"), ("Gru", "1,10,8")])
def test_int8_exports_a_masked_softmax_and_a_gru_fully_integer(models, name, shape):
    res, out = _export(models, name, shape, "--quantize", "int8")
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    assert report["verdict"] == "passed" and report["validation"]["status"] == "passed"
    assert report["quantization"]["fully_integer"] is True


@pytest.mark.slow
def test_a_gru_kept_unrolled_on_the_cpu_target_is_in_every_report(models):
    """--target cpu writes no target section of its own, but a declined rewrite still reaches the
    JSON (with the user's line), the Markdown and the terminal summary."""
    res, out = _export(models, "Gru", "1,10,8")
    assert res.exit_code == 0, res.stderr
    (gru,) = read_report(out)["target"]["rewrites"]
    assert gru["kind"] == "nn.GRU kept unrolled" and gru["declined"] is True and gru["module_path"] == "gru"
    assert "LiteRT has no fused GRU operator" in gru["why"]
    assert "device_graph_models.py:" in gru["source"] and gru["module_type"] == "GRU"
    from edge_export.output.text_safety import code_span, escape_markdown

    markdown = out.with_suffix(".report.md").read_text()
    line = f"- not rewritten {code_span('gru')} (GRU), at {code_span(gru['source'])}: {escape_markdown('nn.GRU kept unrolled')} ("
    assert line + escape_markdown("LiteRT has no fused GRU operator") in markdown
    assert f"not rewritten: nn.GRU kept unrolled in module 'gru' (GRU), at {gru['source']}: LiteRT has no fused" in res.stdout
