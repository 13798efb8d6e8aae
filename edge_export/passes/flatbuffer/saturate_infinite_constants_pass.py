"""Saturate the infinite entries of float constants to a finite magnitude before int8 quantization.

An additive attention mask built as ``torch.tril(ones).log()`` holds zeros and -inf; the converter
writes -inf as -3.4e38 (float32's lowest). Quantized as it is, that constant gets a scale of 1e36:
the ADD reading it cannot rescale (LiteRT aborted in the parity run) and the ranges around it are
wrecked (2.1 dB after a softmax). A mask only needs its masked entries far enough below the others
that a softmax gives them nothing: an int8 SOFTMAX output moves in steps of 1/256, so a logit more
than ln(512) = 6.2 below the largest rounds to exactly zero. ``magnitude`` (32 by default) keeps
that margin for logits spread over up to ~26 while the ADD's range grows by 32 instead of 3.4e38;
in float the masked weights stay below e^-26. Only constants whose other entries are finite and
below ``magnitude`` are changed, so a weight that is merely large is left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model_graph import constant_value, set_constant

__all__ = ["saturate_infinite_constants_pass", "MASK_MAGNITUDE"]

MASK_MAGNITUDE = 32.0
_INFINITE = float(np.finfo(np.float32).max)  # the converter writes -inf as float32's lowest


def _saturated(value: np.ndarray, magnitude: float) -> np.ndarray | None:
    if value.dtype != np.float32 or value.size == 0:
        return None
    infinite = np.abs(value) >= _INFINITE
    if not infinite.any() or np.isnan(value).any():
        return None
    finite = value[~infinite]
    if finite.size and np.abs(finite).max() >= magnitude:
        return None
    return np.where(infinite, np.sign(value) * np.float32(magnitude), value).astype(np.float32)


def saturate_infinite_constants_pass(model: Any, magnitude: float = MASK_MAGNITUDE) -> bool:
    """Replace ±inf (and ±float32 max) in the main subgraph's float constants by ±``magnitude``."""
    sg = model.subgraphs[0]
    changed = False
    for index in range(len(sg.tensors)):
        value = constant_value(model, sg, index)
        saturated = None if value is None else _saturated(value, magnitude)
        if saturated is not None:
            set_constant(model, sg, index, saturated)
            changed = True
    return changed
