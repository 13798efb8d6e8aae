"""Store each distinct quantization vector once (about 7% of a MobileNetV2's int8 file).

The writer (``flatbuffer.pack``) shares every repeated int64 zero-point and float32 scale vector
whenever it packs; this pass decides that a model holding such vectors is re-packed for it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["share_quantization_vectors_pass"]


def share_quantization_vectors_pass(model: Any) -> bool:
    """True when ``model`` has quantization parameters, whose vectors the writer then shares.

    Changes nothing itself: sharing is a property of how the model is written, not of the model
    object (an unpacked ModelT holds one array per tensor whatever the file shares).
    """
    return any(
        t.quantization is not None and t.quantization.scale is not None and len(t.quantization.scale) > 0
        for sg in model.subgraphs or ()
        for t in sg.tensors or ()
    )
