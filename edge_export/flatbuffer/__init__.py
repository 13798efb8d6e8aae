"""LiteRT flatbuffers in pure Python: read and verify, write aligned, account for the bytes.

- ``model``: the typed model every later stage reads (``FlatbufferModel``, ``TensorInfo``, ...).
- ``parse``: ``read_flatbuffer``/``load_flatbuffer``, verified (``verify``: flatbuffers' C++
  Verifier rules) and checked for what the kernels trust (``kernel_checks``) before any runtime
  sees the bytes; ``malformed``: the errors they raise.
- ``schema_layout`` (+ ``schema_layout.json``): which field of which schema table is what, and
  ``schema_walk``: the one walk over the tables by that layout, shared by ``verify`` and
  ``accounting``.
- ``schema_reader``: the one door to ai-edge-litert's lazy schema reader (the root table, enum
  names, facts read without unpacking the model).
- ``pack`` (with ``aligned_builder``): the writer of every .tflite (16-byte aligned buffers, each
  equal vector and table once); ``accounting``: where a file's bytes go, and the schema's floor.

``python -m edge_export.flatbuffer --write-layout`` regenerates the schema layout after a pin change.
"""

from __future__ import annotations

from .accounting import PAYLOAD_CATEGORIES, byte_accounting, payload_bytes, schema_floor
from .malformed import OversizedTensorError
from .model import (
    DTYPE_BITS,
    FLOAT_DTYPES,
    INTEGER_ACTIVATION_DTYPES,
    FlatbufferModel,
    OperatorInfo,
    PerChannelQuantization,
    PerTensorQuantization,
    QuantParams,
    TensorInfo,
)
from .pack import align_buffers, misaligned_buffers, pack_model, read_model
from .parse import load_flatbuffer, read_flatbuffer
from .schema_reader import has_builtin_operator, metadata_buffer, opcode_names

__all__ = [
    "DTYPE_BITS",
    "FLOAT_DTYPES",
    "INTEGER_ACTIVATION_DTYPES",
    "PAYLOAD_CATEGORIES",
    "FlatbufferModel",
    "OperatorInfo",
    "OversizedTensorError",
    "PerChannelQuantization",
    "PerTensorQuantization",
    "QuantParams",
    "TensorInfo",
    "align_buffers",
    "byte_accounting",
    "has_builtin_operator",
    "load_flatbuffer",
    "metadata_buffer",
    "misaligned_buffers",
    "opcode_names",
    "pack_model",
    "payload_bytes",
    "read_flatbuffer",
    "read_model",
    "schema_floor",
]
