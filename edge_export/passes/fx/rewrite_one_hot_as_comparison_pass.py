"""Rewrite ``F.one_hot(ids, n)`` as ``ids[..., None] == arange(n)``, without its run-time range check.

litert-torch decomposes ``aten.one_hot`` into a check that every id lies in ``[0, n)`` (GE, LT, ANY,
then ``_assert_async``, which has no lowering: "Lowering not found: aten._assert_async.msg") and the
comparison against ``arange(n)``. So every model calling one_hot failed to convert (exit 3), and
one_hot is what edge-export's own refusal of ``scatter_add`` recommends instead. LiteRT has no
assert: written as the comparison alone (EQUAL and a CAST), an id outside ``[0, n)`` gives a row of
zeros on the device instead of an error in PyTorch; ids in range give the same int64 one-hot rows.
``num_classes=-1`` (n taken from the ids' maximum at run time) is left as it is.
"""

from __future__ import annotations

from typing import Any

from .rewrites import FxRewrite, call_arguments, node_location

__all__ = ["rewrite_one_hot_as_comparison_pass"]


def _one_hot(ids: Any, classes: int) -> Any:
    import torch

    return (ids.unsqueeze(-1) == torch.arange(classes, device=ids.device)).to(torch.int64)


def rewrite_one_hot_as_comparison_pass(gm: Any) -> tuple[FxRewrite, ...]:
    """one_hot calls with a fixed number of classes become the comparison. Changes the GraphModule
    in place; returns the rewrites made (empty: nothing changed)."""
    import torch

    rewrites = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != torch.ops.aten.one_hot.default:
            continue
        kw = call_arguments(node)
        classes = kw.get("num_classes", -1)
        if not isinstance(classes, int) or classes <= 0:  # -1 or a size only known at run time
            continue
        node.target, node.args, node.kwargs = _one_hot, (kw["self"], classes), {}
        rewrites.append(FxRewrite(*node_location(node), "one_hot as a comparison", "its range check (_assert_async) has no LiteRT lowering"))
    if rewrites:
        gm.graph.lint()
        gm.recompile()
    return tuple(rewrites)
