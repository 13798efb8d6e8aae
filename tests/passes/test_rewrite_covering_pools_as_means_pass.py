"""rewrite_covering_pools_as_means_pass: a pooling whose one window covers its input becomes a mean
(or amax) with PyTorch's own divisor, and converts without the PAD to the window's size."""

from __future__ import annotations

import pytest
import torch

from edge_export.passes.fx import rewrite_covering_pools_as_means_pass


class _Pool(torch.nn.Module):
    def __init__(self, pool: torch.nn.Module) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)
        self.pool = pool

    def forward(self, x):
        return self.pool(self.conv(x))


def _graph(pool, shape=(2, 3, 7, 5)):
    torch.manual_seed(0)
    module = _Pool(pool).eval()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    return module, x, torch.export.export(module, (x,)).module()


@pytest.mark.parametrize(
    "pool",
    [
        torch.nn.AvgPool2d(2560, ceil_mode=True),  # Hugging Face EfficientNet's head
        torch.nn.AvgPool2d((9, 6), ceil_mode=True, padding=(1, 0)),
        torch.nn.AvgPool2d((9, 6), ceil_mode=True, padding=(1, 0), count_include_pad=False),
        torch.nn.AvgPool2d((8, 12), stride=(8, 12), padding=(1, 1), ceil_mode=True),
        torch.nn.AvgPool2d(40, ceil_mode=True, divisor_override=7),
        torch.nn.AvgPool2d((7, 5)),  # exactly the input: no ceil_mode needed
        torch.nn.MaxPool2d(64, ceil_mode=True),
        torch.nn.MaxPool2d((8, 6), padding=(1, 1), ceil_mode=True),
    ],
    ids=lambda p: repr(p),
)
def test_covering_pools_become_reductions_with_the_same_values(pool):
    module, x, graph = _graph(pool)
    rewrites = rewrite_covering_pools_as_means_pass(graph)
    assert len(rewrites) == 1 and rewrites[0].module_path == "pool" and rewrites[0].module_type == type(pool).__name__
    targets = {n.target for n in graph.graph.nodes}
    assert not targets & {torch.ops.aten.avg_pool2d.default, torch.ops.aten.max_pool2d.default}
    torch.testing.assert_close(graph(x), module(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "pool",
    [
        torch.nn.AvgPool1d(100, ceil_mode=True),
        torch.nn.AvgPool1d(9, ceil_mode=True, padding=2, count_include_pad=False),
        torch.nn.AvgPool1d(10, ceil_mode=True, padding=3),
        torch.nn.MaxPool1d(64, ceil_mode=True),
    ],
    ids=repr,
)
def test_covering_1d_pools_become_reductions_with_the_same_values(pool):
    class Pool1d(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(3, 4, 1)
            self.pool = pool

        def forward(self, x):
            return self.pool(self.conv(x))

    torch.manual_seed(0)
    module, x = Pool1d().eval(), torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(1))
    graph = torch.export.export(module, (x,)).module()
    (rewrite,) = rewrite_covering_pools_as_means_pass(graph)
    assert rewrite.module_path == "pool"
    torch.testing.assert_close(graph(x), module(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("pool", [torch.nn.AvgPool2d(3, ceil_mode=True), torch.nn.MaxPool2d(2), torch.nn.AvgPool2d((7, 4))])
def test_windows_that_do_not_cover_the_input_are_left_alone(pool):
    module, x, graph = _graph(pool)
    assert rewrite_covering_pools_as_means_pass(graph) == ()
    assert torch.ops.aten.avg_pool2d.default in {n.target for n in graph.graph.nodes} or torch.ops.aten.max_pool2d.default in {
        n.target for n in graph.graph.nodes
    }


@pytest.mark.slow
def test_an_efficientnet_head_converts_to_a_mean_that_runs():
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner

    module, x, graph = _graph(torch.nn.AvgPool2d(2560, ceil_mode=True), shape=(1, 3, 7, 7))
    rewrite_covering_pools_as_means_pass(graph)
    model = read_flatbuffer(convert_module(graph, (x,)))
    assert "MEAN" in model.op_counts and "PAD" not in model.op_counts and "AVERAGE_POOL_2D" not in model.op_counts
    (out,) = TFLiteRunner(model).run([x.numpy()])
    torch.testing.assert_close(torch.from_numpy(out), module(x).detach(), atol=1e-5, rtol=1e-5)


def test_an_adaptive_max_pool_to_one_becomes_amax_and_converts():
    """litert-torch has no lowering for adaptive_max_pool2d: a global max pool was exit 3."""
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner

    module, x, graph = _graph(torch.nn.AdaptiveMaxPool2d(1))
    (rewrite,) = rewrite_covering_pools_as_means_pass(graph)
    assert rewrite.kind == "adaptive max pool to 1x1 as amax" and rewrite.module_path == "pool"
    assert torch.ops.aten.adaptive_max_pool2d.default not in {n.target for n in graph.graph.nodes}
    torch.testing.assert_close(graph(x), module(x))
    model = read_flatbuffer(convert_module(graph, (x,)))
    assert "REDUCE_MAX" in model.op_counts
    (out,) = TFLiteRunner(model).run([x.numpy()])
    torch.testing.assert_close(torch.from_numpy(out), module(x).detach(), atol=1e-5, rtol=1e-5)


def test_an_adaptive_max_pool_whose_indices_are_read_or_whose_output_is_larger_is_left_alone():
    class WithIndices(torch.nn.Module):
        def forward(self, x):
            values, indices = torch.nn.functional.adaptive_max_pool2d(x, 1, return_indices=True)
            return values, indices

    x = torch.randn(1, 3, 6, 6)
    graph = torch.export.export(WithIndices(), (x,)).module()
    assert rewrite_covering_pools_as_means_pass(graph) == ()
    _, _, graph = _graph(torch.nn.AdaptiveMaxPool2d(2))
    assert rewrite_covering_pools_as_means_pass(graph) == ()
