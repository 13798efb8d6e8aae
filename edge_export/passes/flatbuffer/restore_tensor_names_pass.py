"""Put back inner tensor names from a tensor-name map (``validate`` on a stripped file).

The inverse of ``strip_tensor_names_pass`` for the tensors the map names: per-layer parity finds
each layer's tensor by the module path in its name, so ``validate --per-layer`` restores the names
of a stripped model in memory from the ``<stem>.tensors.json`` written with it
(``edge_export.artifacts.tensor_names``). Only names change; the file on disk is not touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import UsageError

__all__ = ["restore_tensor_names_pass"]


def restore_tensor_names_pass(model: Any, names: Sequence[Mapping[int, str]]) -> bool:
    """Name tensor ``index`` of subgraph ``i`` ``names[i][index]``; True if any name changed."""
    subgraphs = model.subgraphs or []
    if len(names) > len(subgraphs):
        raise UsageError(
            f"The tensor-name map names {len(names)} subgraphs but the model has {len(subgraphs)}.",
            "Pass the map written with this model.",
        )
    modified = False
    for sg, sg_names in zip(subgraphs, names):
        tensors = sg.tensors or []
        for index, name in sg_names.items():
            if not 0 <= index < len(tensors):
                raise UsageError(
                    f"The tensor-name map names tensor {index}, but the model's subgraph has {len(tensors)} tensors.",
                    "Pass the map written with this model.",
                )
            encoded = name.encode()
            if tensors[index].name != encoded:
                tensors[index].name = encoded
                modified = True
    return modified
