"""Reorder a model's operators for the Edge TPU compiler.

The compiler cuts the graph once, at the first operator it cannot map in execution order; every
operator after the cut runs on the CPU even when it could map. This pass moves every operator that
maps and depends only on mapped operators before the first one that does not (a valid topological
order: the graph computes the same values). Which operators map is the Edge TPU checker's verdict
(``targets/edgetpu.check_edgetpu``), given per operator of the main subgraph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import InternalError

__all__ = ["reorder_operators_for_edgetpu_pass"]


def reorder_operators_for_edgetpu_pass(model: Any, supported: Sequence[bool]) -> bool:
    """Move the mapped prefix of ``model``'s main subgraph first; True if the order changed.

    ``supported[i]`` says whether operator ``i`` maps (boundary QUANTIZE/DEQUANTIZE count as
    supported: they never cut the graph).
    """
    sg = model.subgraphs[0]
    operators = list(sg.operators or ())
    if len(supported) != len(operators):
        raise InternalError(
            f"The Edge TPU verdict covers {len(supported)} operators but the model has {len(operators)}."
        )
    graph_inputs = {int(i) for i in (sg.inputs if sg.inputs is not None else ())}
    producer: dict[int, int] = {}
    for index, op in enumerate(operators):
        for t in op.outputs if op.outputs is not None else ():
            producer[int(t)] = index
    prefix: list[int] = []
    in_prefix: set[int] = set()
    for index, op in enumerate(operators):
        if not supported[index]:
            continue
        inputs = (int(t) for t in (op.inputs if op.inputs is not None else ()))
        deps = {producer[t] for t in inputs if t >= 0 and t in producer and t not in graph_inputs}
        if deps <= in_prefix:
            prefix.append(index)
            in_prefix.add(index)
    order = prefix + [i for i in range(len(operators)) if i not in in_prefix]
    if order == list(range(len(operators))):
        return False
    sg.operators = [operators[i] for i in order]
    return True
