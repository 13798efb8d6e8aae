"""The FX passes every export runs before conversion: what LiteRT cannot run is refused or rewritten.

litert-torch traces the module itself; to see the aten calls it will lower (a functional
``torch.topk`` is invisible on the nn.Module), the module is exported here once more. When no pass
finds anything, the caller's module goes on unchanged, so litert-torch traces exactly what it
traced before; otherwise the rewritten GraphModule does (its nodes keep their ``nn_module_stack``,
so the flatbuffer's tensor names still name the user's modules). A module torch.export cannot
trace is left to the conversion stage, which reports the failure with its location.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .refuse_unrunnable_ops_pass import refuse_unrunnable_ops_pass
from .rewrite_covering_pools_as_means_pass import rewrite_covering_pools_as_means_pass
from .rewrite_expands_as_broadcasts_pass import rewrite_expands_as_broadcasts_pass
from .rewrite_lstms_as_sequence_lstm_pass import rewrite_lstms_as_sequence_lstm_pass
from .rewrite_one_hot_as_comparison_pass import rewrite_one_hot_as_comparison_pass
from .rewrite_patch_folds_as_reshapes_pass import rewrite_patch_folds_as_reshapes_pass
from .rewrite_prelus_as_litert_prelu_pass import rewrite_prelus_as_litert_prelu_pass
from .rewrite_reflect_replicate_pads_pass import rewrite_reflect_replicate_pads_pass
from .rewrite_sorts_as_topk_v2_pass import rewrite_sorts_as_topk_v2_pass
from .rewrites import FxRewrite

__all__ = ["LiteRTGraph", "prepare_graph_for_litert"]

# In order: refusals first (nothing is rewritten in a model that cannot run anyway).
_REWRITES = (
    rewrite_sorts_as_topk_v2_pass,
    rewrite_covering_pools_as_means_pass,
    rewrite_one_hot_as_comparison_pass,
    rewrite_expands_as_broadcasts_pass,
    rewrite_patch_folds_as_reshapes_pass,
    rewrite_lstms_as_sequence_lstm_pass,
    rewrite_prelus_as_litert_prelu_pass,
    rewrite_reflect_replicate_pads_pass,
)


@dataclass(frozen=True)
class LiteRTGraph:
    module: Any  # what to convert: the rewritten GraphModule, or the caller's module unchanged
    rewrites: tuple[FxRewrite, ...]


def _export(module: Any, example: tuple, strict: bool) -> Any:
    import torch

    from ...processes.library_output import quiet_libraries

    with quiet_libraries(False):
        try:
            return torch.export.export(module, tuple(example), strict=strict).module()
        except Exception:  # the conversion stage traces again and reports the failure with its location
            return None


def prepare_graph_for_litert(module: Any, example: tuple, *, strict: bool = False) -> LiteRTGraph:
    """Refuse operators LiteRT cannot run (TargetError, exit 2) and rewrite the lowerings it cannot
    run into ones it can; see the module docstring for what is converted afterwards."""
    graph = _export(module, example, strict)
    if graph is None:
        return LiteRTGraph(module, ())
    refuse_unrunnable_ops_pass(graph)
    rewrites: list[FxRewrite] = []
    for rewrite in _REWRITES:
        rewrites.extend(rewrite(graph))
    return LiteRTGraph(graph if rewrites else module, tuple(rewrites))
