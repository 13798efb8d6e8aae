"""Put a TFLite model metadata buffer into a model (``--labels``, ``--mean``/``--std``, ``--model-name``...).

The metadata schema (MediaPipe's ``metadata_schema.fbs``, read by MediaPipe Tasks and the LiteRT
support library) is stored in one ``Model.buffers`` entry named by a ``Model.metadata`` entry
``TFLITE_METADATA``. The pass adds both, or replaces the data of an existing one, so the model keeps
one metadata buffer; the aligned writer places it at a multiple of 16 like every buffer. The
associated files (labels) are not part of the flatbuffer: ``model_metadata.attach_metadata`` appends
them as a zip after the packed model.
"""

from __future__ import annotations

from typing import Any

__all__ = ["METADATA_BUFFER_NAME", "attach_metadata_pass"]

METADATA_BUFFER_NAME = b"TFLITE_METADATA"


def attach_metadata_pass(model: Any, metadata_buffer: bytes) -> bool:
    """Store ``metadata_buffer`` as the model's ``TFLITE_METADATA``; True if anything changed."""
    import numpy as np
    from ai_edge_litert import schema_py_generated as schema

    data = np.frombuffer(bytes(metadata_buffer), dtype=np.uint8)
    model.buffers = list(model.buffers or [])
    model.metadata = list(model.metadata or [])
    for entry in model.metadata:
        name = entry.name.encode() if isinstance(entry.name, str) else bytes(entry.name or b"")
        if name == METADATA_BUFFER_NAME:
            current = model.buffers[entry.buffer]
            if current.data is not None and bytes(np.asarray(current.data, dtype=np.uint8)) == bytes(metadata_buffer):
                return False
            replacement = schema.BufferT()
            replacement.data = data
            model.buffers[entry.buffer] = replacement
            return True
    buffer = schema.BufferT()
    buffer.data = data
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = METADATA_BUFFER_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata.append(entry)
    return True
