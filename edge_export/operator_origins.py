"""Which PyTorch call a flatbuffer operator came from: the aten operator, the module, the user's line.

A refusal after conversion (TFLite Micro has no kernel for SELECT) names a flatbuffer operator the
user never wrote. Its output tensor's name gives the module (``provenance.flatbuffer_operator_module``);
the aten call is found in the converted module's graph after PyTorch's core decompositions, as
litert-torch lowers it: among that module's nodes, those whose core operator lowers to the refused
opcode (``_LOWERED_FROM``; by default the opcode's own name, ``CUMSUM`` from ``aten.cumsum``), and
of those the operator the user called (``meta["original_aten"]``: ``aten.reflection_pad1d``, which
decomposes into ``abs``, ``sub`` and ``index``) and the line of the user's code that made the node.
Diagnosis only: anything that fails here leaves the description with what is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .flatbuffer import FlatbufferModel

__all__ = ["OperatorOrigin", "describe_operator_origins", "operator_origin"]

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
        from .provenance import describe_location

        made = f" (from {self.aten})" if self.aten else ""
        return f"{self.opcode}{made}{describe_location(self.module_path, self.module_type, self.source)}"


def _example(source_module: Any, model: FlatbufferModel) -> tuple:
    """Inputs to trace ``source_module`` with: its graph's placeholders, else the model's inputs."""
    import torch

    if isinstance(source_module, torch.fx.GraphModule):
        vals = [n.meta.get("val") for n in source_module.graph.nodes if n.op == "placeholder"]
        if vals and all(v is not None and hasattr(v, "shape") for v in vals):
            return tuple(torch.zeros(tuple(int(d) for d in v.shape), dtype=v.dtype) for v in vals)
    integer = {"int32", "int64", "bool"}
    return tuple(
        torch.zeros(t.shape, dtype=torch.int64 if t.dtype in integer else torch.float32) for t in model.input_tensors
    )


def _decomposed_graph(source_module: Any, model: FlatbufferModel) -> Any:
    import torch

    from .library_output import quiet_libraries

    with quiet_libraries(False):
        try:
            exported = torch.export.export(source_module, _example(source_module, model), strict=False)
            return exported.run_decompositions().graph_module
        except Exception:  # diagnosis only: without a graph the refusal names the module, not the call
            return None


def _aten_name(target: Any) -> str:
    name = str(getattr(target, "_schema", None) and target._schema.name or target)
    return name.replace("::", ".")


def _core_name(node: Any) -> str:
    return _aten_name(node.target).split(".")[-1]


def _call_in(graph: Any, opcode: str, module_path: str) -> tuple[str | None, str | None]:
    """(the user's aten operator, the user's line) of the node in ``module_path`` that lowers to ``opcode``."""
    from .provenance import node_module, node_user_source

    nodes = [n for n in graph.graph.nodes if n.op == "call_function" and (m := node_module(n)) and m.path == module_path]
    lowering = _LOWERED_FROM.get(opcode, frozenset()) | {opcode.lower()}
    chosen = [n for n in nodes if _core_name(n) in lowering] or nodes
    called = list(dict.fromkeys(_aten_name(n.meta.get("original_aten") or n.target) for n in chosen))
    if not called:
        return None, None
    aten = called[0] if len(called) == 1 else " or ".join(called[:3])
    return aten, next((s for s in map(node_user_source, chosen) if s), None)


def operator_origin(model: FlatbufferModel, opcode: str, source_module: Any = None, graph: Any = None) -> OperatorOrigin:
    """Where the first ``opcode`` operator of ``model`` came from (``graph``: a decomposed graph of
    ``source_module`` already traced, else traced here when a module is given)."""
    from .provenance import flatbuffer_operator_module, module_user_source

    op = next((o for o in model.operators if o.opcode == opcode), None)
    found = flatbuffer_operator_module(model, op) if op is not None else None
    if found is None:
        return OperatorOrigin(opcode, None, None, None, None)
    aten, source = None, None
    if graph is None and source_module is not None:
        graph = _decomposed_graph(source_module, model)
    if graph is not None:
        aten, source = _call_in(graph, opcode, found.path)
    return OperatorOrigin(opcode, found.path, found.type_name, aten, source or module_user_source(source_module, found.path))


def describe_operator_origins(model: FlatbufferModel, opcodes: tuple[str, ...], source_module: Any = None) -> str:
    """``SELECT (from aten.reflection_pad1d) in module '<root>' (VAD), at vad.py:12; GELU ...``."""
    graph = _decomposed_graph(source_module, model) if source_module is not None else None
    return "; ".join(operator_origin(model, code, source_module, graph).describe() for code in opcodes)
