"""The TRANSPOSE operators a written model still has, and the PyTorch module each came from.

A TRANSPOSE inside an image model is a copy of an activation (RAM and time on a microcontroller)
and a cut in NPU and GPU partitions. The converter and edge-export's layout passes
(``rewrite_reduction_axes_pass``, ``fold_layout_chains_pass``) remove those a NHWC graph does not
need; what is left is reported under ``flatbuffer.transposes``: each one's operator index, the shape
it permutes, its permutation, whether it is the NCHW/NHWC adapter at a 4-D model input or output
(NCHW I/O, which ``--channels-last`` removes) and the module ``provenance`` reads from its
tensor names (the names the checks ran on, so a model written with ``--strip-names`` still names
them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel

__all__ = ["TransposeSite", "TransposeReport", "find_transposes"]

LISTED = 50  # sites listed in the report (the count is always complete)


@dataclass(frozen=True)
class TransposeSite:
    operator_index: int
    shape: tuple[int, ...]  # the tensor it permutes
    perm: tuple[int, ...] | None  # None: not a constant
    boundary: bool  # the NCHW/NHWC adapter at a 4-D model input or output (--channels-last removes it)
    module: str | None  # the module path ("" the root module), None when its names name none
    module_type: str | None

    def describe(self) -> str:
        where = "" if self.module is None else f" in {self.module or '<root>'}" + (f" ({self.module_type})" if self.module_type else "")
        perm = "" if self.perm is None else f" perm {','.join(map(str, self.perm))}"
        return f"#{self.operator_index} {list(self.shape)}{perm}{where}"


@dataclass(frozen=True)
class TransposeReport:
    """``flatbuffer.transposes``: how many TRANSPOSE operators the model has (``count``), how many
    of those are inside the graph (``inner``: all but the NCHW/NHWC adapters at 4-D model inputs
    and outputs), and the first ``LISTED`` of them, inner ones first."""

    count: int
    inner: int
    sites: tuple[TransposeSite, ...]

    @property
    def boundary(self) -> int:
        return self.count - self.inner


_ADAPTERS = ((0, 2, 3, 1), (0, 3, 1, 2))  # NCHW -> NHWC after an input, NHWC -> NCHW before an output


def _is_io_adapter(op, perm, boundary_tensors: set[int]) -> bool:
    at_io = op.inputs[0] in boundary_tensors or op.outputs[0] in boundary_tensors
    return at_io and perm is not None and tuple(int(p) for p in perm.ravel()) in _ADAPTERS


def _module_near(names: FlatbufferModel, op) -> Any:
    """The module the TRANSPOSE's output or input names; for a model output (named after the
    signature), the first module named by what its input was computed from (a few steps back)."""
    from ..graph.provenance import operator_module

    for index in (op.outputs[0], op.inputs[0]):
        where = operator_module(names.tensors[index].name, "TRANSPOSE")
        if where is not None:
            return where
    tensor = op.inputs[0]
    for _ in range(4):
        producer = names.producer_of(tensor)
        if producer is None or not producer.inputs:
            return None
        for index in producer.inputs:
            where = operator_module(names.tensors[index].name, producer.opcode) if index >= 0 else None
            if where is not None:
                return where
        tensor = producer.inputs[0]
    return None


def find_transposes(model: FlatbufferModel, named: FlatbufferModel | None = None) -> TransposeReport:
    """The TRANSPOSEs of ``model``'s main subgraph; module names are read from ``named`` (the same
    operators with their tensor names, e.g. before ``--strip-names``) when given."""
    names = named if named is not None and len(named.operators) == len(model.operators) else model
    boundary_tensors = {*model.inputs, *model.outputs}
    sites = []
    for op in model.operators:
        if op.opcode != "TRANSPOSE":
            continue
        perm = model.constant(op.inputs[1]) if len(op.inputs) > 1 and model.data else None
        where = _module_near(names, op)
        sites.append(TransposeSite(
            operator_index=op.index,
            shape=tuple(model.tensors[op.inputs[0]].shape),
            perm=None if perm is None else tuple(int(p) for p in perm.ravel()),
            boundary=_is_io_adapter(op, perm, boundary_tensors),
            module=None if where is None else where.path,
            module_type=None if where is None else where.type_name,
        ))
    ordered = sorted(sites, key=lambda s: (s.boundary, s.operator_index))
    return TransposeReport(count=len(sites), inner=sum(not s.boundary for s in sites), sites=tuple(ordered[:LISTED]))
