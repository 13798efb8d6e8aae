"""Write each float SQUARED_DIFFERENCE as a SUB and a MUL of the difference by itself.

Every LayerNorm's variance is a SQUARED_DIFFERENCE, and ai-edge-quantizer has no int16x8 recipe
for it: raised to int16 (``--mixed-precision int16``), its neighbours left it computing in float
between a DEQUANTIZE and a QUANTIZE, so no transformer could be fully integer at int16. SUB and MUL
both have int16x8 recipes. In float the two compute what SQUARED_DIFFERENCE does, ``(a - b) * (a -
b)``, bit for bit (one subtraction, one rounded product). The MUL keeps the original output tensor
(its name and module); the difference is a new tensor named after it with ``;difference``.
"""

from __future__ import annotations

from typing import Any

from .graph_edits import add_activation_like, new_operator, opcode_name

__all__ = ["split_squared_difference_pass"]


def split_squared_difference_pass(model: Any) -> bool:
    """Replace the main subgraph's float SQUARED_DIFFERENCE operators; True when any was."""
    from ai_edge_litert import schema_py_generated as schema

    sg = model.subgraphs[0]
    rewritten: list[Any] = []
    changed = False
    for op in sg.operators:
        out = int(op.outputs[0]) if op.outputs is not None and len(op.outputs) == 1 else -1
        if opcode_name(model, op) != "SQUARED_DIFFERENCE" or out < 0 or sg.tensors[out].type != schema.TensorType.FLOAT32:
            rewritten.append(op)
            continue
        difference = add_activation_like(sg, out, sg.tensors[out].shape, ";difference")
        subtract = new_operator(model, "SUB", [int(i) for i in op.inputs], [difference], schema.SubOptionsT())
        square = new_operator(model, "MUL", [difference, difference], [out], schema.MulOptionsT())
        rewritten += [subtract, square]
        changed = True
    sg.operators = rewritten
    return changed
