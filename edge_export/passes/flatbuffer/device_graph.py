"""The flatbuffer passes every export runs on the converted (or quantized) model, whatever the
target: operators that compute nothing are removed and operators of constants are folded, so no
operator is left that only costs time and splits delegate partitions (see each pass)."""

from __future__ import annotations

from ...flatbuffer import FlatbufferModel
from .fold_constant_operators_pass import fold_constant_operators_pass
from .pipeline import run_flatbuffer_passes
from .remove_noop_operators_pass import remove_noop_operators_pass

__all__ = ["simplify_device_graph", "DEVICE_GRAPH_PASSES"]

DEVICE_GRAPH_PASSES = (remove_noop_operators_pass, fold_constant_operators_pass)


def simplify_device_graph(model: FlatbufferModel) -> FlatbufferModel:
    """``model`` with the device-graph passes applied (the same object when none changed anything)."""
    return run_flatbuffer_passes(model, DEVICE_GRAPH_PASSES, origin="the simplified model").model
