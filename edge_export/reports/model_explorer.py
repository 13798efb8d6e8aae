"""Model Explorer node data: per-layer SQNR and sensitivity as an overlay on the graph.

Model Explorer (``ai-edge-model-explorer``) colours the nodes of a .tflite graph from a JSON file
of its ``GraphNodeData`` type (model_explorer/node_data_builder.py):

    {"results": {<tensor name>: {"value": <number>}, ...},
     "thresholds": [{"value": <upper bound>, "bgColor": <css colour>}, ...]}

A result's key is one of a node's output tensor names; a value at or below a threshold's ``value``
takes the first such threshold's colour, above the last one none. Both overlays hold SQNR in dB
(lower is worse): ``<stem>.sensitivity.json`` the output SQNR with only that operator quantized
(quantization/sensitivity.py), ``<stem>.per_layer.json`` each compared layer's SQNR against
PyTorch. Keys are the tensor names of the model as checked: the written file's, or with
``--strip-names`` (micro's default) the names it had before stripping, which its
``<stem>.tensors.json`` maps back. Load one in Model Explorer with "Add per-node data".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["SQNR_THRESHOLDS", "node_data", "overlay_file", "overlay_path"]

# red below 20 dB (int8's default parity floor), orange to 30, yellow to 40; above it uncoloured
SQNR_THRESHOLDS = (
    {"value": 20, "bgColor": "#ef5350"},
    {"value": 30, "bgColor": "#ffa726"},
    {"value": 40, "bgColor": "#fff176"},
)
_KEYS = {"sensitivity": "sensitivity_overlay", "per_layer": "per_layer_overlay"}


def overlay_path(tflite_path: Path, kind: str) -> Path:
    """``<stem>.sensitivity.json`` or ``<stem>.per_layer.json`` beside the .tflite."""
    return tflite_path.with_name(f"{tflite_path.stem}.{kind}.json")


def node_data(values: dict[str, float]) -> dict:
    """GraphNodeData for SQNR values by tensor name (a value that is not finite is left out: JSON
    has no infinity, and a lossless layer needs no colour)."""
    results = {name: {"value": round(float(v), 3)} for name, v in values.items() if v is not None and math.isfinite(v)}
    return {"results": results, "thresholds": [dict(t) for t in SQNR_THRESHOLDS]}


def _sensitivity_values(report: Any, model: Any) -> dict[str, float]:
    """Each ranked operator's SQNR under its tensor name in ``model``. The ranking was measured on
    the float model's names; a model from the PT2E backend names its tensors its own way, so an
    operator whose name is not in it is found by its module and opcode instead."""
    from ..graph.provenance import operator_module

    names = {t.name for t in model.tensors}
    by_module: dict[tuple[str, str], str] = {}
    for op in model.operators:
        for index in op.outputs:
            name = model.tensors[index].name if index >= 0 else ""
            ref = operator_module(name, op.opcode) if name else None
            if ref is not None:
                by_module.setdefault((ref.path, op.opcode), name)
            break
    values = {}
    for layer in report.layers:
        name = layer.tensor if layer.tensor in names else by_module.get((layer.module_path, layer.opcode))
        if name is not None and name not in values:
            values[name] = layer.sqnr_db
    return values


def overlay_file(kind: str, report: Any, model: Any, tflite_path: Path) -> tuple[str, Path, bytes]:
    """The overlay as (its key under the report's "artifacts", its path, its bytes), which the
    finish stage writes atomically with the .tflite. Only names that are tensors of ``model`` are
    kept: Model Explorer matches nothing else."""
    if kind == "sensitivity":
        values = _sensitivity_values(report, model)
    else:
        names = {t.name for t in model.tensors}
        values = {row.tflite_tensor: row.sqnr_db for row in report.layers if row.tflite_tensor in names}
    data = json.dumps(node_data(values), indent=1, sort_keys=False).encode("utf-8") + b"\n"
    return _KEYS[kind], overlay_path(tflite_path, kind), data
