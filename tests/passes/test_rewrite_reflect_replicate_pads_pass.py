"""rewrite_reflect_replicate_pads_pass: a VAD-like 1-D reflect pad becomes MIRROR_PAD (litert-torch
wrote SELECT and GATHER_ND, which TFLite Micro cannot run), replicate pads SLICE + CONCATENATION;
the values are PyTorch's exactly, and the reflect-padded model runs on --target micro."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from edge_export.passes.fx import rewrite_reflect_replicate_pads_pass


class ReflectVAD(nn.Module):
    """A voice-activity detector's front: reflect-padded 1-D convolutions over a waveform's frames."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv1d(1, 8, 5), nn.Conv1d(8, 4, 3)

    def forward(self, x):
        y = torch.relu(self.conv1(F.pad(x, (2, 2), mode="reflect")))
        return self.conv2(F.pad(y, (1, 1), mode="reflect"))


class Replicates(nn.Module):
    """nn.ReplicationPad1d/2d and F.pad(mode="replicate") on a 3-D tensor, uneven pads."""

    def __init__(self) -> None:
        super().__init__()
        self.pad1, self.pad2 = nn.ReplicationPad1d((3, 1)), nn.ReplicationPad2d((2, 0, 1, 3))

    def forward(self, seq, image, volume):
        return self.pad1(seq) * 2, self.pad2(image) + 1, F.pad(volume, (1, 2, 3, 0), mode="replicate")


def _waveform() -> torch.Tensor:
    t = torch.linspace(0, 1, 64)
    return (torch.sin(2 * torch.pi * 7 * t) + 0.3 * torch.sin(2 * torch.pi * 23 * t)).reshape(1, 1, 64)


def _opcodes(model_bytes: bytes) -> list[str]:
    from edge_export.flatbuffer import read_flatbuffer

    return [op.opcode for op in read_flatbuffer(model_bytes).operators]


def test_litert_torch_lowers_a_1d_reflect_pad_to_select_without_the_pass():
    from edge_export.conversion.litert import convert_module

    # what the pass is for; when a litert-torch release writes MIRROR_PAD itself, the pass can go
    ops = _opcodes(convert_module(ReflectVAD().eval(), (_waveform(),)))
    assert "MIRROR_PAD" not in ops and {"SELECT", "GATHER_ND"} <= set(ops)


@pytest.fixture(scope="module")
def rewritten_vad():
    """The seeded ReflectVAD traced, through the pass, and that graph converted once: the MIRROR_PAD
    test and the GPU delegate test read the same model (a conversion takes seconds)."""
    from edge_export.conversion.litert import convert_module

    torch.manual_seed(0)
    module, example = ReflectVAD().eval(), (_waveform(),)
    graph = torch.export.export(module, example).module()
    rewrites = rewrite_reflect_replicate_pads_pass(graph)
    return module, example, graph, rewrites, convert_module(graph, example)


def test_reflect_pads_become_mirror_pad_and_compute_the_same(rewritten_vad):
    from edge_export.runtime.interpreter import TFLiteRunner

    module, example, graph, rewrites, model = rewritten_vad
    assert [r.kind for r in rewrites] == ["reflect pad as MIRROR_PAD"] * 2
    with torch.no_grad():
        want = module(*example)
        assert torch.equal(graph(*example), want)
    ops = _opcodes(model)
    assert ops.count("MIRROR_PAD") == 2 and not {"SELECT", "GATHER_ND", "LESS", "ABS"} & set(ops)
    (got,) = TFLiteRunner(model).run([example[0].numpy()])
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_an_unbatched_reflect_pad_is_rewritten_too():
    x = torch.randn(3, 10)
    graph = torch.export.export(nn.ReflectionPad1d((4, 1)), (x,)).module()
    assert len(rewrite_reflect_replicate_pads_pass(graph)) == 1
    assert torch.equal(graph(x), F.pad(x, (4, 1), mode="reflect"))


def test_replicate_pads_become_slices_and_concatenations():
    from edge_export.conversion.litert import convert_module
    from edge_export.runtime.interpreter import TFLiteRunner

    example = (torch.randn(1, 2, 8), torch.randn(1, 2, 5, 6), torch.randn(2, 5, 6))
    module = Replicates().eval()
    # without the pass: GATHER_ND, which the Edge TPU and the GPU delegate lack
    assert "GATHER_ND" in _opcodes(convert_module(module, example))
    graph = torch.export.export(module, example).module()
    assert [r.kind for r in rewrite_reflect_replicate_pads_pass(graph)] == ["replicate pad as edge slices"] * 3
    want = module(*example)
    for ours, theirs in zip(graph(*example), want):
        assert torch.equal(ours, theirs)
    model = convert_module(graph, example)
    assert set(_opcodes(model)) <= {"SLICE", "CONCATENATION", "MUL", "ADD", "TRANSPOSE", "RESHAPE"}
    for got, theirs in zip(TFLiteRunner(model).run([e.numpy() for e in example]), want):
        np.testing.assert_array_equal(got, theirs.numpy())  # moved values and one exact op each


def test_pads_it_does_not_handle_are_left_as_they_are():
    volume = torch.randn(1, 2, 4, 5, 6)
    graph = torch.export.export(nn.Sequential(nn.ReflectionPad3d(1), nn.ZeroPad2d(1)), (volume,)).module()
    code = graph.code
    assert rewrite_reflect_replicate_pads_pass(graph) == ()  # 3-D reflect, and a constant pad
    assert graph.code == code


@pytest.mark.slow
def test_the_reflect_padded_vad_runs_on_tflite_micro(tmp_path):
    import edge_export

    torch.manual_seed(0)
    result = edge_export.export(
        ReflectVAD().eval(), example_inputs=(_waveform(),), output=tmp_path / "vad.tflite", target="micro",
        samples=4, calibration_samples=16, no_emit_c=True,
    )
    assert result.exit_code == 0, result.report["verdict"]  # was exit 3: no TFLite Micro kernel for SELECT
    report = result.report
    assert report["validation"]["status"] == "passed"
    assert report["validation"]["runtime"] == "TFLite Micro host interpreter"
    assert report["quantization"]["fully_integer"] is True
    assert _opcodes((tmp_path / "vad.tflite").read_bytes()).count("MIRROR_PAD") == 2


class ReflectImage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)

    def forward(self, x):
        return self.conv(F.pad(x, (2, 1, 1, 2), mode="reflect"))


@pytest.mark.parametrize(("module", "example"), [(ReflectVAD(), (_waveform(),)), (ReflectImage(), (torch.randn(1, 2, 8, 8),))])
def test_the_edge_tpu_gets_reflect_pads_as_slices(module, example):
    from edge_export.conversion.litert import convert_module
    from edge_export.passes.fx import rewrite_ops_for_edgetpu_pass

    module = module.eval()
    graph = torch.export.export(module, example).module()
    rewrite_reflect_replicate_pads_pass(graph)  # every target's pass first, as prepare runs them
    prepared = rewrite_ops_for_edgetpu_pass(graph)
    assert {r.kind for r in prepared.rewrites} == {"reflect-pad-as-slices"}
    with torch.no_grad():
        assert torch.equal(prepared.module(*example), module(*example))
    ops = set(_opcodes(convert_module(prepared.module, example)))
    assert "MIRROR_PAD" not in ops and {"SLICE", "CONCATENATION"} <= ops  # both on the Edge TPU's list


def test_the_gpu_delegate_takes_the_reflect_mirror_pad_but_not_a_symmetric_one(rewritten_vad):
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.targets.gpu.checks import check_gpu

    *_, rewritten = rewritten_vad  # the VAD converted after the pass
    report = check_gpu(read_flatbuffer(rewritten))
    assert report.num_partitions == 1 and report.fully_delegated, report.summary()
    # litert-torch's own replicate pad by 1 is MIRROR_PAD SYMMETRIC, which the delegate refuses
    # (the pass writes slices instead)
    symmetric = read_flatbuffer(convert_module(nn.ReplicationPad2d(1).eval(), (torch.randn(1, 2, 6, 6),)))
    assert "SYMMETRIC" in check_gpu(symmetric).first_unsupported.reason
