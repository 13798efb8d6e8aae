"""What an FX pass reports for each rewrite it made: where (module, source line), what and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FxRewrite", "call_arguments", "node_location", "rewrite_calls"]


@dataclass(frozen=True)
class FxRewrite:
    module_path: str  # "" for the root module's own forward()
    module_type: str | None
    source: str | None  # "file.py:12" in the user's code, when the node records one
    kind: str
    why: str
    declined: bool = False  # a rewrite that could not be made (an LSTM kept unrolled), with why

    def describe(self) -> str:
        from ...graph.provenance import describe_location

        return f"{self.kind}{describe_location(self.module_path, self.module_type, self.source)}"


def node_location(node: Any) -> tuple[str, str | None, str | None]:
    """(module path, module type, user source line) of an FX node, from its metadata."""
    from ...graph.provenance import node_module, node_user_source

    found = node_module(node)
    path, mtype = (found.path, found.type_name) if found else ("", None)
    return path, mtype, node_user_source(node)


def call_arguments(node: Any) -> dict[str, Any]:
    """An aten call's arguments by their schema names (``self``, ``k``, ``dim``...), defaults filled."""
    arguments = node.target._schema.arguments
    values = {a.name: a.default_value for a in arguments if a.has_default_value()}
    values.update(zip((a.name for a in arguments), node.args))
    values.update(node.kwargs)
    return values


def rewrite_calls(gm: Any, rewrite: Any) -> tuple[FxRewrite, ...]:
    """``rewrite(node)`` on every call_function node of ``gm`` (it changes the node in place and
    returns (kind, why), or None to leave it); the graph is linted and recompiled when one changed.
    The records of the rewrites made (empty: nothing changed)."""
    rewrites = []
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and (done := rewrite(node)) is not None:
            rewrites.append(FxRewrite(*node_location(node), *done))
    if rewrites:
        gm.graph.lint()
        gm.recompile()
    return tuple(rewrites)
