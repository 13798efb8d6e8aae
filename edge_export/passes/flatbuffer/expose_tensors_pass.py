"""Make named inner tensors outputs of the main subgraph, so that a run can read them without
``experimental_preserve_all_tensors``.

Keeping every tensor switches off LiteRT's memory reuse and the XNNPACK delegate: on the zoo's YOLOS
one run of the float model took 176 ms that way and about a tenth of that as the model normally
runs. A calibration step that reads a few tensors per run (normalization_ranges.py) exposes them
instead. The signature is not changed (apps see the same model); the extra outputs follow the
signature's in subgraph order, and tensors that are constants, inputs or already outputs are left
as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["expose_tensors_pass"]


def _name(tensor: Any) -> str:
    name = tensor.name
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name or "")


def expose_tensors_pass(model: Any, names: Iterable[str]) -> bool:
    """Append the tensors called ``names`` in subgraph 0 to its outputs; True if any was added."""
    if not model.subgraphs:
        return False
    sg = model.subgraphs[0]
    wanted = set(names)
    outputs = [int(i) for i in (sg.outputs if sg.outputs is not None else [])]
    inputs = {int(i) for i in (sg.inputs if sg.inputs is not None else [])}
    computed = {int(i) for op in sg.operators or () for i in (op.outputs if op.outputs is not None else [])}
    added = [
        index for index, tensor in enumerate(sg.tensors or ())
        if _name(tensor) in wanted and index in computed and index not in inputs and index not in outputs
    ]
    if not added:
        return False
    sg.outputs = outputs + added
    return True
