"""FX passes: rewrites of an exported PyTorch graph before conversion, one module each
(``<verb>_<object>_pass.py``). Each changes a ``torch.fx.GraphModule`` (in place, or a copy it
returns) and says what it changed. List them with ``python -m edge_export.passes``.
"""

from __future__ import annotations

from .distinct_operand_scales_pass import distinct_operand_scales_pass
from .permute_io_channels_last_pass import permute_io_channels_last_pass
from .refuse_unrunnable_ops_pass import refuse_unrunnable_ops_pass
from .restore_source_functions_pass import restore_source_functions_pass
from .rewrite_covering_pools_as_means_pass import rewrite_covering_pools_as_means_pass
from .rewrite_expands_as_broadcasts_pass import rewrite_expands_as_broadcasts_pass
from .rewrite_lstms_as_sequence_lstm_pass import rewrite_lstms_as_sequence_lstm_pass
from .rewrite_one_hot_as_comparison_pass import rewrite_one_hot_as_comparison_pass
from .rewrite_patch_folds_as_reshapes_pass import rewrite_patch_folds_as_reshapes_pass
from .rewrite_ops_for_edgetpu_pass import rewrite_ops_for_edgetpu_pass
from .rewrite_prelus_as_litert_prelu_pass import rewrite_prelus_as_litert_prelu_pass
from .rewrite_reflect_replicate_pads_pass import rewrite_reflect_replicate_pads_pass
from .rewrite_sorts_as_topk_v2_pass import rewrite_sorts_as_topk_v2_pass

__all__ = [
    "distinct_operand_scales_pass",
    "permute_io_channels_last_pass",
    "refuse_unrunnable_ops_pass",
    "restore_source_functions_pass",
    "rewrite_covering_pools_as_means_pass",
    "rewrite_expands_as_broadcasts_pass",
    "rewrite_lstms_as_sequence_lstm_pass",
    "rewrite_one_hot_as_comparison_pass",
    "rewrite_ops_for_edgetpu_pass",
    "rewrite_prelus_as_litert_prelu_pass",
    "rewrite_reflect_replicate_pads_pass",
    "rewrite_patch_folds_as_reshapes_pass",
    "rewrite_sorts_as_topk_v2_pass",
]
