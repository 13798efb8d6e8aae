"""rewrite_one_hot_as_comparison_pass: F.one_hot without its run-time range check, which
litert-torch cannot lower (every model calling one_hot was exit 3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from edge_export.passes.fx import rewrite_one_hot_as_comparison_pass


class OneHot(torch.nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.classes = classes

    def forward(self, ids):
        return F.one_hot(ids, self.classes).float() * 2


def test_one_hot_becomes_a_comparison_with_the_same_rows_and_converts():
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner

    ids = torch.tensor([[0, 5, 31, 7], [3, 3, 0, 30]])
    graph = torch.export.export(OneHot(32), (ids,)).module()
    (rewrite,) = rewrite_one_hot_as_comparison_pass(graph)
    assert rewrite.kind == "one_hot as a comparison"
    assert torch.ops.aten.one_hot.default not in {n.target for n in graph.graph.nodes}
    assert torch.equal(graph(ids), OneHot(32)(ids))
    model = read_flatbuffer(convert_module(graph, (ids,)))
    (out,) = TFLiteRunner(model).run([ids.numpy().astype(model.input_tensors[0].dtype)])
    assert torch.equal(torch.from_numpy(out), OneHot(32)(ids))


def test_one_hot_with_classes_taken_from_the_ids_is_left_alone():
    # F.one_hot(ids) (num_classes=-1) is data-dependent: the call is edited to it here
    graph = torch.export.export(OneHot(4), (torch.tensor([1, 2]),)).module()
    for node in graph.graph.nodes:
        if node.target == torch.ops.aten.one_hot.default:
            node.args = (node.args[0], -1)
    assert rewrite_one_hot_as_comparison_pass(graph) == ()
