"""Drop an ABS whose every reader squares it (``MUL(a, a)``), before int8 quantization.

A 2-norm written ``x.abs() ** 2`` (Swinv2's cosine attention normalises queries and keys with
``F.normalize``) reaches the flatbuffer as ABS then MUL of the result by itself. ai-edge-quantizer has
no int8 recipe for ABS, so each stayed float between a DEQUANTIZE and a QUANTIZE, and the model was
not fully integer (16 of them in the zoo's Swinv2). ``|x| * |x|`` is ``x * x`` bit for bit, so the
squares read the ABS's input instead and the ABS goes. Run on the float model the flatbuffer quantizer
calibrates (``flatbuffer_recipes``).
"""

from __future__ import annotations

from typing import Any

from .graph_edits import consumers_of, opcode_name
from .model_graph import drop_unused_tensors

__all__ = ["drop_abs_before_square_pass"]


def _squared_only(model: Any, readers: list[Any], tensor: int) -> bool:
    return bool(readers) and all(
        opcode_name(model, r) == "MUL" and len(r.inputs) == 2 and list(r.inputs) == [tensor, tensor]
        and not getattr(r.builtinOptions, "fusedActivationFunction", 0)
        for r in readers
    )


def drop_abs_before_square_pass(model: Any) -> bool:
    """Remove the main subgraph's ABS operators that only squares read; True when any was."""
    sg = model.subgraphs[0]
    readers = consumers_of(sg)
    outputs = {int(i) for i in sg.outputs}
    kept, changed = [], False
    for op in sg.operators:
        out = int(op.outputs[0]) if op.outputs is not None and len(op.outputs) == 1 else -1
        if opcode_name(model, op) != "ABS" or out < 0 or out in outputs or not _squared_only(model, readers.get(out, []), out):
            kept.append(op)
            continue
        source = int(op.inputs[0])
        for square in readers[out]:
            square.inputs = [source, source]
        changed = True
    sg.operators = kept
    if changed:
        drop_unused_tensors(model)
    return changed
