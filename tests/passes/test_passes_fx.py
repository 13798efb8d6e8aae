"""Each FX pass on a small exported graph: what it changes, and that the graph computes the same."""

from __future__ import annotations

import pytest
import torch
from passes_models import SHAPE, TwoBranches

from edge_export.conversion.litert import plan_channels_last
from edge_export.passes.fx import permute_io_channels_last_pass, restore_source_functions_pass, rewrite_ops_for_edgetpu_pass


class _EdgeTPUUnfriendly(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.pool = torch.nn.MaxPool2d(3, stride=1, padding=1)

    def forward(self, x):
        return torch.nn.functional.hardswish(self.pool(self.conv(x))).mean((2, 3))


def _exported(module, example):
    return torch.export.export(module.eval(), example).module()


@pytest.fixture
def converted():
    """The folder's model and input, without converting it (FX passes run before conversion)."""
    from types import SimpleNamespace

    torch.manual_seed(0)
    return SimpleNamespace(module=TwoBranches().eval(), example=(torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)),))


def test_restore_source_functions_pass_tags_untagged_nodes_once(converted):
    graph = _exported(converted.module, converted.example)
    assert restore_source_functions_pass(graph) > 0
    adds = [n for n in graph.graph.nodes if n.target is torch.ops.aten.add.Tensor]
    assert adds and all(n.meta["source_fn_stack"][0][1] is torch.add for n in adds)
    assert restore_source_functions_pass(graph) == 0  # nodes with metadata are left alone


def test_permute_io_channels_last_pass_takes_and_gives_nhwc(converted):
    graph = _exported(converted.module, converted.example)
    nhwc = permute_io_channels_last_pass(graph, plan_channels_last([4], [4]))
    (x,) = converted.example
    expected = converted.module(x)
    torch.testing.assert_close(nhwc(x.permute(0, 2, 3, 1)), expected.permute(0, 2, 3, 1))
    torch.testing.assert_close(graph(x), expected)  # a copy: the input graph is unchanged


def test_rewrite_ops_for_edgetpu_pass_replaces_unsupported_calls_with_the_same_function():
    module = _EdgeTPUUnfriendly().eval()
    example = (torch.randn(1, 3, 10, 10, generator=torch.Generator().manual_seed(0)),)
    graph = _exported(module, example)
    prep = rewrite_ops_for_edgetpu_pass(graph)
    assert {r.kind for r in prep.rewrites} == {"maxpool-replicate-padding", "hardswish-as-relu6", "global-mean-as-avgpool"}
    targets = {n.target for n in prep.module.graph.nodes}
    assert torch.ops.aten.max_pool2d.default not in targets and torch.ops.aten.hardswish.default not in targets
    torch.testing.assert_close(prep.module(*example), module(*example), atol=1e-5, rtol=1e-5)
    assert rewrite_ops_for_edgetpu_pass(prep.module).rewrites == ()  # nothing left to rewrite
