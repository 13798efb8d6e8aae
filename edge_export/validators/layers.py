"""Per-layer parity: compare every PyTorch module's output with the flatbuffer tensor it became.

The public entry, ``per_layer_parity``, chains three stages in ``validators/per_layer/``:

- **capture** (``per_layer/capture.py``): run each sample through PyTorch, recording every
  module's output under the scope key litert-torch names tensors after (hooks on an ``nn.Module``,
  the nodes' ``nn_module_stack`` on a torch.export graph), and through LiteRT with the reference
  kernels and every intermediate tensor kept (dequantized).
- **matching** (``per_layer/matching.py``): on the first sample, decide which flatbuffer tensor
  holds which module's output. Each rule is one named function with its own unit test
  (``tests/validators/per_layer/test_per_layer_matching.py``): the owner of a tensor is the module that finished
  last, layout ops feeding a module are adapters, a BatchNorm PT2E folded is compared after the
  fold, renamed model outputs take their weights' scope, identity modules are left out, ...
  A module that owns no tensor is *fused* (listed on the op it was fused into), one that returns
  its input is *identity*, one whose tensor cannot be transposed to the PyTorch shape is a *shape
  mismatch*, one called several times without separate tensors is *repeated calls*.
- **measurement** (``per_layer/measurement.py``): the layout of each tensor, SQNR and cosine per
  row (mean over samples), the first jump (the likely culprit) and the per-layer gate.

Each compared tensor gets one row, owned by the innermost module; enclosing modules whose output
is the same tensor (a Sequential and its last child) are listed on it as ``also_outputs_of``.
The result types are in ``per_layer/results.py`` and re-exported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputSpecError, UsageError
from ..flatbuffer import FlatbufferModel, read_flatbuffer
from .per_layer.capture import capture_sample, class_fullname, graph_root_name, is_exported_graph
from .per_layer.matching import match_layers
from .per_layer.measurement import first_jump_index, measure_layers
from .per_layer.results import JUMP_DROP_DB, JUMP_FLOOR_DB, JumpRule, LayerParity, LayerParityReport, UnmatchedModule, UnmatchedReason

# The result types are re-exported: reports, tests and examples import them from here.
__all__ = [
    "LayerParity",
    "UnmatchedModule",
    "UnmatchedReason",
    "LayerParityReport",
    "per_layer_parity",
    "first_jump_index",
    "JumpRule",
    "JUMP_DROP_DB",
    "JUMP_FLOOR_DB",
]


def per_layer_parity(
    module: Any,
    example_inputs: tuple,
    model: FlatbufferModel | bytes,
    *,
    samples: list[tuple[np.ndarray, ...]] | None = None,
    channels_last_inputs: tuple[int, ...] = (),
    jump_drop_db: float = JUMP_DROP_DB,
    jump_floor_db: float = JUMP_FLOOR_DB,
    min_sqnr_db: float | None = None,
) -> LayerParityReport:
    """Compare each PyTorch module's output with its flatbuffer tensor, over the samples.

    ``module`` is the PyTorch reference (float, as the user wrote it); ``example_inputs`` and
    ``samples`` are in PyTorch's layout. ``channels_last_inputs`` names the inputs the flatbuffer
    takes as NHWC (exported through ``conversion.wrap_channels_last``): they are permuted before
    being fed to LiteRT. The flatbuffer runs with the reference kernels and every intermediate
    tensor kept, so each tensor holds what its own op computed. ``min_sqnr_db`` gates each layer
    (``LayerParity.passed``). ``model`` is the flatbuffer as read (bytes, from a file, are read and
    verified here).
    """
    if min_sqnr_db is not None and min_sqnr_db != min_sqnr_db:
        raise UsageError("The per-layer SQNR threshold is NaN.", "Give a number of dB, e.g. 25.")
    from ..runtime.interpreter import Resolver, TFLiteRunner

    fm = model if isinstance(model, FlatbufferModel) else read_flatbuffer(model)
    if samples is None:
        samples = [tuple(np.asarray(t.detach().cpu().numpy()) for t in example_inputs)]
    if not samples:
        raise UsageError("Per-layer parity was given an empty list of samples.", "Pass at least one sample.")
    runner = TFLiteRunner(fm, resolver=Resolver.REFERENCE, preserve_all_tensors=True)
    if len(samples[0]) != len(runner.inputs):
        raise InputSpecError(
            f"The flatbuffer takes {len(runner.inputs)} inputs but the samples have {len(samples[0])}.",
            "Give per-layer parity the same inputs the model was exported with.",
        )
    for i in channels_last_inputs:
        if not 0 <= i < len(runner.inputs):
            raise UsageError(
                f"channels_last_inputs names input {i}, but the model has {len(runner.inputs)} inputs.",
                "List only indices of 4-D image inputs that were exported channels-last.",
            )

    # A torch.export graph inlines its modules: read their values from the nodes instead of hooks.
    # Its train/eval mode was fixed at export time (eval() raises on it).
    from_graph = is_exported_graph(module)
    was_training = getattr(module, "training", False) and not from_graph
    if was_training:
        module.eval()
    root_name = class_fullname(type(module))
    graph_outputs = [o.index for o in runner.outputs]  # in forward()'s result order

    def run_sample(s_idx: int):
        return capture_sample(
            module, samples[s_idx], s_idx, runner, fm,
            from_graph=from_graph, channels_last_inputs=channels_last_inputs,
        )

    try:
        first = run_sample(0)
        if from_graph:
            root_name = graph_root_name(module) or root_name
        match = match_layers(fm.tensors, fm.operators, first, root_name, graph_outputs)
        # Matching uses the first sample; metrics accumulate sample by sample so that memory
        # holds one sample's activations at a time.
        later = (run_sample(i) for i in range(1, len(samples)))
        return measure_layers(
            fm.tensors, match, first, later, n_samples=len(samples),
            jump_drop_db=jump_drop_db, jump_floor_db=jump_floor_db, min_sqnr_db=min_sqnr_db,
        )
    finally:
        if was_training:
            module.train()
