"""The precision a flatbuffer was exported at, read from its tensors: validate's default thresholds."""

from __future__ import annotations

from typing import Any

from ..config import QuantizeMode

__all__ = ["infer_precision"]


def infer_precision(fb: Any) -> QuantizeMode:
    """The precision a flatbuffer was exported at, read from its tensors (for default thresholds)."""
    activations = [t for t in fb.tensors if not t.is_constant]
    constants = [t for t in fb.tensors if t.is_constant]
    if any(t.dtype == "int16" and t.quant for t in activations):
        return QuantizeMode.INT16X8
    if fb.is_fully_integer or any(t.dtype in ("int8", "uint8") and t.quant for t in activations):
        return QuantizeMode.INT8
    if any(t.dtype == "int4" and t.quant for t in constants):
        return QuantizeMode.INT4
    if any(t.dtype == "int8" and t.quant for t in constants):
        return QuantizeMode.DYNAMIC_INT8
    if any(t.dtype == "float16" for t in constants):
        return QuantizeMode.FP16
    return QuantizeMode.NONE
