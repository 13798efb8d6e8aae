"""Which operators of a float flatbuffer ai-edge-quantizer's recipes can address, and how.

A recipe is scoped to one operator by a regex on its *scope*: its output tensor names joined by
";", plus a trailing ";". The model's inputs and outputs are ai-edge-quantizer's virtual INPUT and
OUTPUT operators, scoped by every input's (output's) name. Shared by the sensitivity pass, the
mixed-precision search, weight splitting and the float feeders of step functions
(``discontinuous``), none of which import each other for it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..flatbuffer import FlatbufferModel

__all__ = ["LAYOUT_OPS", "QuantizableOp", "has_int16_recipe", "held_at_int8", "passthrough_ops", "quantizable_ops"]

# Operators that move, select or pick values: never candidates (see the module docstring).
LAYOUT_OPS = frozenset({
    "RESHAPE", "TRANSPOSE", "PAD", "PADV2", "MIRROR_PAD", "SQUEEZE", "EXPAND_DIMS", "MAX_POOL_2D",
    "CONCATENATION", "SLICE", "STRIDED_SLICE", "GATHER", "GATHER_ND", "SPLIT", "SPLIT_V", "PACK",
    "UNPACK", "TILE", "BROADCAST_TO", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "QUANTIZE", "DEQUANTIZE",
    "RESIZE_NEAREST_NEIGHBOR", "SELECT", "SELECT_V2", "REDUCE_MAX", "REDUCE_MIN", "ARG_MAX", "ARG_MIN",
    "CAST", "SHAPE", "RELU", "RELU6", "RELU_N1_TO_1",
})


@functools.lru_cache(maxsize=None)
def has_int16_recipe(opcode: str) -> bool:
    """Whether ai-edge-quantizer takes int16 activations with int8 weights (int16x8) for this
    operator: SQUARED_DIFFERENCE (every LayerNorm's variance) does not, and a recipe raising it to
    int16 fails (the ViT's --mixed-precision int16 was exit 3)."""
    from ai_edge_quantizer import recipe_manager
    from ai_edge_quantizer.qtyping import TFLOperationName

    try:
        recipe_manager.RecipeManager().add_static_config("^probe$", TFLOperationName(opcode), 16, 8)
    except ValueError:  # not an operator it knows, or no int16 policy for it
        return False
    return True


@dataclass(frozen=True)
class QuantizableOp:
    """One operator of the float model that the sensitivity pass measures."""

    index: int  # operator index in the float model's main subgraph
    opcode: str
    tensor: str  # its first output tensor's name (the Model Explorer key)
    scope: str  # ai-edge-quantizer's scope string, matched exactly by ``regex``

    @property
    def regex(self) -> str:
        return "^" + re.escape(self.scope) + "$"

    @classmethod
    def named(cls, index: int, opcode: str, names: list[str]) -> QuantizableOp:
        """The operator keyed by its first output's name and scoped by all of them, as
        ai-edge-quantizer scopes an operator (``names``: its named outputs, at least one)."""
        return cls(index, opcode, names[0], ";".join(names) + ";")


def held_at_int8(model: FlatbufferModel, int16_opcodes: frozenset[str] | None) -> dict[QuantizableOp, str]:
    """Recipe overrides keeping at int8 every operator (layout ones too) whose opcode is not in
    ``int16_opcodes``, the operators the target runs at int16 (None: every one). TFLite Micro runs
    MIRROR_PAD in int8 only: raised with the convolution after it, as a layout operator between two
    int16 ones, it made a model TFLM refuses (the Silero VAD's reflect pad)."""
    from ai_edge_quantizer.qtyping import TFLOperationName

    if int16_opcodes is None:
        return {}
    known = {m.value for m in TFLOperationName}
    held = {}
    for op in model.operators:
        names = [model.tensors[i].name for i in op.outputs if i >= 0 and model.tensors[i].name]
        if op.opcode in known and op.opcode not in int16_opcodes and names:
            held[QuantizableOp.named(op.index, op.opcode, names)] = "int8"
    return held


def quantizable_ops(model: FlatbufferModel) -> tuple[QuantizableOp, ...]:
    """The operators of the main subgraph that ai-edge-quantizer can quantize and that compute
    something (``LAYOUT_OPS`` left out), in graph order."""
    from ai_edge_quantizer.qtyping import TFLOperationName

    known = {m.value for m in TFLOperationName}
    ops = []
    for op in model.operators:
        if op.opcode in LAYOUT_OPS or op.opcode not in known:
            continue
        outputs = [model.tensors[i] for i in op.outputs if i >= 0]
        names = [t.name for t in outputs if t.name]
        if not names or not any(t.is_float for t in outputs):
            continue
        ops.append(QuantizableOp.named(op.index, op.opcode, names))
    return tuple(ops)


def passthrough_ops(model: FlatbufferModel, promoted: set[int], allowed: frozenset[str] | None = None) -> tuple[QuantizableOp, ...]:
    """The layout operators (``LAYOUT_OPS``; only those in ``allowed`` when given: the ones the
    target runs at the precision) to promote with ``promoted``: those whose every neighbour is
    promoted or such a layout operator itself. A pad or reshape between two float operators would
    otherwise quantize the tensor it passes on and undo what promoting them bought. Also the model's
    virtual INPUT/OUTPUT operators when all their neighbours are promoted. A layout operator left
    out keeps the layout operators that reach it only through it at their precision too: a
    same-scale operator takes its input's type (a MIRROR_PAD after an int16 input ran at int16)."""
    from ai_edge_quantizer.qtyping import TFLOperationName

    known = {m.value for m in TFLOperationName}
    producer = {t: op.index for op in model.operators for t in op.outputs if t >= 0}
    consumers: dict[int, list[int]] = {}
    for op in model.operators:
        for t in op.inputs:
            if t >= 0 and not model.tensors[t].is_constant:
                consumers.setdefault(t, []).append(op.index)
    # The largest set of layout operators whose every neighbour is promoted or in the set (a chain
    # TRANSPOSE -> PAD before a promoted conv goes as a whole): start from all of them and drop
    # any with a neighbour outside, until nothing changes.
    def neighbours(op) -> list[int]:
        inputs = [t for t in op.inputs if t >= 0 and not model.tensors[t].is_constant]
        outputs = [t for t in op.outputs if t >= 0]
        return [producer[t] for t in inputs if t in producer] + [c for t in outputs for c in consumers.get(t, [])]

    layout = {
        op.index: op for op in model.operators
        if op.index not in promoted and op.opcode in LAYOUT_OPS and op.opcode in known
        and (allowed is None or op.opcode in allowed) and any(model.tensors[t].name for t in op.outputs if t >= 0)
    }
    kept = set(layout)
    changed = True
    while changed:
        changed = False
        for index in sorted(kept):
            near = neighbours(layout[index])
            if not near or not all(n in promoted or n in kept for n in near):
                kept.discard(index)
                changed = True
    # a set touching no promoted operator (layout ops between int8 ones) stays int8
    touching = {i for i in kept if any(n in promoted for n in neighbours(layout[i]))}
    reach = set(touching)
    frontier = list(touching)
    while frontier:
        i = frontier.pop()
        for n in neighbours(layout[i]):
            if n in kept and n not in reach:
                reach.add(n)
                frontier.append(n)
    added: list[QuantizableOp] = []
    for index in sorted(reach):
        op = layout[index]
        names = [model.tensors[t].name for t in op.outputs if t >= 0 and model.tensors[t].name]
        added.append(QuantizableOp.named(op.index, op.opcode, names))
    chosen = set(promoted) | reach
    # The model's inputs and outputs (ai-edge-quantizer's virtual INPUT and OUTPUT operators, one
    # each, scoped by every input's or output's name): an input quantized to int8 before a float
    # operator is int8 error at the very start, which a network with a high noise gain amplifies.
    for key, tensors, near_ops, index in (
        ("INPUT", model.inputs, [c for t in model.inputs for c in consumers.get(t, [])], -1),
        ("OUTPUT", model.outputs, [producer[t] for t in model.outputs if t in producer], -2),
    ):
        names = [model.tensors[t].name for t in tensors if model.tensors[t].name]
        if names and near_ops and all(n in chosen for n in near_ops):
            added.append(QuantizableOp.named(index, key, names))
    return tuple(added)
