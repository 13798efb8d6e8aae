"""refuse_unrunnable_ops_pass: an operator LiteRT cannot run is refused before conversion (exit 2),
naming the operator, the module and the source line, with what to write instead."""

from __future__ import annotations

import inspect

import pytest
import torch

from edge_export.errors import TargetError
from edge_export.passes.fx import refuse_unrunnable_ops_pass


class Accumulate(torch.nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def forward(self, x):
        index = torch.tensor([0, 2, 2, 1])
        if self.how == "scatter_add":
            return torch.zeros(2, 8).scatter_add(1, index.expand(2, 4), x[:, :4])
        if self.how == "index_put":
            return torch.zeros(8).index_put((index,), x[0, :4], accumulate=True)
        if self.how == "index_add":
            return torch.zeros(2, 8).index_add(1, index, x[:, :4])
        return torch.kthvalue(x, 2).values


class Head(torch.nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.accumulate = Accumulate(how)

    def forward(self, x):
        return self.accumulate(self.fc(x))


@pytest.mark.parametrize(
    "how, operator, advice",
    [
        ("scatter_add", "scatter_add", "one_hot"),
        ("index_put", "index_put(accumulate=True)", "one_hot"),
        ("index_add", "index_add", "one_hot"),
        ("kthvalue", "kthvalue", "torch.topk"),
    ],
)
def test_the_refusal_names_operator_module_and_line(how, operator, advice):
    graph = torch.export.export(Head(how).eval(), (torch.randn(2, 8),)).module()
    with pytest.raises(TargetError) as caught:
        refuse_unrunnable_ops_pass(graph)
    error = caught.value
    assert error.exit_code == 2
    assert f"torch's {operator} in module 'accumulate' (Accumulate)" in error.message
    assert f"{inspect.getsourcefile(Accumulate)}:" in error.message and "LiteRT cannot run it" in error.message
    assert advice in error.hint


def test_a_model_of_runnable_operators_passes_unchanged():
    graph = torch.export.export(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval(), (torch.randn(2, 8),)).module()
    before = str(graph.graph)
    assert refuse_unrunnable_ops_pass(graph) is None
    assert str(graph.graph) == before


def test_index_put_without_accumulate_is_not_refused():
    class Put(torch.nn.Module):
        def forward(self, x):
            return torch.zeros(8).index_put((torch.tensor([1, 3]),), x[0, :2])

    graph = torch.export.export(Put(), (torch.randn(2, 8),)).module()
    refuse_unrunnable_ops_pass(graph)


@pytest.mark.slow
def test_what_the_refusal_prevents_is_named_by_the_runtime_too():
    """Converted anyway (without the pass), scatter_add is STABLEHLO_SCATTER, which LiteRT refuses to
    prepare: the runner's error names the operator and the module it came from."""
    from edge_export.conversion.litert import convert_module
    from edge_export.errors import RuntimeRunError
    from edge_export.runtime.interpreter import TFLiteRunner

    with pytest.raises(RuntimeRunError) as caught:
        TFLiteRunner(convert_module(Head("scatter_add").eval(), (torch.randn(2, 8),)))
    message = " ".join(caught.value.message.split())
    assert "STABLEHLO_SCATTER" in message and "failed is #" in message and "in module 'accumulate' (Accumulate)" in message
