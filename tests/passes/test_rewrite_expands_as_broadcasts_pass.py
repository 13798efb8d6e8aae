"""rewrite_expands_as_broadcasts_pass: MobileViTv2's ``relu(value) * context.expand_as(value)``
converts (it was exit 3), computes the same, and only expands that broadcasting replaces are dropped."""

from __future__ import annotations

import numpy as np
import torch

from edge_export.passes.fx import rewrite_expands_as_broadcasts_pass


class LinearSelfAttention(torch.nn.Module):
    """MobileViTv2's linear self-attention (transformers' MobileViTV2LinearSelfAttention), small."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.channels = channels
        self.qkv = torch.nn.Conv2d(channels, 1 + 2 * channels, 1)
        self.out = torch.nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        query, key, value = torch.split(self.qkv(x), [1, self.channels, self.channels], dim=1)
        context = (key * torch.softmax(query, dim=-1)).sum(-1, keepdim=True)
        return self.out(torch.relu(value) * context.expand_as(value))


class Expands(torch.nn.Module):
    """Expands broadcasting cannot replace: the result's shape comes from the expand."""

    def forward(self, x, row):
        grown = row.expand(3, 4) * row.expand(3, 4)  # both operands expanded: 3 rows only through them
        same = row.expand(3, 4)
        return grown + x, same * same  # x is [3, 4]: this add may drop its expand; same*same may not


def _example() -> tuple:
    return (torch.randn(1, 8, 4, 16, generator=torch.Generator().manual_seed(0)),)


def _targets(graph) -> list:
    return [n.target for n in graph.graph.nodes if n.op == "call_function"]


def test_the_attention_converts_and_computes_the_same():
    from edge_export.conversion.litert import convert_module
    from edge_export.errors import ConversionError
    from edge_export.runtime.interpreter import TFLiteRunner
    from edge_export.flatbuffer import read_flatbuffer

    module, example = LinearSelfAttention().eval(), _example()
    try:  # what the pass is for; when a litert-torch release converts it, the pass can go
        convert_module(module, example)
        raise AssertionError("litert-torch converts the expand_as now")
    except ConversionError as exc:
        assert "broadcast-compatible" in exc.message

    graph = torch.export.export(module, example).module()
    (rewrite,) = rewrite_expands_as_broadcasts_pass(graph)
    assert rewrite.kind == "expand dropped before an elementwise operation"
    assert torch.ops.aten.expand_as.default not in _targets(graph)
    with torch.no_grad():
        want = module(*example)
        assert torch.equal(graph(*example), want)
    model = read_flatbuffer(convert_module(graph, example))
    (got,) = TFLiteRunner(model).run([example[0].numpy()])
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_only_expands_that_set_no_shape_are_dropped():
    x, row = torch.randn(3, 4), torch.randn(1, 4)
    graph = torch.export.export(Expands(), (x, row)).module()
    before = _targets(graph).count(torch.ops.aten.expand.default)
    rewrites = rewrite_expands_as_broadcasts_pass(graph)
    # grown's operands: dropping one still broadcasts to [3, 4] against the other, so one goes;
    # same * same reads one expand twice and keeps it
    assert len(rewrites) == 1
    assert _targets(graph).count(torch.ops.aten.expand.default) == before - 1
    with torch.no_grad():
        for ours, theirs in zip(graph(x, row), Expands()(x, row)):
            assert ours.shape == theirs.shape and torch.equal(ours, theirs)


def test_a_graph_without_expands_is_left_as_it_is():
    graph = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)).module()
    code = graph.code
    assert rewrite_expands_as_broadcasts_pass(graph) == ()
    assert graph.code == code
