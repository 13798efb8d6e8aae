"""Flatbuffer passes: rewrites of a converted model, one module each (``<verb>_<object>_pass.py``).

Each pass is a function over the mutable model object (ai-edge-litert's ``ModelT``) that checks
its preconditions, changes the model and returns whether it changed anything;
``run_flatbuffer_passes`` runs a list of them and packs once, through the aligned writer
(``flatbuffer.pack``). List them with ``python -m edge_export.passes``.
"""

from __future__ import annotations

from .attach_metadata_pass import attach_metadata_pass
from .drop_abs_before_square_pass import drop_abs_before_square_pass
from .expose_tensors_pass import expose_tensors_pass
from .fold_constant_operators_pass import fold_constant_operators_pass
from .fold_layout_chains_pass import fold_layout_chains_pass
from .multiply_by_reciprocal_pass import multiply_by_reciprocal_pass
from .permute_fully_connected_weights_pass import permute_fully_connected_weights_pass
from .pipeline import FlatbufferPass, PassPipelineResult, pass_name, run_flatbuffer_passes
from .quantize_embedding_tables_pass import quantize_embedding_tables_pass
from .remove_noop_operators_pass import remove_noop_operators_pass
from .rename_signature_pass import rename_signature_pass
from .reset_lstm_states_pass import reset_lstm_states_pass
from .repair_signature_outputs_pass import repair_signature_outputs_pass
from .saturate_infinite_constants_pass import saturate_infinite_constants_pass
from .round_to_float16_pass import round_to_float16_pass
from .reorder_operators_for_edgetpu_pass import reorder_operators_for_edgetpu_pass
from .restore_tensor_names_pass import restore_tensor_names_pass
from .rewrite_reduction_axes_pass import rewrite_reduction_axes_pass
from .set_io_dtype_pass import set_io_dtype_pass
from .share_quantization_vectors_pass import share_quantization_vectors_pass
from .split_prelu_pass import split_prelu_pass
from .split_squared_difference_pass import split_squared_difference_pass
from .split_weights_pass import split_weights_pass
from .strip_tensor_names_pass import strip_tensor_names_pass
from .strip_unread_fields_pass import strip_unread_fields_pass

# What the conversion stage runs on every converter output (conversion.fold_layout_transposes), in
# this order: reductions first (a TRANSPOSE they no longer read may then fold away), then flattens
# into fully connected layers, then what is left of each chain of layout operators.
LAYOUT_PASSES = (rewrite_reduction_axes_pass, permute_fully_connected_weights_pass, fold_layout_chains_pass)

__all__ = [
    "attach_metadata_pass",
    "expose_tensors_pass",
    "drop_abs_before_square_pass",
    "FlatbufferPass",
    "fold_constant_operators_pass",
    "multiply_by_reciprocal_pass",
    "fold_layout_chains_pass",
    "LAYOUT_PASSES",
    "pass_name",
    "PassPipelineResult",
    "permute_fully_connected_weights_pass",
    "quantize_embedding_tables_pass",
    "remove_noop_operators_pass",
    "rename_signature_pass",
    "reset_lstm_states_pass",
    "reorder_operators_for_edgetpu_pass",
    "repair_signature_outputs_pass",
    "restore_tensor_names_pass",
    "rewrite_reduction_axes_pass",
    "round_to_float16_pass",
    "run_flatbuffer_passes",
    "saturate_infinite_constants_pass",
    "set_io_dtype_pass",
    "share_quantization_vectors_pass",
    "split_prelu_pass",
    "split_squared_difference_pass",
    "split_weights_pass",
    "strip_tensor_names_pass",
    "strip_unread_fields_pass",
]
