"""The precision a flatbuffer was exported at, read from its tensors: validate's default thresholds."""

from __future__ import annotations

from typing import Any

from ..config import QuantizeMode

__all__ = ["infer_precision"]


def infer_precision(fb: Any) -> QuantizeMode | str:
    """The precision a flatbuffer was exported at, read from its tensors (for default thresholds):
    the first mode of the table (quantize_modes.py) whose ``reads_as`` recognises it, the more
    specific precisions first (int16 activations before int8 ones, int8 activations before int8
    weights). A mode only the table knows (a test's) comes back as its name."""
    from ..quantize_modes import MODES

    activations = [t for t in fb.tensors if not t.is_constant]
    constants = [t for t in fb.tensors if t.is_constant]
    for spec in sorted(MODES.values(), key=lambda s: s.detect_rank):
        if spec.reads_as(fb, activations, constants):
            try:
                return QuantizeMode(spec.name)
            except ValueError:
                return spec.name
    return QuantizeMode.NONE
