"""reshape_operands_to_one_rank_pass: a ViT-like model's residual ADDs of [T, D] and [1, T, D] (what
litert-torch writes) get one rank, so the GPU delegate is predicted to take the whole model as one
partition (it was 5), with the same values bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edge_export.passes.flatbuffer.reshape_operands_to_one_rank_pass import reshape_operands_to_one_rank_pass


class TinyViT(nn.Module):
    """A ViT: patch embedding, class token, position embedding, pre-norm encoder layers, head."""

    def __init__(self, dim: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 8, 8)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
            for _ in range(depth)
        )
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], 1) + self.pos
        for block in self.blocks:
            tokens = block(tokens)
        return self.head(self.norm(tokens)[:, 0])


class ScaledByTable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(5, 8))

    def forward(self, x):
        return torch.relu(x) * self.table


def _float_model(module, example):
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.passes.flatbuffer.device_graph import simplify_device_graph

    torch.manual_seed(0)
    return simplify_device_graph(read_flatbuffer(convert_module(module, example)))


def _mismatched(model) -> list:
    return [
        op for op in model.operators
        if op.opcode in ("ADD", "SUB", "MUL", "DIV")
        and len({len(model.tensors[i].shape) for i in op.inputs if len(model.tensors[i].shape) > 1}) > 1
    ]


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    module, example = TinyViT().eval(), (torch.randn(1, 3, 32, 32),)
    return module, example, _float_model(module, example)


def test_litert_torch_writes_residual_adds_of_two_ranks_without_the_pass(vit):
    from edge_export.targets.gpu.checks import check_gpu

    module, _, model = vit
    # what the pass is for; when litert-torch keeps one rank, the pass can go
    adds = _mismatched(model)
    assert len(adds) == 4 and {tuple(model.tensors[i].shape) for op in adds for i in op.inputs} == {(1, 17, 32), (17, 32)}
    report = check_gpu(model, source_module=module)
    assert report.num_partitions == 5 and "broadcasting [1, 17, 32] with [17, 32]" in report.summary()


def test_the_vit_is_one_gpu_partition_and_computes_the_same(vit):
    from edge_export.passes.flatbuffer.pipeline import run_flatbuffer_passes
    from edge_export.runtime.interpreter import Resolver, TFLiteRunner
    from edge_export.targets.gpu.checks import check_gpu

    module, example, model = vit
    result = run_flatbuffer_passes(model, (reshape_operands_to_one_rank_pass,))
    assert result.modified_by == ("reshape_operands_to_one_rank_pass",)
    rewritten = result.model
    assert _mismatched(rewritten) == []
    assert len(rewritten.operators) == len(model.operators) + 4  # one RESHAPE per residual ADD
    report = check_gpu(rewritten, source_module=module)
    assert report.num_partitions == 1 and report.fully_delegated, report.summary()
    feed = [example[0].numpy()]
    (before,) = TFLiteRunner(model, resolver=Resolver.REFERENCE).run(feed)
    (after,) = TFLiteRunner(rewritten, resolver=Resolver.REFERENCE).run(feed)
    np.testing.assert_array_equal(after, before)  # a RESHAPE moves no value


def _with_constant_of_rank_two(model):
    """``model`` (a MUL of [1, 5, 8] by a constant litert-torch stored as [1, 5, 8]) with the
    constant declared [5, 8], as other converters leave it: the same bytes, a lower rank."""
    from edge_export.flatbuffer import pack_model, read_flatbuffer, read_model

    mutable = read_model(model.data)
    sg = mutable.subgraphs[0]
    (mul,) = [op for op in sg.operators if mutable.operatorCodes[op.opcodeIndex].builtinCode == 18]  # MUL
    constant = next(int(i) for i in mul.inputs if sg.tensors[int(i)].buffer and mutable.buffers[sg.tensors[int(i)].buffer].data is not None)
    sg.tensors[constant].shape, sg.tensors[constant].shapeSignature = [5, 8], None
    return read_flatbuffer(pack_model(mutable))


def test_a_lower_rank_constant_is_viewed_in_the_higher_rank():
    from edge_export.passes.flatbuffer.pipeline import run_flatbuffer_passes
    from edge_export.runtime.interpreter import Resolver, TFLiteRunner

    torch.manual_seed(0)
    module, x = ScaledByTable().eval(), torch.randn(1, 5, 8)
    model = _with_constant_of_rank_two(_float_model(module, (x,)))
    assert len(_mismatched(model)) == 1
    rewritten = run_flatbuffer_passes(model, (reshape_operands_to_one_rank_pass,)).model
    assert _mismatched(rewritten) == []
    assert len(rewritten.operators) == len(model.operators)  # no RESHAPE for a constant: a second view of its buffer
    (got,) = TFLiteRunner(rewritten, resolver=Resolver.REFERENCE).run([x.numpy()])
    (want,) = TFLiteRunner(model, resolver=Resolver.REFERENCE).run([x.numpy()])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-6)


def test_a_model_of_one_rank_is_left_as_it_is():
    from edge_export.flatbuffer import read_model

    module = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model = _float_model(module, (torch.randn(2, 4),))
    assert reshape_operands_to_one_rank_pass(read_model(model.data)) is False


@pytest.mark.slow
def test_export_target_gpu_predicts_the_vit_as_one_partition(tmp_path, vit):
    import edge_export

    module, example, _ = vit
    result = edge_export.export(module, example_inputs=example, output=tmp_path / "vit.tflite", target="gpu", samples=2)
    assert result.exit_code == 0, result.report["verdict"]
    gpu = result.report["target"]["gpu"]
    assert gpu["num_partitions"] == 1 and gpu["fully_delegated"], gpu
