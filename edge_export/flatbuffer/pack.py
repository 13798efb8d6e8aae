"""Writing a LiteRT model object back to flatbuffer bytes: every buffer 16-byte aligned, each
distinct quantization vector stored once. Every .tflite edge-export writes goes through
``pack_model`` (or ``align_buffers`` for bytes straight from the converter); the rewrites that
precede it are the flatbuffer passes in ``edge_export/passes/flatbuffer/``.

Alignment. The TFLite schema declares ``force_align: 16`` on ``Buffer.data``, but Python's
``flatbuffers.Builder`` ignores the attribute (tflite-micro PR 3177), so neither litert-torch's
converter nor a plain ``ModelT.Pack`` honours it: a small CNN's weights start at 4, 8 or 12 mod 16.
Cortex-M cores fault on misaligned wide loads (an int16x8 model's int64 biases), TFLite Micro
documents 16-byte alignment for model data, and LiteRT copies buffers it cannot use in place.
The builder here places each buffer's bytes at a multiple of 16 from the file start: it aligns the
vector to 16 from the end of the (back-to-front) build, and ``Finish`` pads the file to a multiple
of the largest alignment used, so the two coincide. The padding costs at most 15 bytes a buffer.

Sharing. A per-channel quantized tensor stores a float32 scale and an int64 zero point per channel,
and the bias of every quantized conv or linear stores another such pair. The zero points are all
zero for symmetric weights, so a MobileNetV2 repeats the same all-zero vectors thousands of bytes at
a time: about 7% of its int8 file (289 kB of 4.1 MB). FlatBuffers allows any number of tables to
point at one vector, and readers (LiteRT, TFLite Micro, flatc, the Edge TPU compiler) only follow
offsets, so writing each distinct quantization vector once is lossless: the model decodes to the
same values and runs bit-identically. The same holds for every other repeated piece that
is not buffer data, so the writer stores each once: int32 vectors (tensor shapes, most of which
repeat in a transformer; operator and subgraph index vectors), strings (the empty names
``--strip-names`` leaves), and whole quantization-parameter and builtin-options tables (an
activation's scale and zero point repeat through reshapes and transposes; most operators of one
kind have the same options). Passes may leave vectors as Python lists; they are written as numpy
vectors of the schema's type (same values), so equal lists are shared too. Measured on the
benchmark transformer (int8, ``--strip-names``): 6 kB of 184 kB (benchmarks/int8_payload.py).

Layout. Each table's fields are written largest first (the generated packer's order pads a tensor's
two 1-byte fields to 4 bytes each), and every buffer's data is written first, each preceded by
vectors the model needs anyway (shapes, index vectors, scales) chosen to fill the gap the 16-byte
rule would leave before it: (4 - size) mod 16 bytes a buffer otherwise, 448 bytes on the benchmark
MobileNetV2 width 0.5 (int64 zero points go where their data lands 8-byte aligned, saving the 4
bytes they would often cost among the tables). Values are unchanged; only positions move.

Buffers stored outside the flatbuffer. The converter keeps the data of a model over 2 GB after
the flatbuffer, located by ``Buffer.offset`` (from the file start, > 1) and ``Buffer.size``.
ai-edge-litert's reader moves such data inside the model object, so every pass sees one layout, and
the writer does the same (reading the bytes from ``source``); a model whose constants do not fit in
one flatbuffer is refused with a ConversionError rather than written with the data misplaced.
Converter output that is already aligned is kept as it is, external buffers included.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConversionError, FlatbufferError, InternalError
from .schema_reader import model_table

__all__ = [
    "align_buffers",
    "misaligned_buffers",
    "pack_model",
    "read_model",
]

_TFLITE_FILE_IDENTIFIER = b"TFL3"
# Buffer.offset values 0 and 1 mean "data inline" (1 is the converter's placeholder); see the
# runtimes' readers, which take data from the file only for offset > 1.
_EXTERNAL_OFFSET_MIN = 2
# A flatbuffer addresses itself with signed 32-bit offsets; leave room for the tables around the data.
_MAX_FLATBUFFER_BYTES = 2**31 - 2**24


def _pack_flatbuffer(model: Any) -> bytes:
    import numpy as np

    from .aligned_builder import BUFFER_ALIGNMENT, AlignedModelBuilder

    aligned: set[int] = set()
    for buf in model.buffers or ():
        if buf.data is None:
            continue
        if type(buf.data) is not np.ndarray or buf.data.dtype != np.uint8:  # the packer's fast path needs one
            raw = buf.data
            bytes_like = isinstance(raw, (bytes, bytearray, memoryview))
            buf.data = np.frombuffer(bytes(raw), dtype=np.uint8) if bytes_like else np.asarray(raw, dtype=np.uint8)
        if buf.data.size:
            aligned.add(id(buf.data))
    # Sized for the constants up front: growing the builder copies everything written so far.
    constant_bytes = sum(len(buf.data) for buf in model.buffers or () if buf.data is not None)
    builder = AlignedModelBuilder(constant_bytes + BUFFER_ALIGNMENT * len(aligned) + 2**16, aligned)
    restore = _share_equal_tables(model)
    try:
        data = [buf.data for buf in model.buffers or () if id(buf.data) in aligned]
        builder.fill_alignment_gaps(list({id(d): d for d in data}.values()), _filler_vectors(model))
        builder.Finish(model.Pack(builder), file_identifier=_TFLITE_FILE_IDENTIFIER)
    finally:
        restore()
    return bytes(memoryview(builder.Bytes)[builder.Head() :])


# Vector fields written once when equal, and their schema element types.
_INDEX_VECTORS = {"SubGraphT": ("inputs", "outputs"), "TensorT": ("shape", "shapeSignature"), "OperatorT": ("inputs", "outputs", "intermediates")}
_QUANTIZATION_VECTORS = {"scale": "<f4", "zeroPoint": "<i8", "min": "<f4", "max": "<f4"}


class _PackedOnce:
    """Stands in for a table object while packing: equal tables are written once, and every
    table that pointed at one of them points at that one copy (the generated packer calls
    ``.Pack(builder)`` on the field's object)."""

    def __init__(self, table: Any, written: dict[tuple, int], key: tuple) -> None:
        self.table, self.written, self.key = table, written, key

    def Pack(self, builder: Any) -> int:  # noqa: N802 (the generated packer's name)
        found = self.written.get(self.key)
        if found is None:
            found = self.written[self.key] = self.table.Pack(builder)
        return found


def _table_key(table: Any) -> tuple:
    import numpy as np

    def value(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return (v.dtype.str, v.shape, v.tobytes())
        if isinstance(v, (list, tuple)):
            return tuple(value(x) for x in v)
        if hasattr(v, "__dict__"):
            return _table_key(v)
        return (type(v).__name__, v)

    return (type(table).__name__, tuple((k, value(v)) for k, v in sorted(vars(table).items())))


def _filler_vectors(model: Any) -> list[Any]:
    """The distinct vectors ``model`` packs that the writer shares (int32 index vectors and shapes,
    float32 scales, int64 zero points), in the order they appear: what ``fill_alignment_gaps`` may
    write early. Each is written once anyway, so writing it early costs nothing."""
    import numpy as np

    from .aligned_builder import SHARED_DTYPES

    found: dict[tuple[str, bytes], Any] = {}

    def add(vector: Any) -> None:
        if isinstance(vector, np.ndarray) and vector.ndim == 1 and vector.dtype.str in SHARED_DTYPES:
            found.setdefault((vector.dtype.str, vector.tobytes()), vector)

    for sg in model.subgraphs or ():
        for field in _INDEX_VECTORS["SubGraphT"]:
            add(getattr(sg, field))
        for tensor in sg.tensors or ():
            for field in _INDEX_VECTORS["TensorT"]:
                add(getattr(tensor, field))
            q = tensor.quantization.table if isinstance(tensor.quantization, _PackedOnce) else tensor.quantization
            if q is not None:
                for field in ("scale", "zeroPoint", "min", "max"):
                    add(getattr(q, field))
        for op in sg.operators or ():
            for field in _INDEX_VECTORS["OperatorT"]:
                add(getattr(op, field))
    return list(found.values())


def _as_vector(values: Any, dtype: str) -> Any:
    import numpy as np

    if values is None or isinstance(values, np.ndarray):
        return values
    return np.asarray(values, dtype=dtype)


def _share_equal_tables(model: Any) -> Any:
    """Prepare ``model`` so that its packing writes each equal vector and table once: list-valued
    vectors become numpy vectors of their schema type, and each quantization-parameters or
    builtin-options table is replaced by a ``_PackedOnce`` keyed by its content. Returns the
    function that puts the original table objects back (the caller's model is left as it was,
    but for lists now numpy vectors of the same values)."""
    written: dict[tuple, int] = {}
    replaced: list[tuple[Any, str, Any]] = []

    def share(owner: Any, field: str) -> None:
        table = getattr(owner, field, None)
        if table is not None:
            replaced.append((owner, field, table))
            setattr(owner, field, _PackedOnce(table, written, _table_key(table)))

    for sg in model.subgraphs or ():
        for field in _INDEX_VECTORS["SubGraphT"]:
            setattr(sg, field, _as_vector(getattr(sg, field), "<i4"))
        for tensor in sg.tensors or ():
            for field in _INDEX_VECTORS["TensorT"]:
                setattr(tensor, field, _as_vector(getattr(tensor, field), "<i4"))
            q = tensor.quantization
            if q is not None:
                for field, dtype in _QUANTIZATION_VECTORS.items():
                    setattr(q, field, _as_vector(getattr(q, field), dtype))
                share(tensor, "quantization")
        for op in sg.operators or ():
            for field in _INDEX_VECTORS["OperatorT"]:
                setattr(op, field, _as_vector(getattr(op, field), "<i4"))
            share(op, "builtinOptions")
            share(op, "builtinOptions2")

    def restore() -> None:
        for owner, field, table in replaced:
            setattr(owner, field, table)

    return restore


def _inline_external_buffers(model: Any, source: bytes | None) -> None:
    """Move the data of buffers stored after the flatbuffer (``Buffer.offset`` > 1) into it, as
    ai-edge-litert's reader (``read_model``) already does: the writer keeps one layout."""
    for buf in model.buffers or ():
        start, size = int(buf.offset or 0), int(buf.size or 0)
        if start < _EXTERNAL_OFFSET_MIN:
            continue
        if source is None:
            raise InternalError("A model with buffers stored after the flatbuffer was packed without the file it came from.")
        if start + size > len(source):
            raise FlatbufferError(
                f"The model's buffer data at byte {start} ({size} bytes) lies outside the file "
                f"({len(source)} bytes). The file may be truncated or corrupted.",
                "Re-export the model, or check that the file was copied completely.",
            )
        buf.data, buf.offset, buf.size = bytes(source[start : start + size]), 0, 0


def pack_model(model: Any, source: bytes | None = None) -> bytes:
    """Serialize a ``schema_py_generated.ModelT``: every buffer's data at a multiple of 16 bytes
    from the file start, repeated quantization vectors written once. Deterministic: the same model
    packs to the same bytes.

    Buffer data is written inside the flatbuffer. Data a model stores after it (``Buffer.offset``
    > 1, the converter's layout for models over 2 GB) is read from ``source``, the file the model
    came from, and moved inside; a model whose constants cannot fit in one flatbuffer is refused.
    """
    _inline_external_buffers(model, source)
    constant_bytes = sum(len(buf.data) for buf in model.buffers or () if buf.data is not None)
    if constant_bytes > _MAX_FLATBUFFER_BYTES:
        raise ConversionError(
            f"The model holds {constant_bytes / 2**30:.1f} GiB of constant data, more than one "
            "flatbuffer can hold (2 GiB); edge-export writes every buffer inside the flatbuffer, "
            "16-byte aligned, as the devices it targets load them.",
            "Quantize the weights (--quantize fp16, dynamic-int8 or int8) to bring them under 2 GiB, "
            "or export a smaller model.",
        )
    return _pack_flatbuffer(model)


def read_model(model_bytes: bytes) -> Any:
    """The ``ModelT`` object of ``model_bytes`` (pass the same bytes to ``pack_model`` as ``source``)."""
    from ai_edge_litert.tools import flatbuffer_utils

    return flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))


def misaligned_buffers(model_bytes: bytes) -> list[tuple[int, int]]:
    """``(buffer index, byte offset)`` of every non-empty buffer whose data does not start at a
    multiple of 16 from the file start. Reads only the buffer table, not the whole model."""
    from .aligned_builder import BUFFER_ALIGNMENT

    model = model_table(bytes(model_bytes))
    found = []
    for index in range(model.BuffersLength()):
        buf = model.Buffers(index)
        if buf.Offset() >= _EXTERNAL_OFFSET_MIN:
            start = buf.Offset()
        elif buf.DataLength():
            start = buf._tab.Vector(buf._tab.Offset(4))  # Buffer.data is field 0 (vtable slot 4)
        else:
            continue
        if start % BUFFER_ALIGNMENT:
            found.append((index, start))
    return found


def align_buffers(model_bytes: bytes) -> bytes:
    """``model_bytes`` with every buffer 16-byte aligned: unchanged when already so, else re-packed
    (same tensors, constants and operators; ai-edge-litert's reader may renumber buffers as it
    drops unused empty ones, which the tensors follow)."""
    if not misaligned_buffers(model_bytes):
        return bytes(model_bytes)
    return pack_model(read_model(model_bytes), source=model_bytes)
