"""rewrite_patch_folds_as_reshapes_pass: MobileViTv2's unfold/fold over non-overlapping patches
runs in LiteRT (fold's scatter did not load: exit 3) with the same values; overlapping ones are left."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from edge_export.passes.fx import rewrite_patch_folds_as_reshapes_pass


class Patches(torch.nn.Module):
    """MobileViTv2's unfolding, a mix of the patches, and folding back (transformers' MobileViTV2Layer)."""

    def __init__(self, kernel: tuple[int, int] = (2, 2), stride: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.kernel, self.stride = kernel, stride or kernel
        self.mix = torch.nn.Conv2d(8 * kernel[0] * kernel[1], 8 * kernel[0] * kernel[1], 1)

    def forward(self, x):
        patches = F.unfold(x, kernel_size=self.kernel, stride=self.stride)  # [N, C*kh*kw, L]
        mixed = self.mix(patches.unsqueeze(-1)).squeeze(-1)
        return F.fold(mixed, output_size=x.shape[-2:], kernel_size=self.kernel, stride=self.stride)


def _x(shape=(1, 8, 12, 16)) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _aten(graph) -> set:
    return {n.target for n in graph.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("kernel, shape", [((2, 2), (1, 8, 12, 16)), ((3, 4), (1, 8, 12, 16)), ((2, 2), (3, 8, 4, 6))],
                         ids=["2x2", "3x4", "batch-of-3"])
def test_non_overlapping_patches_become_reshapes_with_the_same_values(kernel, shape):
    module, x = Patches(kernel).eval(), _x(shape)
    graph = torch.export.export(module, (x,)).module()
    rewrites = rewrite_patch_folds_as_reshapes_pass(graph)
    assert [r.kind for r in rewrites] == ["unfold as reshapes", "fold as reshapes"]
    assert not _aten(graph) & {torch.ops.aten.im2col.default, torch.ops.aten.col2im.default}
    with torch.no_grad():
        assert torch.equal(graph(x), module(x))


def test_the_rewritten_model_runs_in_litert():
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner

    module, x = Patches().eval(), _x()
    graph = torch.export.export(module, (x,)).module()
    rewrite_patch_folds_as_reshapes_pass(graph)
    model = read_flatbuffer(convert_module(graph, (x,)))
    assert "STABLEHLO_SCATTER" not in {op.opcode for op in model.operators}
    (got,) = TFLiteRunner(model).run([x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(got, module(x).numpy(), atol=1e-5)


@pytest.mark.parametrize("kernel, stride, shape", [((2, 2), (1, 1), (1, 8, 12, 16)), ((2, 2), (2, 2), (1, 8, 13, 16))],
                         ids=["overlapping", "size-not-divided"])
def test_patches_that_overlap_or_leave_a_remainder_are_left_alone(kernel, stride, shape):
    module, x = Patches(kernel, stride).eval(), _x(shape)
    graph = torch.export.export(module, (x,)).module()
    code = graph.code
    assert rewrite_patch_folds_as_reshapes_pass(graph) == ()
    assert graph.code == code
