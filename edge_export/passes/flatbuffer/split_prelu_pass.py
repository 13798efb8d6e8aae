"""Write each float PRELU as RELU, MUL, MUL and SUB for the flatbuffer quantizer, which has no PRELU recipe.

``rewrite_prelus_as_litert_prelu_pass`` gives every export LiteRT's PRELU, and PT2E quantizes it;
ai-edge-quantizer has no recipe for it and left it float between a DEQUANTIZE and a QUANTIZE, so
``--quant-backend flatbuffer`` (and int16x8, which only that backend does) lost the fully integer
model it had. On the float model it calibrates, PRELU becomes what litert-torch wrote before that
pass, ``relu(x) - alpha * relu(-x)`` (``relu(-x)`` as a MUL by -1 with a fused RELU), which it
quantizes fully. In float it is PRELU's value bit for bit: ``x`` where ``x > 0``, else ``0 - alpha *
-x``, the same rounded product ``alpha * x`` with its sign flipped twice. The SUB keeps the original
output tensor (its name and module); the new tensors are named after it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph_edits import add_activation_like, add_float32_constant, new_operator, opcode_name

__all__ = ["split_prelu_pass"]


def _split(model: Any, sg: Any, op: Any, minus_one: int) -> list[Any]:
    from ai_edge_litert import schema_py_generated as schema

    x, alpha = (int(i) for i in op.inputs)
    out = int(op.outputs[0])
    shape = sg.tensors[out].shape
    positive, negative, scaled = (add_activation_like(sg, out, shape, suffix) for suffix in (";relu", ";relu_neg", ";scaled"))
    negated = schema.MulOptionsT()
    negated.fusedActivationFunction = schema.ActivationFunctionType.RELU
    return [
        new_operator(model, "RELU", [x], [positive]),
        new_operator(model, "MUL", [x, minus_one], [negative], negated),
        new_operator(model, "MUL", [negative, alpha], [scaled], schema.MulOptionsT()),
        new_operator(model, "SUB", [positive, scaled], [out], schema.SubOptionsT()),
    ]


def split_prelu_pass(model: Any) -> bool:
    """Replace the main subgraph's float PRELU operators; True when any was."""
    from ai_edge_litert import schema_py_generated as schema

    sg = model.subgraphs[0]
    rewritten: list[Any] = []
    minus_one = None
    for op in sg.operators:
        float_prelu = (
            opcode_name(model, op) == "PRELU" and op.inputs is not None and len(op.inputs) == 2
            and all(sg.tensors[int(i)].type == schema.TensorType.FLOAT32 for i in (*op.inputs, *op.outputs))
        )
        if not float_prelu:
            rewritten.append(op)
            continue
        if minus_one is None:
            minus_one = add_float32_constant(model, sg, np.array(-1.0, dtype=np.float32), "prelu;minus_one")
        rewritten += _split(model, sg, op, minus_one)
    sg.operators = rewritten
    return minus_one is not None
