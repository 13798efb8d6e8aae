"""Restore the ``source_fn_stack`` metadata that PT2E's annotators match patterns by.

litert-torch's annotator finds add, cat, max-pool and add+relu patterns by the ``source_fn_stack``
metadata that only strict (dynamo) tracing records; a non-strict export, and any graph re-exported
from an ExportedProgram's module, lack it, so those ops were left in float (DEQUANTIZE/ADD/QUANTIZE
islands in every residual block). Runs on the exported graph before ``prepare_pt2e``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["restore_source_functions_pass"]


def _source_functions() -> dict:
    """aten op -> the Python-level function litert-torch's annotators ask get_source_partitions for."""
    import operator

    import torch
    import torch.nn.functional as F

    aten = torch.ops.aten
    return {
        aten.add.Tensor: torch.add,
        aten.add_.Tensor: torch.add,
        aten.mul.Tensor: torch.mul,
        aten.mul_.Tensor: torch.mul,
        aten.cat.default: torch.cat,
        aten.concat.default: torch.cat,
        aten.relu.default: F.relu,
        aten.relu_.default: F.relu,
        aten.max_pool2d.default: F.max_pool2d,
        aten.adaptive_avg_pool2d.default: F.adaptive_avg_pool2d,
        aten._adaptive_avg_pool2d.default: F.adaptive_avg_pool2d,
        operator.add: torch.add,
        operator.mul: torch.mul,
    }


def restore_source_functions_pass(graph_module: Any) -> int:
    """Give every call_function node without ``source_fn_stack`` one, in place; returns how many
    (0: nothing modified).

    Known ops get the function the annotators look for (``aten.add.Tensor`` -> ``torch.add``), so
    residual adds, concatenations and poolings are quantized. Every other node gets its own aten op
    as its source, so get_source_partitions no longer groups untagged nodes by their innermost
    nn.Module (the SLICE/CONCATENATION padding the Edge TPU rewrite writes in place of a MaxPool2d's
    padding keeps the MaxPool2d's module stack and would form a "max-pool" partition without a
    max-pool). Recurrent modules keep that module fallback, which their annotator relies on.
    """
    from torch import nn

    known = _source_functions()
    changed = 0
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or node.meta.get("source_fn_stack") is not None:
            continue
        stack = node.meta.get("nn_module_stack") or {}
        innermost = list(stack.values())[-1][1] if stack else None
        if isinstance(innermost, type) and issubclass(innermost, nn.RNNBase):
            continue
        if isinstance(innermost, str) and innermost.rsplit(".", 1)[-1] in ("GRU", "LSTM", "RNN"):
            continue
        source = known.get(node.target)
        if source is None and isinstance(innermost, type) and issubclass(innermost, nn.AdaptiveAvgPool2d):
            source = nn.functional.adaptive_avg_pool2d  # it may trace to mean.dim
        node.meta["source_fn_stack"] = [(node.name, source if source is not None else node.target)]
        changed += 1
    return changed
