"""Refuse, before conversion, the operators LiteRT cannot run, naming the module, line and operator.

Two kinds, measured with litert-torch 0.10 and the LiteRT 2.3 interpreter (``benchmarks/
op_coverage.py`` sweeps more):

- operators litert-torch converts into a model the interpreter refuses to prepare: scatter-style
  accumulation (``scatter_add``, ``scatter_reduce``, ``index_add``, ``index_put(...,
  accumulate=True)``) becomes STABLEHLO_SCATTER, and LiteRT says "Only update, Add, Multiply,
  Maximum and Minimum operations are currently supported" after the whole conversion;
- operators without any litert-torch lowering (``kthvalue``, ``median``, ``mode``, ``cummax``,
  ``cumprod``, ``searchsorted``, ...): conversion would fail on them after tracing.

Sorting itself is not refused: ``rewrite_sorts_as_topk_v2_pass`` turns topk, sort, argsort and
msort into TOPK_V2. Each refusal is a ``TargetError`` (exit 2) with what to write instead.
"""

from __future__ import annotations

from typing import Any

from .rewrites import call_arguments, node_location

__all__ = ["refuse_unrunnable_ops_pass", "UNRUNNABLE_OPERATORS"]

_SCATTER = (
    "it converts to STABLEHLO_SCATTER, which the LiteRT interpreter refuses to prepare",
    "Write the accumulation as a matrix product with a one-hot matrix "
    "(torch.nn.functional.one_hot(index, n).to(x.dtype).T @ src), or do it outside the model.",
)
_SORT_STATISTIC = (
    "litert-torch has no lowering for it",
    "Sort with torch.topk or torch.sort (both convert to TOPK_V2) and index the position you need "
    "(the median of n values is torch.sort(x, dim).values.select(dim, (n - 1) // 2)).",
)
_CUMULATIVE = (
    "litert-torch has no lowering for it",
    "torch.cumsum converts (CUMSUM): cumprod of positive values is exp(cumsum(log(x))), logcumsumexp "
    "is log(cumsum(exp(x - m))) + m with m = x.amax(dim, keepdim=True); cummax/cummin have no LiteRT "
    "operator, compute them outside the model.",
)
_BUCKETS = (
    "litert-torch has no lowering for it",
    "Compare with the boundaries and count: (x.unsqueeze(-1) > boundaries).sum(-1) gives "
    "torch.bucketize(x, boundaries) (right=False) with operators LiteRT runs.",
)

# aten operator name (overload packet) -> (why LiteRT cannot run it, what to write instead)
UNRUNNABLE_OPERATORS: dict[str, tuple[str, str]] = {
    "scatter_add": _SCATTER, "scatter_reduce": _SCATTER, "index_add": _SCATTER,
    "kthvalue": _SORT_STATISTIC, "median": _SORT_STATISTIC, "nanmedian": _SORT_STATISTIC, "mode": _SORT_STATISTIC,
    "cummax": _CUMULATIVE, "cummin": _CUMULATIVE, "cumprod": _CUMULATIVE, "logcumsumexp": _CUMULATIVE,
    "searchsorted": _BUCKETS, "bucketize": _BUCKETS,
}


def _operator_name(node: Any) -> str | None:
    """The aten packet name of a call (``index_put`` for ``aten.index_put.default``), or None."""
    if node.op != "call_function" or not hasattr(node.target, "_schema"):
        return None
    namespace, _, name = node.target._schema.name.partition("::")
    if namespace != "aten":
        return None
    name = name.rstrip("_")  # in-place variants
    if name == "index_put" and call_arguments(node).get("accumulate"):
        return "index_put(accumulate=True)"
    return name


def refuse_unrunnable_ops_pass(gm: Any) -> None:
    """Raise TargetError at the first call of an operator LiteRT cannot run; change nothing."""
    from ...errors import TargetError
    from ...graph.provenance import describe_location

    for node in gm.graph.nodes:
        name = _operator_name(node)
        entry = UNRUNNABLE_OPERATORS.get("scatter_add" if name == "index_put(accumulate=True)" else name or "")
        if entry is None:
            continue
        path, mtype, source = node_location(node)
        where = describe_location(path, mtype, source)
        why, instead = entry
        raise TargetError(f"The model calls torch's {name}{where}: LiteRT cannot run it ({why}).", instead)
