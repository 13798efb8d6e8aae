"""Write each float DIV by a constant as a MUL by the constant's reciprocal, before int8 quantization.

ai-edge-quantizer quantizes a DIV's divisor per tensor like any operand. A divisor whose values
span orders of magnitude then has its small values on the zero point, and LiteRT's int8 DIV refuses
to run (``div.cc: data[i] != zero_point``): DETR's sine position embedding divides by 1 to 7500
(``fold_constant_operators_pass`` makes that divisor a constant first). A product cannot fail that
way: a small reciprocal rounds to zero, which is what dividing by a large number comes to. In float
``x * (1 / c)`` is ``x / c`` to an ulp or two. Only constant divisors whose every value is finite and
not zero are written; the reciprocal is a new tensor named after the divisor with ``;reciprocal``.
Run on the float model the flatbuffer quantizer calibrates (``flatbuffer_recipes``), not on float exports.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph_edits import add_float32_constant, new_operator, opcode_name
from .model_graph import constant_value, drop_unused_tensors

__all__ = ["multiply_by_reciprocal_pass"]


def _reciprocal(model: Any, sg: Any, op: Any) -> np.ndarray | None:
    """1 / divisor when ``op`` is a float32 DIV of a constant divisor fit for it, else None."""
    from ai_edge_litert import schema_py_generated as schema

    if opcode_name(model, op) != "DIV" or op.inputs is None or len(op.inputs) != 2 or op.outputs is None or len(op.outputs) != 1:
        return None
    if any(sg.tensors[i].type != schema.TensorType.FLOAT32 or sg.tensors[i].quantization is not None
           and sg.tensors[i].quantization.scale is not None and len(sg.tensors[i].quantization.scale)
           for i in (*op.inputs, *op.outputs)):
        return None
    divisor = constant_value(model, sg, int(op.inputs[1]))
    if divisor is None or divisor.size == 0 or not np.all(np.isfinite(divisor)) or np.any(divisor == 0):
        return None
    with np.errstate(over="ignore"):  # 1 / a subnormal is inf: not written
        reciprocal = (np.float32(1.0) / divisor.astype(np.float32)).astype(np.float32)
    return reciprocal if np.all(np.isfinite(reciprocal)) else None


def multiply_by_reciprocal_pass(model: Any) -> bool:
    """Replace the main subgraph's DIVs by a constant with MULs; True when any was."""
    from ai_edge_litert import schema_py_generated as schema

    sg = model.subgraphs[0]
    changed = False
    for position, op in enumerate(list(sg.operators)):
        reciprocal = _reciprocal(model, sg, op)
        if reciprocal is None:
            continue
        name = sg.tensors[op.inputs[1]].name
        name = name.decode() if isinstance(name, bytes) else (name or "divisor")
        factor = add_float32_constant(model, sg, reciprocal, name + ";reciprocal")
        options = schema.MulOptionsT()
        options.fusedActivationFunction = getattr(op.builtinOptions, "fusedActivationFunction", 0) or 0
        sg.operators[position] = new_operator(model, "MUL", [int(op.inputs[0]), factor], [int(op.outputs[0])], options)
        changed = True
    if changed:
        drop_unused_tensors(model)
    return changed
