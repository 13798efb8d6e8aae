"""Rewrite torch.topk, torch.sort, torch.argsort and torch.msort as LiteRT's TOPK_V2 (``tfl.topk_v2``).

litert-torch lowers ``aten.topk`` through JAX's ``top_k``, which becomes TOPK_V2 only while both
results are used: a ``torch.topk(x, k).values`` (the indices dead) comes out as STABLEHLO_SORT,
which the LiteRT 2.3 interpreter cannot run, and ``aten.sort``/``aten.argsort`` do not convert at
all (the sort comparator's int64 operand). litert-torch's own ``tfl.topk_v2`` operator lowers to
TOPK_V2 whatever is used: a sort along a dimension of n elements is a top-n. TOPK_V2 works on the
last dimension and finds the largest values, so another dimension is moved last and back
(TRANSPOSE), and the smallest values are the largest of the negated input (NEG); it returns int32
indices, cast to PyTorch's int64 (which the converter writes as int32 again). Ties come out lower
index first, which is also what a stable sort gives.
"""

from __future__ import annotations

from typing import Any

from .rewrites import FxRewrite, call_arguments, node_location

__all__ = ["rewrite_sorts_as_topk_v2_pass"]

# Negating the input reverses the order of floats and signed integers (but for an integer type's
# lowest value, which has no negation), not of unsigned integers and bools: those are left alone.
_NEGATABLE = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64")


def _topk_v2(x: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """``torch.topk`` through ``tfl.topk_v2`` (always sorted, which ``sorted=False`` allows)."""
    import torch
    from litert_torch.backend.experimental.torch_tfl import _ops  # noqa: F401  registers torch.ops.tfl

    last = x.dim() - 1
    dim = dim % x.dim() if x.dim() else 0
    moved = x.transpose(dim, last) if dim != last else x
    values, indices = torch.ops.tfl.topk_v2(moved if largest else -moved, int(k))
    if not largest:
        values = -values
    if dim != last:
        values, indices = values.transpose(dim, last), indices.transpose(dim, last)
    return values, indices.to(torch.int64)


def _sort(x: Any, dim: int = -1, descending: bool = False) -> Any:
    return _topk_v2(x, x.shape[dim], dim, largest=descending)


def _argsort(x: Any, dim: int = -1, descending: bool = False) -> Any:
    return _sort(x, dim, descending)[1]


def _msort(x: Any) -> Any:
    return _sort(x, 0)[0]


def _sort_call(node: Any) -> tuple[Any, tuple, str] | None:
    """(replacement, args, what) for a sort-like node whose input TOPK_V2 can take, else None."""
    import torch

    aten = torch.ops.aten
    kinds = {
        aten.topk.default: "torch.topk", aten.sort.default: "torch.sort", aten.sort.stable: "torch.sort",
        aten.argsort.default: "torch.argsort", aten.argsort.stable: "torch.argsort", aten.msort.default: "torch.msort",
    }
    what = kinds.get(node.target)
    if what is None:
        return None
    kw = call_arguments(node)
    x = kw["self"]
    if what == "torch.topk":
        largest = kw.get("largest", True)
        call = (_topk_v2, (x, kw["k"], kw.get("dim", -1), largest, kw.get("sorted", True)), what)
    elif what == "torch.msort":
        largest, call = False, (_msort, (x,), what)
    else:
        largest = kw.get("descending", False)
        call = (_sort if what == "torch.sort" else _argsort, (x, kw.get("dim", -1), largest), what)
    val = x.meta.get("val") if hasattr(x, "meta") else None
    if val is None or (not largest and str(val.dtype).replace("torch.", "") not in _NEGATABLE):
        return None
    return call


def rewrite_sorts_as_topk_v2_pass(gm: Any) -> tuple[FxRewrite, ...]:
    """Sort-like calls (topk, sort, argsort, msort) become ``tfl.topk_v2``, which converts to TOPK_V2.

    Changes the GraphModule in place; returns the rewrites made (empty: nothing changed)."""
    rewrites = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        call = _sort_call(node)
        if call is None:
            continue
        function, args, what = call
        node.target, node.args, node.kwargs = function, args, {}
        rewrites.append(FxRewrite(*node_location(node), f"{what} as TOPK_V2", "litert-torch lowers it to STABLEHLO_SORT or fails; LiteRT runs TOPK_V2"))
    if rewrites:
        gm.graph.lint()
        gm.recompile()
    return tuple(rewrites)
