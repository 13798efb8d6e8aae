"""rewrite_sorts_as_topk_v2_pass: topk, sort, argsort and msort become tfl.topk_v2, compute the same
in PyTorch, and convert to TOPK_V2 that LiteRT runs (values-only topk was STABLEHLO_SORT; sort and
argsort did not convert)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_export.passes.fx import rewrite_sorts_as_topk_v2_pass


class Sorts(torch.nn.Module):
    """Every sort-like call the pass rewrites: other dimensions, smallest first, values only."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        s = self.fc(x)
        return (
            torch.topk(s, 3).values,  # values only: was STABLEHLO_SORT
            torch.topk(s, 2, dim=0, largest=False),
            torch.sort(s, dim=-1, descending=True).values,
            torch.sort(s, dim=0, stable=True)[1],
            torch.argsort(s, dim=-1),
            torch.msort(s),
            torch.topk((s * 10).int(), 2).values,  # integer input: was STABLEHLO_SORT
        )


def _flat(outputs):
    return [t for o in outputs for t in (o if isinstance(o, tuple) else (o,))]


@pytest.fixture(scope="module")
def rewritten():
    torch.manual_seed(0)
    module = Sorts().eval()
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
    graph = torch.export.export(module, (x,)).module()
    return module, x, graph, rewrite_sorts_as_topk_v2_pass(graph)


def test_every_sort_like_call_is_rewritten_and_computes_the_same(rewritten):
    module, x, graph, rewrites = rewritten
    assert [r.kind for r in rewrites] == [
        "torch.topk as TOPK_V2", "torch.topk as TOPK_V2", "torch.sort as TOPK_V2", "torch.sort as TOPK_V2",
        "torch.argsort as TOPK_V2", "torch.msort as TOPK_V2", "torch.topk as TOPK_V2",
    ]
    assert all(r.source and r.source.endswith(".py:" + r.source.rsplit(":", 1)[1]) for r in rewrites)
    aten = torch.ops.aten
    assert not {n.target for n in graph.graph.nodes} & {aten.topk.default, aten.sort.default, aten.sort.stable, aten.argsort.default, aten.msort.default}
    for got, want in zip(_flat(graph(x)), _flat(module(x))):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    assert rewrite_sorts_as_topk_v2_pass(graph) == ()  # nothing left


def test_ascending_sorts_of_unsigned_integers_are_left_alone():
    class Bytes(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x.to(torch.uint8)).values

    graph = torch.export.export(Bytes(), (torch.randn(2, 4),)).module()
    assert rewrite_sorts_as_topk_v2_pass(graph) == ()  # -x is no order reversal for uint8


@pytest.mark.slow
def test_ties_come_out_lower_index_first_in_litert_like_a_stable_sort():
    from edge_export.conversion.litert import convert_module
    from edge_export.runtime.interpreter import TFLiteRunner

    class Ties(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x, stable=True)[1], torch.sort(x, descending=True, stable=True)[1]

    x = torch.tensor([[2.0, 1.0, 2.0, 1.0, 3.0, 1.0]])
    graph = torch.export.export(Ties(), (x,)).module()
    rewrite_sorts_as_topk_v2_pass(graph)
    for got, want in zip(TFLiteRunner(convert_module(graph, (x,))).run([x.numpy()]), Ties()(x)):
        assert got.tolist() == want.tolist()


@pytest.mark.slow
def test_the_rewritten_graph_converts_to_topk_v2_and_runs_in_litert(rewritten):
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner

    module, x, graph, _ = rewritten
    model = read_flatbuffer(convert_module(graph, (x,)))
    # seven calls, six TOPK_V2: msort(s) is sort(s, dim=0), which the converter computes once
    assert model.op_counts["TOPK_V2"] == 6 and not [op for op in model.op_counts if op.startswith("STABLEHLO")]
    outputs = TFLiteRunner(model).run([x.numpy()])
    for got, want in zip(outputs, _flat(module(x))):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-6)
