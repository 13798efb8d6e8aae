"""Which PyTorch call a flatbuffer operator came from: the aten operator, the module, the user's line.

A refusal after conversion (TFLite Micro has no kernel for SELECT) names a flatbuffer operator the
user never wrote. Its output tensor's name gives the module (``provenance.flatbuffer_operator_module``);
the aten call is found in the converted module's graph after PyTorch's core decompositions, as
litert-torch lowers it: among that module's nodes, those whose core operator lowers to the refused
opcode (``_LOWERED_FROM``; by default the opcode's own name, ``CUMSUM`` from ``aten.cumsum``), and
of those the operator the user called (``meta["original_aten"]``: ``aten.reflection_pad1d``, which
decomposes into ``abs``, ``sub`` and ``index``) and the line of the user's code that made the node.
Used by every refusal or per-operator row that names a flatbuffer operator: TFLite Micro's missing
kernels, LiteRT's own "failed to prepare" (``name_failing_call``), the GPU delegate's and the Edge
TPU compiler's operators left on the CPU. Diagnosis only: anything that fails here leaves the
description with what is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel

__all__ = [
    "OperatorOrigin", "describe_operator_origins", "name_failing_call", "operator_origin", "operator_origin_at", "operator_origins_at",
]

# Core aten operators litert-torch lowers to a flatbuffer opcode, beyond the opcode's own name.
# ``index`` wraps negative indices with LESS, ADD and SELECT before its GATHER_ND.
_LOWERED_FROM: dict[str, frozenset[str]] = {
    "SELECT": frozenset({"where", "index", "masked_fill"}),
    "SELECT_V2": frozenset({"where", "index", "masked_fill"}),
    "GATHER_ND": frozenset({"index", "gather"}),
    "GATHER": frozenset({"index_select", "embedding", "gather"}),
    "LESS": frozenset({"lt", "index"}),
    "GREATER": frozenset({"gt"}),
    "STABLEHLO_SCATTER": frozenset({"scatter", "scatter_add", "scatter_reduce", "index_put"}),
    "BATCH_MATMUL": frozenset({"bmm", "matmul"}),
    "FULLY_CONNECTED": frozenset({"addmm", "mm", "linear"}),
}


@dataclass(frozen=True)
class OperatorOrigin:
    opcode: str
    module_path: str | None  # None when no tensor name names a module
    module_type: str | None
    aten: str | None  # "aten.reflection_pad1d", when the graph shows it
    source: str | None  # "file.py:12" in the user's code

    def describe(self) -> str:
        from ..graph.provenance import describe_location

        made = f" (from {self.aten})" if self.aten else ""
        return f"{self.opcode}{made}{describe_location(self.module_path, self.module_type, self.source)}"


def _examples(source_module: Any, model: FlatbufferModel) -> list[tuple]:
    """Inputs to trace ``source_module`` with, to try in order: its graph's placeholders, else the
    model's inputs as they are, then with channels-last inputs moved back to channels-first (the
    model takes NHWC where the export made it)."""
    import torch

    if isinstance(source_module, torch.fx.GraphModule):
        vals = [n.meta.get("val") for n in source_module.graph.nodes if n.op == "placeholder"]
        if vals and all(v is not None and hasattr(v, "shape") for v in vals):
            return [tuple(torch.zeros(tuple(int(d) for d in v.shape), dtype=v.dtype) for v in vals)]
    integer = {"int32", "int64", "bool"}
    shapes = [(tuple(t.shape), torch.int64 if t.dtype in integer else torch.float32) for t in model.input_tensors]
    first = [s[:1] + s[-1:] + s[1:-1] if len(s) >= 3 else s for s, _ in shapes]
    tried = [[s for s, _ in shapes]] + ([first] if first != [s for s, _ in shapes] else [])
    return [tuple(torch.zeros(s, dtype=d) for s, (_, d) in zip(candidate, shapes)) for candidate in tried]


def _decomposed_graph(source_module: Any, model: FlatbufferModel, example: tuple | None = None) -> Any:
    import torch

    from ..processes.library_output import quiet_libraries

    candidates = [tuple(example)] if example is not None else _examples(source_module, model)
    with quiet_libraries(False):
        for candidate in candidates:  # at most two traces
            try:
                return torch.export.export(source_module, candidate, strict=False).run_decompositions().graph_module
            except Exception:  # diagnosis only: without a graph the refusal names the module, not the call
                continue
    return None


def _aten_name(target: Any) -> str:
    name = str(getattr(target, "_schema", None) and target._schema.name or target)
    return name.replace("::", ".")


def _core_name(node: Any) -> str:
    return _aten_name(node.target).split(".")[-1]


def _call_in(graph: Any, opcode: str, module_path: str) -> tuple[str | None, str | None]:
    """(the user's aten operator, the user's line) of the node in ``module_path`` that lowers to ``opcode``."""
    from ..graph.provenance import node_module, node_user_source

    def path(node: Any) -> str:  # the root module's own calls may carry no module stack
        found = node_module(node)
        return found.path if found else ""

    nodes = [n for n in graph.graph.nodes if n.op == "call_function" and path(n) == module_path]
    lowering = _LOWERED_FROM.get(opcode, frozenset()) | {opcode.lower()}
    chosen = [n for n in nodes if _core_name(n) in lowering] or nodes
    called = list(dict.fromkeys(_aten_name(n.meta.get("original_aten") or n.target) for n in chosen))
    if not called:
        return None, None
    aten = called[0] if len(called) == 1 else " or ".join(called[:3])
    return aten, next((s for s in map(node_user_source, chosen) if s), None)


def operator_origin_at(model: FlatbufferModel, index: int, source_module: Any = None, graph: Any = None) -> OperatorOrigin:
    """Where operator #``index`` of ``model`` came from (``graph``: a decomposed graph of
    ``source_module`` already traced, else traced here when a module is given)."""
    from ..graph.provenance import flatbuffer_operator_module, module_user_source

    op = model.operators[index]
    found = flatbuffer_operator_module(model, op)
    if found is None:
        return OperatorOrigin(op.opcode, None, None, None, None)
    aten, source = None, None
    if graph is None and source_module is not None:
        graph = _decomposed_graph(source_module, model)
    if graph is not None:
        aten, source = _call_in(graph, op.opcode, found.path)
    return OperatorOrigin(op.opcode, found.path, found.type_name, aten, source or module_user_source(source_module, found.path))


def operator_origin(model: FlatbufferModel, opcode: str, source_module: Any = None, graph: Any = None) -> OperatorOrigin:
    """Where the first ``opcode`` operator of ``model`` came from (see ``operator_origin_at``)."""
    index = next((o.index for o in model.operators if o.opcode == opcode), None)
    if index is None:
        return OperatorOrigin(opcode, None, None, None, None)
    return operator_origin_at(model, index, source_module, graph)


def operator_origins_at(model: FlatbufferModel, indices: Iterable[int], source_module: Any = None) -> dict[int, OperatorOrigin]:
    """The origin of each operator in ``indices``, tracing ``source_module`` once (none: no trace)."""
    wanted = list(dict.fromkeys(indices))
    graph = _decomposed_graph(source_module, model) if wanted and source_module is not None else None
    return {i: operator_origin_at(model, i, source_module, graph) for i in wanted}


def name_failing_call(error: Any, model: FlatbufferModel, source_module: Any, example: tuple | None = None) -> Any:
    """A RuntimeRunError that names the operator LiteRT refused (``runtime.blame_failing_operator``
    records its index) again with the aten call and the user's line; ``error`` itself otherwise.
    ``example``: inputs in the module's own layout (the model's may be NHWC)."""
    index = getattr(error, "failed_operator", None)
    if index is None or source_module is None or not 0 <= index < len(model.operators):
        return error
    origin = operator_origin_at(model, index, source_module, _decomposed_graph(source_module, model, example))
    if origin.aten is None and origin.source is None:
        return error
    named = type(error)(f"{error.unblamed}. The operator that failed is #{index} {origin.describe()}.", error.hint)
    named.failed_operator, named.unblamed = index, error.unblamed
    return named


def describe_operator_origins(model: FlatbufferModel, opcodes: tuple[str, ...], source_module: Any = None) -> str:
    """``SELECT (from aten.reflection_pad1d) in module '<root>' (VAD), at vad.py:12; GELU ...``."""
    graph = _decomposed_graph(source_module, model) if source_module is not None else None
    return "; ".join(operator_origin(model, code, source_module, graph).describe() for code in opcodes)
